"""`cluster status`: which nodes run and which live brokers each broker sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from .probes import live_brokers
from .processes import node_pid
from .security import probe_context, security_of
from .state import ClusterState, bootstrap, load_state, resolve_dir

if TYPE_CHECKING:
    from .commands import Args


class NodeStatus(TypedDict):
    """One broker in `status --json`."""

    id: int
    pid: int | None
    running: bool
    port: int
    controller_port: int
    live_brokers_seen: list[int] | None


class ControllerStatus(TypedDict):
    """The dedicated KRaft controller in `status --json` ("controller")."""

    id: int
    pid: int | None
    running: bool
    controller_port: int


def cmd_status(a: Args) -> int:
    d = resolve_dir(a.dir)
    st = load_state(d)
    if st is None:
        if a.json:
            print(json.dumps({"dir": str(d), "exists": False, "running": 0}))
        else:
            print(f"no cluster in {d}")
        return 3
    rows = _status_rows(d, st)
    controller = _controller_status(d, st)
    up = sum(r["running"] for r in rows)
    every = [r["running"] for r in rows] + ([controller["running"]] if controller else [])
    code = 0 if all(every) else (3 if not any(every) else 1)
    if a.json:
        print(
            json.dumps(
                {
                    "dir": str(d),
                    "exists": True,
                    "kafka_version": st["kafka_version"],
                    "cluster_id": st["cluster_id"],
                    "security": security_of(st),
                    "brokers": len(rows),
                    "running": up,
                    "nodes": rows,
                    "controller": controller,
                    "bootstrap_servers": bootstrap(st),
                }
            )
        )
        return code
    _print_status(d, st, rows, controller, up)
    return code


def _status_rows(d: Path, st: ClusterState) -> list[NodeStatus]:
    rows: list[NodeStatus] = []
    tls = probe_context(d, st)
    for n in st["nodes"]:
        pid = node_pid(d, n["id"])
        seen = live_brokers(st, n["port"], tls, timeout=2.0) if pid else None
        rows.append(
            {
                "id": n["id"],
                "pid": pid,
                "running": pid is not None,
                "port": n["port"],
                "controller_port": n["controller_port"],
                "live_brokers_seen": sorted(seen) if seen is not None else None,
            }
        )
    return rows


def _controller_status(d: Path, st: ClusterState) -> ControllerStatus | None:
    if "controller" not in st:
        return None
    c = st["controller"]
    pid = node_pid(d, c["id"])
    return {"id": c["id"], "pid": pid, "running": pid is not None,
            "controller_port": c["controller_port"]}  # fmt: skip


def _print_status(
    d: Path,
    st: ClusterState,
    rows: list[NodeStatus],
    controller: ControllerStatus | None,
    up: int,
) -> None:
    print(f"cluster {st['cluster_id']}  Kafka {st['kafka_version']}  "
          f"security {security_of(st)}  dir {d}")  # fmt: skip
    for r in rows:
        state = f"running pid {r['pid']}" if r["running"] else "stopped"
        seen = (
            f"  sees brokers {r['live_brokers_seen']}"
            if r["live_brokers_seen"] is not None
            else ("  (not answering)" if r["running"] else "")
        )
        where = "" if controller else f" (controller {r['controller_port']})"
        print(f"  broker {r['id']}: 127.0.0.1:{r['port']}{where}  {state}{seen}")
    if controller:
        state = f"running pid {controller['pid']}" if controller["running"] else "stopped"
        print(
            f"  KRaft controller {controller['id']}: 127.0.0.1:{controller['controller_port']}"
            f"  {state}"
        )
    print(f"{up}/{len(rows)} brokers running")
    print(bootstrap(st))
