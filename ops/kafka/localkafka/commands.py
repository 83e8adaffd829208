"""The subcommands: `cmd_<name>(args)` returns the exit code; a `ClusterError` exits 2."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .common import ClusterError, PortRace, log
from .config import check_existing, new_state, write_config
from .jars import check_java, classpath, ensure_jars, java_bin, java_cmd
from .probes import check_ports, wait_ready
from .processes import (
    after_exit,
    format_nodes,
    kill_all,
    node_pid,
    spawn,
    stop_all,
    stop_gracefully,
    stop_node,
    wait_dead,
    writes_cds_at_exit,
)
from .security import make_secrets, write_client_settings
from .state import (
    AnyNode,
    ClusterState,
    NodeState,
    all_nodes,
    bootstrap,
    describe,
    dir_lock,
    get_node,
    load_state,
    node_dir,
    require_state,
    resolve_dir,
    save_state,
    tail_file,
    wipe,
)


class Args(argparse.Namespace):
    """The parsed command line; each subcommand sets only the options it has (see cli)."""

    func: Callable[[Args], int]
    dir: str | None
    brokers: int | None
    port: str | None  # a number or "auto"
    controller_port: str | None
    settings: list[str]
    security: str | None
    timeout: float
    stop_timeout: float
    wipe: bool
    json: bool
    id: int
    lines: int
    follow: bool
    main: str
    args: list[str]


# --------------------------------------------------------------------------------------------
# start
# --------------------------------------------------------------------------------------------


def cmd_start(a: Args) -> int:
    for attempt in range(3):
        try:
            return start(a)
        except PortRace as e:
            log(f"{e}; retrying on other ports" if attempt < 2 else str(e))
    return 2


def start(a: Args) -> int:
    t0 = time.monotonic()
    d = resolve_dir(a.dir)
    java = java_bin()
    check_java(java)
    ensure_jars()
    with dir_lock(d):
        st = load_state(d)
        fresh_auto = st is None and a.port == "auto"
        settings = parse_settings(a.settings)
        if st is not None:
            check_existing(d, st, a.brokers, a.port, settings, a.security)
        else:
            st = new_state(d, a.brokers, a.port, a.controller_port, settings, a.security)
            make_secrets(d, st)
        down = [n for n in all_nodes(st) if node_pid(d, n["id"]) is None]
        if not down:
            print(f"already running: {describe(st, d)}")
            _print_ready(d, st)
            return 0
        _prepare_nodes(java, d, st, down)
        _spawn_and_wait(java, d, st, down, a.timeout, t0, fresh_auto)
    print(f"ready in {time.monotonic() - t0:.1f}s: {describe(st, d)}")
    _print_ready(d, st)
    return 0


def _print_ready(d: Path, st: ClusterState) -> None:
    """A secured cluster's client settings files (written again), then the bootstrap servers
    as the last line."""
    for user, path in write_client_settings(d, st, bootstrap(st)):
        print(f"settings for User:{user}: {path}")
    print(bootstrap(st))


def parse_settings(pairs: list[str]) -> dict[str, str]:
    """`--set KEY=VALUE` options as server.properties entries."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ClusterError(f"--set expects KEY=VALUE, got {pair!r}")
        settings[key.strip()] = value.strip()
    return settings


def _prepare_nodes(java: str, d: Path, st: ClusterState, down: list[AnyNode]) -> None:
    """Before starting the nodes `down`: free ports, their configs, the state, formatting."""
    check_ports(down)
    for n in down:
        write_config(d, st, n)
    save_state(d, st)
    unformatted = [n for n in down if not n.get("formatted")]
    if unformatted:
        tf = time.monotonic()
        format_nodes(java, d, st, unformatted)
        save_state(d, st)
        ids = [n["id"] for n in unformatted]
        log(f"formatted node(s) {ids} in {time.monotonic() - tf:.1f}s")


def _spawn_and_wait(
    java: str,
    d: Path,
    st: ClusterState,
    down: list[AnyNode],
    timeout: float,
    t0: float,
    fresh_auto: bool,
) -> None:
    """Starts the nodes `down` and waits until the whole cluster is ready; on any failure
    stops those it started (and, for a new --port auto cluster that lost a port, wipes it
    and raises PortRace so that `cmd_start` tries other ports)."""
    started: list[AnyNode] = []
    try:
        for n in down:
            spawn(java, d, n)
            started.append(n)
        log(f"started node(s) {[n['id'] for n in down]} in {d}; waiting until ready ...")
        wait_ready(d, st, [n["port"] for n in st["nodes"]], timeout, t0)
    except BaseException as e:
        for n in started:
            stop_node(d, n["id"])
        if fresh_auto and "Address already in use" in str(e):
            wipe(d, st, keep_dir=True)
            raise PortRace(f"a port of {bootstrap(st)} was taken meanwhile") from e
        raise


# --------------------------------------------------------------------------------------------
# stop, clean
# --------------------------------------------------------------------------------------------


def cmd_stop(a: Args) -> int:
    d = resolve_dir(a.dir)
    st = load_state(d)
    if st is None:
        print(f"no cluster in {d}")
        return 0
    with dir_lock(d):
        t0 = time.monotonic()
        stopped = stop_all(d, st, a.timeout)
        for n in all_nodes(st):
            with contextlib.suppress(OSError):
                (node_dir(d, n["id"]) / "kafka.pid").unlink()
    print(
        f"stopped node(s) {stopped} in {time.monotonic() - t0:.1f}s"
        if stopped
        else f"cluster in {d} was not running"
    )
    if a.wipe:
        wipe(d, st)
        print(f"deleted {d}")
    return 0


def cmd_clean(a: Args) -> int:
    d = resolve_dir(a.dir)
    st = load_state(d)
    if st is None:
        print(f"no cluster in {d}")
        return 0
    with dir_lock(d):
        if writes_cds_at_exit(d, st):
            stop_all(d, st, a.timeout)  # the archive is written only at a clean exit
        else:
            kill_all(d, st)
    wipe(d, st)
    print(
        f"deleted {d}"
        if not d.exists()
        else f"deleted the cluster's files in {d} (other files remain)"
    )
    return 0


# --------------------------------------------------------------------------------------------
# kill, restart
# --------------------------------------------------------------------------------------------


def cmd_kill(a: Args) -> int:
    d = resolve_dir(a.dir)
    st = require_state(d)
    get_node(st, a.id)
    with dir_lock(d):
        pid = node_pid(d, a.id)
        if pid is None:
            print(f"broker {a.id} is not running")
            return 0
        os.kill(pid, signal.SIGKILL)
        wait_dead(d, {a.id: pid}, 10)
        after_exit(d, a.id, clean=False)
    print(f"killed broker {a.id} (pid {pid})")
    return 0


def cmd_restart(a: Args) -> int:
    t0 = time.monotonic()
    d = resolve_dir(a.dir)
    st = require_state(d)
    n = get_node(st, a.id)
    java = java_bin()
    check_java(java)
    with dir_lock(d):
        _restart_node(java, d, st, n, a.stop_timeout)
    # Wait without the lock, so that `kill`/`restart` of other brokers can go on meanwhile.
    _wait_back(d, st, n, a.timeout, t0)
    print(f"broker {a.id} back in {time.monotonic() - t0:.1f}s")
    print(bootstrap(st))
    return 0


def _restart_node(java: str, d: Path, st: ClusterState, n: NodeState, stop_timeout: float) -> None:
    """(Stop and) start node n again; the caller holds the directory lock."""
    pid = node_pid(d, n["id"])
    if pid is not None:
        stop_gracefully(d, n["id"], pid, stop_timeout)
    else:
        after_exit(d, n["id"], clean=False)  # it died on its own or was killed
    check_ports([n])
    write_config(d, st, n)
    if not n.get("formatted"):
        format_nodes(java, d, st, [n])
        save_state(d, st)
    spawn(java, d, n)


def _wait_back(d: Path, st: ClusterState, n: NodeState, timeout: float, t0: float) -> None:
    """Until restarted node n sees itself and every other running broker as live."""
    nid = n["id"]

    def running() -> set[int]:
        return {m["id"] for m in st["nodes"] if node_pid(d, m["id"]) is not None}

    up = running()
    if "controller" in st and node_pid(d, st["controller"]["id"]) is None:
        log(
            f"warning: KRaft controller {st['controller']['id']} not running, so broker {nid} "
            f"cannot register until it is started (`cluster start`)"
        )
    elif "controller" not in st and 2 * len(up) <= len(st["nodes"]):
        log(
            f"warning: only broker(s) {sorted(up)} of {len(st['nodes'])} running: no controller "
            f"quorum, so broker {nid} cannot register until more are started"
        )
    try:
        wait_ready(d, st, [n["port"]], timeout, t0, want_ids=running)
    except ClusterError as e:
        if node_pid(d, nid) is not None:
            raise ClusterError(f"{e}\n(broker {nid} is left running: it may still join)") from e
        raise


# --------------------------------------------------------------------------------------------
# logs, bootstrap, classpath, tool
# --------------------------------------------------------------------------------------------


def cmd_logs(a: Args) -> int:
    d = resolve_dir(a.dir)
    st = require_state(d)
    if a.id not in {n["id"] for n in all_nodes(st)}:
        get_node(st, a.id)  # says which ids there are
    path = node_dir(d, a.id) / "server.log"
    if not path.exists():
        raise ClusterError(f"no log yet: {path}")
    if a.follow and shutil.which("tail"):
        os.execvp("tail", ["tail", "-n", str(a.lines), "-F", str(path)])  # noqa: S606
    print(tail_file(path, a.lines))
    return 0


def cmd_bootstrap(a: Args) -> int:
    print(bootstrap(require_state(resolve_dir(a.dir))))
    return 0


def cmd_classpath(a: Args) -> int:
    print(classpath())
    return 0


def cmd_tool(a: Args) -> int:
    java = java_bin()
    check_java(java)
    cmd = java_cmd(java, a.main, *a.args, kind="tool")
    return subprocess.call(cmd)
