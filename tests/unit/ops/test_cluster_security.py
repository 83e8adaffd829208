"""`ops/kafka/cluster start --security`: the server.properties each mode gives its nodes, the
SCRAM users formatted in and the client settings files, without starting a broker."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from inferstream.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "kafka"))

from localkafka.common import ClusterError
from localkafka.config import check_existing, new_state, server_properties
from localkafka.security import (
    USERS,
    client_settings,
    scram_args,
    secrets_dir,
    write_client_settings,
)
from localkafka.state import AnyNode, ClusterState, all_nodes


def cluster(d: Path, brokers: int, security: str | None) -> ClusterState:
    st = new_state(d, brokers, "21000", None, {}, security)
    secrets_dir(d).mkdir(parents=True)
    for name in (*USERS, "keystore"):
        (secrets_dir(d) / f"{name}.password").write_text(f"{name}-secret\n")
    return st


def props(d: Path, st: ClusterState, n: AnyNode) -> dict[str, str]:
    lines = server_properties(d, st, n).splitlines()
    pairs = [ln.split("=", 1) for ln in lines if ln and not ln.startswith("#")]
    return {k: v for k, v in pairs}


def test_plaintext_stays_one_plaintext_listener_without_an_authorizer(tmp_path: Path) -> None:
    st = cluster(tmp_path, 1, None)
    p = props(tmp_path, st, st["nodes"][0])
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:21000,CONTROLLER://127.0.0.1:21100"
    assert p["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert "authorizer.class.name" not in p and "security" not in st


def test_sasl_ssl_puts_clients_on_scram_and_nodes_on_mtls(tmp_path: Path) -> None:
    st = cluster(tmp_path, 1, "sasl_ssl")
    p = props(tmp_path, st, st["nodes"][0])
    assert p["listeners"] == ("CLIENT://127.0.0.1:21000,BROKER://127.0.0.1:21200,"
                              "CONTROLLER://127.0.0.1:21100")
    assert p["listener.security.protocol.map"] == "CLIENT:SASL_SSL,BROKER:SSL,CONTROLLER:SSL"
    assert p["inter.broker.listener.name"] == "BROKER"
    assert p["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert "ScramLoginModule" in p["listener.name.client.scram-sha-512.sasl.jaas.config"]
    assert p["listener.name.broker.ssl.client.auth"] == "required"
    assert p["listener.name.controller.ssl.client.auth"] == "required"
    assert "listener.name.client.ssl.client.auth" not in p  # a password is enough
    assert p["authorizer.class.name"] == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert p["allow.everyone.if.no.acl.found"] == "false"
    assert p["super.users"] == "User:admin;User:broker"
    assert p["ssl.keystore.password"] == "keystore-secret"


def test_ssl_on_three_brokers_requires_certificates_everywhere(tmp_path: Path) -> None:
    st = cluster(tmp_path, 3, "ssl")
    controller, *brokers = all_nodes(st)
    c = props(tmp_path, st, controller)
    assert c["listener.security.protocol.map"] == "CONTROLLER:SSL"
    assert c["authorizer.class.name"].endswith("StandardAuthorizer")
    assert c["super.users"] == "User:admin;User:broker"
    for i, n in enumerate(brokers):
        p = props(tmp_path, st, n)
        assert p["advertised.listeners"] == (
            f"CLIENT://127.0.0.1:{21000 + i},BROKER://127.0.0.1:{21200 + i}")
        assert p["listener.security.protocol.map"] == "CLIENT:SSL,BROKER:SSL,CONTROLLER:SSL"
        assert p["listener.name.client.ssl.client.auth"] == "required"
        assert p["ssl.principal.mapping.rules"] == "RULE:^CN=([^,]+)$/$1/,DEFAULT"
        assert "sasl.enabled.mechanisms" not in p


def test_the_scram_users_are_formatted_in_with_their_passwords(tmp_path: Path) -> None:
    st = cluster(tmp_path, 1, "sasl_ssl")
    args = scram_args(tmp_path, st)
    assert args[:2] == ["--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"]
    assert len(args) == 2 * len(USERS) and "nobody" in USERS
    assert scram_args(tmp_path, cluster(tmp_path / "m", 1, "ssl")) == []


def test_each_user_gets_an_owner_only_settings_file(tmp_path: Path) -> None:
    st = cluster(tmp_path, 1, "sasl_ssl")
    written = dict(write_client_settings(tmp_path, st, "127.0.0.1:21000"))
    assert set(written) == set(USERS)
    admin = tomllib.loads(written["admin"].read_text())
    assert admin == {
        "bootstrap_servers": "127.0.0.1:21000", "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "admin",
        "sasl_password_file": str(tmp_path / "secrets" / "admin.password"),
        "ssl_cafile": str(tmp_path / "tls" / "ca.pem")}
    assert written["admin"].stat().st_mode & 0o077 == 0
    loaded = load_config({"config_file": str(written["admin"])}, {})
    assert loaded.sasl_password == "admin-secret"  # noqa: S105 (the fake cluster's password)
    mtls = cluster(tmp_path / "m", 1, "ssl")
    worker = tomllib.loads(client_settings(tmp_path / "m", mtls, "worker", "x:1"))
    assert worker["security_protocol"] == "SSL"
    assert worker["ssl_certfile"].endswith("tls/worker.pem")
    assert worker["ssl_keyfile"].endswith("tls/worker.key")


def test_an_unknown_mode_or_another_mode_than_the_clusters_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="--security must be one of"):
        new_state(tmp_path, 1, "21000", None, {}, "kerberos")
    st = cluster(tmp_path, 1, "sasl_ssl")
    with pytest.raises(ClusterError, match="holds a sasl_ssl cluster, not ssl"):
        check_existing(tmp_path, st, None, None, {}, "ssl")
    check_existing(tmp_path, st, None, None, {}, None)  # unsaid: the cluster's own
