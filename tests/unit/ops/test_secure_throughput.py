"""ops/bench/secure_throughput.py without a broker: its arguments, and the medians and ratio
its table reports (the run itself needs two clusters: `python ops/bench/secure_throughput.py
--items 200 --repeats 1` takes about a minute)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import secure_throughput

BENCH = Path(secure_throughput.__file__)


def test_the_defaults_time_thousands_of_items_at_least_three_times_a_side() -> None:
    args = secure_throughput.parse_args([])
    assert args.items >= 1000 and args.repeats >= 3
    assert secure_throughput.parse_args(["--items", "200", "--repeats", "1"]).items == 200
    usage = subprocess.run([sys.executable, str(BENCH), "--help"],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "SASL_SSL" in usage and "--repeats" in usage


def test_the_table_gives_each_side_s_median_and_their_ratio() -> None:
    def runs(*rates: float) -> list[secure_throughput.Run]:
        return [secure_throughput.Run(rate, {"broker": rate / 10, "controller": 1.0,
                                             "worker": 2.0}) for rate in rates]
    measured = {"plaintext": runs(1000.0, 1200.0, 900.0), "sasl_ssl": runs(800.0, 700.0, 950.0)}
    assert secure_throughput.summary(measured) == {
        "plaintext": 1000.0, "sasl_ssl": 800.0, "ratio": pytest.approx(0.8)}
    table = secure_throughput.table(measured, [1.0] * 6)
    assert "| plaintext | 1000, 1200, 900 | 1000 | 100, 1, 2 |" in table
    assert "| sasl_ssl | 800, 700, 950 | 800 | 80, 1, 2 |" in table
    assert "sasl_ssl / plaintext: 0.800" in table


def test_cpu_time_is_read_from_proc() -> None:
    spent = secure_throughput.cpu_s(os.getpid())
    sum(range(2_000_000))
    assert secure_throughput.cpu_s(os.getpid()) > spent
