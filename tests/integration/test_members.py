"""Issue 15.1 on the real broker: `inferstream worker --members N` is N independent group
members in one process, and makes the same group as N processes with the same worker ids:
the same shares of the partitions, every item exactly once, by the same workers; SIGTERM
drains them all."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from inferstream.config import Config
from tests.integration.conftest import Processes, topics_config
from tests.integration.test_policy_assignor import run_job
from tests.integration.test_sysinfo import wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 12
MEMBERS = ("m-0", "m-1", "m-2")


@pytest.fixture
def config(kafka: str) -> Config:
    return topics_config(kafka, PARTITIONS)


def member_assignments(log: str, members: tuple[str, ...]) -> dict[str, set[int]]:
    """Each member's last logged assignment, from lines `[<member>] ... assigned
    partitions=[...]` (members mode) or, with one member per log, any such line."""
    found: dict[str, set[int]] = {}
    for line in log.splitlines():
        if "assigned partitions=" not in line:
            continue
        listed = line.split("assigned partitions=")[1].strip("[] ")
        parts = {int(p) for p in listed.split(",") if p.strip()}
        for member in members:
            if f"[{member}]" in line or len(members) == 1:
                found[member] = parts
    return found


def settled(assignments: dict[str, set[int]]) -> dict[str, set[int]] | None:
    """The assignment once every member owns partitions and all are owned once."""
    together = set().union(*assignments.values()) if assignments else set()
    if (set(assignments) != set(MEMBERS) or not all(assignments.values())
            or len(together) != PARTITIONS or sum(map(len, assignments.values())) != PARTITIONS):
        return None
    return assignments


@pytest.mark.timeout(600)
def test_members_in_one_process_make_the_group_that_processes_make(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    procs.controller()
    one = procs.worker("sim:ms=2", "--members", str(len(MEMBERS)), name="m")
    together = wait_for("the members sharing the partitions", lambda: settled(
        member_assignments(procs.log("m"), MEMBERS)), 180)
    done = run_job(config, tmp_path, 600)  # each item exactly once
    assert set(done) == set(MEMBERS), done
    one.send_signal(signal.SIGTERM)
    assert one.wait(timeout=120) == 0  # every member drained and left the group
    assert "Traceback" not in procs.log("m")

    apart = [procs.worker("sim:ms=2", name=member) for member in MEMBERS]
    separate = wait_for("the processes sharing the partitions", lambda: settled({
        member: found for member in MEMBERS
        for found in member_assignments(procs.log(member), (member,)).values()}), 180)
    # the same shares (the assignor is sticky: which partitions depends on who came first)
    assert {m: len(p) for m, p in separate.items()} == {m: len(p) for m, p in together.items()}
    done = run_job(config, tmp_path, 600)
    assert set(done) == set(MEMBERS), done
    for proc in apart:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
