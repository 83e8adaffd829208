"""Secured local clusters for the integration tests (`ops/kafka/cluster start --security`).

A run of the tests starts one SASL_SSL 1-broker cluster (`shared_sasl_ssl`, the `sasl_ssl`
fixture), whichever of its xdist processes asks first; the others use it and the last to end
removes it. The test files on it keep out of each other's way: their own topic prefix, and
principals of their own where they change ACLs (`add_user`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialUpsertion
from confluent_kafka.admin import ScramCredentialInfo as Scram

from tests.integration.conftest import CLUSTER, INFERSTREAM, start_cluster


def secured_cluster(tmp: Path, mode: str) -> Iterator[Path]:
    """A 1-broker cluster secured by `mode`; yields its folder, removed at the end."""
    start_cluster(tmp, 1, "--security", mode)
    try:
        yield tmp
    finally:
        clean(tmp)


def clean(directory: Path) -> None:
    subprocess.run([sys.executable, str(CLUSTER), "clean", "--dir", str(directory)],
                   capture_output=True, timeout=120, check=False)


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def shared_sasl_ssl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The run's SASL_SSL cluster: started by the first process that asks, removed by the
    last one to end (a count of users beside it, under a file lock)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield from secured_cluster(tmp_path_factory.mktemp("sasl-ssl"), "sasl_ssl")
        return
    root = tmp_path_factory.getbasetemp().parent  # the same for every process of the run
    directory, users = root / "sasl-ssl", root / "sasl-ssl.users"
    with _locked(root / "sasl-ssl.lock"):
        count = int(users.read_text()) if users.exists() else 0
        if count == 0:
            start_cluster(directory, 1, "--security", "sasl_ssl")
        users.write_text(str(count + 1))
    try:
        yield directory
    finally:
        with _locked(root / "sasl-ssl.lock"):
            count = int(users.read_text()) - 1
            users.write_text(str(count))
            if count == 0:
                clean(directory)


def settings(cluster: Path, user: str) -> Path:
    """The settings file `cluster start` wrote for `user` (or `add_user` did)."""
    return cluster / "clients" / f"{user}.toml"


def add_user(cluster: Path, user: str) -> Path:
    """A SCRAM user made by admin on a SASL_SSL cluster (again: a new password), who can log
    in once this returns; its settings file."""
    password = secrets.token_hex(16)
    admin = AdminClient(librdkafka(settings(cluster, "admin")))
    upsert = UserScramCredentialUpsertion(
        user, Scram(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    secret = cluster / "secrets" / f"{user}.password"
    secret.touch(mode=0o600)
    secret.write_text(password + "\n")
    written = settings(cluster, user)
    written.touch(mode=0o600)
    written.write_text(settings(cluster, "admin").read_text()
                       .replace('sasl_username = "admin"', f'sasl_username = "{user}"')
                       .replace(str(cluster / "secrets" / "admin.password"), str(secret)))
    _wait_for_login(written)
    return written


def _wait_for_login(settings_file: Path, timeout_s: float = 30) -> None:
    """Until the broker knows the user's new credential (it applies metadata a little later
    than the controller acknowledges it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        client = AdminClient(librdkafka(settings_file))
        try:
            client.list_topics(timeout=5)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def inferstream(settings_file: Path, *args: str, timeout: float = 60
                ) -> subprocess.CompletedProcess[str]:
    """Run `inferstream ARGS` with only `settings_file` as its configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSTREAM_")}
    env["INFERSTREAM_CONFIG"] = str(settings_file)
    return subprocess.run([*INFERSTREAM, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def librdkafka(settings_file: Path) -> dict[str, Any]:
    """The settings file as confluent-kafka's configuration."""
    s = tomllib.loads(settings_file.read_text())
    if "sasl_password_file" in s:
        s["sasl_password"] = Path(s.pop("sasl_password_file")).read_text().strip()
    names = {"bootstrap_servers": "bootstrap.servers", "security_protocol": "security.protocol",
             "sasl_mechanism": "sasl.mechanism", "sasl_username": "sasl.username",
             "sasl_password": "sasl.password", "ssl_cafile": "ssl.ca.location",
             "ssl_certfile": "ssl.certificate.location", "ssl_keyfile": "ssl.key.location"}
    return {names[k]: v for k, v in s.items()}


def refused(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip(), "refused without a word"
