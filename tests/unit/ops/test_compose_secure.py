"""docker-compose.secure.yml over docker-compose.yml, as Compose resolves them with the files
ops/compose/make_secrets.py makes: SASL_SSL brokers that authorise as the local secured
cluster does, and each role as a principal of its own, holding its own secret only and
starting after the ACLs `inferstream acls` prints for it were applied by the admin."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferstream.cli import build_parser, config_from_args
from inferstream.client.acls import ROLES, role_bindings
from tests.unit.ops.test_compose import BROKERS, REPO, ROLE_SERVICES, bind_mounts, compose

sys.path.insert(0, str(REPO / "ops" / "kafka"))
sys.path.insert(0, str(REPO / "ops" / "compose"))

from localkafka.config import new_state
from localkafka.security import security_properties
from make_secrets import BROKERS as CERTIFIED_BROKERS
from make_secrets import COMPOSE_USERS
from make_secrets import main as make_secrets

SECURE_FILE = REPO / "docker-compose.secure.yml"
FILES = (REPO / "docker-compose.yml", SECURE_FILE)
SETTINGS = "/etc/inferstream/inferstream.toml"
#: Whom each service that runs `inferstream` connects as.
USER_OF = {"topics": "admin", "controller-1": "controller", "controller-2": "controller",
           "sysinfo-1": "sysinfo", "sysinfo-2": "sysinfo", "worker": "worker",
           "worker-cpu": "worker", "client": "client", "stream-member": "stream",
           **{f"acls-{role}": "admin" for role in ROLES if role != "admin"}}


@pytest.fixture(scope="module")
def resolved(compose_secrets: Path) -> subprocess.CompletedProcess[str]:
    return compose("--profile", "cpu", "--profile", "client", "config",
                   secrets=compose_secrets, files=FILES)


@pytest.fixture(scope="module")
def services(resolved: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert resolved.returncode == 0, resolved.stderr
    found: dict[str, Any] = yaml.safe_load(resolved.stdout)["services"]
    return found


def unescaped(value: object) -> str:
    """A value as the container gets it (`config` writes `$` as `$$` again)."""
    return str(value).replace("$$", "$")


def test_compose_accepts_the_secured_variant(resolved: subprocess.CompletedProcess[str],
                                             services: dict[str, Any]) -> None:
    assert "WARNING" not in resolved.stderr, resolved.stderr
    assert set(USER_OF) | {"users"} <= set(services)
    unmade = compose("config", files=FILES)
    assert unmade.returncode != 0 and "Couldn't find env file" in unmade.stderr


def test_no_listener_lets_anyone_in_without_a_credential(services: dict[str, Any]) -> None:
    for name in BROKERS:
        env = {k: unescaped(v) for k, v in services[name]["environment"].items()}
        protocols = dict(pair.split(":") for pair in
                         env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
        listeners = [listener.split("://")[0] for listener in env["KAFKA_LISTENERS"].split(",")]
        assert {protocols[listener] for listener in listeners} == {"SASL_SSL", "SSL"}, name
        for listener in listeners:
            if protocols[listener] == "SSL":  # the brokers' and controllers' own: mTLS
                assert env[f"KAFKA_LISTENER_NAME_{listener}_SSL_CLIENT_AUTH"] == "required"
        assert protocols[env["KAFKA_INTER_BROKER_LISTENER_NAME"]] == "SSL"
        assert protocols[env["KAFKA_CONTROLLER_LISTENER_NAMES"]] == "SSL"
        advertised = dict(listener.split("://") for listener in
                          env["KAFKA_ADVERTISED_LISTENERS"].split(","))
        assert advertised["CLIENT"] == f"{name}:9092"
        assert protocols["CLIENT"] == "SASL_SSL"
    assert set(CERTIFIED_BROKERS) == set(BROKERS)  # the certificate names every broker


def test_the_brokers_authorise_as_the_local_secured_cluster_does(
        services: dict[str, Any], compose_secrets: Path, tmp_path: Path) -> None:
    """The settings ops/kafka/cluster start --security sasl_ssl writes (and its integration
    tests run), as the Kafka image's KAFKA_* variables (`.` as `_`)."""
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "keystore.password").write_text("x\n")
    local = dict(line.split("=", 1) for line in security_properties(
        tmp_path, new_state(tmp_path, 3, "21000", None, {}, "sasl_ssl")).splitlines()
        if line and not line.startswith("#"))
    jaas = local.pop("listener.name.client.scram-sha-512.sasl.jaas.config")
    jaas_file = compose_secrets / "kafka" / "jaas.conf"
    assert jaas.removesuffix(";") in jaas_file.read_text()
    for name in BROKERS:
        env = {k: unescaped(v) for k, v in services[name]["environment"].items()}
        assert f"-Djava.security.auth.login.config=/etc/kafka/secrets/{jaas_file.name}" in (
            env["KAFKA_OPTS"])
        for key, value in local.items():
            if key.startswith(("ssl.keystore.location", "ssl.truststore.location",
                               "ssl.keystore.password", "ssl.key.password")):
                continue  # where the container has them; from kafka.env
            assert env["KAFKA_" + key.upper().replace(".", "_")] == value, (name, key)
        stores = bind_mounts(services[name])
        for key in ("SSL_KEYSTORE_LOCATION", "SSL_TRUSTSTORE_LOCATION"):
            assert stores[env[f"KAFKA_{key}"]].is_file(), key
        assert env["KAFKA_SSL_KEYSTORE_PASSWORD"] == (
            compose_secrets / "secrets" / "keystore.password").read_text().strip()


def test_each_role_runs_as_its_own_user_holding_its_own_secret_only(
        services: dict[str, Any], compose_secrets: Path) -> None:
    for name, user in USER_OF.items():
        service = services[name]
        assert service["environment"]["INFERSTREAM_CONFIG"] == SETTINGS, name
        mounts = bind_mounts(service)
        assert mounts[SETTINGS] == compose_secrets / "clients" / f"{user}.toml", name
        settings = tomllib.loads(mounts[SETTINGS].read_text())
        assert settings["security_protocol"] == "SASL_SSL"
        assert settings["sasl_username"] == user
        for key in ("sasl_password_file", "ssl_cafile"):
            assert mounts[settings[key]].is_file(), (name, key)
        passwords = [target for target in mounts if target.endswith(".password")]
        assert passwords == [settings["sasl_password_file"]], name


def test_each_role_starts_after_its_acls_which_follow_the_topics_and_users(
        services: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, user in USER_OF.items():
        if user == "admin":
            continue
        assert services[name]["depends_on"][f"acls-{user}"] == {
            "condition": "service_completed_successfully"}, name
    for role in set(ROLES) - {"admin"}:
        acls = services[f"acls-{role}"]
        command = acls["command"]
        assert command[:6] == ["acls", "--principal", f"User:{role}", "--role", role,
                               "--apply"]
        for key in [k for k in os.environ if k.startswith("INFERSTREAM_")]:
            monkeypatch.delenv(key)
        config = config_from_args(build_parser().parse_args(command))
        assert role_bindings(config, (role,), (config.pool,))  # the stream's: its topics
        assert acls["depends_on"] == {"topics": {"condition": "service_completed_successfully"}}
    assert services["topics"]["depends_on"]["users"] == {
        "condition": "service_completed_successfully"}
    assert {name for name in ROLE_SERVICES if name != "topics"} <= set(USER_OF)


def test_users_gives_every_user_its_scram_credential(services: dict[str, Any],
                                                     compose_secrets: Path) -> None:
    users = services["users"]
    script = unescaped(users["command"][0])
    assert f"for user in {' '.join(COMPOSE_USERS)}; do" in script
    assert "SCRAM-SHA-512=[password=$(cat /etc/kafka/users/$user.password)]" in script
    mounts = bind_mounts(users)
    for user in COMPOSE_USERS:
        assert mounts[f"/etc/kafka/users/{user}.password"] == (
            compose_secrets / "secrets" / f"{user}.password")
    assert {services["users"]["depends_on"][name]["condition"] for name in BROKERS} == {
        "service_healthy"}


def test_the_secrets_are_made_once_for_the_brokers_names(compose_secrets: Path) -> None:
    assert compose_secrets.stat().st_mode & 0o077 == 0  # the folder: its owner's only
    assert (compose_secrets / "tls" / "ca.key").stat().st_mode & 0o077 == 0
    san = subprocess.run(["openssl", "x509", "-in", str(compose_secrets / "tls" / "broker.pem"),
                          "-noout", "-ext", "subjectAltName"], capture_output=True, text=True,
                         check=True).stdout
    for host in (*BROKERS, "localhost"):
        assert f"DNS:{host}" in san
    admin = (compose_secrets / "secrets" / "admin.password").read_text()
    assert make_secrets(["--dir", str(compose_secrets)]) == 0  # kept: the brokers hold it
    assert (compose_secrets / "secrets" / "admin.password").read_text() == admin
    host = tomllib.loads((compose_secrets / "host" / "client.toml").read_text())
    assert host["bootstrap_servers"] == "localhost:19092,localhost:19093,localhost:19094"
    assert Path(host["sasl_password_file"]).read_text().strip()
