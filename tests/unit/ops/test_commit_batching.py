"""ops/bench/commit_batching.py without a broker: the variants, their order and the summary
(a run needs a broker: `python ops/bench/commit_batching.py --items 2000 --rounds 1` takes
a few minutes)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import commit_batching
from commit_batching import Run, Variant


def test_the_old_code_runs_beside_each_window_each_round_starting_with_the_next() -> None:
    args = commit_batching.parse_args(["--base-src", "/tmp/base/src", "--windows-ms", "0", "10",
                                       "--rounds", "3"])
    order = commit_batching.variants(args)
    assert order == [Variant("base", "/tmp/base/src"),
                     Variant("window 0 ms", None, ("--commit-window-ms", "0")),
                     Variant("window 10 ms", None, ("--commit-window-ms", "10"))]
    names = [v.name for v in commit_batching.schedule(order, args.rounds)]
    assert names == ["base", "window 0 ms", "window 10 ms",
                     "window 0 ms", "window 10 ms", "base",
                     "window 10 ms", "base", "window 0 ms"]


def test_the_summary_gives_each_variant_s_medians() -> None:
    runs = [Run("base", 1000, 100, seconds, cpu, 50, True, 5.0)
            for seconds, cpu in ((1.0, 0.2), (2.0, 0.1), (4.0, 0.3))]
    runs.append(Run("window 10 ms", 1000, 100, 0.5, 0.05, 20, True, 5.0))
    assert commit_batching.summary(runs).splitlines()[2:] == [
        "| base | 3 | 500 | 200 |", "| window 10 ms | 1 | 2,000 | 50 |"]
    assert commit_batching.row(runs[-1]) == (
        "| window 10 ms | 2,000 | 0.5 | 50 | 0.20 | 2.5 | yes | 5.0 |")
