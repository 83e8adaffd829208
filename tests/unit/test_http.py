"""The roles' HTTP server (`/metrics`, `/healthz`, `/readyz`): a bearer token, HTTPS only with
a certificate, open probes; and the settings that turn them on, refused in one line."""

from __future__ import annotations

import http.client
import os
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import pytest
from prometheus_client import CollectorRegistry, Counter

from inferstream.cli import main
from inferstream.config import load_config
from inferstream.errors import ConfigError
from inferstream.http import Health, HttpGuard
from inferstream.metrics import serve_metrics
from tests.unit.support.tls import Certificates, fetch

TOKEN = "t0ken-of-the-test"  # noqa: S105 (a test value that must never be printed)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("INFERSTREAM_")]:
        monkeypatch.delenv(name)


def registry() -> CollectorRegistry:
    found = CollectorRegistry()
    Counter("inferstream_test_items", "Items of the test", registry=found).inc(3)
    return found


@pytest.fixture
def serving() -> Iterator[list[WSGIServer]]:
    servers: list[WSGIServer] = []
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def serve(servers: list[WSGIServer], guard: HttpGuard, health: Health | None = None) -> int:
    server = serve_metrics(registry(), 0, "127.0.0.1", guard=guard, health=health)
    servers.append(server)
    return int(server.server_address[1])


def test_with_a_token_metrics_need_it_and_the_probes_do_not(
        serving: list[WSGIServer]) -> None:
    port = serve(serving, HttpGuard(token=TOKEN))
    url = f"http://127.0.0.1:{port}"
    status, body, headers = fetch(url + "/metrics")
    assert status == 401
    assert "Authorization: Bearer" in body
    assert headers["WWW-Authenticate"].startswith("Bearer")
    assert fetch(url + "/metrics", token="not-" + TOKEN)[0] == 401
    status, body, _ = fetch(url + "/metrics", token=TOKEN)
    assert status == 200 and "inferstream_test_items_total 3.0" in body
    assert fetch(url + "/healthz")[:2] == (200, "ok\n")
    assert fetch(url + "/readyz")[:2] == (200, "ready\n")


def test_without_a_token_metrics_are_open(serving: list[WSGIServer]) -> None:
    port = serve(serving, HttpGuard())
    status, body, _ = fetch(f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and "inferstream_test_items_total" in body


def test_only_metrics_is_served_other_paths_are_not_found(serving: list[WSGIServer]) -> None:
    url = f"http://127.0.0.1:{serve(serving, HttpGuard(token=TOKEN))}"
    for path in ("/", "/metric", "/api/jobs", "/metrics/x"):
        status, body, _ = fetch(url + path, token=TOKEN)
        assert (status, body) == (404, "not found: the metrics are at /metrics\n"), path
    assert fetch(url + "/nothing")[0] == 401  # the token first: the server's paths not told
    assert fetch(url + "/metrics/", token=TOKEN)[0] == 200
    assert fetch(url + "/metrics?name[]=inferstream_test_items_total", token=TOKEN)[0] == 200


def test_with_a_certificate_the_server_speaks_https_only(
        serving: list[WSGIServer], certificates: Certificates) -> None:
    port = serve(serving, HttpGuard(str(certificates.cert), str(certificates.key), TOKEN))
    status, body, _ = fetch(f"https://127.0.0.1:{port}/metrics", TOKEN, certificates.ca)
    assert status == 200 and "inferstream_test_items_total" in body
    assert fetch(f"https://localhost:{port}/readyz", cafile=certificates.ca)[:2] == (200, "ready\n")
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, OSError)):
        fetch(f"http://127.0.0.1:{port}/metrics", TOKEN)  # plain HTTP gets no answer
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch(f"https://127.0.0.1:{port}/metrics", TOKEN, certificates.other_ca)
    # the server is still there for the next client
    assert fetch(f"https://127.0.0.1:{port}/healthz", cafile=certificates.ca)[0] == 200


def test_readiness_says_what_it_waits_for_and_liveness_a_stalled_loop(
        serving: list[WSGIServer]) -> None:
    now = [100.0]
    health = Health(stall_s=60, clock=lambda: now[0])
    health.waiting("loading models")
    port = serve(serving, HttpGuard(token=TOKEN), health)
    url = f"http://127.0.0.1:{port}"
    assert fetch(url + "/readyz")[:2] == (503, "loading models\n")
    assert fetch(url + "/healthz")[:2] == (200, "ok\n")  # starting is not wedged
    health.waiting("w-1 has not joined group inferstream.default.workers yet", "w-1")
    health.done()
    assert fetch(url + "/readyz")[1] == "w-1 has not joined group inferstream.default.workers yet\n"
    health.beat()
    health.done("w-1")
    assert fetch(url + "/readyz")[:2] == (200, "ready\n")
    now[0] += 61
    assert fetch(url + "/healthz")[:2] == (503, "the loop has not run for 61s\n")
    assert fetch(url + "/readyz")[0] == 503
    health.beat()
    assert fetch(url + "/healthz")[0] == 200


def test_the_token_is_compared_as_a_bearer_credential() -> None:
    guard = HttpGuard(token=TOKEN)
    assert guard.allows(f"Bearer {TOKEN}") and guard.allows(f"bearer {TOKEN}")
    assert not guard.allows(None)
    assert not guard.allows(f"Basic {TOKEN}")
    assert not guard.allows(f"Bearer {TOKEN}x")
    assert HttpGuard().allows(None)


def test_a_key_that_is_not_the_certificates_is_one_line(certificates: Certificates) -> None:
    with pytest.raises(ConfigError) as caught:
        HttpGuard(str(certificates.cert), str(certificates.other_key)).server_context()
    assert "do not load as a certificate and its key" in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="No such file or directory"):
        HttpGuard("/nonexistent/cert.pem", str(certificates.key)).server_context()


def test_the_settings_come_from_files_and_the_token_is_masked(
        tmp_path: Path, certificates: Certificates) -> None:
    token_file = tmp_path / "http.token"
    token_file.write_text(TOKEN + "\n")
    config = load_config({}, {"INFERSTREAM_HTTP_TOKEN_FILE": str(token_file),
                              "INFERSTREAM_HTTP_TLS_CERTFILE": str(certificates.cert),
                              "INFERSTREAM_HTTP_TLS_KEYFILE": str(certificates.key)})
    assert HttpGuard.of(config) == HttpGuard(str(certificates.cert), str(certificates.key), TOKEN)
    assert config.masked()["http_token"] == "****"  # noqa: S105
    assert TOKEN not in repr(config) and TOKEN not in repr(HttpGuard.of(config))


@pytest.mark.parametrize(("environ", "error"), [
    ({"INFERSTREAM_HTTP_TLS_CERTFILE": "cert.pem"},
     "http_tls_certfile and http_tls_keyfile go together: set both or neither"),
    ({"INFERSTREAM_HTTP_TOKEN_FILE": "/nonexistent/token"},
     "http_token_file /nonexistent/token: cannot read it (No such file or directory)"),
    ({"INFERSTREAM_HTTP_TOKEN": " "}, "http_token is empty"),
])
def test_wrong_settings_are_config_errors(environ: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({}, environ)
    assert str(caught.value) == error


def test_a_role_with_a_key_not_its_certificates_stops_before_kafka(
        capsys: pytest.CaptureFixture[str], certificates: Certificates) -> None:
    """Exit 2 and one line, before any connection (no broker listens at 127.0.0.1:1)."""
    argv = ["controller", "--metrics-port", "59123", "--bootstrap-servers", "127.0.0.1:1",
            "--http-tls-certfile", str(certificates.cert),
            "--http-tls-keyfile", str(certificates.other_key)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith(f"inferstream: error: http_tls_certfile {certificates.cert} and "
                          f"http_tls_keyfile {certificates.other_key} do not load")
