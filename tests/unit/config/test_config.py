"""Configuration: where settings come from and what is refused (what reaches the Kafka clients:
test_kafka_settings.py)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from inferstream.cli import build_parser, main
from inferstream.config import Config, load_config, parse_kafka_config
from inferstream.errors import ConfigError
from inferstream.models import known_models
from inferstream.models.names import SIM_SYNTAX


def write_toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "inferstream.toml"
    path.write_text(text)
    return str(path)


# -- precedence --------------------------------------------------------------------------------
def test_defaults_without_any_source() -> None:
    config = load_config({}, {})
    assert config == Config()
    assert config.bootstrap_servers == "localhost:9092"
    assert config.topic_prefix == "inferstream."
    assert config.pool == "default"


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path: Path) -> None:
    path = write_toml(tmp_path, """
[inferstream]
bootstrap_servers = "file:9092"
topic_prefix = "file."
pool = "filepool"
partitions = 3
""")
    environ = {
        "INFERSTREAM_CONFIG": path,
        "INFERSTREAM_TOPIC_PREFIX": "env.",
        "INFERSTREAM_POOL": "envpool",
    }
    config = load_config({"pool": "flagpool", "topic_prefix": None}, environ)
    assert config.pool == "flagpool"  # flag over env and file
    assert config.topic_prefix == "env."  # env over file (a None flag is "not given")
    assert config.bootstrap_servers == "file:9092"  # file over default
    assert config.partitions == 3  # typed from the file
    assert config.security_protocol == "PLAINTEXT"  # default


def test_environment_values_are_typed() -> None:
    config = load_config({}, {"INFERSTREAM_PARTITIONS": "7",
                              "INFERSTREAM_REPLICATION_FACTOR": "3",
                              "INFERSTREAM_KAFKA_CONFIG": "linger.ms=20, client.id=me"})
    assert config.partitions == 7
    assert config.replication_factor == 3
    assert config.kafka_config == (("linger.ms", "20"), ("client.id", "me"))


def test_task_topics_have_their_own_partition_count_with_a_per_pool_override(
        tmp_path: Path) -> None:
    """Task topics default to 120 partitions, apart from the other topics' `partitions`;
    `pool_partitions` (a list in TOML, comma-separated in the environment) overrides a pool."""
    assert Config().task_partitions_for() == 120
    path = write_toml(tmp_path, 'task_partitions = 60\npool_partitions = ["gpu=240"]\n')
    config = load_config({}, {"INFERSTREAM_CONFIG": path})
    assert (config.partitions, config.task_partitions_for("gpu")) == (12, 240)
    assert config.task_partitions_for("cpu") == config.task_partitions_for() == 60
    env = load_config({}, {"INFERSTREAM_POOL_PARTITIONS": "gpu=24, cpu=6"})
    assert (env.task_partitions_for("gpu"), env.task_partitions_for("cpu")) == (24, 6)


def test_config_file_flag_beats_environment_config_file(tmp_path: Path) -> None:
    env_file = tmp_path / "env.toml"
    env_file.write_text('pool = "from-env-file"\n')
    flag_file = tmp_path / "flag.toml"
    flag_file.write_text('pool = "from-flag-file"\n')  # top-level keys work without a table
    config = load_config({"config_file": str(flag_file)}, {"INFERSTREAM_CONFIG": str(env_file)})
    assert config.pool == "from-flag-file"


def test_kafka_config_table_in_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, """
[inferstream.kafka_config]
"linger.ms" = 10
"enable.idempotence" = true
""")
    config = load_config({"config_file": path}, {})
    assert dict(config.kafka_config) == {"linger.ms": "10", "enable.idempotence": "True"}


def test_cli_flags_over_environment(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("INFERSTREAM_POOL", "envpool")
    monkeypatch.setenv("INFERSTREAM_BOOTSTRAP_SERVERS", "env-host:9092")
    assert main(["config", "show", "--pool", "flagpool", "--partitions", "5"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["pool"] == "flagpool"
    assert shown["bootstrap_servers"] == "env-host:9092"
    assert shown["partitions"] == 5


# -- validation --------------------------------------------------------------------------------
@pytest.mark.parametrize(("settings", "message"), [
    ({"bootstrap_servers": "localhost"}, "bootstrap server 'localhost' is not host:port"),
    ({"bootstrap_servers": "a:9092,b:port"}, "bootstrap server 'b:port' is not host:port"),
    ({"bootstrap_servers": " "}, "bootstrap_servers is empty"),
    ({"security_protocol": "TLS"}, "security_protocol 'TLS' is not one of"),
    ({"security_protocol": "SASL_SSL"}, "SASL_SSL needs sasl_mechanism in"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"},
     "SASL_PLAINTEXT needs sasl_mechanism in"),
    ({"pool": "gpu pool"}, "pool name 'gpu pool' may use only letters, digits"),
    ({"pool": "a/b"}, "pool name 'a/b'"),
    ({"pool": ""}, "pool name ''"),
    ({"partitions": "0"}, "partitions must be >= 1, got 0"),
    ({"partitions": "many"}, "partitions must be an integer, got 'many'"),
    ({"replication_factor": "0"}, "replication_factor must be >= 1"),
    ({"task_partitions": "0"}, "task_partitions must be >= 1, got 0"),
    ({"pool_partitions": "gpu"}, "pool_partitions expects POOL=N with N >= 1, got 'gpu'"),
    ({"pool_partitions": "gpu=0"}, "pool_partitions expects POOL=N with N >= 1, got 'gpu=0'"),
    ({"pool_partitions": "=8"}, "pool_partitions expects POOL=N with N >= 1, got '=8'"),
])
def test_bad_settings_are_config_errors(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(settings, {})


def test_bad_setting_from_environment_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="security_protocol 'plaintext' is not one of"):
        load_config({}, {"INFERSTREAM_SECURITY_PROTOCOL": "plaintext"})


def test_bad_toml_is_a_config_error(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "pool = \n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config({"config_file": path}, {})


def test_unknown_toml_key_is_a_config_error(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[inferstream]\npool = "gpu"\nbootstrap_server = "x:1"\n')
    with pytest.raises(ConfigError, match=r"unknown settings \['bootstrap_server'\]"):
        load_config({"config_file": path}, {})


@pytest.mark.parametrize(("toml", "hint"), [
    ('bootstrap_server = "x:1"\n', "(did you mean bootstrap_servers?)"),
    ("[worker]\nmax_batches = 3\n", "(did you mean worker.max_batch?)"),
    ("max_batch = 3\n", "(max_batch is a setting of [worker])"),
    ('[worker]\npool = "gpu"\n', "(pool is a setting of the file's top level)"),
    ("[controller]\ncommit_window_ms = 5\n", "(commit_window_ms is a setting of [worker])"),
    ('[stream]\nmodel_repository = "/m"\n',
     "(model_repository is a setting of [worker])"),
    ("[stream]\nissue_ahead_s = 5\nmax_wait_ms = 3\n",
     "['stream.issue_ahead_s', 'stream.max_wait_ms'] (issue_ahead_s is a setting of "
     "[controller])"),
    ("[worker]\nzzz = 1\n", "['worker.zzz']\n"),
])
def test_an_unknown_key_of_a_config_file_says_what_it_may_have_meant(
        tmp_path: Path, toml: str, hint: str) -> None:
    """As the environment's variables and the SDK's settings do: a key spelt alike in its
    own table, else the table a setting of that name belongs in."""
    with pytest.raises(ConfigError) as refused:
        load_config({"config_file": write_toml(tmp_path, toml)}, {})
    assert (str(refused.value) + "\n").endswith(f"{hint}" if hint.endswith("\n")
                                                else f"{hint}\n")


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config({}, {"INFERSTREAM_CONFIG": str(tmp_path / "nope.toml")})


@pytest.mark.parametrize("line", ['kafka_config = ["linger.ms=5"]', 'kafka_config = "linger.ms=5"'])
def test_kafka_config_in_file_must_be_a_table(tmp_path: Path, line: str) -> None:
    path = write_toml(tmp_path, line + "\n")
    with pytest.raises(ConfigError, match="kafka_config"):
        load_config({"config_file": path}, {}).confluent_config()


@pytest.mark.parametrize("pool", ["gpu#1", "gpu*", "['x']"])
def test_pool_must_be_topic_safe(pool: str) -> None:
    with pytest.raises(ConfigError, match="pool name"):
        Config(pool=pool)


@pytest.mark.parametrize("pair", ["linger.ms", "=5", ""])
def test_kafka_config_pair_without_key_or_equals_is_refused(pair: str) -> None:
    with pytest.raises(ConfigError, match="--kafka-config expects key=value"):
        parse_kafka_config([pair])


def test_cli_reports_config_errors_without_a_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--bootstrap-servers", "nohost"]) == 2
    captured = capsys.readouterr()
    assert "inferstream: error: bootstrap server 'nohost' is not host:port" in captured.err
    assert "Traceback" not in captured.err


# -- role sections -----------------------------------------------------------------------------
def test_role_settings_come_from_flags_environment_and_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, """
[inferstream.worker]
max_batch = 8
max_wait_ms = 2.5
guarantee = "at-least-once"
random_weights = true

[inferstream.controller]
tasks_per_round = 9
""")
    environ = {"INFERSTREAM_CONFIG": path, "INFERSTREAM_WORKER_MAX_BATCH": "16",
               "INFERSTREAM_CONTROLLER_IDLE_EXIT_S": "3"}
    config = load_config({"worker": {"max_batch": 64, "session_timeout_ms": None}}, environ)
    assert config.worker.max_batch == 64  # flag over env over file
    assert config.worker.max_wait_ms == 2.5  # typed from the file
    assert config.worker.guarantee == "at-least-once"
    assert config.worker.random_weights is True
    assert config.worker.session_timeout_ms == 10_000  # a None flag is "not given": default
    assert config.controller.tasks_per_round == 9
    assert config.controller.idle_exit_s == 3.0  # typed from the environment


def test_the_model_repository_has_a_short_environment_name_too(tmp_path: Path) -> None:
    short, long = "INFERSTREAM_MODEL_REPOSITORY", "INFERSTREAM_WORKER_MODEL_REPOSITORY"
    assert load_config({}, {short: "/srv/models"}).worker.model_repository == "/srv/models"
    both = {short: "/srv/models", long: "file:///srv/other"}
    assert load_config({}, both).worker.model_repository == "file:///srv/other"
    path = write_toml(tmp_path, '[worker]\nmodel_repository = "/srv/file"\n')
    in_file = {"INFERSTREAM_CONFIG": path, short: "/srv/env"}
    assert load_config({}, in_file).worker.model_repository == "/srv/env"  # env over file


def test_role_flags_on_the_cli_and_in_config_show(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSTREAM_WORKER_DECODE_THREADS", "3")
    from inferstream.cli import build_parser, config_from_args

    args = build_parser().parse_args(["worker", "--model", "sim:ms=1", "--max-batch", "7",
                                      "--idle-exit", "2", "--random-weights"])
    config = config_from_args(args)
    assert (config.worker.models, config.worker.max_batch, config.worker.idle_exit_s,
            config.worker.random_weights, config.worker.decode_threads) == (
        ("sim:ms=1",), 7, 2.0, True, 3)
    assert main(["config", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["worker"]["decode_threads"] == 3
    assert shown["controller"]["tasks_per_round"] == 256


def test_help_shows_each_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "most items per model batch (default: 32)" in text
    assert "(default: exactly-once)" in text
    assert "Kafka servers, host:port,... (default: localhost:9092)" in text
    # a list's default as the docs write it, not the tuple's repr ('cpu', 'memory', ...)
    assert "(default: cpu, memory, accelerator, models, queue, software)" in text


@pytest.mark.parametrize(("settings", "message"), [
    ({"INFERSTREAM_WORKER_MAX_BATCH": "0"}, "worker.max_batch must be >= 1, got 0"),
    ({"INFERSTREAM_WORKER_MAX_BATCH": "big"}, "worker.max_batch must be an integer, got 'big'"),
    ({"INFERSTREAM_WORKER_GUARANTEE": "maybe"}, "worker.guarantee 'maybe' is not one of"),
    ({"INFERSTREAM_WORKER_COMPILE_BACKGROUND": "auto"},
     "worker.compile_background 'auto' is not one of"),
    ({"INFERSTREAM_WORKER_RANDOM_WEIGHTS": "perhaps"},
     "worker.random_weights must be true or false"),
    ({"INFERSTREAM_WORKER_HEARTBEAT_INTERVAL_MS": "20000"},
     "worker.heartbeat_interval_ms must be below worker.session_timeout_ms"),
    ({"INFERSTREAM_CONTROLLER_COMMIT_TIMEOUT_S": "0"}, "controller.commit_timeout_s must be >="),
    ({"INFERSTREAM_CONTROLLER_MAX_POLL_INTERVAL_MS": "5000"},
     "controller.max_poll_interval_ms must be at least controller.session_timeout_ms"),
    ({"INFERSTREAM_CONTROLLER_MAX_CHUNK_SIZE": "0"}, "controller.max_chunk_size must be >= 1"),
    ({"INFERSTREAM_CONTROLLER_MAX_CHUNK_SIZE": "100001"},
     "controller.max_chunk_size must be at most 100,000, got 100,001"),
])
def test_bad_role_settings_are_config_errors(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config({}, settings)


def test_unknown_setting_in_a_role_table_is_a_config_error(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[worker]\nmax_batches = 3\n")
    with pytest.raises(ConfigError, match=r"unknown settings \['worker.max_batches'\]"):
        load_config({"config_file": path}, {})


def test_worker_without_a_model_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker"]) == 2
    err = capsys.readouterr().err
    assert "inferstream: error: the worker needs a model: --model NAME" in err
    assert "Traceback" not in err


def test_a_worker_serves_every_model_named(tmp_path: Path) -> None:
    """`--model` repeats; the environment and the file take a list."""
    from inferstream.cli import build_parser, config_from_args

    args = build_parser().parse_args(["worker", "--model", "a", "--model", "sim:ms=1"])
    assert config_from_args(args).worker.models == ("a", "sim:ms=1")
    env = load_config({}, {"INFERSTREAM_WORKER_MODELS": "alexnet, googlenet"})
    assert env.worker.models == ("alexnet", "googlenet")
    path = write_toml(tmp_path, '[worker]\nmodels = ["resnet50", "sim:ms=2"]\n')
    assert load_config({"config_file": path}, {}).worker.models == ("resnet50", "sim:ms=2")


def test_help_of_every_command_shows_each_option_default() -> None:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    silent = [f"{name} {' '.join(action.option_strings)}"
              for name, child in commands.choices.items() for action in child._actions
              if action.option_strings and not action.required
              and "-h" not in action.option_strings
              and not re.search(r"default|\(empty: ", action.help or "")]
    assert silent == []


def test_submit_help_names_the_models(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["submit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in (*known_models(), SIM_SYNTAX):
        assert name in text


def test_a_streams_group_and_pool_come_from_its_topics() -> None:
    from inferstream.config import StreamConfig

    stream = StreamConfig(input_topic="uploads", output_topic="labels")
    assert stream.group_id("inferstream.") == "inferstream.stream.uploads.labels"
    assert stream.pool("inferstream.") == "stream.uploads.labels"
    named = StreamConfig(input_topic="a", output_topic="b", group="team/vision:cats")
    assert named.group_id("inferstream.") == "team/vision:cats"
    assert named.pool("inferstream.") == "team_vision_cats"  # a pool name's characters only
    Config(pool=named.pool("inferstream."))  # valid as a pool
