"""The scale study's points and what is made of them: speed-ups, the table and the plot
(`scale_study.py` runs the jobs; `--replot` rebuilds these from its saved records)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The source system's speed-ups at 100 nodes (seed abstract: 37.7x to 90.6x).
SOURCE_AT_100 = (37.7, 90.6)


@dataclass
class Point:
    """One job of the study."""

    profile: str
    nodes: int
    run: str  # "sweep", "kill 10% of members", "kill a member process", "mix policy", ...
    items: int
    seconds: float
    rate: float
    ideal_rate: float
    exactly_once: bool
    lost: int = 0
    duplicates: int = 0
    speedup: float | None = None
    efficiency: float | None = None
    time_lost_s: float | None = None
    join_s: float = 0.0
    controller_cpu_s: float = 0.0
    broker_cpu_s: float = 0.0
    tasks: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def with_speedups(points: list[Point]) -> list[Point]:
    """The sweep points' speed-up and efficiency against the profile's smallest-N sweep point,
    an outage's time lost against the mean rate of the sweep jobs of its N, a mix's
    efficiency against its ideal rate (jobs of several runs read back from
    scale_study.jsonl)."""
    for profile in {p.profile for p in points}:
        sweep = [p for p in points if p.profile == profile and p.run == "sweep"]
        if not sweep:
            continue
        base = min(sweep, key=lambda p: p.nodes)
        for point in sweep:
            point.speedup = point.rate / base.rate * base.nodes
            point.efficiency = point.speedup / point.nodes
        for point in (p for p in points if p.profile == profile and p.run != "sweep"):
            clean = [p.rate for p in sweep if p.nodes == point.nodes]
            if point.run.startswith("kill") and clean:
                point.time_lost_s = point.seconds - point.items / (sum(clean) / len(clean))
            elif point.run.startswith("mix"):
                point.efficiency = point.rate / point.ideal_rate
    return points


def write_table(points: list[Point], path: Path, command: str) -> str:
    lines = [f"Command: `{command}`", "",
             "| profile | N | run | partitions | items | s | items/s | ideal items/s | speed-up | "
             "efficiency | exactly once | time lost | join s | controller CPU ms/task | "
             "broker CPU ms/task | broker CPU ms/transaction |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        speedup = f"{p.speedup:.1f}x" if p.speedup is not None else ""
        efficiency = f"{p.efficiency:.2f}" if p.efficiency is not None else ""
        lost = f"{p.time_lost_s:.1f} s" if p.time_lost_s is not None else ""
        per_task = 1000 / max(p.tasks, 1)
        txns = p.extra.get("transactions")
        per_transaction = f"{p.broker_cpu_s * 1000 / txns:.1f}" if txns else ""
        lines.append(
            f"| {p.profile} | {p.nodes} | {p.run} | {p.extra.get('partitions', max(4, p.nodes))} | "
            f"{p.items} | {p.seconds:.1f} | "
            f"{p.rate:.0f} | {p.ideal_rate:.0f} | {speedup} | {efficiency} | "
            f"{'yes' if p.exactly_once else f'NO (lost {p.lost}, dup {p.duplicates})'} | "
            f"{lost} | {p.join_s:.0f} | {p.controller_cpu_s * per_task:.1f} | "
            f"{p.broker_cpu_s * per_task:.1f} | {per_transaction} |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def write_plot(points: list[Point], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 5))
    largest = max(p.nodes for p in points)
    axes.plot([0, largest], [0, largest], "k--", linewidth=1, label="ideal (N)")
    axes.plot([0, largest], [0, 0.95 * largest], ":", color="grey", linewidth=1,
              label="goal (0.95 N)")
    for profile in sorted({p.profile for p in points}):
        sweep = sorted((p for p in points if p.profile == profile and p.run == "sweep"),
                       key=lambda p: p.nodes)
        axes.plot([p.nodes for p in sweep], [p.speedup or 0 for p in sweep], "o-",
                  label=f"inferstream, {profile}")
    axes.plot([100, 100], list(SOURCE_AT_100), "s", color="red",
              label="source system at 100 nodes (37.7x, 90.6x)")
    axes.set_xlabel("nodes (N)")
    axes.set_ylabel("speed-up over one node")
    axes.set_title("inferstream scale study (simulated P40 nodes)")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
