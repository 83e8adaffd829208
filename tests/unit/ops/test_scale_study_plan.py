"""The scale study's plan without a broker: node speeds from the GPU profiles, processes of
members, speed-ups against the smallest N of each profile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import scale_study

from inferstream.models.names import parse_sim_name


def test_a_node_does_the_node_rate_at_the_batch_size() -> None:
    params = parse_sim_name(scale_study.node_model("googlenet", 20.0, 32))
    batch_s = (params.batch_ms + 32 * params.ms) * params.slower / 1000
    assert 32 / batch_s == pytest.approx(20.0, rel=0.01)
    slow = parse_sim_name(scale_study.node_model("googlenet", 20.0, 32, factor=4.0))
    assert slow.slower == pytest.approx(4 * params.slower, rel=0.01)


def test_nodes_are_packed_in_processes_of_one_speed() -> None:
    study = scale_study.Study.__new__(scale_study.Study)
    study.args = scale_study.parse_args(["--members-per-process", "25"])
    assert study.packs(60) == [(25, 1.0), (25, 1.0), (10, 1.0)]
    mix = [1.0] * 50 + [2.0] * 30 + [4.0] * 20
    assert study.packs(100, mix) == [(25, 1.0), (25, 1.0), (25, 2.0), (5, 2.0), (20, 4.0)]


def point(nodes: int, rate: float, profile: str = "alexnet", run: str = "sweep"
          ) -> scale_study.Point:
    return scale_study.Point(profile=profile, nodes=nodes, run=run, items=1, seconds=1.0,
                             rate=rate, ideal_rate=20.0 * nodes, exactly_once=True)


def test_speedups_are_against_the_smallest_n_of_the_same_profile() -> None:
    points = scale_study.with_speedups([
        point(1, 20.0), point(100, 1800.0), point(100, 1700.0, run="kill a member process"),
        point(10, 150.0, profile="googlenet"), point(20, 300.0, profile="googlenet")])
    assert points[1].speedup == pytest.approx(90.0) and points[1].efficiency == pytest.approx(0.9)
    assert points[2].speedup is None  # not a sweep job
    assert points[4].speedup == pytest.approx(20.0)  # googlenet's base is its N = 10
