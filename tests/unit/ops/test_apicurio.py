"""ops/apicurio/registry without starting Java: the users file, the settings a registry is
started with, and the cache it is fetched into (the real registry runs in
tests/integration/test_schema_registry.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "apicurio"))

from localregistry import RegistryError, app_dir, read_users, settings


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_users_come_from_name_password_lines(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("# who may log in\nalice=s3=cret\n\nbob=pw\n")
    assert read_users(users) == {"alice": "s3=cret", "bob": "pw"}
    users.write_text("alice\n")
    with pytest.raises(RegistryError, match="users:1: not NAME=PASSWORD"):
        read_users(users)


def test_a_registry_listens_on_loopback_and_asks_its_users_to_log_in() -> None:
    shown = properties(settings(8081, 9001, {"alice": "pw"}))
    assert shown["quarkus.http.host"] == shown["quarkus.management.host"] == "127.0.0.1"
    assert (shown["quarkus.http.port"], shown["quarkus.management.port"]) == ("8081", "9001")
    assert shown["quarkus.http.auth.basic"] == "true"
    assert shown["quarkus.oidc.tenant-enabled"] == "false"
    assert shown["quarkus.security.users.embedded.users.alice"] == "pw"
    assert "quarkus.http.auth.basic" not in properties(settings(8081, 9001, {}))


def test_the_cache_is_keyed_by_the_version_and_the_pom(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("INFERSTREAM_KAFKA_CACHE", str(tmp_path))
    folder = app_dir()
    assert folder.parent.parent == tmp_path and folder.name == "app"
    assert folder.parent.name.startswith("apicurio-3.3.3-")
