"""ops/bench/ablation.py without a broker: the runs it plans, the jobs' sizes and ideals, the
settings each run's processes get, and each piece's effect from a table of makespans (the
study itself needs a broker: `python ops/bench/ablation.py --tiny` runs it at 3 s a job)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import ablation
import p3_policy
from ablation import Combo, Measured, Run

BENCH = Path(ablation.__file__)


def test_every_combination_runs_once_a_repeat_each_one_switch_from_the_last() -> None:
    runs = ablation.plan(["mixed", "straggler"], repeats=2)
    assert len(runs) == 32
    for repeat in (0, 1):
        for scenario in ("mixed", "straggler"):
            combos = [r.combo for r in runs if r.repeat == repeat and r.scenario == scenario]
            assert len(set(combos)) == 8
            for before, after in itertools.pairwise(combos):
                assert sum(before.on(p) != after.on(p) for p in ablation.PIECES) == 1
    # the second repeat reverses the order and swaps the scenarios
    assert [r.scenario for r in runs[:8]] == ["mixed"] * 8
    assert [r.scenario for r in runs[16:24]] == ["straggler"] * 8
    assert [r.combo for r in runs[16:24]] == [r.combo for r in runs[8:16]][::-1]


def test_each_piece_off_is_its_documented_switch() -> None:
    none = Combo(pacing=False, policy=False, migration=False)
    assert none.controller_args() == ["--issue-ahead-s", "0", "--migration-slack", "0"]
    assert none.assignor == "roundrobin"
    every = Combo(pacing=True, policy=True, migration=True)
    assert every.controller_args() == [] and every.assignor == "policy"
    assert every.without("policy") == Combo(pacing=True, policy=False, migration=True)
    assert every.label == "pacing-policy-migration" and none.label == "none"


def test_a_job_is_the_ideal_seconds_of_the_pool_s_capacity() -> None:
    mixed = Run(0, "mixed", Combo(True, True, True)).case()
    straggler = Run(0, "straggler", Combo(True, True, True)).case()
    # 100 + 50 + 25 items/s; three at 100 and one at 100 / 8
    assert ablation.capacity(mixed) == pytest.approx(175.0)
    assert ablation.capacity(straggler) == pytest.approx(312.5)
    assert ablation.items_for(mixed, 30) == 5250
    assert ablation.items_for(straggler, 30) == 9375
    assert p3_policy.ideal_makespan(9375, straggler) == pytest.approx(30.0, rel=1e-3)
    # the straggler is slow once its calibration and warm-up batch are done
    assert p3_policy.model_of("w10d", straggler, 8) == "sim:ms=10,slow_after=16,slow_factor=8"
    assert straggler.name == "straggler-pacing-policy-migration-0"


def measured(scenario: str, combo: Combo, over_ideal: float, repeat: int = 0) -> Measured:
    return Measured(Run(repeat, scenario, combo), 100, 10 * over_ideal, 10.0, 0, {"w10": 1.0},
                    0, 0, 5.0)


def test_a_piece_that_halves_every_makespan_has_an_effect_of_one_half() -> None:
    rows = []
    for combo in ablation.gray_order():
        span = 4.0 * (0.5 if combo.migration else 1.0) * (0.8 if combo.pacing else 1.0)
        rows.append(measured("straggler", combo, span))
        rows.append(measured("straggler", combo, span * 3, repeat=1))  # median of three
        rows.append(measured("straggler", combo, span, repeat=2))
    found = {e.piece: e for e in ablation.effects(rows)}
    assert found["migration"].ratio == pytest.approx(0.5)
    assert found["pacing"].ratio == pytest.approx(0.8)
    assert found["policy"].ratio == pytest.approx(1.0)
    assert found["migration"].pairs == 4
    table = ablation.effects_table(list(found.values()))
    assert "| straggler | migration | 0.50 | 0.50-0.50 | 4 |" in table


def test_a_pair_with_a_failed_run_is_left_out_of_the_effect() -> None:
    combos = [c for c in ablation.gray_order() if c != Combo(True, True, True)]
    rows = [measured("mixed", c, 2.0 if c.policy else 4.0) for c in combos]
    found = {e.piece: e for e in ablation.effects(rows)}
    assert found["policy"].pairs == 3 and found["policy"].ratio == pytest.approx(0.5)


def test_tiny_and_plan_print_the_runs_without_a_broker() -> None:
    args = ablation.parse_args(["--tiny"])
    assert args.ideal_s == 3.0 and args.partitions == 8
    with pytest.raises(SystemExit):
        ablation.parse_args(["--scenarios", "mixed,burst"])
    shown = subprocess.run([sys.executable, str(BENCH), "--tiny", "--plan", "--scenarios",
                            "straggler"], capture_output=True, text=True, timeout=60,
                           check=True).stdout.splitlines()
    assert shown[0].startswith("# ops/bench/ablation.py --tiny --plan --scenarios straggler")
    assert len(shown) == 9
    assert shown[1] == ("straggler-none-0: 938 items; workers sim:ms=10 sim:ms=10 sim:ms=10 "
                        "sim:ms=10,slow_after=16,slow_factor=8 --assignor roundrobin; "
                        "controller --issue-ahead-s 0 --migration-slack 0")
    usage = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert "--ideal-s" in usage and "pacing" in usage
