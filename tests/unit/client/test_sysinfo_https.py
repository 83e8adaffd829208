"""SysInfoClient and `inferstream top` against a sysinfo API behind HTTPS and a bearer token
(the fake app served by the roles' own guarded server): the token and the CA from the
settings; a refused token and an untrusted certificate are one line in words."""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from inferstream.cli import main
from inferstream.client.errors import SysInfoRefusedError, SysInfoUnreachableError
from inferstream.client.sysinfo_api import SysInfoClient
from inferstream.config import load_config
from inferstream.http import Health, HttpGuard, serve
from tests.unit.support.fake_sysinfo import FakeSysInfo, worker
from tests.unit.support.tls import Certificates

TOKEN = "top-t0ken"  # noqa: S105 (a test value)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("INFERSTREAM_")]:
        monkeypatch.delenv(name)


def wsgi(fake: FakeSysInfo) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """The fake app's routes as a WSGI app."""
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, body = fake.route(environ["PATH_INFO"],
                                  urllib.parse.parse_qs(environ.get("QUERY_STRING", "")))
        start_response(f"{status} {'OK' if status == 200 else 'Not Found'}",
                       [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]

    return app


@pytest.fixture(scope="module")
def url(certificates: Certificates) -> Iterator[str]:
    """An https sysinfo API on loopback that wants TOKEN, its certificate signed by the CA;
    one for the module, which only reads it (its shutdown waits up to 0.1 s)."""
    fake = FakeSysInfo()
    fake.workers = [worker("w-tls")]
    guard = HttpGuard(str(certificates.cert), str(certificates.key), TOKEN)
    server = serve(wsgi(fake), 0, "127.0.0.1", guard, Health())
    yield f"https://localhost:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "http.token"
    path.write_text(TOKEN + "\n")
    return path


def test_the_client_sends_the_token_and_trusts_the_ca_of_its_settings(
        url: str, certificates: Certificates, token_file: Path) -> None:
    config = load_config({"sysinfo_url": url},
                         {"INFERSTREAM_HTTP_TOKEN_FILE": str(token_file),
                          "INFERSTREAM_HTTP_TLS_CAFILE": str(certificates.ca)})
    client = SysInfoClient.from_config(config)
    assert [w["worker"] for w in client.workers()] == ["w-tls"]
    assert client.health()["workers"] == 1


def test_a_refused_or_missing_token_is_said_in_words(url: str, certificates: Certificates) -> None:
    with pytest.raises(SysInfoRefusedError) as refused:
        SysInfoClient(url, token="not-" + TOKEN, cafile=str(certificates.ca)).workers()
    assert str(refused.value).startswith("the sysinfo API refused the token: ")
    assert "http_token_file" in str(refused.value)
    with pytest.raises(SysInfoRefusedError, match="the sysinfo API wants a token and none was"):
        SysInfoClient(url, cafile=str(certificates.ca)).workers()


def test_an_untrusted_certificate_is_said_in_words(url: str, certificates: Certificates) -> None:
    with pytest.raises(SysInfoRefusedError) as refused:
        SysInfoClient(url, token=TOKEN, cafile=str(certificates.other_ca)).workers()
    assert str(refused.value).startswith(
        f"the sysinfo API at {url} has a certificate this client does not trust (")
    assert "http_tls_cafile" in str(refused.value)


def test_top_once_reads_the_api_with_the_token_and_ca(
        url: str, certificates: Certificates, token_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["top", "--once", "--json", "--sysinfo-url", url,
            "--http-token-file", str(token_file), "--http-tls-cafile", str(certificates.ca)]
    assert main(argv) == 0
    snapshot = json.loads(capsys.readouterr().out)
    assert [w["worker"] for w in snapshot["workers"]] == ["w-tls"]


@pytest.mark.parametrize(("flags", "said"), [
    (["--http-tls-cafile", "{ca}"], "the sysinfo API wants a token and none was set"),
    (["--http-token-file", "{token}"], "has a certificate this client does not trust"),
])
def test_top_once_refused_is_one_line(url: str, certificates: Certificates, token_file: Path,
                                      capsys: pytest.CaptureFixture[str], flags: list[str],
                                      said: str) -> None:
    given = [f.format(ca=certificates.ca, token=token_file) for f in flags]
    assert main(["top", "--once", "--sysinfo-url", url, *given]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("inferstream: error: the sysinfo API") and said in err


def test_a_ca_file_that_does_not_load_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["top", "--once", "--sysinfo-url", "https://127.0.0.1:1",
            "--http-tls-cafile", "/nonexistent/ca.pem"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("inferstream: error: http_tls_cafile /nonexistent/ca.pem: cannot "
                          "load it (")


def test_the_wrong_scheme_is_said_with_the_right_one(url: str) -> None:
    with pytest.raises(SysInfoUnreachableError, match="if it serves HTTPS, use an https:// URL"):
        SysInfoClient(url.replace("https://", "http://"), token=TOKEN).workers()
