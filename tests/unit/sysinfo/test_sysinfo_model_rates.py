"""The sysinfo app measures every served model and version of a worker (issue 27.6): each one's
calibration until it has run items, then its own busy rate, each version apart; and the
policy it writes gives each model's task size. No Kafka."""

from __future__ import annotations

import pytest

from inferstream.config.sysinfo import SysinfoConfig
from inferstream.policy.table import PolicyTable
from inferstream.schemas.records import PolicyEntry, PolicyKind, now_ms, plain_record
from inferstream.sysinfo.fleet import Fleet, record_of
from inferstream.sysinfo.intake import read_sample
from tests.sysinfo_samples import calibrated, perf, sample
from tests.unit.support.memory import CODEC, make_config

SYSINFO = SysinfoConfig(task_seconds=1.0)
SLOW, FAST = "googlenet", "alexnet"


def feed(fleet: Fleet, *samples: object) -> None:
    """Each sample through the codec and the intake, as the app takes it."""
    for s in samples:
        value = CODEC.encode("SysInfoSample", s)  # type: ignore[arg-type]
        read = read_sample(CODEC, value, now_ms(), 60.0).sample
        assert read is not None
        previous = fleet.records.get(read["worker"])
        fleet.observe(record_of(read, previous["perf"] if previous else {}, now_ms(), SYSINFO))


def two_models(worker: str, slow_busy: float = 0.0) -> object:
    """A worker serving SLOW and FAST, calibrated at 4 and 400 items/s; SLOW busy at
    `slow_busy` items/s over the window (0: idle)."""
    return sample(worker, slow_busy, model=SLOW, served_models=[SLOW, FAST],
                  models=[perf(SLOW, slow_busy), perf(FAST, 0.0)],
                  calibration=calibrated(SLOW, 4.0),
                  calibrations=[calibrated(SLOW, 4.0), calibrated(FAST, 400.0)])


def rates(fleet: Fleet, worker: str) -> dict[str, float]:
    (row,) = [r for r in fleet.workers_json(now_ms())["workers"] if r["worker"] == worker]
    found: dict[str, float] = row["model_rates"]
    return found


def test_a_worker_is_scheduled_by_each_models_calibration_then_by_its_busy_rate() -> None:
    fleet = Fleet(SYSINFO, {})
    feed(fleet, two_models("w1"))
    assert rates(fleet, "w1") == {SLOW: 4.0, FAST: 400.0}
    feed(fleet, two_models("w1", slow_busy=2.5))  # slower than it calibrated
    assert rates(fleet, "w1") == {SLOW: pytest.approx(2.5), FAST: 400.0}
    feed(fleet, two_models("w1"))  # idle again: it keeps what it measured
    assert rates(fleet, "w1") == {SLOW: pytest.approx(2.5), FAST: 400.0}


def test_each_version_of_a_repository_model_is_measured_apart() -> None:
    fleet = Fleet(SYSINFO, {})
    feed(fleet, sample("w1", 30.0, model="faces", served_models=["faces"],
                       models=[perf("faces", 10.0, version="1"),
                               perf("faces", 20.0, version="2")],
                       calibrations=[calibrated("faces", 50.0, "1"),
                                     calibrated("faces", 50.0, "2")]))
    assert rates(fleet, "w1") == {"faces:1": pytest.approx(10.0), "faces:2": pytest.approx(20.0)}


def test_a_sample_before_per_model_calibrations_counts_its_first_models() -> None:
    fleet = Fleet(SYSINFO, {})
    feed(fleet, sample("old", 0.0, model=SLOW, calibration_items_per_s=6.0, calibrations=[]))
    assert rates(fleet, "old") == {SLOW: 6.0}


def test_the_policy_sizes_a_slow_models_tasks_small_and_a_fast_ones_big() -> None:
    fleet = Fleet(SYSINFO, {})
    feed(fleet, two_models("w1"), two_models("w2", slow_busy=2.0),
         sample("w3", 0.0, model=FAST, calibrations=[calibrated(FAST, 300.0)]))
    written = fleet.policy_to_write(now_ms())
    table = PolicyTable(make_config(), codec=CODEC, max_age_s=None)
    for entry in written:
        key = entry["pool"] if entry["kind"] == PolicyKind.POOL else \
            f"{entry['pool']}/{entry['worker']}"
        table.apply(key.encode(), CODEC.encode("PolicyEntry", plain_record(PolicyEntry, entry)))
    # SLOW: 4 and 2 items/s (median 3); FAST: 400, 400 and 300 (median 400); 1 s of work
    assert table.task_size("default", SLOW) == 3
    assert table.task_size("default", FAST) == 400
    w2 = (table.workers("default") or {})["w2"]
    assert w2.rate_for(SLOW) == pytest.approx(2.0) and w2.rate_for(FAST) == 400.0
