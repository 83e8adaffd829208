"""`inferstream sysinfo` refuses wrong settings in one line; strategies plug in by entry point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferstream.cli import main
from inferstream.config.sysinfo import SysinfoConfig
from inferstream.errors import ConfigError
from inferstream.policy.strategies import load_strategy
from inferstream.schemas.records import now_ms
from inferstream.sysinfo.fleet import Fleet, record_of
from tests.sysinfo_samples import sample
from tests.unit.sysinfo.test_web import free_port


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("INFERSTREAM_")]:
        monkeypatch.delenv(name)


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_unknown_strategy_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["sysinfo", "--pool-strategy", "gpu=fastest"])
    assert err.startswith("inferstream: error: unknown strategy 'fastest' for pool 'gpu'")


def test_unreachable_broker_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # (a free port: the default, 6066, may be another sysinfo app's on this machine)
    err = one_line_error(capsys, ["sysinfo", "--bootstrap-servers", "127.0.0.1:1",
                                  "--connect-timeout-s", "0.1", "--port", str(free_port())])
    assert err.startswith("inferstream: error: no Kafka broker answered at 127.0.0.1:1")


def test_wrong_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["sysinfo", "--port", "0"])
    assert err == "inferstream: error: sysinfo.port 0 is not a TCP port"


@pytest.mark.timeout(150)
def test_a_signal_while_it_waits_for_its_cluster_at_start_up_is_said_in_one_line() -> None:
    """As a worker or controller says it, where the replica died of the signal in silence
    (Faust's handlers come only once its worker runs)."""
    argv = [sys.executable, "-m", "inferstream", "sysinfo", "--restart", "off",
            "--log-level", "DEBUG", "--bootstrap-servers", "127.0.0.1:1",
            "--connect-timeout-s", "120", "--port", str(free_port())]
    with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True) as replica:
        assert replica.stderr is not None
        try:
            for line in replica.stderr:  # the start-up check waits for the cluster
                if "checking the Kafka cluster at 127.0.0.1:1" in line:
                    break
            replica.send_signal(signal.SIGTERM)
            _, err = replica.communicate(timeout=60)
        finally:
            replica.kill()
    assert replica.returncode == 128 + signal.SIGTERM
    assert err.strip() == "inferstream: SIGTERM during start-up: exiting now"


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test package that registers strategies under `inferstream.strategies`."""
    (tmp_path / "halfstrategy.py").write_text(textwrap.dedent("""
        from inferstream.policy.strategies import WorkerPlan

        class FirstGetsAll:
            name = "first-gets-all"

            def plan(self, workers, settings):
                first = min(w.worker for w in workers)
                return {w.worker: WorkerPlan(1.0 if w.worker == first else 0.0)
                        for w in workers}

        def broken():
            raise RuntimeError("no GPU here")
    """))
    info = tmp_path / "halfstrategy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: halfstrategy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[inferstream.strategies]\nfirst-gets-all = halfstrategy:FirstGetsAll\n"
        "broken = halfstrategy:broken\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("halfstrategy", None)


@pytest.mark.usefixtures("plugin")
def test_a_strategy_registered_by_entry_point_drives_the_policy() -> None:
    sysinfo = SysinfoConfig(pool_strategies=("default=first-gets-all",))
    fleet = Fleet(sysinfo, {})
    fleet.check_strategies()
    for worker, rate in (("a", 10.0), ("b", 90.0)):
        fleet.observe(record_of(sample(worker, rate), {}, now_ms(), sysinfo))
    entries = fleet.policy_to_write(now_ms())
    assert {e["worker"]: e["share"] for e in entries if e["worker"]} == {"a": 1.0, "b": 0.0}
    assert {e["strategy"] for e in entries} == {"first-gets-all"}


@pytest.mark.usefixtures("plugin")
def test_a_strategy_that_does_not_load_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="strategy 'broken' does not load: no GPU here"):
        load_strategy("broken")


def test_the_http_api_listens_on_loopback_unless_told_otherwise() -> None:
    """Issue 28.5: loopback by default, and a loopback replica is advertised there (its host
    name may name another interface); told to bind every interface, by its host name."""
    import socket

    from inferstream.config import load_config
    from inferstream.sysinfo.app import Topology, faust_settings

    local = faust_settings(load_config({}, {}), Topology(12, 12, replication=1), "/tmp/x")
    assert (local["web_bind"], local["canonical_url"]) == ("127.0.0.1", "http://127.0.0.1:6066")
    every = faust_settings(load_config({}, {"INFERSTREAM_SYSINFO_BIND": "0.0.0.0"}),  # noqa: S104
                           Topology(12, 12, replication=1), "/tmp/x")
    assert every["canonical_url"] == f"http://{socket.gethostname()}:6066"


def test_faust_settings_come_from_the_config() -> None:
    from inferstream.config import load_config
    from inferstream.sysinfo.app import Topology, faust_settings

    config = load_config({}, {"INFERSTREAM_BOOTSTRAP_SERVERS": "k1:9092,k2:9092",
                              "INFERSTREAM_SYSINFO_PORT": "7001",
                              "INFERSTREAM_SYSINFO_ADVERTISED_HOST": "sys-1",
                              "INFERSTREAM_SYSINFO_STANDBY_REPLICAS": "2"})
    settings = faust_settings(config, Topology(12, 12, replication=3), "/tmp/x")
    assert settings["id"] == "inferstream.sysinfo"
    assert settings["broker"] == ["kafka://k1:9092", "kafka://k2:9092"]
    assert settings["processing_guarantee"] == "at_least_once"  # never faust's exactly_once
    assert settings["table_standby_replicas"] == 2
    assert settings["topic_replication_factor"] == 3
    assert settings["canonical_url"] == "http://sys-1:7001"
    assert settings["broker_session_timeout"] == 6.0
