"""Every command as a user runs it, against a broker address with nothing behind it, with a
bad Kafka setting, against a cluster without the topics (issue 9, points 4 and 6): one line
on stderr naming what to change, a non-zero exit, no traceback; SIGTERM stops a worker or
controller that waits for its cluster."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from inferstream.config import Config
from tests.integration.conftest import INFERSTREAM, topics_config
from tests.roles import ROLE_ARGS

pytestmark = pytest.mark.integration

COMMANDS = {
    "status": ["status"],
    "results": ["results", "20250101-000000-0000abcd"],
    "submit": ["submit", "--model", "sim:ms=1", "--input", "."],
    "controller": [*ROLE_ARGS["controller"]],
    "worker": [*ROLE_ARGS["worker"], "--model", "sim:ms=1"],
    "stream": ["stream", "--model", "sim:ms=1", "--input-topic", "uploads",
               "--output-topic", "labels"],
    "topics": [*ROLE_ARGS["topics"]],
    "config check": ["config", "check"],
}


def free_address() -> str:
    """A loopback address that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def nowhere() -> str:
    return free_address()


def environment(servers: str, prefix: str = "inferstream.") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSTREAM_")}
    env.update({"INFERSTREAM_BOOTSTRAP_SERVERS": servers, "INFERSTREAM_TOPIC_PREFIX": prefix,
                "PYTHONUNBUFFERED": "1"})
    return env


def run(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    proc = subprocess.run([*INFERSTREAM, *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120, check=False)
    return proc.returncode, proc.stderr


def the_one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


class Together:
    """Commands started at once, each awaited by the test that reads it: what waits out a
    timeout (for a broker, 5 s; for topics to appear, as long) waits it out side by side
    instead of one command after the other."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.started: dict[str, subprocess.Popen[str]] = {}

    def start(self, key: str, args: list[str], env: dict[str, str]) -> None:
        self.started[key] = subprocess.Popen([*INFERSTREAM, *args], stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True, env=env,
                                             cwd=self.cwd)

    def result(self, key: str) -> tuple[int, str]:
        """(exit code, stderr) of the command started as `key`."""
        _, stderr = self.started[key].communicate(timeout=120)
        return self.started[key].returncode, stderr

    def stop(self) -> None:
        for proc in self.started.values():
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="module")
def together(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Together]:
    runs = Together(tmp_path_factory.mktemp("together"))
    yield runs
    runs.stop()


@pytest.fixture(scope="module")
def without_broker(together: Together) -> tuple[str, Together]:
    """An address with no broker behind it, and every command of COMMANDS run against it
    ("nowhere <command>")."""
    nowhere = free_address()
    for command, args in COMMANDS.items():
        together.start(f"nowhere {command}", args, environment(nowhere))
    return nowhere, together


@pytest.fixture(scope="module")
def without_topics(together: Together, kafka: str) -> tuple[str, Together]:
    """A topic prefix that nothing created, and status, worker and controller run on the
    cluster with it ("missing <command>"); a stream whose own topics are missing, with
    inferstream's topics there ("missing stream")."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    for command in ("status", "worker", "controller"):
        together.start(f"missing {command}", COMMANDS[command], environment(kafka, prefix))
    config = topics_config(kafka)
    together.start("missing stream", COMMANDS["stream"],
                   environment(config.bootstrap_servers, config.topic_prefix))
    return prefix, together


@pytest.mark.timeout(180)
@pytest.mark.parametrize("command", COMMANDS)
def test_no_broker_is_one_line_naming_the_address(
        command: str, without_broker: tuple[str, Together]) -> None:
    nowhere, runs = without_broker
    code, stderr = runs.result(f"nowhere {command}")
    assert code == 2
    line = the_one_line(stderr)
    assert f"no Kafka broker answered at {nowhere}" in line
    assert "--bootstrap-servers or INFERSTREAM_BOOTSTRAP_SERVERS" in line


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("setting", "command"), [("linger.ms=abc", "worker"),
                                                  ("foo.bar=1", "worker"),
                                                  ("foo.bar=1", "controller"),
                                                  ("enable.idempotence=false", "submit")])
def test_a_bad_kafka_setting_is_one_line_naming_the_key(setting: str, command: str,
                                                        nowhere: str, tmp_path: Path) -> None:
    code, stderr = run([*COMMANDS[command], "--kafka-config", setting], environment(nowhere),
                       tmp_path)
    assert code == 2
    line = the_one_line(stderr)
    assert f"--kafka-config (INFERSTREAM_KAFKA_CONFIG) {setting}" in line


@pytest.mark.timeout(180)
@pytest.mark.parametrize("command", ["worker", "controller", "stream"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_stops_a_process_that_waits_for_its_cluster(
        command: str, signum: signal.Signals, nowhere: str, tmp_path: Path) -> None:
    args = [*COMMANDS[command], "--connect-timeout-s", "3600", "--log-level", "DEBUG"]
    with subprocess.Popen([*INFERSTREAM, *args], stderr=subprocess.PIPE, text=True,
                          env=environment(nowhere), cwd=tmp_path) as proc:
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                if "checking the Kafka cluster" in line:
                    break
            proc.send_signal(signum)
            rest = proc.stderr.read()
            code = proc.wait(timeout=120)
        finally:
            proc.kill()
    assert code == 128 + signum
    assert "Traceback" not in rest
    assert f"inferstream: {signum.name} during start-up: exiting now" in rest


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", ["status", "worker", "controller"])
def test_missing_topics_say_to_create_them(command: str,
                                           without_topics: tuple[str, Together]) -> None:
    prefix, runs = without_topics
    code, stderr = runs.result(f"missing {command}")
    assert code == 2
    line = the_one_line(stderr)
    assert f"{prefix}" in line
    assert "run `inferstream topics create`" in line


@pytest.mark.timeout(600)
def test_a_stream_whose_topics_are_missing_says_which(
        without_topics: tuple[str, Together]) -> None:
    """The input and output topics are the user's: the line names them and says to create
    them (not `inferstream topics create`, which makes only inferstream's own)."""
    code, stderr = without_topics[1].result("missing stream")
    assert code == 2
    line = the_one_line(stderr)
    assert "topics uploads, labels missing" in line and "create them first" in line


@pytest.mark.timeout(180)
def test_a_stream_started_as_its_topics_are_created_runs(config: Config,
                                                         tmp_path: Path) -> None:
    """Issue 26.7: topics created while a stream starts (after its first look at the
    cluster) are not missing: the start-up check asks again within connect_timeout_s."""
    names = [f"{config.topic_prefix}{uuid.uuid4().hex[:8]}-{role}" for role in ("in", "out")]
    env = {**environment(config.bootstrap_servers, config.topic_prefix),
           "INFERSTREAM_CONNECT_TIMEOUT_S": "30"}
    proc = subprocess.Popen(
        [*INFERSTREAM, "stream", "--model", "sim:ms=1", "--input-topic", names[0],
         "--output-topic", names[1], "--idle-exit", "3", "--log-level", "DEBUG"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # its first look at the cluster, before the topics exist
        seen.append(line)
        if "checking the Kafka cluster" in line:
            break
    admin = AdminClient(config.confluent_config())
    for future in admin.create_topics([NewTopic(name, num_partitions=1) for name in names]
                                      ).values():
        future.result(60)
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 0, "".join(seen) + rest
    assert "missing" not in rest and "Traceback" not in rest


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("args", "says"), [
    (["stream", "--model", "sim:ms=1"], "needs --input-topic and --output-topic"),
    (["stream", "--input-topic", "a", "--output-topic", "b"], "the stream needs a model"),
    (["stream", "--model", "sim:ms=1", "--input-topic", "a", "--output-topic", "a"],
     "reads its own output"),
    (["stream", "--model", "sim:ms=1", "--input-topic", "a", "--output-topic", "b",
      "--input-format", "json"], "needs --field NAME"),
    (["stream", "--model", "sim:ms=1", "--model", "sim:ms=2", "--input-topic", "a",
      "--output-topic", "b"], "one model"),
    (["stream", "--model", "sim:ms=1", "--input-topic", "a", "--output-topic", "b",
      "--input-format", "xml"], "invalid choice"),
    (["stream", "--model", "sim:ms=1", "--input-topic", "a", "--output-topic", "b",
      "--input-format", "avro", "--field", "image"], "needs --input-schema FILE.avsc"),
    (["stream", "--model", "sim:ms=1", "--input-topic", "a", "--output-topic", "b",
      "--input-format", "avro", "--field", "image", "--input-schema", "/nowhere.avsc"],
     "--input-schema /nowhere.avsc: No such file"),
])
def test_a_wrong_stream_setting_is_one_line(args: list[str], says: str, nowhere: str,
                                            tmp_path: Path) -> None:
    code, stderr = run(args, environment(nowhere), tmp_path)
    assert code == 2
    assert says in stderr.strip().splitlines()[-1] and "Traceback" not in stderr


@pytest.mark.timeout(600)
def test_config_check_passes_on_a_cluster_with_the_topics(config: Config,
                                                          tmp_path: Path) -> None:
    proc = subprocess.run([*INFERSTREAM, "config", "check"], capture_output=True, text=True,
                          env=environment(config.bootstrap_servers, config.topic_prefix),
                          cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"ok: settings, cluster at {config.bootstrap_servers}")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mistake", ["metrics port", "log level"])
def test_local_mistakes_are_one_line(mistake: str, nowhere: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = {"metrics port": [*COMMANDS["worker"], "--metrics-port", str(port)],
                "log level": [*COMMANDS["status"], "--log-level", "LOUD"]}[mistake]
        code, stderr = run(args, environment(nowhere), tmp_path)
    assert code == 2
    line = the_one_line(stderr)
    assert (f"--metrics-port {port} is in use" if mistake == "metrics port"
            else "--log-level 'LOUD'") in line
