"""A user's mistake in a setting, whichever way it comes (a flag, INFERSTREAM_*, the TOML
file), is one line on stderr and exit 2: never a traceback, never a value quietly changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferstream.cli import main
from inferstream.config import load_config
from inferstream.errors import ConfigError
from tests.unit.kafka.test_preflight import one_line_error


@pytest.mark.parametrize("argv", [["config", "show"], ["worker", "--model", "sim:ms=1"]])
@pytest.mark.parametrize("by_env", [False, True])
def test_a_config_file_that_is_not_utf8_is_one_line_naming_it(
        tmp_path: Path, argv: list[str], by_env: bool, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xff\xfe")
    if by_env:
        monkeypatch.setenv("INFERSTREAM_CONFIG", str(path))
    assert main([*argv, *([] if by_env else ["--config", str(path)])]) == 2
    assert f"config file {path} is not UTF-8" in one_line_error(capsys)


@pytest.mark.parametrize(("line", "shown"), [("[worker]\nmax_batch = 3.5", "worker.max_batch"),
                                             ("[worker]\nmetrics_port = 1e3",
                                              "worker.metrics_port"),
                                             ("partitions = 12.0", "partitions")])
def test_a_toml_float_for_an_integer_setting_is_refused_as_the_flag_is(
        tmp_path: Path, line: str, shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text(line + "\n")
    assert main(["config", "show", "--config", str(path)]) == 2
    assert f"{shown} must be an integer, got " in one_line_error(capsys)
    path.write_text(line.split("=")[0] + "= 3\n")  # a TOML integer is fine
    assert main(["config", "show", "--config", str(path)]) == 0


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("INFERSTREAM_CONNECT_TIMEOUT_S", "inf", "connect_timeout_s must be a finite number"),
    ("INFERSTREAM_CONNECT_TIMEOUT_S", "nan", "connect_timeout_s must be a finite number"),
    ("INFERSTREAM_CONNECT_TIMEOUT_S", "2147484", "connect_timeout_s must be at most 2147483 s"),
    ("INFERSTREAM_STOP_GRACE_S", "nan", "stop_grace_s must be a finite number"),
    ("INFERSTREAM_CONTROLLER_MIGRATION_SLACK", "nan", "controller.migration_slack must be a "),
    ("INFERSTREAM_CONTROLLER_IDLE_EXIT_S", "nan", "controller.idle_exit_s must be a finite"),
    ("INFERSTREAM_WORKER_MAX_WAIT_MS", "-inf", "worker.max_wait_ms must be a finite number"),
    ("INFERSTREAM_WORKER_SESSION_TIMEOUT_MS", "3000000000",
     "worker.session_timeout_ms must be at most 2147483000 ms"),
])
def test_nan_inf_and_durations_past_librdkafkas_are_refused_in_one_line(
        name: str, value: str, shown: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    assert main(["config", "show"]) == 2
    assert shown in one_line_error(capsys)


def test_nan_in_a_flag_or_the_file_is_refused_and_the_longest_duration_is_taken(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--model", "sim:ms=1", "--max-wait-ms", "nan"]) == 2
    assert "worker.max_wait_ms must be a finite number" in one_line_error(capsys)
    path = tmp_path / "c.toml"
    path.write_text("[sysinfo]\nhysteresis = nan\n")
    assert main(["config", "show", "--config", str(path)]) == 2
    assert "sysinfo.hysteresis must be a finite number" in one_line_error(capsys)
    assert main(["config", "show", "--connect-timeout-s", "2147483"]) == 0


@pytest.mark.parametrize("argv", [["submit", "--model", "sim:ms=1", "--input", "x", "--wait",
                                   "--timeout", "nan"],
                                  ["cancel", "job-1", "--wait", "--timeout", "1e99"],
                                  ["top", "--interval", "nan"]])
def test_nan_and_inf_in_a_flag_that_is_not_a_setting_are_refused(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert f"argument {argv[-2]}: expects a " in refused_flag(argv, capsys)


def refused_flag(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What `main(argv)` prints as it exits 2 on a flag's value."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv", [["submit", "--model", "sim:ms=1", "--input", "x", "--wait",
                                   "--timeout", "-1"],
                                  ["submit", "--model", "sim:ms=1", "--input", "x", "--wait",
                                   "--timeout", "0"],
                                  ["cancel", "job-1", "--wait", "--timeout", "-5"],
                                  ["top", "--interval", "0"]])
def test_a_duration_flag_not_above_zero_is_refused_before_anything_runs(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`submit --timeout -1` submitted the job, then gave up on it at once."""
    err = refused_flag(argv, capsys)
    assert err.count("\n") == 1
    assert f"argument {argv[-2]}: expects a number of seconds above 0 and up to 2147483" in err


@pytest.mark.parametrize("command", ["status", "cancel", "results"])
@pytest.mark.parametrize("job", ["", "  "])
def test_an_empty_job_id_is_refused_before_anything_runs(
        command: str, job: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`status "$JOB"` with JOB unset listed every job, exit 0 (as JSON, a list where a
    script expected its job's object)."""
    err = refused_flag([command, job], capsys)
    assert err.count("\n") == 1
    assert err == ("inferstream: error: argument job: expects a job id, got an empty one "
                   f"(inferstream {command} --help lists the flags)\n")


@pytest.mark.parametrize(("flags", "shown"), [
    ({"worker": {"max_bach": 64}},
     "worker.max_bach is not an inferstream setting (did you mean worker.max_batch?)"),
    ({"controller": {"nonsense": 1}}, "controller.nonsense is not an inferstream setting"),
])
def test_an_unknown_key_of_a_section_in_load_configs_flags_is_a_config_error_naming_it(
        flags: dict[str, dict[str, int]], shown: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(flags, {})
    assert str(raised.value) == shown


@pytest.mark.parametrize(("servers", "bad"), [("localhost:99999", "localhost:99999"),
                                              ("a:9092, b:0", "b:0"),
                                              ("[::1]:65536", "[::1]:65536")])
def test_a_bootstrap_port_out_of_range_is_one_line_naming_the_entry(
        servers: str, bad: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSTREAM_BOOTSTRAP_SERVERS", servers)
    assert main(["config", "show"]) == 2
    assert f"bootstrap server '{bad}' is not host:port with a port from 1 to 65535" in (
        one_line_error(capsys))


def test_every_form_of_bootstrap_servers_valid_before_still_is() -> None:
    servers = "kafka-1:9092,kafka-2:65535, 10.0.0.1:1,[::1]:9093"
    assert load_config({"bootstrap_servers": servers}, {}).bootstrap_servers == servers


@pytest.mark.parametrize(("raw", "models"), [
    ("sim:ms=1,jitter=0.1", ("sim:ms=1,jitter=0.1",)),
    ("sim:ms=1, jitter=0.1,sim:as=t4,batch_ms=2", ("sim:ms=1,jitter=0.1", "sim:as=t4,batch_ms=2")),
    ("resnet18,sim:ms=1,jitter=0.2,efficientnet_lite0:3",
     ("resnet18", "sim:ms=1,jitter=0.2", "efficientnet_lite0:3")),
    ("resnet18:2,resnet50", ("resnet18:2", "resnet50")),
])
def test_a_model_with_parameters_survives_the_environments_commas(
        raw: str, models: tuple[str, ...]) -> None:
    assert load_config({}, {"INFERSTREAM_WORKER_MODELS": raw}).worker.models == models


def test_other_environment_lists_still_split_on_every_comma() -> None:
    config = load_config({}, {"INFERSTREAM_WORKER_COLLECTORS": "cpu,memory",
                              "INFERSTREAM_POOL_PARTITIONS": "gpu=240,cpu=12",
                              "INFERSTREAM_SYSINFO_POOL_STRATEGIES": "gpu=a:b,cpu=throughput"})
    assert config.worker.collectors == ("cpu", "memory")
    assert config.pool_partitions == ("gpu=240", "cpu=12")
    assert config.sysinfo.pool_strategies == ("gpu=a:b", "cpu=throughput")


def test_a_kafka_config_value_with_commas_survives_the_environment() -> None:
    environ = {"INFERSTREAM_KAFKA_CONFIG": "debug=broker,topic,msg, linger.ms=5"}
    assert load_config({}, environ).kafka_config == (("debug", "broker,topic,msg"),
                                                      ("linger.ms", "5"))


def test_a_model_with_parameters_in_the_environment_reaches_the_worker(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSTREAM_WORKER_MODELS", "sim:ms=1,jitter=0.1")
    assert main(["config", "show"]) == 0
    assert '"sim:ms=1,jitter=0.1"' in capsys.readouterr().out
