"""The cluster directory: its `cluster.json` state file, its lock and the nodes' directories.

`cluster.json` is kept as plain JSON objects; the TypedDicts below only describe it, so a
file written by any earlier `cluster` (and any key this code does not know) reads and
writes back unchanged."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NotRequired, TypedDict, TypeGuard

from .common import DEFAULT_DIR, STATE_FILE, ClusterError


class NodeState(TypedDict):
    """One broker of `cluster.json`'s "nodes" (also a KRaft controller where the cluster has
    no dedicated one)."""

    id: int  # node id, 1..N
    port: int  # client listener on 127.0.0.1
    controller_port: int  # controller listener on 127.0.0.1 (unused beside a dedicated one)
    formatted: bool  # storage formatted (kafka.tools.StorageTool format) already
    #: a secured cluster's inter-broker (mTLS) listener on 127.0.0.1
    internal_port: NotRequired[int]


class ControllerState(TypedDict):
    """The dedicated KRaft controller of a multi-broker cluster (`cluster.json`'s
    "controller"), the metadata quorum's only voter."""

    id: int  # node id N+1
    controller_port: int
    formatted: bool


class ClusterState(TypedDict):
    """`cluster.json`."""

    kafka_version: str
    cluster_id: str
    dir: str
    created: str  # local time, %Y-%m-%dT%H:%M:%S%z
    nodes: list[NodeState]
    #: absent: every broker is a controller too (a single broker, or a cluster made before)
    controller: NotRequired[ControllerState]
    #: server.properties lines that `start --set` added, on every node
    settings: NotRequired[dict[str, str]]
    #: `start --security`: sasl_ssl or ssl (absent: plaintext)
    security: NotRequired[str]


#: A process of the cluster: a broker or the dedicated controller.
AnyNode = NodeState | ControllerState


def is_broker(n: AnyNode) -> TypeGuard[NodeState]:
    return "port" in n


def all_nodes(st: ClusterState) -> list[AnyNode]:
    """Every process of the cluster, the dedicated controller (if any) first."""
    controller: list[AnyNode] = [st["controller"]] if "controller" in st else []
    return controller + list(st["nodes"])


def resolve_dir(d: str | None) -> Path:
    raw = d or os.environ.get("INFERSTREAM_KAFKA_DIR") or str(DEFAULT_DIR)
    return Path(raw).expanduser().resolve()


def load_state(d: Path) -> ClusterState | None:
    f = d / STATE_FILE
    if not f.is_file():
        return None
    try:
        st: ClusterState = json.loads(f.read_text())
    except ValueError as e:
        raise ClusterError(
            f"{f} is not valid JSON ({e}); `cluster clean --dir {d}` starts over"
        ) from e
    return st


def save_state(d: Path, st: ClusterState) -> None:
    tmp = d / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(st, indent=2) + "\n")
    tmp.replace(d / STATE_FILE)


def require_state(d: Path) -> ClusterState:
    st = load_state(d)
    if st is None:
        raise ClusterError(
            f"no cluster in {d} (no {STATE_FILE}); run `cluster start --dir {d}` first"
        )
    return st


@contextlib.contextmanager
def dir_lock(d: Path) -> Iterator[None]:
    """Serialises start/stop/kill/restart on one cluster directory (creating it)."""
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def node_dir(d: Path, nid: int) -> Path:
    return d / f"node-{nid}"


def bootstrap(st: ClusterState) -> str:
    return ",".join(f"127.0.0.1:{n['port']}" for n in st["nodes"])


def get_node(st: ClusterState, nid: int) -> NodeState:
    for n in st["nodes"]:
        if n["id"] == nid:
            return n
    raise ClusterError(f"no broker {nid}: this cluster has ids 1..{len(st['nodes'])}")


def describe(st: ClusterState, d: Path) -> str:
    quorum = (f" and KRaft controller {st['controller']['id']}" if "controller" in st
              else "")
    security = f", {st['security']}" if "security" in st else ""
    return (f"{len(st['nodes'])} broker(s){quorum}, Kafka {st['kafka_version']}{security}, "
            f"dir {d}")  # fmt: skip


def wipe(d: Path, st: ClusterState, keep_dir: bool = False) -> None:
    # Only what `cluster` created, so a wrong --dir cannot delete anything else.
    for n in all_nodes(st):
        shutil.rmtree(node_dir(d, n["id"]), ignore_errors=True)
    for sub in ("tls", "secrets", "clients") if "security" in st else ():
        shutil.rmtree(d / sub, ignore_errors=True)
    for f in (STATE_FILE, STATE_FILE + ".tmp") + (() if keep_dir else (".lock",)):
        with contextlib.suppress(OSError):
            (d / f).unlink()
    if not keep_dir:
        with contextlib.suppress(OSError):
            d.rmdir()


def tail_file(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a (log) file, read from its last 64 KiB."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(data.splitlines()[-lines:])
