"""The supervisor with real children, tiny Python processes: a native abort becomes a restart
with its line and its count, a failed start-up stays one line, a refusal by the cluster is
never restarted, and the stop signals reach a child once, as `inferstream.signals` expects
them."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from inferstream.supervise.child import count_restarts
from inferstream.supervise.environ import RESTARTS
from inferstream.supervise.parent import Supervisor
from inferstream.supervise.policy import RestartPolicy
from tests.unit.promtool import check_metrics, sample
from tests.unit.support.processes import gone_pid

#: A child that records each start in `runs` (one line: the restarts it was told of), then
#: does what the `{step}` at its start's index says: abort, exit N, or wait for a signal.
CHILD = textwrap.dedent("""
    import os, resource, sys, threading
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from the aborts
    from inferstream.signals import StopSignals, when_stopping
    from inferstream.supervise.child import note_running
    with open({runs!r}, "a+") as runs:
        runs.seek(0)
        start = len(runs.readlines())
        runs.write(os.environ.get("INFERSTREAM_SUPERVISOR_RESTARTS", "") + "\\n")
    step = {steps!r}[min(start, {last})]
    if step.startswith("running"):
        note_running()
        step = step.split()[1]
    if step == "abort":
        os.abort()
    if step == "litter":  # leaves a file in its TMPDIR and dies of SIGKILL
        import tempfile
        with open({runs!r} + ".tmpdir", "a") as said:
            said.write(tempfile.mkdtemp() + "\\n")
        os.kill(os.getpid(), 9)
    if step == "refused":  # the cluster refuses it an ACL, said as `inferstream` says it
        from inferstream import cli
        from inferstream.config import Config
        from inferstream.kafka import preflight
        from inferstream.kafka.refusals import not_authorized
        def refuse(*_):
            raise not_authorized(Config(sasl_username="w"), "worker", "use transactional id t.0")
        preflight.preflight = refuse
        sys.exit(cli.main(["status"]))
    if step in ("drain", "stuck"):  # a drain that ends, or one that never does
        done = threading.Event()
        with StopSignals(grace_s=600):
            when_stopping(done.set if step == "drain" else lambda: None)
            print("draining", flush=True)
            done.wait()
        print("drained", flush=True)
    if step == "hangup":  # what a worker does on SIGHUP: carries on
        from inferstream.signals import on_hangup
        heard = threading.Event()
        on_hangup(heard.set)
        print("listening", flush=True)
        heard.wait()
        print("heard", flush=True)
    if step == "hang":
        signal = __import__("signal")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("hanging", flush=True)
        threading.Event().wait()
    sys.exit(int(step) if step.isdigit() else 0)
""")


def child_command(tmp_path: Path, *steps: str) -> list[str]:
    source = CHILD.format(runs=str(tmp_path / "runs"), steps=list(steps), last=len(steps) - 1)
    return [sys.executable, "-c", source]


def runs(tmp_path: Path) -> list[str]:
    """The restarts each child was told of, one entry per start."""
    return (tmp_path / "runs").read_text().splitlines()


def supervise(tmp_path: Path, *steps: str) -> int:
    policy = RestartPolicy(0.01, 0.05)
    return Supervisor("test", child_command(tmp_path, *steps), policy, grace_s=600).run()


@pytest.mark.timeout(60)
def test_a_native_abort_is_restarted_with_one_line_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "inferstream.supervise")
    assert supervise(tmp_path, "abort", "abort", "1", "0") == 0
    assert runs(tmp_path) == ["", "SIGABRT=1", "SIGABRT=2", "SIGABRT=2,exit=1"]
    restarts = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(restarts) == 3
    assert "died of SIGABRT" in restarts[0] and restarts[0].endswith("restart 1 in 0.01s")
    assert "died of SIGABRT" in restarts[1] and restarts[1].endswith("restart 2 in 0.02s")
    assert "exited with status 1" in restarts[2] and restarts[2].endswith("restart 3 in 0.04s")


@pytest.mark.timeout(60)
def test_a_failed_first_start_up_is_not_restarted(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    assert supervise(tmp_path, "2", "0") == 2
    assert runs(tmp_path) == [""]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.timeout(60)
def test_after_a_start_up_that_succeeded_a_failed_one_is_retried(tmp_path: Path) -> None:
    """A child that was running dies; its successor cannot reach the cluster (exit 2) and is
    started again until one can."""
    assert supervise(tmp_path, "running abort", "2", "2", "running 0") == 0
    assert runs(tmp_path) == ["", "SIGABRT=1", "SIGABRT=1,exit=1", "SIGABRT=1,exit=2"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("steps", [("running refused", "0"), ("running abort", "refused", "0")],
                         ids=["running", "restarted"])
def test_a_refusal_by_the_cluster_is_not_restarted_and_said_last(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], steps: tuple[str, ...]) -> None:
    """An ACL missing after start-up (a partition's transactional id), or at a restart after
    a crash: the supervisor starts no other child and exits with the child's line, said once."""
    assert supervise(tmp_path, *steps) == 2
    assert len(runs(tmp_path)) == len(steps) - 1
    line = ("inferstream: error: User:w may not use transactional id t.0 at localhost:9092: no "
            "ACL allows it; an admin grants the worker's ACLs with `inferstream acls "
            "--principal User:w --role worker --apply`")
    err = capfd.readouterr().err
    assert err.strip().splitlines()[-1] == line
    assert err.count(line) == 1


def test_the_restart_counter_goes_on_from_the_supervisor_s_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RESTARTS, raising=False)
    fresh = CollectorRegistry()
    count_restarts(fresh, "controller")
    assert sample(fresh, "inferstream_process_restarts_total", role="controller",
                  reason="SIGABRT") == 0  # every reason from 0: the first restart is an increase
    monkeypatch.setenv(RESTARTS, "SIGABRT=2,exit=1,bogus=3,SIGKILL=x")
    registry = CollectorRegistry()
    count_restarts(registry, "controller")
    counts = {reason: sample(registry, "inferstream_process_restarts_total",
                             role="controller", reason=reason)
              for reason in ("SIGABRT", "SIGSEGV", "SIGBUS", "SIGKILL", "signal", "exit")}
    assert counts == {"SIGABRT": 2, "SIGSEGV": 0, "SIGBUS": 0, "SIGKILL": 0, "signal": 0,
                      "exit": 1}
    check_metrics(generate_latest(registry))


# -- signals, with the supervisor in a process of its own ------------------------------------
SUPERVISOR = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from inferstream.supervise import parent
    from inferstream.supervise.policy import RestartPolicy
    parent.SECOND_SIGNAL_S = 0.1  # a child still there after a second signal: killed at once
    sys.exit(parent.Supervisor("test", {command!r}, RestartPolicy({delay}, {delay}), 600).run())
""")


def start_supervisor(tmp_path: Path, *steps: str, delay: float = 0.01
                     ) -> subprocess.Popen[str]:
    """The supervisor as a terminal would run it: a process group of its own."""
    source = SUPERVISOR.format(command=child_command(tmp_path, *steps), delay=delay)
    return subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == line


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, out, err


@pytest.mark.timeout(60)
def test_ctrl_c_reaches_the_child_once_and_it_drains(tmp_path: Path) -> None:
    proc = start_supervisor(tmp_path, "drain", "0")
    wait_for(proc, "draining")
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    code, out, err = finish(proc)
    assert code == 0
    assert out.strip() == "drained"
    assert "SIGINT: stopping after the work in flight" in err
    assert "exiting now" not in err  # one signal reached the child, not two
    assert runs(tmp_path) == [""]  # a child stopped is not restarted


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("step", "code", "said"), [
    ("stuck", 128 + signal.SIGTERM, "inferstream: SIGTERM again after SIGTERM: exiting now"),
    ("hang", 128 + signal.SIGKILL, ""),  # it ignores SIGTERM: the supervisor kills it
], ids=["by-itself", "killed"])
def test_a_second_signal_ends_the_child_at_once(tmp_path: Path, step: str, code: int,
                                                said: str) -> None:
    """The second SIGTERM is sent once the first has reached the child where it says so (on
    stderr), else half a second after it: sooner, the two could merge into one."""
    proc = start_supervisor(tmp_path, step)
    assert proc.stderr is not None
    wait_for(proc, "draining" if step == "stuck" else "hanging")
    proc.send_signal(signal.SIGTERM)
    seen = ""
    if step == "stuck":
        while "SIGTERM: stopping after the work in flight" not in seen:
            line = proc.stderr.readline()
            assert line, f"the child never said it drains; stderr: {seen}"
            seen += line
    else:  # the supervisor's Python handler shows nothing: time for it to run
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    ended, _, err = finish(proc)
    assert ended == code
    assert said in seen + err
    assert runs(tmp_path) == [""]


@pytest.mark.timeout(60)
def test_sighup_reaches_the_child_and_neither_ends(tmp_path: Path) -> None:
    proc = start_supervisor(tmp_path, "hangup")
    wait_for(proc, "listening")
    proc.send_signal(signal.SIGHUP)
    wait_for(proc, "heard")
    code, _, _ = finish(proc)
    assert code == 0 and runs(tmp_path) == [""]


@pytest.mark.timeout(60)
def test_a_stop_during_the_delay_starts_no_other_child(tmp_path: Path) -> None:
    proc = start_supervisor(tmp_path, "abort", delay=30)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "restart 1 in 30s" in line:
            break
    proc.send_signal(signal.SIGTERM)
    code, _, _ = finish(proc)
    assert code == 0
    assert runs(tmp_path) == [""]


@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_whose_supervisor_is_killed_drains(tmp_path: Path) -> None:
    """The child of a supervisor killed -9 (by what else would kill it) is in a process
    group of its own: it is sent SIGTERM, and leaves its group cleanly."""
    drained = tmp_path / "drained"
    command = [sys.executable, "-c", textwrap.dedent(f"""
        import threading
        from inferstream.signals import StopSignals, when_stopping
        from inferstream.supervise.child import follow_supervisor
        assert follow_supervisor()
        done = threading.Event()
        with StopSignals(grace_s=600):
            when_stopping(done.set)
            print("draining", flush=True)
            done.wait()
        open({str(drained)!r}, "w").write("drained")
    """)]
    source = SUPERVISOR.format(command=command, delay=0.01)
    with subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "TMPDIR": str(tmp_path)}) as proc:  # its scratch
        wait_for(proc, "draining")
        proc.kill()
    deadline = time.monotonic() + 30
    while not drained.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert drained.read_text() == "drained"


@pytest.mark.timeout(60)
def test_what_a_child_killed_with_sigkill_left_in_its_tmpdir_is_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each child's TMPDIR is the supervisor's own folder in the temporary folder, emptied
    when the child ends and removed with the supervisor; the folder of a supervisor of the
    role killed with SIGKILL on this host is removed when the next one starts."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    abandoned = tmp_path / f"inferstream-test-{socket.gethostname()}-{gone_pid()}"
    (abandoned / "aotinductor_x").mkdir(parents=True)
    assert supervise(tmp_path, "running litter", "litter", "0") == 0
    assert runs(tmp_path) == ["", "SIGKILL=1", "SIGKILL=2"]
    made = [Path(line) for line in (tmp_path / "runs.tmpdir").read_text().splitlines()]
    assert len(made) == 2 and all(p.parent.name.startswith("inferstream-test-") for p in made)
    assert all(p.parent.parent == tmp_path for p in made)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "runs.tmpdir"]


@pytest.mark.timeout(60)
def test_a_temporary_folder_that_cannot_be_made_is_one_warning_not_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_folder))
    assert supervise(tmp_path, "abort", "0") == 0
    assert runs(tmp_path) == ["", "SIGABRT=1"]
    warnings = [r.getMessage() for r in caplog.records if "temporary folder" in r.getMessage()]
    assert len(warnings) == 2 and "cannot make the child's temporary folder" in warnings[0]
