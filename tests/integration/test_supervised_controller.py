"""Issue 26.2 on the real broker: the process of the only controller replica dies of SIGABRT
mid-job, as it did inside librdkafka when a broker died. Its supervisor starts it again, the
new process resumes the job from the ledger, and the job completes with every item exactly
once; the restart is in the supervisor's log and on the controller's /metrics."""

from __future__ import annotations

import os
import re
import signal
import urllib.request
from pathlib import Path

import pytest

from inferstream.client.client import Client
from inferstream.config import Config
from tests.integration.conftest import Processes
from tests.integration.test_controller_replicas import lines_of, listing, owned, wait_until
from tests.integration.test_sysinfo import free_port
from tests.roles import ROLE_ARGS

pytestmark = pytest.mark.integration

ITEMS = 4000
_STARTED = re.compile(r"controller process (\d+) started")


def restarts(port: int, reason: str) -> float:
    """The controller's inferstream_process_restarts_total for `reason`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    pattern = (r'^inferstream_process_restarts_total\{reason="' + reason
               + r'",role="controller"\} (\S+)$')
    found = re.search(pattern, text, re.MULTILINE)
    assert found, text
    return float(found[1])


@pytest.mark.timeout(600)
def test_an_aborted_controller_is_restarted_and_its_job_completes_exactly_once(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    port = free_port()
    supervisor = procs.start("controller", *ROLE_ARGS["controller"], "--restart", "on",
                             "--metrics-port", str(port))
    procs.worker("sim:ms=5", name="worker-1")
    procs.worker("sim:ms=5", name="worker-2")
    procs.wait_for_group("worker-1", "worker-2")
    wait_until("the controller owning the job partitions", lambda: owned(procs, "controller"))
    path, names = listing(tmp_path, "job", ITEMS)
    job = Client(config).submit("sim:ms=5", [f"@{path}"], chunk_size=10)
    for status in job.events(timeout_s=300):
        if status.done_items >= ITEMS // 10:
            break
    first = _STARTED.findall(procs.log("controller"))
    assert len(first) == 1, procs.log("controller")
    os.kill(int(first[0]), signal.SIGABRT)  # the role's process, not its supervisor

    status = job.wait(timeout_s=300)
    lines = lines_of(config, job)
    assert sorted(str(line["item"]) for line in lines) == names  # each item once
    assert (status.total_items, status.done_items, status.ok_items) == (ITEMS, ITEMS, ITEMS)
    log = procs.log("controller")
    assert f"controller process {first[0]} died of SIGABRT" in log
    assert "restart 1 in 1s" in log
    assert len(_STARTED.findall(log)) == 2
    assert restarts(port, "SIGABRT") == 1 and restarts(port, "exit") == 0

    supervisor.send_signal(signal.SIGTERM)  # reaches the new process once: a drain
    assert supervisor.wait(timeout=120) == 0
    assert "exiting now" not in procs.log("controller")
