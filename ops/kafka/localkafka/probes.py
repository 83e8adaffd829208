"""Looking at the network: free ports, and readiness through a minimal Kafka protocol client
(ApiVersions v0, then Metadata v1..v8) that lists the live brokers a broker knows of."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable
from pathlib import Path

from .common import ClusterError
from .processes import node_pid
from .security import probe_context, probe_port
from .state import AnyNode, ClusterState, all_nodes, is_broker, node_dir, tail_file

# --------------------------------------------------------------------------------------------
# Ports
# --------------------------------------------------------------------------------------------


def port_free(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM does
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def check_ports(nodes: list[AnyNode]) -> None:
    for n in nodes:
        ports = [("controller", n["controller_port"])]
        if is_broker(n):
            ports.insert(0, ("client", n["port"]))
            if "internal_port" in n:
                ports.append(("inter-broker", n["internal_port"]))
        for what, p in ports:
            if not port_free(p):
                raise ClusterError(
                    f"port {p} on 127.0.0.1 ({what} port of node {n['id']}) is already in use by "
                    f"another process; pick another --port base (or the --dir of the cluster "
                    f"that has it)"
                )


# --------------------------------------------------------------------------------------------
# The Kafka protocol, just enough for Metadata
# --------------------------------------------------------------------------------------------


def _request(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    client = b"inferstream-cluster"
    header = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    msg = header + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    size: int = struct.unpack(">i", _recv(sock, 4))[0]
    resp = _recv(sock, size)
    if struct.unpack(">i", resp[:4])[0] != corr:
        raise OSError("correlation id mismatch")
    return resp[4:]


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def live_brokers(
    st: ClusterState, port: int, tls: ssl.SSLContext | None, timeout: float = 3.0
) -> set[int] | None:
    """`metadata_brokers` of the broker whose client port is `port`; a secured cluster's is
    asked on its inter-broker listener, `tls` being `probe_context`'s."""
    n = next((m for m in st["nodes"] if m["port"] == port), None)
    return metadata_brokers(port if n is None else probe_port(st, n), timeout, tls)


def metadata_brokers(
    port: int, timeout: float = 3.0, tls: ssl.SSLContext | None = None
) -> set[int] | None:
    """Node ids of the live (registered, unfenced) brokers as seen by the broker on `port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            s = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw
            s.settimeout(timeout)
            v = _metadata_version(s)
            if v is None:
                return None
            return _metadata_broker_ids(s, v)
    except (OSError, struct.error, ValueError):
        return None


def _metadata_version(s: socket.socket) -> int | None:
    """ApiVersions v0: the newest Metadata version in 1..8 that the broker speaks, or None."""
    r = _request(s, 18, 0, 1, b"")  # ApiVersions v0
    err, count = struct.unpack(">hi", r[:6])
    if err != 0:
        return None
    ranges: dict[int, tuple[int, int]] = {}
    for i in range(count):
        k, lo, hi = struct.unpack(">hhh", r[6 + 6 * i : 12 + 6 * i])
        ranges[k] = (lo, hi)
    lo, hi = ranges.get(3, (0, -1))
    v = min(hi, 8)
    if v < max(lo, 1):
        return None
    return v


def _metadata_broker_ids(s: socket.socket, v: int) -> set[int]:
    """Metadata v`v` for no topics: the node ids in its brokers array."""
    body = struct.pack(">i", 0)  # no topics
    if v >= 4:
        body += b"\x00"  # allow_auto_topic_creation
    if v >= 8:
        body += b"\x00\x00"  # include cluster/topic authorized operations
    r = _request(s, 3, v, 2, body)
    off = 4 if v >= 3 else 0  # throttle_time_ms
    (nb,) = struct.unpack(">i", r[off : off + 4])
    off += 4
    ids: set[int] = set()
    for _ in range(nb):
        (nid,) = struct.unpack(">i", r[off : off + 4])
        (hl,) = struct.unpack(">h", r[off + 4 : off + 6])
        off += 6 + hl + 4
        (rl,) = struct.unpack(">h", r[off : off + 2])
        off += 2 + max(rl, 0)
        ids.add(nid)
    return ids


# --------------------------------------------------------------------------------------------
# Readiness
# --------------------------------------------------------------------------------------------


def wait_ready(
    d: Path,
    st: ClusterState,
    want_ports: list[int],
    timeout: float,
    t0: float,
    want_ids: Callable[[], set[int]] | None = None,
) -> None:
    """Until each broker in want_ports answers Metadata listing as live the brokers
    want_ids() (default: every node of the cluster), re-evaluated at each poll."""
    deadline = t0 + timeout
    pending = list(want_ports)
    tls = probe_context(d, st)
    while True:
        _fail_if_exited(d, st, pending)
        all_ids = want_ids() if want_ids is not None else {n["id"] for n in st["nodes"]}
        pending = [p for p in pending if not all_ids <= (live_brokers(st, p, tls) or set())]
        if not pending:
            return
        if time.monotonic() > deadline:
            seen = {p: live_brokers(st, p, tls) for p in pending}
            raise ClusterError(
                f"cluster in {d} not ready after {timeout:.0f}s (brokers seen from ports: {seen}); "
                f"see `cluster logs ID --dir {d}`"
            )
        time.sleep(0.25)


def _fail_if_exited(d: Path, st: ClusterState, pending: list[int]) -> None:
    """A broker still awaited (its port in `pending`), or the dedicated controller they all
    wait for, that no longer runs is an error."""
    for n in all_nodes(st):
        awaited = n["port"] in pending if is_broker(n) else bool(pending)
        if awaited and node_pid(d, n["id"]) is None:
            server_log = node_dir(d, n["id"]) / "server.log"
            raise ClusterError(
                f"node {n['id']} is not running (it exited while starting?); last lines of "
                f"{server_log}:\n{tail_file(server_log)}"
            )
