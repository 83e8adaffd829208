"""An SSL file that cannot be read is one line naming its setting and path, for every command:
librdkafka said "ssl.certificate.location failed: ... system lib" and the worker "the SSL
files (--ssl-cafile, --ssl-certfile, --ssl-keyfile) cannot be loaded: [Errno 2] No such file
or directory", neither naming the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferstream.cli import main
from inferstream.config import Config
from inferstream.kafka.passthrough import check_pass_through
from tests.unit.kafka.test_preflight import CERTIFICATE, free_port, one_line_error


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("INFERSTREAM_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("command", [["status"], ["worker", "--model", "sim:ms=1"],
                                     ["controller"]])
@pytest.mark.parametrize("missing", ["--ssl-cafile", "--ssl-certfile"])
def test_an_ssl_file_that_is_not_there_is_named_with_its_setting(
        command: list[str], missing: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ca.pem").write_text(CERTIFICATE)
    (tmp_path / "worker.pem").write_text(CERTIFICATE)
    files = {"--ssl-cafile": str(tmp_path / "ca.pem"),
             "--ssl-certfile": str(tmp_path / "worker.pem"),
             "--ssl-keyfile": str(tmp_path / "worker.key")}
    files[missing] = str(tmp_path / "gone.pem")
    (tmp_path / "worker.key").write_text("a key")
    flags = [word for flag, path in files.items() for word in (flag, path)]
    assert main([*command, "--security-protocol", "SSL", *flags,
                 "--bootstrap-servers", f"127.0.0.1:{free_port()}"]) == 2
    setting = missing.removeprefix("--").replace("-", "_")
    assert one_line_error(capsys) == (f"inferstream: error: {setting} {tmp_path}/gone.pem: "
                                      "cannot read it (No such file or directory)")


def test_ssl_files_are_not_read_where_the_protocol_has_no_tls(tmp_path: Path) -> None:
    config = Config(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                    sasl_username="worker", sasl_password="secret",  # noqa: S106
                    ssl_cafile=str(tmp_path / "gone.pem"))
    assert check_pass_through(config, librdkafka=True, aiokafka=True) == []
