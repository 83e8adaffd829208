"""What a simulated node costs at rest (issue 15.1): one `inferstream worker --members N`
process for each N, with a local one-broker Kafka, measured once every member owns partitions
and the group has settled. Prints, per N, the process's RSS and its CPU share at rest, and the
cost of each member beyond the first.

    python ops/bench/members_footprint.py [--members 1 10 50 100] [--rest-s 20]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from failover_common import Fleet, start_broker
from p1_cpu import process_cpu_s as cpu_s
from p1_cpu import status_mib


def settled_members(log: str, members: int) -> int:
    """How many members have logged an assignment with partitions."""
    pattern = r"\[([\w.-]+)\] assigned partitions=\[\d" if members > 1 \
        else r"()assigned partitions=\[\d"
    return len(set(re.findall(pattern, log)))


def measure(fleet: Fleet, members: int, rest_s: float, timeout_s: float) -> dict[str, float]:
    name = f"n{members}"
    proc = fleet.worker(name, "sim:ms=10", "--members", str(members), "--decode-threads", "1")
    started = time.monotonic()
    while settled_members(fleet.log_path(name).read_text(errors="replace"), members) < members:
        fleet.check_alive(name)
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"{members} members did not all get partitions in {timeout_s}s")
        time.sleep(1)
    joined_s = time.monotonic() - started
    time.sleep(5)  # the last commits of the joining round, the first samples
    before, at = cpu_s(proc.pid), time.monotonic()
    time.sleep(rest_s)
    cpu = (cpu_s(proc.pid) - before) / (time.monotonic() - at)
    row = {"members": members, "rss_mib": status_mib(proc.pid), "cpu_cores": cpu,
           "joined_s": joined_s}
    fleet.stop_all()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[1, 10, 50, 100])
    parser.add_argument("--rest-s", type=float, default=20.0)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
        broker = start_broker(Path(tmp) / "kafka")
        try:
            rows = []
            for members in args.members:
                fleet = Fleet(broker.bootstrap, max(args.members), Path(tmp), f"fp{members}")
                fleet.create_topics()
                rows.append(measure(fleet, members, args.rest_s, args.timeout_s))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            broker.clean()
    base = rows[0]
    print("\n| members | RSS MiB | MiB per extra member | CPU at rest (cores) | "
          "per extra member | all own partitions after |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        extra = row["members"] - base["members"]
        per_mib = (row["rss_mib"] - base["rss_mib"]) / extra if extra else 0.0
        per_cpu = (row["cpu_cores"] - base["cpu_cores"]) / extra if extra else 0.0
        print(f"| {row['members']} | {row['rss_mib']:.0f} | {per_mib:.1f} | "
              f"{row['cpu_cores']:.3f} | {per_cpu:.4f} | {row['joined_s']:.1f} s |")


if __name__ == "__main__":
    main()
