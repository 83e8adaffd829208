"""The brokers' JVMs: which pid runs which node, formatting storage, spawning and stopping."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from .common import ClusterError, log
from .jars import cds_tmp_path, java_bin, java_cmd, promote_cds
from .security import scram_args
from .state import AnyNode, ClusterState, all_nodes, is_broker, node_dir

# --------------------------------------------------------------------------------------------
# Which process is which broker
# --------------------------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own child, not yet reaped) is dead for our purposes
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return False
    except OSError:
        pass
    return True


def is_our_broker(pid: int, props: Path) -> bool:
    """Guards against pid reuse: the process must be kafka.Kafka with this node's config.

    Right after the spawn, /proc/<pid>/cmdline can still hold the forking Python's arguments
    (the exec has not happened yet), so a mismatch is looked at again for up to a second.
    """
    for _ in range(20):
        if _cmdline_matches(pid, props):
            return True
        if not pid_alive(pid):
            return False
        time.sleep(0.05)
    return False


def _cmdline_matches(pid: int, props: Path) -> bool:
    if not pid_alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            return False
        return b"kafka.Kafka" in args and str(props).encode() in args
    out = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True)
    return "kafka.Kafka" in out.stdout and str(props) in out.stdout


def node_pid(d: Path, nid: int) -> int | None:
    """pid of the running broker `nid` of the cluster in d, or None."""
    nd = node_dir(d, nid)
    try:
        pid = int((nd / "kafka.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if is_our_broker(pid, nd / "server.properties") else None


# --------------------------------------------------------------------------------------------
# Formatting and starting
# --------------------------------------------------------------------------------------------


def format_nodes(java: str, d: Path, st: ClusterState, nodes: list[AnyNode]) -> None:
    """kafka-storage format, one JVM per node, in parallel; a secured cluster's SCRAM users
    go into its controllers' bootstrap metadata."""
    procs: list[tuple[AnyNode, Path | None, subprocess.Popen[str]]] = []
    for n in nodes:
        props = node_dir(d, n["id"]) / "server.properties"
        args = ["format", "--cluster-id", st["cluster_id"], "--config", str(props)]
        if not is_broker(n) or "controller" not in st:  # a KRaft controller
            args += scram_args(d, st)
        tmp = cds_tmp_path(java, "tool")
        cmd = java_cmd(java, "kafka.tools.StorageTool", *args, "--ignore-formatted",
                       kind="tool", cds_tmp=tmp)  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True)  # fmt: skip
        procs.append((n, tmp, proc))
    for n, tmp, p in procs:
        out, _ = p.communicate()
        promote_cds(java, "tool", tmp, p.returncode == 0)
        if p.returncode != 0:
            raise ClusterError(f"formatting node {n['id']} failed:\n{out.strip()}")
        n["formatted"] = True


def spawn(java: str, d: Path, n: AnyNode) -> int:
    nd = node_dir(d, n["id"])
    props = nd / "server.properties"
    logf = open(nd / "server.log", "ab")
    logf.write(
        f"\n===== cluster: starting node {n['id']} at "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} =====\n".encode()
    )
    logf.flush()
    tmp = cds_tmp_path(java, "broker")
    cds_note = nd / "cds-tmp"
    if tmp is not None:
        cds_note.write_text(str(tmp))
    else:
        with contextlib.suppress(OSError):
            cds_note.unlink()
    cmd = java_cmd(java, "kafka.Kafka", str(props), cds_tmp=tmp)
    # Detached: own session, no inherited stdin/stdout, so callers that capture our output
    # (subprocess.run(capture_output=True)) do not wait for the broker to exit.
    p = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=logf,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
        cwd=str(nd),
    )
    logf.close()
    (nd / "kafka.pid").write_text(f"{p.pid}\n")
    return p.pid


# --------------------------------------------------------------------------------------------
# Stopping
# --------------------------------------------------------------------------------------------


def stop_node(d: Path, nid: int, sig: int = signal.SIGKILL) -> bool:
    pid = node_pid(d, nid)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    wait_dead(d, {nid: pid}, 10)
    after_exit(d, nid, clean=False)
    return True


def stop_gracefully(d: Path, nid: int, pid: int, timeout: float) -> None:
    """SIGTERM broker nid (pid), SIGKILL it if it has not stopped after `timeout` s."""
    log(f"stopping broker {nid} (pid {pid}) ...")
    os.kill(pid, signal.SIGTERM)
    stuck = bool(wait_dead(d, {nid: pid}, timeout))
    if stuck:
        log(f"broker {nid} did not stop within {timeout:.0f}s; SIGKILL")
        os.kill(pid, signal.SIGKILL)
        wait_dead(d, {nid: pid}, 10)
    after_exit(d, nid, clean=not stuck)


def wait_dead(d: Path, pids: dict[int, int], timeout: float) -> list[int]:
    """Waits until the processes {node id: pid} are gone; returns the ids still alive."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = {nid: p for nid, p in pids.items() if pid_alive(p)}
        if not pids:
            return []
        time.sleep(0.2)
    return list(pids)


def stop_all(d: Path, st: ClusterState, timeout: float) -> list[int]:
    found = {n["id"]: node_pid(d, n["id"]) for n in all_nodes(st)}
    pids = {k: v for k, v in found.items() if v is not None}
    # All at once: stopping combined broker+controller nodes one by one makes the last ones
    # wait for a controller quorum that is already gone.
    for p in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGTERM)
    stuck = wait_dead(d, pids, timeout)
    for nid in stuck:
        log(f"node {nid} did not stop within {timeout:.0f}s; SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pids[nid], signal.SIGKILL)
    wait_dead(d, {nid: pids[nid] for nid in stuck}, 10)
    for nid in pids:
        after_exit(d, nid, clean=nid not in stuck)
    return sorted(pids)


def kill_all(d: Path, st: ClusterState) -> list[int]:
    """SIGKILL every node of the cluster in d (for `clean`: its data go next, so nothing is
    gained by a graceful stop, which takes 3 brokers 5-30 s); ids of those that ran."""
    return [n["id"] for n in all_nodes(st) if stop_node(d, n["id"])]


def writes_cds_at_exit(d: Path, st: ClusterState) -> bool:
    """Whether a running broker writes the class-data archive at a clean exit (see spawn)."""
    return any((node_dir(d, n["id"]) / "cds-tmp").exists() for n in all_nodes(st))


def after_exit(d: Path, nid: int, clean: bool) -> None:
    """Housekeeping once broker nid is dead: keep the CDS archive it wrote at a clean exit."""
    note = node_dir(d, nid) / "cds-tmp"
    try:
        tmp = Path(note.read_text().strip())
    except OSError:
        return
    with contextlib.suppress(OSError):
        note.unlink()
    with contextlib.suppress(ClusterError, OSError):
        promote_cds(java_bin(), "broker", tmp, clean)
