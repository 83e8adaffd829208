"""docker-compose.yml as Compose reads it, and what a user of it relies on.

The validator is Debian's `docker-compose` (Compose 1.29.2): `config` checks the file against
the Compose schema and resolves it without a Docker engine. Where it is missing the tests fail
in CI (CI=true; `.ci/run` installs it) and are skipped locally with the reason. Compose reads
the files ops/compose/make_secrets.py makes (Grafana's password), here into a folder of the
tests' own (conftest.py).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferstream.cli import build_parser, config_from_args
from inferstream.config import Config, ControllerConfig
from tests.roles import ROLE_ARGS, deployment_settings

REPO = Path(__file__).resolve().parents[3]
COMPOSE_FILE = REPO / "docker-compose.yml"
PROMETHEUS_FILE = REPO / "ops" / "prometheus" / "prometheus-compose.yml"
DASHBOARDS_PROVIDER = REPO / "ops" / "grafana" / "provisioning" / "dashboards" / "inferstream.yml"
DATASOURCE = REPO / "ops" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
BROKERS = ["kafka-1", "kafka-2", "kafka-3"]
#: The services that run an inferstream role, read from the file itself so each gets a test.
ROLE_SERVICES = [name for name, service in yaml.safe_load(COMPOSE_FILE.read_text())
                 ["services"].items() if "command" in service
                 and str(service.get("image", "")).startswith("inferstream:")]


def compose(*args: str, secrets: Path | None = None,
            files: tuple[Path, ...] = (COMPOSE_FILE,)) -> subprocess.CompletedProcess[str]:
    """Run `docker-compose -f FILE... ARGS` (no engine needed for `config`), with the
    secrets made in `secrets` (None: none made)."""
    exe = shutil.which("docker-compose")
    if exe is None:
        reason = ("docker-compose is not installed (Debian: apt-get install docker-compose; "
                  ".ci/run installs it)")
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("INFERSTREAM_", "COMPOSE_", "DOCKER_"))}
    # (a folder where nothing is made, rather than var/compose/ of whoever runs the tests)
    env["INFERSTREAM_COMPOSE_SECRETS"] = str(secrets or REPO / "var" / "compose" / "none")
    names = [arg for file in files for arg in ("-f", str(file))]
    return subprocess.run([exe, *names, *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120, check=False)


#: The profiles of each `config` run: none, cpu, and all of them (for `services`).
PROFILES = {"default": (), "cpu": ("--profile", "cpu"),
            "all": ("--profile", "cpu", "--profile", "client")}


@pytest.fixture(scope="module")
def configs(compose_secrets: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """`docker-compose config` with each set of PROFILES, run side by side (Compose takes
    about 0.4 s to start)."""
    with ThreadPoolExecutor(len(PROFILES)) as runs:
        started = {name: runs.submit(compose, *profiles, "config", secrets=compose_secrets)
                   for name, profiles in PROFILES.items()}
    return {name: run.result() for name, run in started.items()}


@pytest.fixture(scope="module")
def services(configs: dict[str, subprocess.CompletedProcess[str]]) -> dict[str, Any]:
    """The services as Compose resolves them, every profile on."""
    proc = configs["all"]
    assert proc.returncode == 0, proc.stderr
    resolved: dict[str, Any] = yaml.safe_load(proc.stdout)["services"]
    return resolved


@pytest.mark.parametrize("profiles", ["default", "cpu"])
def test_compose_accepts_the_file(configs: dict[str, subprocess.CompletedProcess[str]],
                                  profiles: str) -> None:
    proc = configs[profiles]
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr


def test_grafana_has_no_password_but_the_one_made_for_it(
        services: dict[str, Any], compose_secrets: Path) -> None:
    made = (compose_secrets / "grafana.env").read_text().strip()
    assert made.startswith("GF_SECURITY_ADMIN_PASSWORD=")
    password = services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert password == made.split("=", 1)[1] and len(password) >= 32
    assert "GRAFANA_ADMIN_PASSWORD" not in COMPOSE_FILE.read_text()  # no default anywhere
    unmade = compose("config")
    assert unmade.returncode != 0
    assert "Couldn't find env file" in unmade.stderr and "grafana.env" in unmade.stderr


def test_three_brokers_form_one_quorum_that_survives_one_loss(services: dict[str, Any]) -> None:
    brokers = {n: s for n, s in services.items() if s["image"].startswith("apache/kafka:")}
    assert sorted(brokers) == BROKERS
    envs = [{k: str(v) for k, v in brokers[name]["environment"].items()} for name in BROKERS]
    voters = ",".join(f"{i}@{name}:9093" for i, name in enumerate(BROKERS, 1))
    for node_id, env in enumerate(envs, 1):
        assert env["KAFKA_NODE_ID"] == str(node_id)
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == voters
        assert env["CLUSTER_ID"] == envs[0]["CLUSTER_ID"]
        for name in ("DEFAULT_REPLICATION_FACTOR", "OFFSETS_TOPIC_REPLICATION_FACTOR",
                     "TRANSACTION_STATE_LOG_REPLICATION_FACTOR"):
            assert env[f"KAFKA_{name}"] == "3", name
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
    internal = ",".join(f"{name}:9092" for name in BROKERS)
    advertised = [dict(listener.split("://") for listener in
                       env["KAFKA_ADVERTISED_LISTENERS"].split(","))["PLAINTEXT"]
                  for env in envs]
    assert ",".join(advertised) == internal
    for name in ROLE_SERVICES:
        assert services[name]["environment"]["INFERSTREAM_BOOTSTRAP_SERVERS"] == internal, name


def test_the_brokers_run_the_kafka_release_the_tests_run(services: dict[str, Any]) -> None:
    pom = (REPO / "ops" / "kafka" / "pom.xml").read_text()
    version = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    assert version is not None
    assert {services[name]["image"] for name in BROKERS} == {f"apache/kafka:{version[1]}"}


def test_gpu_workers_scale_and_a_cpu_worker_waits_behind_its_profile(
        services: dict[str, Any]) -> None:
    worker, cpu = services["worker"], services["worker-cpu"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert "profiles" not in worker  # `docker compose up` starts it
    assert cpu["profiles"] == ["cpu"]
    assert "deploy" not in cpu
    for service in (worker, cpu):  # `--scale worker=N`: no fixed name, no host port
        assert "container_name" not in service
        assert "ports" not in service


def test_every_role_runs_as_the_tests_start_it(services: dict[str, Any]) -> None:
    roles = set()
    for name in ROLE_SERVICES:
        command = services[name]["command"]
        try:
            deployment_settings(command[0], command)
        except (KeyError, ValueError) as exc:
            pytest.fail(f"service {name}: {exc}")
        roles.add(command[0])
    assert roles == set(ROLE_ARGS)


def role_config(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Config:
    """The Config the service's command and environment give, as `inferstream` builds it."""
    for key in [k for k in os.environ if k.startswith("INFERSTREAM_")]:
        monkeypatch.delenv(key)
    for key, value in service.get("environment", {}).items():
        monkeypatch.setenv(key, str(value))
    try:
        return config_from_args(build_parser().parse_args(service["command"]))
    except SystemExit as exc:
        raise AssertionError(f"inferstream rejects {service['command']}") from exc


@pytest.mark.parametrize("name", ROLE_SERVICES)
def test_each_command_is_valid_and_serves_metrics_on_every_interface(
        name: str, services: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    role = services[name]["command"][0]
    if role == "controller" and "metrics_port" not in {
            f.name for f in dataclasses.fields(ControllerConfig)}:
        pytest.skip("ControllerConfig has no metrics_port/metrics_addr yet (issue 14)")
    config = role_config(services[name], monkeypatch)
    if role in ("worker", "controller"):
        settings = getattr(config, role)
        assert settings.metrics_port is not None
        assert settings.metrics_addr == "0.0.0.0"  # noqa: S104
    elif role == "sysinfo":
        assert config.sysinfo.bind == "0.0.0.0"  # noqa: S104


def metrics_port(service: dict[str, Any]) -> int | None:
    command = service.get("command") or ["-"]
    if command[0] not in ROLE_ARGS:
        return None
    flags = deployment_settings(command[0], command)
    port = flags.get("--metrics-port") or flags.get("--port")
    return int(port) if port else None


def scraped(prometheus: dict[str, Any]) -> set[tuple[str, int]]:
    """(host, port) of every scrape target, static or found by DNS."""
    found = set()
    for job in prometheus["scrape_configs"]:
        for static in job.get("static_configs", []):
            found |= {(t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1])) for t in static["targets"]}
        for sd in job.get("dns_sd_configs", []):
            found |= {(host, int(sd["port"])) for host in sd["names"]}
    return found


def test_prometheus_scrapes_every_role_where_it_listens(services: dict[str, Any]) -> None:
    targets = scraped(yaml.safe_load(PROMETHEUS_FILE.read_text()))
    listening = {(name, port) for name, s in services.items()
                 if (port := metrics_port(s)) is not None}
    assert listening <= targets
    assert {host for host, _ in targets} - set(services) == {"localhost"}  # itself
    assert {(h, p) for h, p in targets if h != "localhost"} <= listening


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of the service's bind mounts (Compose 1.x and 2 forms)."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts[volume["target"]] = Path(volume["source"])
        elif volume.startswith("/"):
            source, target = volume.split(":")[:2]
            mounts[target] = Path(source)
    return mounts


def test_prometheus_and_grafana_mount_files_of_the_repository(services: dict[str, Any]) -> None:
    prometheus, grafana = bind_mounts(services["prometheus"]), bind_mounts(services["grafana"])
    assert prometheus["/etc/prometheus/prometheus.yml"] == PROMETHEUS_FILE
    assert grafana["/etc/grafana/provisioning"] == DATASOURCE.parents[1]
    for source in [*prometheus.values(), *grafana.values()]:
        assert source.exists() and source.is_relative_to(REPO), source
    provider = yaml.safe_load(DASHBOARDS_PROVIDER.read_text())["providers"][0]
    assert grafana[provider["options"]["path"]] == REPO / "ops" / "grafana" / "dashboards"
    datasource = yaml.safe_load(DATASOURCE.read_text())["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090" and "prometheus" in services


def test_prometheus_loads_the_rules_under_the_job_names_they_use(
        services: dict[str, Any]) -> None:
    config = yaml.safe_load(PROMETHEUS_FILE.read_text())
    mounts = bind_mounts(services["prometheus"])
    for rule_file in config["rule_files"]:
        folder, name = rule_file.rsplit("/", 1)
        assert (mounts[folder] / name).is_file(), rule_file  # no glob: a typo loads nothing
    local = yaml.safe_load((REPO / "ops" / "prometheus" / "prometheus.yml").read_text())
    names = {job["job_name"] for job in config["scrape_configs"]} - {"prometheus"}
    assert names <= {job["job_name"] for job in local["scrape_configs"]}
