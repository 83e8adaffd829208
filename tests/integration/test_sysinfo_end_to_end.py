"""Issue 10's acceptance with real workers: their samples reach the sysinfo app, whose /workers
and /policy follow what they measure while a job runs, mark a killed worker STALE, show a new
worker's calibrated capacity before it has run a task, and honour a collector and a strategy
registered by entry point."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from inferstream.client.client import Client
from inferstream.config import DEFAULT_COLLECTORS, Config
from inferstream.kafka.topics import ensure_topics
from tests.integration.conftest import Processes
from tests.integration.test_sysinfo import free_port, get, start_replica, wait_for
from tests.roles import ROLE_ARGS
from tests.unit.client.test_top_terminal import Pane, top_command

pytestmark = pytest.mark.integration

PLUGINS = '''
class Answer:
    """A custom collector: one reading in `extra`."""

    name = "answer"

    def collect(self, context):
        return {"extra": {"answer": 42.0}}


class LastGetsAll:
    """A custom strategy: the last worker by name gets the whole pool."""

    name = "last-gets-all"

    def plan(self, workers, settings):
        from inferstream.policy.strategies import WorkerPlan

        last = max(w.worker for w in workers)
        return {w.worker: WorkerPlan(1.0 if w.worker == last else 0.0) for w in workers}
'''


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution on every child's PYTHONPATH registering the collector and strategy."""
    site = tmp_path / "site"
    info = site / "e2e_plugins-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "e2e_plugins.py").write_text(textwrap.dedent(PLUGINS))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: e2e-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[inferstream.collectors]\nanswer = e2e_plugins:Answer\n\n"
        "[inferstream.strategies]\nlast-gets-all = e2e_plugins:LastGetsAll\n")
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def rows(port: int) -> dict[str, dict[str, Any]]:
    status, body = get(port, "/workers")
    return {w["worker"]: w for w in body["workers"]} if status == 200 else {}


def entries(port: int, pool: str) -> dict[str, dict[str, Any]]:
    status, body = get(port, f"/policy/{pool}")
    if status != 200:
        return {}
    return {e["worker"]: e for e in body["entries"] if e["kind"] == "WORKER"}


def near(value: float | None, target: float, tolerance: float) -> bool:
    return value is not None and abs(value - target) <= tolerance


def create_pool_topics(config: Config, *pools: str) -> None:
    for pool in pools:
        report = ensure_topics(dataclasses.replace(config, pool=pool))
        assert report.ok, report.mismatched


def check_top(procs: Processes, port: int, tmp_path: Path, workers: dict[str, Any]) -> None:
    """`top --once --json` and the live view in a real terminal read the real app."""
    url = f"http://127.0.0.1:{port}"
    snapshot = json.loads(procs.run("top", "--once", "--json", "--sysinfo-url", url).stdout)
    assert {w["worker"] for w in snapshot["workers"]} >= set(workers)
    assert snapshot["health"]["status"] == "ok"
    if shutil.which("tmux") is None:
        return
    pane = Pane(tmp_path / "tmux.sock")
    try:
        pane.start(top_command(url, tmp_path / "top.pid"))
        pane.wait_for(lambda text: all(name in text for name in workers) and "default" in text,
                      "the two workers' rows")
        pane.tmux("send-keys", "q")
        pane.wait_for(lambda text: "top exited with 0" in text, "top exiting 0 on q")
    finally:
        subprocess.run(["tmux", "-S", str(pane.socket), "kill-server"], capture_output=True,
                       check=False, timeout=30)


@pytest.mark.timeout(600)
def test_workers_measured_rates_drive_the_policy_and_a_killed_worker_goes_stale(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    create_pool_topics(config, "idle")
    port = free_port()
    start_replica(procs, "sysinfo", port)
    procs.controller()
    workers = {"fast": procs.worker("sim:ms=10", name="fast"),
               "slow": procs.worker("sim:ms=40", name="slow")}
    started = time.monotonic()
    wait_for("both workers in /workers", lambda: set(rows(port)) >= set(workers), 120)
    print(f"both workers in /workers {time.monotonic() - started:.1f}s after they started")
    procs.wait_for_group(*workers)
    listing = tmp_path / "items.txt"
    listing.write_text("".join(f"item-{i:05d}\n" for i in range(6000)))
    Client(config).submit("sim:ms=10", [f"@{listing}"], chunk_size=10)

    measured = wait_for("items/s within 20 % of 100 and 25", lambda: (
        (found := rows(port)) and near(found["fast"]["items_per_s"], 100, 20)
        and near(found["slow"]["items_per_s"], 25, 5) and found), 60)
    shares = wait_for("shares within 0.05 of 0.8 and 0.2", lambda: (
        (found := entries(port, "default")) and set(found) >= set(workers)
        and near(found["fast"]["share"], 0.8, 0.05) and near(found["slow"]["share"], 0.2, 0.05)
        and found), 60)
    print("items/s", {w: measured[w]["items_per_s"] for w in workers},
          "shares", {w: shares[w]["share"] for w in workers})
    check_top(procs, port, tmp_path, workers)

    interval = get(port, "/workers/slow")[1]["sample"]["interval_s"]
    workers["slow"].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    wait_for("the killed worker STALE", lambda: rows(port)["slow"]["health"] == "STALE",
             3 * interval + 3)
    stale_after = time.monotonic() - killed
    dropped = wait_for("the policy without the killed worker", lambda: (
        (found := entries(port, "default")) and found["slow"]["share"] == 0
        and found["slow"]["health"] != "HEALTHY" and near(found["fast"]["share"], 1.0, 1e-6)
        and found), 30)
    print(f"STALE {stale_after:.1f}s after kill -9; policy {dropped['slow']['health']}")

    procs.start("fresh", *ROLE_ARGS["worker"], "--model", "sim:ms=20", "--worker-id", "fresh",
                "--pool", "idle")
    fresh = wait_for("the new worker's calibrated capacity in /policy/idle", lambda: (
        (found := entries(port, "idle")) and "fresh" in found
        and near(found["fresh"]["capacity_items_per_s"], 50, 10) and found["fresh"]), 120)
    row = rows(port)["fresh"]
    assert row["calibration"] is not None and near(row["calibration"]["items_per_s"], 50, 10)
    assert row["items_per_s"] == 0  # no task ran: the capacity is the calibration's
    assert fresh["share"] == 1.0


@pytest.mark.timeout(600)
@pytest.mark.usefixtures("plugins")
def test_a_collector_and_a_strategy_from_entry_points_reach_sysinfo_and_the_policy(
        procs: Processes, config: Config) -> None:
    create_pool_topics(config, "spare")
    port = free_port()
    start_replica(procs, "sysinfo", port, "--pool-strategy", "spare=last-gets-all")
    collectors = [arg for name in (*DEFAULT_COLLECTORS, "answer")
                  for arg in ("--collector", name)]
    for name, model in (("spare-a", "sim:ms=20"), ("spare-b", "sim:ms=40")):
        procs.start(name, *ROLE_ARGS["worker"], "--model", model, "--worker-id", name,
                    "--pool", "spare", *collectors)

    def samples_with_answer() -> bool:
        status, body = get(port, "/sysinfo/spare-a?since=0")
        return status == 200 and any(s["extra"].get("answer") == 42.0 for s in body["samples"])

    wait_for("the custom collector's reading in /sysinfo/spare-a", samples_with_answer, 120)
    policy = wait_for("the custom strategy's shares", lambda: (
        (found := entries(port, "spare")) and set(found) == {"spare-a", "spare-b"}
        and found["spare-b"]["share"] == 1.0 and found), 120)
    assert policy["spare-a"]["share"] == 0.0  # throughput would have given it 2/3
    assert {e["strategy"] for e in policy.values()} == {"last-gets-all"}
