"""SysInfoClient against a fake sysinfo app on loopback: every call, 404, unreachable."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from inferstream.client.errors import (
    SysInfoNotFoundError,
    SysInfoResponseError,
    SysInfoUnreachableError,
)
from inferstream.client.sysinfo_api import SysInfoClient
from inferstream.config import load_config
from inferstream.errors import ConfigError, InferstreamError
from inferstream.schemas.records import PolicyKind, WorkerHealth
from tests.unit.support.fake_sysinfo import (
    NOW_MS,
    FakeSysInfo,
    policy_entry,
    sample,
    unused_url,
    worker,
)


@pytest.fixture
def fake() -> Iterator[FakeSysInfo]:
    app = FakeSysInfo()
    app.workers = [worker("w-fast"), worker("w slow/2", share=0.2, health="STALE")]
    app.samples = {"w-fast": [sample("w-fast", NOW_MS - 4_000), sample("w-fast", NOW_MS)]}
    app.policy = [policy_entry("w-fast"), policy_entry("w-cpu", pool="cpu", share=1.0)]
    with app.serving():
        yield app


@pytest.fixture
def client(fake: FakeSysInfo) -> SysInfoClient:
    return SysInfoClient(fake.url + "/", timeout_s=5)


def test_health_reports_live_workers_pools_and_policy_time(client: SysInfoClient) -> None:
    assert client.health() == {"status": "ok", "workers": 1, "pools": ["gpu"],
                               "policy_updated_at": NOW_MS}


def test_workers_lists_every_worker_with_health_as_enum(client: SysInfoClient) -> None:
    workers = client.workers()
    assert [w["worker"] for w in workers] == ["w-fast", "w slow/2"]
    assert workers[1]["health"] is WorkerHealth.STALE
    assert workers[0]["assigned_partitions"] == [0, 1, 2, 5]


def test_worker_detail_carries_its_latest_sample(client: SysInfoClient) -> None:
    detail = client.worker("w-fast")
    assert detail["share"] == 0.8
    assert detail["sample"]["timestamp"] == NOW_MS


def test_worker_ids_are_quoted_as_one_path_segment(client: SysInfoClient,
                                                   fake: FakeSysInfo) -> None:
    assert client.worker("w slow/2")["worker"] == "w slow/2"
    assert fake.requests[-1] == "/workers/w%20slow%2F2"


def test_sysinfo_returns_samples_newer_than_since(client: SysInfoClient) -> None:
    assert [s["timestamp"] for s in client.sysinfo("w-fast")] == [NOW_MS - 4_000, NOW_MS]
    assert [s["timestamp"] for s in client.sysinfo("w-fast", since_ms=NOW_MS - 1)] == [NOW_MS]


def test_policy_of_all_pools_and_of_one(client: SysInfoClient) -> None:
    entries = client.policy()
    assert {(e["pool"], e["worker"]) for e in entries} == {("gpu", "w-fast"), ("cpu", "w-cpu")}
    assert entries[0]["kind"] is PolicyKind.WORKER
    assert [e["share"] for e in client.policy("cpu")] == [1.0]


@pytest.mark.parametrize("call", [
    lambda c: c.worker("nobody"), lambda c: c.sysinfo("nobody"), lambda c: c.policy("nopool"),
])
def test_unknown_ids_raise_not_found_with_the_servers_message(client: SysInfoClient,
                                                               call: object) -> None:
    with pytest.raises(SysInfoNotFoundError) as caught:
        call(client)  # type: ignore[operator]
    assert "nobody" in caught.value.reason or "nopool" in caught.value.reason
    assert isinstance(caught.value, InferstreamError)


def test_unreachable_app_is_one_line_naming_the_url_and_setting() -> None:
    url = unused_url()
    with pytest.raises(SysInfoUnreachableError) as caught:
        SysInfoClient(url, timeout_s=2).health()
    message = str(caught.value)
    assert "\n" not in message
    assert url in message and "connection refused" in message
    assert "--sysinfo-url" in message and "INFERSTREAM_SYSINFO_URL" in message


def test_an_app_that_never_answers_is_unreachable_after_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(SysInfoUnreachableError, match=r"no answer within 0.2s"):
            SysInfoClient(url, timeout_s=0.2).workers()


def test_a_server_error_is_a_response_error_with_its_message(client: SysInfoClient,
                                                             fake: FakeSysInfo) -> None:
    fake.failure = (500, {"error": "tables not ready"})
    with pytest.raises(SysInfoResponseError, match="HTTP 500: tables not ready"):
        client.health()
    fake.failure = (200, ["not", "an", "object"])
    with pytest.raises(SysInfoResponseError, match="expected a JSON object"):
        client.health()


def test_a_body_outside_the_contract_is_a_response_error(client: SysInfoClient,
                                                         fake: FakeSysInfo) -> None:
    fake.workers = [{"worker": "half"}]
    with pytest.raises(SysInfoResponseError, match="lacks fields"):
        client.workers()
    fake.workers = [worker("odd", health="SLEEPY")]
    with pytest.raises(SysInfoResponseError, match="SLEEPY"):
        client.workers()


@pytest.mark.parametrize("url", ["127.0.0.1:6066", "ftp://host/", "http://"])
def test_a_url_that_is_not_http_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="sysinfo_url"):
        SysInfoClient(url)


def test_sysinfo_url_setting_defaults_and_reads_the_environment() -> None:
    assert load_config(environ={}).sysinfo_url == "http://127.0.0.1:6066"
    environ = {"INFERSTREAM_SYSINFO_URL": "http://sysinfo:7000"}
    assert load_config(environ=environ).sysinfo_url == "http://sysinfo:7000"


def test_the_client_imports_neither_kafka_nor_torch_nor_faust() -> None:
    code = ("import sys, json; import inferstream.client.sysinfo_api; "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    heavy = {"confluent_kafka", "aiokafka", "torch", "faust"}
    assert heavy.isdisjoint(m.split(".")[0] for m in json.loads(out))


def test_the_client_package_still_exports_the_sdk_lazily() -> None:
    import inferstream.client as package
    from inferstream.client import Client, SysInfoClient
    from inferstream.client.client import Client as SdkClient

    assert Client is SdkClient and SysInfoClient.__name__ == "SysInfoClient"
    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = package.NoSuchThing  # type: ignore[attr-defined]
