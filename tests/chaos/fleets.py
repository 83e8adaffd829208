"""The processes a chaos scenario breaks: a 3-broker cluster (`ChaosCluster`, driven through
`ops/kafka/cluster`), the worker processes (`WorkerFleet`) and the controller replicas
(`ControllerFleet`), each by name; `faults.FaultInjector` picks its victims among them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from inferstream.config import Config, load_config
from tests.integration.conftest import CLUSTER, INFERSTREAM, Processes

#: The settings that say how to reach a cluster and who connects.
CONNECTION = ("bootstrap_servers", "security_protocol", "sasl_mechanism", "sasl_username",
              "sasl_password", "ssl_cafile", "ssl_certfile", "ssl_keyfile")


class ClusterUnavailableError(Exception):
    """The 3-broker cluster could not start (no Java, no jars, no ports...)."""


# -- the cluster ----------------------------------------------------------------------------
class ChaosCluster:
    """A 3-broker cluster in `directory`, driven through `ops/kafka/cluster`; `settings`:
    server.properties entries (KEY=VALUE) for `start --set`; `security`: its `--security`
    (on a secured cluster each role runs as the user of its name, with the ACLs `inferstream
    acls` prints for it: `grant`, `principals`)."""

    def __init__(self, directory: Path, brokers: int = 3, settings: tuple[str, ...] = (),
                 security: str = "plaintext") -> None:
        self.directory = directory
        self.brokers = brokers
        self.settings = settings
        self.security = security
        self.bootstrap = ""
        self.restarting: dict[int, subprocess.Popen[str]] = {}

    def _cmd(self, *args: str) -> list[str]:
        return [sys.executable, str(CLUSTER), *args, "--dir", str(self.directory)]

    def start(self) -> str:
        proc = subprocess.run(
            self._cmd("start", "--brokers", str(self.brokers), "--port", "auto",
                      "--security", self.security,
                      *(f"--set={setting}" for setting in self.settings)),
            capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise ClusterUnavailableError(f"cannot start Kafka: {proc.stderr.strip()[-2000:]}")
        self.bootstrap = proc.stdout.strip().splitlines()[-1]
        return self.bootstrap

    def settings_file(self, user: str) -> Path:
        """The settings file `start` wrote for `user` on a secured cluster."""
        return self.directory / "clients" / f"{user}.toml"

    def connect(self, config: Config, user: str = "admin") -> Config:
        """`config` connecting to the cluster as `user` (on a plaintext one, as anyone)."""
        if self.security == "plaintext":
            return dataclasses.replace(config, bootstrap_servers=self.bootstrap)
        own = load_config(environ={"INFERSTREAM_CONFIG": str(self.settings_file(user))})
        return dataclasses.replace(config, **{name: getattr(own, name) for name in CONNECTION})

    def principals(self, *roles: str) -> dict[str, Path]:
        """The settings file each role's processes run with ({} on a plaintext cluster)."""
        if self.security == "plaintext":
            return {}
        return {role: self.settings_file(role) for role in roles}

    def grant(self, config: Config, *roles: str) -> None:
        """As admin, give each role's user what `inferstream acls --role ROLE` prints for the
        topic prefix of `config` (nothing to do on a plaintext cluster)."""
        env = {**os.environ, "INFERSTREAM_CONFIG": str(self.settings_file("admin")),
               "INFERSTREAM_TOPIC_PREFIX": config.topic_prefix}
        started = {role: subprocess.Popen(  # at once: each mostly starts Python
            [*INFERSTREAM, "acls", "--principal", f"User:{role}", "--role", role, "--apply"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for role in self.principals(*roles)}
        for role, process in started.items():
            _, err = process.communicate(timeout=120)
            if process.returncode != 0:
                raise RuntimeError(f"granting {role}'s ACLs failed: {err.strip()}")

    def kill(self, broker: int) -> None:
        subprocess.run(self._cmd("kill", str(broker)), capture_output=True, text=True,
                       timeout=120, check=True)

    def signal(self, broker: int, sig: signal.Signals) -> None:
        """Send `sig` to the broker's JVM (the pid `ops/kafka/cluster` recorded for it)."""
        pid_file = self.directory / f"node-{broker}" / "kafka.pid"
        os.kill(int(pid_file.read_text().strip()), sig)

    def begin_restart(self, broker: int) -> None:
        """Start the broker again in the background; `finished_restarts` reports it."""
        self.restarting[broker] = subprocess.Popen(
            self._cmd("restart", str(broker)), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)

    def finished_restarts(self) -> list[tuple[int, int, str]]:
        """(broker, exit code, last output line) of the restarts that ended since last asked."""
        done = []
        for broker, proc in list(self.restarting.items()):
            if proc.poll() is not None:
                out = (proc.communicate()[0] or "").strip().splitlines()
                done.append((broker, proc.returncode, out[-2] if len(out) > 1 else ""))
                del self.restarting[broker]
        return done

    def keep_logs(self, into: Path) -> None:
        """Copy the brokers' server logs into `into` (before `clean` deletes them)."""
        for broker in range(1, self.brokers + 1):
            log = self.directory / f"node-{broker}" / "server.log"
            with contextlib.suppress(OSError):
                shutil.copy(log, into / f"broker-{broker}.log")

    def clean(self) -> None:
        for proc in self.restarting.values():
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        self.restarting.clear()
        subprocess.run(self._cmd("clean"), capture_output=True, timeout=180, check=False)


# -- the workers ----------------------------------------------------------------------------
class WorkerFleet:
    """The scenario's worker processes by name: w1, w2, ... in start order."""

    def __init__(self, procs: Processes, model: str, worker_args: list[str]) -> None:
        self.procs = procs
        self.model = model
        self.worker_args = worker_args
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: set[str] = set()
        self.leaving: dict[str, float] = {}  # name -> monotonic time of its SIGTERM
        self.exit_codes: dict[str, int] = {}
        self._joined: set[str] = set()

    def add(self, model: str | None = None) -> str:
        """Start one more worker (of `model`, default the scenario's)."""
        name = f"w{len(self.workers) + 1}"
        self.workers[name] = self.procs.worker(model or self.model, *self.worker_args,
                                               name=name)
        return name

    def live(self) -> list[str]:
        """Running workers that are neither paused nor leaving, in start order."""
        return [n for n, p in self.workers.items()
                if p.poll() is None and n not in self.paused and n not in self.leaving]

    def joined(self, name: str) -> bool:
        """Whether the worker has logged a partition assignment (it is in the group)."""
        if name not in self._joined and "assigned partitions=" in self.procs.log(name):
            self._joined.add(name)
        return name in self._joined

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.kill(self.workers[name].pid, sig)

    def kill(self, name: str) -> int:
        self.signal(name, signal.SIGKILL)
        code = self.workers[name].wait(timeout=30)
        self.exit_codes[name] = code
        return code

    def terminate(self, name: str) -> None:
        self.signal(name, signal.SIGTERM)
        self.leaving[name] = time.monotonic()

    def finished_leavers(self) -> list[tuple[str, int, float]]:
        """(name, exit code, seconds to exit) of the SIGTERMed workers that exited."""
        done = []
        for name, since in list(self.leaving.items()):
            code = self.workers[name].poll()
            if code is not None:
                self.exit_codes[name] = code
                done.append((name, code, time.monotonic() - since))
                del self.leaving[name]
        return done

    def unexpected_exits(self) -> dict[str, int]:
        """Workers that exited without the scenario asking them to."""
        return {n: p.returncode for n, p in self.workers.items()
                if p.poll() is not None and n not in self.exit_codes and n not in self.leaving}

    def resume_all(self) -> None:
        for name in list(self.paused):
            with contextlib.suppress(ProcessLookupError):
                self.signal(name, signal.SIGCONT)
        self.paused.clear()


class ControllerFleet:
    """The scenario's controller replicas by name: c1, c2, ... in start order."""

    def __init__(self, procs: Processes, args: list[str]) -> None:
        self.procs = procs
        self.args = args
        self.replicas: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: set[str] = set()
        self.killed: set[str] = set()

    def add(self) -> str:
        name = f"c{len(self.replicas) + 1}"
        self.replicas[name] = self.procs.start(name, "controller", *self.args)
        return name

    def live(self) -> list[str]:
        return [n for n, p in self.replicas.items()
                if p.poll() is None and n not in self.paused and n not in self.killed]

    def owner(self, partition: int) -> str | None:
        """The live replica whose latest assignment has job partition `partition`."""
        for name in self.live():
            lines = [line for line in self.procs.log(name).splitlines()
                     if "owning job partitions=" in line]
            if lines:
                listed = lines[-1].split("owning job partitions=")[1].split("]")[0].strip("[ ")
                if str(partition) in [p.strip() for p in listed.split(",")]:
                    return name
        return None

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.kill(self.replicas[name].pid, sig)

    def kill(self, name: str) -> int:
        self.signal(name, signal.SIGKILL)
        self.killed.add(name)
        return self.replicas[name].wait(timeout=30)

    def unexpected_exits(self) -> dict[str, int]:
        return {n: p.returncode for n, p in self.replicas.items()
                if p.poll() is not None and n not in self.killed}

    def resume_all(self) -> None:
        for name in list(self.paused):
            with contextlib.suppress(ProcessLookupError):
                self.signal(name, signal.SIGCONT)
        self.paused.clear()
