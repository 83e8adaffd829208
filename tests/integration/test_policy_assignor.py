"""Issue 11, points 1-2 on the real broker: the PolicyAssignor gives a fast worker its
capacity share of the task partitions once the sysinfo app's policy settles (the leader
rebalances when the policy appears), and without sysinfo, from the start or once it stops, the
pool works on even shares."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from inferstream.client.client import Client
from inferstream.config import Config
from tests.integration.conftest import Processes, topics_config
from tests.integration.test_sysinfo import free_port, start_replica, wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 20


@pytest.fixture
def config(kafka: str) -> Config:
    """The conftest's config with 20 partitions per topic, so shares can be seen."""
    return topics_config(kafka, PARTITIONS)


def owned(procs: Processes, *workers: str) -> dict[str, int] | None:
    """Partitions per worker once together they own all of them, exactly once."""
    sets = {w: procs.assigned(w) for w in workers}
    together = set().union(*sets.values())
    if len(together) != PARTITIONS or sum(map(len, sets.values())) != PARTITIONS:
        return None
    return {w: len(s) for w, s in sets.items()}


def run_job(config: Config, tmp_path: Path, items: int) -> Counter[str]:
    """Run a job of `items` items to completion, each exactly once; items per worker."""
    listing = tmp_path / "items.txt"
    names = [f"item-{i:05d}" for i in range(items)]
    listing.write_text("\n".join(names) + "\n")
    job = Client(config).submit("sim:ms=10", [f"@{listing}"], chunk_size=10)
    status = job.wait(timeout_s=300)
    assert status.total_items == items and status.ok_items == items
    lines = list(Client(config).job(job.job_id).results())
    assert sorted(str(line["item"]) for line in lines) == names  # each exactly once
    return Counter(str(line["worker"]) for line in lines)


@pytest.mark.timeout(600)
def test_the_fast_worker_owns_its_capacity_share_of_the_partitions(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    start_replica(procs, "sysinfo", free_port())
    procs.controller()
    quick = ("--min-rebalance-interval-s", "5")
    procs.worker("sim:ms=10", *quick, name="fast")
    procs.worker("sim:ms=40", *quick, name="slow")

    def settled() -> dict[str, int] | None:
        counts = owned(procs, "fast", "slow")
        return counts if counts and 15 <= counts["fast"] <= 17 else None

    counts = wait_for("the fast worker owning about 80 % of the partitions", settled, 180)
    print("partitions", counts)
    assert "assigned topic=" in procs.log("fast") + procs.log("slow")
    items = 2000
    started = time.monotonic()
    done = run_job(config, tmp_path, items)
    makespan = time.monotonic() - started
    after = owned(procs, "fast", "slow")
    # The ideal: the work over the summed capacities (100 + 25 items/s). Reported, not
    # asserted (a shared host's noise); BENCHMARKS.md P3 has the side-by-side figure.
    print("items", dict(done), "partitions after the job", after,
          f"makespan {makespan:.1f}s = {makespan / (items / 125):.2f} x ideal")
    # Each worker's share of the results is within 0.07 of its capacity share (0.8 / 0.2).
    assert abs(done["fast"] / items - 0.8) <= 0.07, done
    assert abs(done["slow"] / items - 0.2) <= 0.07, done
    # Measured rates under load move the shares a little: still about 80 %.
    assert after is not None and 14 <= after["fast"] <= 17


@pytest.mark.timeout(600)
def test_when_sysinfo_stops_the_pool_falls_back_to_even_shares(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    sysinfo = start_replica(procs, "sysinfo", free_port())
    procs.controller()
    quick = ("--min-rebalance-interval-s", "5", "--policy-max-age-s", "10")
    procs.worker("sim:ms=10", *quick, name="fast")
    procs.worker("sim:ms=40", *quick, name="slow")
    wait_for("the policy's split", lambda: (
        (found := owned(procs, "fast", "slow")) and 15 <= found["fast"] < 20 and found), 180)
    sysinfo.send_signal(signal.SIGKILL)
    stopped = time.monotonic()
    wait_for("the even fallback", lambda: owned(procs, "fast", "slow") == {
        "fast": 10, "slow": 10}, 120)
    print(f"even {time.monotonic() - stopped:.1f}s after sysinfo was killed")
    assert "policy gone" in procs.log("fast") + procs.log("slow")
    assert set(run_job(config, tmp_path, 300)) == {"fast", "slow"}


@pytest.mark.timeout(600)
def test_without_sysinfo_the_pool_works_on_the_even_fallback(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    procs.controller()
    procs.worker("sim:ms=10", name="one")
    procs.worker("sim:ms=40", name="two")
    counts = wait_for("both workers owning partitions", lambda: (
        (found := owned(procs, "one", "two")) and all(found.values()) and found), 120)
    assert counts == {"one": 10, "two": 10}
    logs = procs.log("one") + procs.log("two")
    assert "no policy for pool default: even assignment" in logs
    assert set(run_job(config, tmp_path, 300)) == {"one", "two"}


@pytest.mark.timeout(300)
def test_a_worker_with_another_assignor_is_refused_with_one_line(procs: Processes) -> None:
    procs.worker("sim:ms=1", name="worker-policy")
    procs.wait_for_log("worker-policy", "assigned partitions=")
    other = procs.worker("sim:ms=1", "--assignor", "roundrobin", name="worker-rr")
    assert other.wait(timeout=120) != 0
    log = procs.log("worker-rr")
    assert "same --assignor" in log and "Traceback" not in log, log
    assert len(procs.assigned("worker-policy")) == PARTITIONS  # the pool goes on


def lines_at(procs: Processes, name: str, text: str) -> list[tuple[float, str]]:
    """(Unix time, line) of each line of `name`'s log that contains `text`."""
    found = []
    for line in procs.log(name).splitlines():
        if text in line:
            stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S"))
            found.append((stamp + int(line[20:23]) / 1000, line))
    return found


def assignments(procs: Processes, name: str) -> list[tuple[float, int]]:
    """(Unix time, partition count) of each assignment `name` logged."""
    return [(t, len([p for p in line.split("assigned partitions=")[1].strip("[] ").split(",")
                     if p.strip()]))
            for t, line in lines_at(procs, name, "assigned partitions=")]


def revoked_after(procs: Processes, name: str, since: float) -> list[float]:
    """When `name` revoked partitions (a rebalance began) after `since`."""
    return [t for t, line in lines_at(procs, name, "revoked partitions=")
            if t > since and "revoked partitions=[]" not in line]


@pytest.mark.timeout(600)
def test_a_worker_slowed_4x_loses_partitions_and_every_item_is_done_once(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    """Issue 11 acceptance: the slowed worker loses partitions within the rebalance interval
    plus one policy interval (and a sample's lag); then a worker killed -9 during a
    rebalance (one that a joining worker starts) costs nothing: every item once."""
    start_replica(procs, "sysinfo", free_port())
    procs.controller()
    quick = ("--min-rebalance-interval-s", "5")
    procs.worker("sim:ms=10,slow_after=600,slow_factor=4", *quick, name="slowing")
    procs.worker("sim:ms=10", *quick, name="steady")
    victim = procs.worker("sim:ms=10", *quick, name="victim")
    names = ("slowing", "steady", "victim")
    wait_for("even thirds", lambda: (found := owned(procs, *names)) and all(
        6 <= n <= 7 for n in found.values()) and found, 180)
    outcome: dict[str, float] = {}

    def watch() -> None:
        slowed = wait_for("the slowdown", lambda: lines_at(procs, "slowing", "slows down"),
                          300)[0][0]
        outcome["slowed"] = slowed
        held = [n for t, n in assignments(procs, "slowing") if t <= slowed][-1]
        outcome["lost"] = wait_for("the slowed worker losing partitions", lambda: [
            t for t, n in assignments(procs, "slowing") if t > slowed and n < held], 120)[0]
        # 100 : 100 : 25 items/s: 2 or 3 of the 20 partitions, maybe in two steps.
        outcome["settled"] = wait_for("the slowed worker's new share", lambda: [
            t for t, n in assignments(procs, "slowing") if t > slowed and n <= 4], 120)[0]
        joined = time.time()
        procs.worker("sim:ms=10", *quick, name="joiner")
        wait_for("the joiner's rebalance", lambda: revoked_after(procs, "victim", joined), 120)
        victim.send_signal(signal.SIGKILL)
        outcome["killed"] = time.time()
        wait_for("the survivors owning every partition", lambda: owned(
            procs, "slowing", "steady", "joiner"), 120)
        outcome["owned"] = time.time()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    done = run_job(config, tmp_path, 9000)  # every item exactly once
    watcher.join(180)
    assert "owned" in outcome, f"the job ended before the kill: {outcome}"
    lost_after = outcome["lost"] - outcome["slowed"]
    print(f"partitions lost {lost_after:.1f}s after the slowdown, down to its share "
          f"{outcome['settled'] - outcome['slowed']:.1f}s after it; victim killed during a "
          f"rebalance, every partition owned again {outcome['owned'] - outcome['killed']:.1f}s "
          f"later; items {dict(done)}")
    # 5 s rebalance interval + 1 s policy interval, + the samples that show the slowdown
    # (2 s each) and the leader's 1 s check.
    assert lost_after <= 5 + 1 + 2 * 2 + 1, lost_after
    # The joiner owns partitions (above); whether it gets tasks depends on when the victim is
    # seen dead: migration re-issues the victim's tasks to the workers that own partitions
    # then, which may be before the joiner's assignment (CI saw both).
    assert done["victim"] > 0 and set(done) <= {"slowing", "steady", "victim", "joiner"}, done
