"""The sysinfo app's HTTP server (Faust's aiohttp server, no Kafka): the bearer token, HTTPS
with the roles' certificate, open probes, and the client that forwards to the policy owner."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from inferstream.config import Config, load_config
from inferstream.sysinfo.app import SysinfoApp, Topology
from inferstream.sysinfo.metrics import SysinfoMetrics
from tests.unit.support.processes import gone_pid
from tests.unit.support.tls import Certificates, fetch

TOKEN = "sysinfo-t0ken"  # noqa: S105 (a test value)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def with_web_server(config: Config, check: Callable[[SysinfoApp], Any]) -> Any:
    """Run `check(app)` in a thread while the app's web server (only) serves."""
    async def serve() -> Any:
        app = SysinfoApp(config, Topology(1, 1), SysinfoMetrics(CollectorRegistry()))
        web = app.app.web
        web.init_server()
        await web.start_server()
        try:
            return await asyncio.get_running_loop().run_in_executor(None, check, app)
        finally:
            await web.stop_server()

    return asyncio.run(serve())


def settings(certificates: Certificates | None = None, **more: Any) -> Config:
    tls = {} if certificates is None else {"http_tls_certfile": str(certificates.cert),
                                    "http_tls_keyfile": str(certificates.key),
                                    "http_tls_cafile": str(certificates.ca)}
    return load_config({"http_token": TOKEN, "sysinfo": {"port": free_port()}, **tls, **more},
                       {})


def test_the_api_needs_the_token_and_the_probes_do_not() -> None:
    config = settings()
    url = f"http://127.0.0.1:{config.sysinfo.port}"

    def check(_app: SysinfoApp) -> None:
        status, body, headers = fetch(url + "/metrics")
        assert status == 401 and "Authorization: Bearer" in body
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert fetch(url + "/workers", "not-" + TOKEN)[0] == 401
        status, body, _ = fetch(url + "/metrics", token=TOKEN)
        assert status == 200 and "inferstream_sysinfo_" in body
        assert fetch(url + "/healthz")[:2] == (200, "ok\n")
        # no group joined: the app is not doing its job yet
        assert fetch(url + "/readyz")[:2] == (503, "has not joined group "
                                                   "inferstream.sysinfo yet\n")

    with_web_server(config, check)


def test_with_a_certificate_the_api_speaks_https_only(certificates: Certificates) -> None:
    config = settings(certificates)
    port = config.sysinfo.port

    def check(_app: SysinfoApp) -> None:
        status, body, _ = fetch(f"https://127.0.0.1:{port}/metrics", TOKEN, certificates.ca)
        assert status == 200 and "inferstream_sysinfo_" in body
        with pytest.raises(OSError):  # plain HTTP gets no answer (URLError is an OSError)
            fetch(f"http://127.0.0.1:{port}/metrics", TOKEN)
        assert fetch(f"https://127.0.0.1:{port}/healthz", cafile=certificates.ca)[0] == 200

    with_web_server(config, check)


def test_the_forwarding_client_trusts_the_replicas_ca_and_carries_the_token(
        certificates: Certificates) -> None:
    """A replica forwards a view to the policy owner with Faust's http_client, the request's
    headers and scheme: with TLS, that client checks the owner against http_tls_cafile."""
    config = settings(certificates)
    assert config.sysinfo.bind == "127.0.0.1"
    url = f"https://127.0.0.1:{config.sysinfo.port}/metrics"

    def check(app: SysinfoApp) -> int:
        async def forward() -> int:
            session = app.app.http_client
            try:
                async with session.get(url, headers={"Authorization": f"Bearer {TOKEN}"}
                                       ) as response:
                    return int(response.status)
            finally:
                await session.close()

        return asyncio.run(forward())

    assert with_web_server(config, check) == 200


def test_the_replica_is_advertised_by_https_with_a_certificate(
        certificates: Certificates, tmp_path: Path) -> None:
    from inferstream.sysinfo.app import faust_settings

    config = settings(certificates, sysinfo={"port": 7001, "advertised_host": "sys-1"})
    faust = faust_settings(config, Topology(1, 1), str(tmp_path))
    assert faust["canonical_url"] == "https://sys-1:7001"
    assert faust["web_ssl_context"] is not None


def test_an_app_that_never_ran_leaves_no_tables_folder_behind() -> None:
    """Each app makes a folder for Faust's tables; `run` removed it, an app that never ran
    (built by a test or a check) left it in the temporary folder for good."""
    import gc

    app = SysinfoApp(settings(), Topology(1, 1), SysinfoMetrics(CollectorRegistry()))
    folder = Path(app._datadir)
    assert folder.is_dir()
    del app
    gc.collect()
    assert not folder.exists()


def test_the_tables_folder_of_a_replica_killed_on_this_host_is_removed_by_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica killed with SIGKILL runs no clean-up; the next one on the host removes its
    folder, and leaves those of replicas still running and of other hosts."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    host = socket.gethostname()
    dead = tmp_path / f"inferstream-sysinfo-{host}-{gone_pid()}-abc123"
    alive = tmp_path / f"inferstream-sysinfo-{host}-{os.getpid()}-def456"
    elsewhere = tmp_path / f"inferstream-sysinfo-not-{host}-{gone_pid()}-ghi789"
    for folder in (dead, alive, elsewhere):
        (folder / "v1" / "tables").mkdir(parents=True)
    app = SysinfoApp(settings(), Topology(1, 1), SysinfoMetrics(CollectorRegistry()))
    try:
        assert not dead.exists() and alive.is_dir() and elsewhere.is_dir()
        assert Path(app._datadir).parent == tmp_path
    finally:
        app.remove_datadir()
