"""`inferstream top` in a real terminal: tmux runs it against a fake sysinfo app.

Each test has its own tmux server (a socket under tmp_path), so nothing else's sessions are
touched. Polls with generous timeouts; nothing here asserts how long anything takes.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import inferstream
from tests.unit.support.fake_sysinfo import FakeSysInfo, worker

pytestmark = [
    pytest.mark.terminal,
    pytest.mark.timeout(90),
    pytest.mark.skipif(shutil.which("tmux") is None,
                       reason="tmux is not installed: the real-terminal test of top needs it"),
]
_SRC = str(Path(inferstream.__file__).resolve().parents[1])
_WAIT_S = 30.0


class Pane:
    """One tmux session of 120x30 on a private server."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", str(self.socket), "-f", "/dev/null", *args],
                              capture_output=True, text=True, check=True, timeout=30).stdout

    def start(self, command: str) -> None:
        self.tmux("new-session", "-d", "-x", "120", "-y", "30", command)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def wait_for(self, seen: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + _WAIT_S
        while True:
            text = self.screen()
            if seen(text):
                return text
            if time.monotonic() > deadline:
                pytest.fail(f"the pane never showed {what}; it shows:\n{text}")
            time.sleep(0.02)


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    pane = Pane(tmp_path / "tmux.sock")
    try:
        yield pane
    finally:
        subprocess.run(["tmux", "-S", str(pane.socket), "kill-server"], capture_output=True,
                       check=False, timeout=30)


def top_command(url: str, pid_file: Path) -> str:
    """top in the pane (its pid in `pid_file`); once it exits the shell prints its status on
    the restored screen."""
    top = shlex.join(["env", f"PYTHONPATH={_SRC}", sys.executable, "-m", "inferstream", "top",
                      "--sysinfo-url", url, "--interval", "0.05"])
    inner = shlex.quote(f"echo $$ > {shlex.quote(str(pid_file))}; exec {top}")
    return f'sh -c {inner}; echo "top exited with $?"; sleep 60'


def row(text: str, name: str) -> list[str]:
    return next((line.split() for line in text.splitlines() if line.startswith(name)), [])


def test_top_refreshes_rows_survives_an_outage_and_quits_on_q(pane: Pane,
                                                              tmp_path: Path) -> None:
    fake = FakeSysInfo()
    fake.workers = [worker("w-fast"), worker("w-slow", items_per_s=25.0, share=0.2)]
    with fake.serving():
        pane.start(top_command(fake.url, tmp_path / "top.pid"))
        first = pane.wait_for(lambda t: bool(row(t, "w-slow")), "the worker rows")
        assert row(first, "w-fast")[:2] == ["w-fast", "gpu"]
        assert row(first, "w-slow")[4:6] == ["25.0", "330ms"]
        assert "status ok" in first
        fake.workers[1]["items_per_s"] = 321.5
        fake.workers.append(worker("w-new", pool="cpu", share=None))
        refreshed = pane.wait_for(lambda t: "321.5" in t and bool(row(t, "w-new")),
                                  "the refreshed values")
        assert row(refreshed, "w-slow")[4] == "321.5"
    port = int(fake.url.rsplit(":", 1)[1])
    # the whole error, wrapped over lines (a capture can catch a redraw half written)
    down = pane.wait_for(lambda t: "cannot reach the sysinfo app" in t and
                         "--sysinfo-url or INFERSTREAM_SYSINFO_URL" in " ".join(t.split()),
                         "the error line and its hint")
    assert "Traceback" not in down and row(down, "w-slow")  # the last rows stay in view
    with fake.serving(port=port):
        pane.wait_for(lambda t: "cannot reach" not in t and bool(row(t, "w-new")),
                      "the view recovered")
        pane.tmux("send-keys", "q")
        done = pane.wait_for(lambda t: "top exited with" in t, "top's exit")
    assert "top exited with 0" in done
    assert "WORKER" not in done  # the curses screen is gone: the terminal is restored


@pytest.mark.parametrize("stop", ["Ctrl-C", "SIGTERM"])
def test_ctrl_c_and_sigterm_quit_cleanly(pane: Pane, tmp_path: Path, stop: str) -> None:
    fake = FakeSysInfo()
    fake.workers = [worker("w-fast")]
    pid_file = tmp_path / "top.pid"
    with fake.serving():
        pane.start(top_command(fake.url, pid_file))
        pane.wait_for(lambda t: bool(row(t, "w-fast")), "the worker row")
        if stop == "Ctrl-C":
            pane.tmux("send-keys", "C-c")
        else:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        done = pane.wait_for(lambda t: "top exited with" in t, "top's exit")
    assert "top exited with 0" in done and "Traceback" not in done
    assert "WORKER" not in done
