"""What `inferstream top` shows: a snapshot of the sysinfo app, totals per pool, the running
jobs with their priorities and weights (`top --jobs`), table lines.

Everything but `fetch_snapshot` is a pure function of its input (the time included), so the
table is tested on fixed data; the terminal loop lives in `client/top.py`.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple, TypedDict

from inferstream.client.sysinfo_api import AppHealth, SysInfoClient, WorkerInfo
from inferstream.schemas.records import PolicyEntry, WorkerHealth, model_ref

if TYPE_CHECKING:
    from inferstream.client.client import JobStatus


class PoolTotals(TypedDict):
    """A pool's workers (all listed, and healthy), and the items/s and models of the healthy."""

    workers: int
    healthy: int
    items_per_s: float
    models: list[str]


class Snapshot(TypedDict):
    """One look at the app: `inferstream top --once --json` prints this."""

    health: AppHealth
    workers: list[WorkerInfo]
    policy: list[PolicyEntry]
    pools: dict[str, PoolTotals]


class Style(StrEnum):
    """How the terminal shows a line; plain text ignores it."""

    TITLE = "title"
    ERROR = "error"
    HEADING = "heading"
    ROW = "row"
    UNHEALTHY = "unhealthy"
    TOTAL = "total"


class Line(NamedTuple):
    text: str
    style: Style


def fetch_snapshot(client: SysInfoClient) -> Snapshot:
    """Health, workers and policy from the app, with the pool totals of those workers."""
    health = client.health()
    workers = client.workers()
    return {"health": health, "workers": workers, "policy": client.policy(),
            "pools": pool_totals(workers)}


def pool_totals(workers: Iterable[WorkerInfo]) -> dict[str, PoolTotals]:
    totals: dict[str, PoolTotals] = {}
    for w in sorted(workers, key=lambda w: w["pool"]):
        pool = totals.setdefault(w["pool"], {"workers": 0, "healthy": 0, "items_per_s": 0.0,
                                             "models": []})
        pool["workers"] += 1
        if w["health"] == WorkerHealth.HEALTHY:
            pool["healthy"] += 1
            pool["items_per_s"] += w["items_per_s"]
            pool["models"] = sorted(set(pool["models"]) | set(w["models"]))
    return totals


# -- cells ------------------------------------------------------------------------------------
def ago(timestamp_ms: int | None, now_ms: int) -> str:
    """`timestamp_ms` as "2s ago", "3m ago", "1h ago", "2d ago"; a future one is "0s ago"."""
    if timestamp_ms is None:
        return "-"
    seconds = max(0, (now_ms - timestamp_ms) // 1000)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def latency(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.2f}s"


def fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def partitions(numbers: Iterable[int]) -> str:
    """Partition numbers as ranges: [0, 1, 2, 5] is "0-2,5"."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    text = ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
    return text or "-"


def device(worker: WorkerInfo) -> str:
    accelerator = worker["accelerator"]
    return f"{worker['device']} {accelerator}" if accelerator else worker["device"]


# -- table ------------------------------------------------------------------------------------
class Column(NamedTuple):
    title: str
    width: int
    cell: Callable[[WorkerInfo, int], str]
    right: bool = False


COLUMNS = (
    Column("WORKER", 16, lambda w, _: w["worker"]),
    Column("POOL", 8, lambda w, _: w["pool"]),
    Column("MODELS", 18, lambda w, _: ",".join(w["models"]) or "-"),
    Column("DEVICE", 12, lambda w, _: device(w)),
    Column("ITEMS/S", 8, lambda w, _: f"{w['items_per_s']:.1f}", right=True),
    Column("P95", 6, lambda w, _: latency(w["latency_seconds_p95"]), right=True),
    Column("SHARE", 5, lambda w, _: fraction(w["share"]), right=True),
    Column("PARTITIONS", 10, lambda w, _: held(w)),
    Column("HEALTH", 7, lambda w, _: w["health"].value),
    Column("LAST SEEN", 9, lambda w, now: ago(w["last_seen"], now), right=True),
)


def held(worker: WorkerInfo) -> str:
    """The partitions a worker holds, as its last sample said; none for a GONE one (its
    partitions are others' by now: they showed under two workers until it was forgotten)."""
    if worker["health"] == WorkerHealth.GONE:
        return "-"
    return partitions(worker["assigned_partitions"])


def fit(text: str, width: int, right: bool = False) -> str:
    """`text` padded or cut (ending in "~") to exactly `width` characters."""
    if len(text) > width:
        return text[: width - 1] + "~"
    return text.rjust(width) if right else text.ljust(width)


def row(cells: Iterable[tuple[str, int, bool]]) -> str:
    """Cells (text, width, right-aligned) joined into one line."""
    return "  ".join(fit(text, width, right) for text, width, right in cells).rstrip()


def title(snapshot: Snapshot | None, url: str, now_ms: int, failed: bool = False) -> str:
    """The first line; `failed`: the last look at the app failed, the rest is older."""
    clock = time.strftime("%H:%M:%S", time.gmtime(now_ms / 1000))
    if snapshot is None:
        return f"inferstream top  {url}  no data yet  {clock} UTC"
    health = snapshot["health"]
    status = "error (last known below)" if failed else health["status"]
    return (f"inferstream top  {url}  status {status}  "
            f"{health['workers']} live workers  pools {','.join(health['pools']) or '-'}  "
            f"policy updated {ago(health['policy_updated_at'], now_ms)}  {clock} UTC")


def worker_lines(workers: list[WorkerInfo], now_ms: int) -> list[Line]:
    lines = [Line(row((c.title, c.width, c.right) for c in COLUMNS), Style.HEADING)]
    for w in sorted(workers, key=lambda w: (w["pool"], w["worker"])):
        style = Style.ROW if w["health"] == WorkerHealth.HEALTHY else Style.UNHEALTHY
        lines.append(Line(row((c.cell(w, now_ms), c.width, c.right) for c in COLUMNS), style))
    if not workers:
        lines.append(Line("(no workers have reported yet)", Style.ROW))
    return lines


#: The totals table: (title, width, right-aligned) per column.
TOTAL_COLUMNS = (("POOL", 10, False), ("WORKERS", 16, False), ("ITEMS/S", 9, True),
                 ("MODELS", 50, False))


def total_lines(pools: dict[str, PoolTotals]) -> list[Line]:
    lines = [Line(row(TOTAL_COLUMNS), Style.HEADING)]
    for name, t in sorted(pools.items()):
        cells = (name, f"{t['workers']} ({t['healthy']} healthy)", f"{t['items_per_s']:.1f}",
                 ",".join(t["models"]) or "-")
        lines.append(Line(row((text, width, right) for text, (_, width, right)
                              in zip(cells, TOTAL_COLUMNS, strict=True)), Style.TOTAL))
    return lines


#: The jobs table: (title, width, right-aligned) per column.
JOB_COLUMNS = (("JOB", 26, False), ("POOL", 10, False), ("STATE", 9, False),
               ("MODEL", 18, False), ("PRIORITY", 8, True), ("WEIGHT", 6, True),
               ("DONE", 17, True), ("ITEMS/S", 8, True))


def job_lines(jobs: Iterable[JobStatus]) -> list[Line]:
    """The jobs not finished, pool by pool in the order the controller serves them (each
    pool's jobs share only that pool): the highest priority first, then by weight (the
    heaviest first) and id; under a job that waits, what it waits for."""
    running = sorted((j for j in jobs if not j.finished),
                     key=lambda j: (j.pool or "", -j.priority, -j.weight, j.job_id))
    lines = [Line(row(JOB_COLUMNS), Style.HEADING)]
    for j in running:
        total = "?" if j.total_items is None else str(j.total_items)
        rate = "-" if j.rate_items_per_s is None else f"{j.rate_items_per_s:.1f}"
        model = model_ref(j.model, j.model_version) if j.model else "-"
        cells = (j.job_id, j.pool or "?", j.state.lower(), model, str(j.priority),
                 f"{j.weight:g}", f"{j.done_items}/{total}", rate)
        lines.append(Line(row((text, width, right) for text, (_, width, right)
                              in zip(cells, JOB_COLUMNS, strict=True)), Style.ROW))
        if j.reason:
            lines.append(Line(f"  {j.reason}", Style.ROW))
    if not running:
        lines.append(Line("(no job is running)", Style.ROW))
    return lines


def render(snapshot: Snapshot | None, *, url: str, now_ms: int, error: str | None = None,
           width: int | None = None, jobs: list[JobStatus] | None = None) -> list[Line]:
    """The view: a title with the app's health, the error if the last look failed, one row
    per worker, totals per pool, and with `jobs` (None: not asked for) the running ones.
    `snapshot` is the last good one (None before any); `width` cuts every line and wraps the
    error (None: no limit)."""
    lines = [Line(title(snapshot, url, now_ms, failed=error is not None), Style.TITLE)]
    if error is not None:
        text = f"! {error} (retrying)"
        wrapped = (textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False)
                   if width else [text])
        lines += [Line(part, Style.ERROR) for part in wrapped]
    if snapshot is not None:
        lines += [Line("", Style.ROW), *worker_lines(snapshot["workers"], now_ms),
                  Line("", Style.ROW), *total_lines(snapshot["pools"])]
    if jobs is not None:
        lines += [Line("", Style.ROW), *job_lines(jobs)]
    if width is None:
        return lines
    return [Line(line.text[:width], line.style) for line in lines]


def plain_text(lines: Iterable[Line]) -> str:
    return "\n".join(line.text for line in lines)
