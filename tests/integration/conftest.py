"""A real Apache Kafka for the integration tests, and factories for inferstream processes.

The session's broker is started through `ops/kafka/cluster` on a free port base in a
temporary directory. Every test gets its own topic prefix (and so its own group ids). Where
the broker cannot start, the tests fail in CI (CI=true) and are skipped locally with the
reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from inferstream.config import Config
from inferstream.kafka.topics import ensure_topics
from tests.roles import ROLE_ARGS

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "ops" / "kafka" / "cluster"
INFERSTREAM = [sys.executable, "-m", "inferstream"]


def start_cluster(directory: Path, brokers: int = 1, *options: str) -> str:
    """Start a cluster in `directory` (with `start`'s further `options`); returns its
    bootstrap servers or fails/skips."""
    return cluster_ready(begin_cluster(directory, brokers, *options))


def begin_cluster(directory: Path, brokers: int = 1, *options: str) -> subprocess.Popen[str]:
    """Start a cluster as `start_cluster` does, in the background: `cluster_ready` waits."""
    return subprocess.Popen(
        [sys.executable, str(CLUSTER), "start", "--brokers", str(brokers), "--dir",
         str(directory), "--port", "auto", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def cluster_ready(starting: subprocess.Popen[str]) -> str:
    """The bootstrap servers of the cluster `starting` brings up, once ready; or fails/skips."""
    try:
        out, err = starting.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        starting.kill()
        starting.communicate()
        raise
    if starting.returncode != 0:
        reason = f"cannot start Kafka: {err.strip()[-2000:]}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return out.strip().splitlines()[-1]


def cluster_cmd(directory: Path, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run(
        [sys.executable, str(CLUSTER), *args, "--dir", str(directory)],
        capture_output=True, text=True, timeout=timeout, check=True,
    )
    return proc.stdout


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers of the session's one-broker cluster."""
    directory = tmp_path_factory.mktemp("kafka")
    servers = start_cluster(directory)
    yield servers
    subprocess.run([sys.executable, str(CLUSTER), "clean", "--dir", str(directory)],
                   capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def sasl_ssl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The folder of the run's SASL_SSL one-broker cluster, one for all xdist processes
    (`tests.integration.secure`)."""
    from tests.integration.secure import shared_sasl_ssl  # it imports this module

    yield from shared_sasl_ssl(tmp_path_factory)


def topics_config(kafka: str, partitions: int = 4) -> Config:
    """A Config with a topic prefix of its own and `partitions` per topic; the topics exist."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    cfg = Config(bootstrap_servers=kafka, topic_prefix=prefix, partitions=partitions,
                 task_partitions=partitions)
    report = ensure_topics(cfg)
    assert report.ok, report.mismatched
    return cfg


@pytest.fixture
def config(kafka: str) -> Config:
    """A Config with a topic prefix of its own; the topics exist."""
    return topics_config(kafka)


def config_env(cfg: Config) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "INFERSTREAM_BOOTSTRAP_SERVERS": cfg.bootstrap_servers,
        "INFERSTREAM_TOPIC_PREFIX": cfg.topic_prefix,
        "INFERSTREAM_PARTITIONS": str(cfg.partitions),
        "INFERSTREAM_TASK_PARTITIONS": str(cfg.task_partitions),
        "PYTHONUNBUFFERED": "1",
        # Compiling a model's forward pass takes 15-80 s of a 2-core machine per start: the
        # tests run eager unless they test the compiled forward pass (`--compile on`).
        "INFERSTREAM_WORKER_COMPILE": os.environ.get("INFERSTREAM_WORKER_COMPILE", "off"),
        # The faults hit the role's own process (kill -9, SIGSTOP), not a supervisor that
        # would start it again: tests of the supervisor turn it on.
        "INFERSTREAM_RESTART": "off",
    })
    return env


class Processes:
    """Starts inferstream processes for one test and stops whatever is left at teardown.

    On a secured cluster, `principals` names the settings file (INFERSTREAM_CONFIG) each
    command runs with, by its first word ("worker", "controller", ...).
    """

    def __init__(self, cfg: Config, logdir: Path,
                 principals: Mapping[str, Path] | None = None) -> None:
        self.cfg = cfg
        self.logdir = logdir
        self.principals = dict(principals or {})
        self.started: list[subprocess.Popen[bytes]] = []
        #: the processes' TMPDIR: `stop_all` kills them with SIGKILL, which leaves what they
        #: made there (torch's extracted compiled packages: 11 MB each), so not in /tmp
        self.tmpdir = logdir / "tmp"
        self.tmpdir.mkdir(parents=True, exist_ok=True)

    def _env(self, command: str) -> dict[str, str]:
        env = config_env(self.cfg)
        env["TMPDIR"] = str(self.tmpdir)
        if command in self.principals:
            env["INFERSTREAM_CONFIG"] = str(self.principals[command])
        return env

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.logdir / f"{name}.log", "wb") as log:  # the child keeps its own copy
            proc = subprocess.Popen([*INFERSTREAM, *args], stdout=log, stderr=subprocess.STDOUT,
                                    env=self._env(args[0]), cwd=self.logdir)
        self.started.append(proc)
        return proc

    def controller(self, *args: str) -> subprocess.Popen[bytes]:
        return self.start(f"controller-{len(self.started)}", *ROLE_ARGS["controller"], *args)

    def worker(self, model: str, *args: str, name: str | None = None) -> subprocess.Popen[bytes]:
        name = name or f"worker-{len(self.started)}"
        return self.start(name, *ROLE_ARGS["worker"], "--model", model, "--worker-id", name,
                          "--decode-threads", "2", *args)

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run a client command to completion."""
        return subprocess.run([*INFERSTREAM, *args], capture_output=True, text=True,
                              env=self._env(args[0]), timeout=timeout, check=False)

    def log(self, name: str) -> str:
        return (self.logdir / f"{name}.log").read_text(errors="replace")

    def wait_for_log(self, name: str, text: str, timeout_s: float = 120) -> None:
        """Block until process `name` has logged `text` (e.g. its partition assignment)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log(name):
                return
            time.sleep(0.2)
        raise AssertionError(f"{name} did not log {text!r} in {timeout_s}s:\n{self.log(name)}")

    def assigned(self, name: str) -> set[int]:
        """The task partitions worker `name` said it owns last."""
        lines = [line for line in self.log(name).splitlines() if "assigned partitions=" in line]
        if not lines:
            return set()
        listed = lines[-1].split("assigned partitions=")[1].strip("[] ")
        return {int(p) for p in listed.split(",") if p.strip()}

    def wait_for_group(self, *workers: str, timeout_s: float = 120) -> None:
        """Block until the workers share the task partitions, each owning some."""
        deadline = time.monotonic() + timeout_s
        partitions = self.cfg.task_partitions_for()
        while time.monotonic() < deadline:
            owned = [self.assigned(name) for name in workers]
            together = set().union(*owned)
            if all(owned) and len(together) == partitions == sum(map(len, owned)):
                return
            time.sleep(0.2)
        raise AssertionError(f"workers {workers} never shared the partitions: {owned}")

    def dump_stacks(self) -> None:
        """Have every live process print its threads' stacks into its log (SIGUSR1)."""
        live = [proc for proc in self.started if proc.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGUSR1)
        if live:
            time.sleep(1.0)

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.started:
            proc.wait(timeout=30)


@pytest.fixture
def procs(config: Config, tmp_path: Path) -> Iterator[Processes]:
    processes = Processes(config, tmp_path)
    yield processes
    processes.stop_all()
