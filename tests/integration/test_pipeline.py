"""The job pipeline end to end on a real broker: submit -> tasks -> workers -> output."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.models.forward import native_bf16_cpu
from inferstream.serving.allocator import find_allocator
from tests.integration.conftest import Processes

pytestmark = pytest.mark.integration

PHOTOS = ("chelsea", "coffee", "rocket", "camera")


def write_photos(directory: Path) -> dict[str, Path]:
    """scikit-image's bundled photos as JPEG files, plus three bad items."""
    from skimage import data

    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in PHOTOS:
        pixels = np.asarray(getattr(data, name)())
        paths[name] = directory / f"{name}.jpg"
        Image.fromarray(pixels).save(paths[name], quality=92)
    good = paths["coffee"].read_bytes()
    paths["corrupt"] = directory / "corrupt.jpg"
    paths["corrupt"].write_bytes(good[:200] + bytes(range(256)) * 40)
    paths["empty"] = directory / "empty.jpg"
    paths["empty"].write_bytes(b"")
    paths["missing"] = directory / "no-such-photo.jpg"
    return paths


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def a_preloadable_library() -> str:
    """A library to preload: the system's jemalloc or tcmalloc where there is one, else libc
    (preloading it changes nothing, but the worker's re-exec is the same)."""
    found = find_allocator() or find_allocator(("/lib/*-linux-gnu/libc.so.6",
                                               "/usr/lib/*-linux-gnu/libc.so.6",
                                               "/lib64/libc.so.6"))
    assert found, "no library to preload"
    return found


def speed_options() -> list[str]:
    """Every worker speed option of issue 16 set, most otherwise than by default: compiled,
    bfloat16 where the CPU computes it (else fp32: emulated bf16 is only slow)."""
    return ["--torch-threads", "1", "--decode-threads", "1", "--decode-ahead", "1",
            "--allocator", a_preloadable_library(), "--compile", "on", "--channels-last", "on",
            "--precision", "bf16" if native_bf16_cpu() else "fp32"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("speed", [False, True], ids=["defaults", "speed-options"])
def test_real_photos_get_real_labels_and_bad_items_get_errors(
    procs: Processes, tmp_path: Path, speed: bool
) -> None:
    paths = write_photos(tmp_path / "photos")
    procs.controller()
    # one worker with every speed option (each worker compiles: one is enough), or two
    workers = {"worker-a": speed_options()} if speed else {"worker-a": [], "worker-b": []}
    for name, options in workers.items():
        procs.worker("efficientnet_lite0", "--max-batch", "4", *options, name=name)
    output = tmp_path / "out.jsonl"
    inputs = [str(p) for p in paths.values()]
    done = procs.run("submit", "--model", "efficientnet_lite0", "--input", *inputs,
                     "--chunk-size", "2", "--wait", "--output", str(output), "--timeout", "400",
                     timeout=500)
    assert done.returncode == 0, done.stderr
    lines = read_lines(output)
    by_item = {line["item"]: line for line in lines}
    assert len(lines) == len(paths) == len(by_item)
    top1 = {name: by_item[str(paths[name])]["top_k"][0]["class_id"] for name in PHOTOS}
    assert top1["chelsea"] in (281, 282, 285), top1
    assert top1["coffee"] == 967, top1
    assert top1["rocket"] in (657, 744), top1
    assert top1["camera"] == 872, top1
    for bad in ("corrupt", "empty", "missing"):
        line = by_item[str(paths[bad])]
        assert line["status"] == "error" and line["error"], line
        assert line["top_k"] == []
    if speed:
        log = procs.log("worker-a")
        assert "threads: torch 1 (set), decode 1 (set)" in log, log
        assert "(preloaded at start)" in log, log
        # the job may end before the background compile does (it serves eager meanwhile)
        procs.wait_for_log("worker-a", "forward of efficientnet_lite0: compiled (compile = on;",
                           timeout_s=300)


@pytest.mark.timeout(600)
def test_a_mixed_pool_answers_every_item_with_its_jobs_model(
    procs: Processes, tmp_path: Path
) -> None:
    """Issue 9.1: a sim worker beside an efficientnet_lite0 worker declines the lite0 job's
    tasks; every item gets lite0's label (or error), none a simulated one."""
    paths = write_photos(tmp_path / "photos")
    procs.controller()
    procs.worker("efficientnet_lite0", "--max-batch", "4", name="worker-lite")
    procs.worker("sim:ms=1", name="worker-sim")
    procs.wait_for_group("worker-lite", "worker-sim")
    output = tmp_path / "out.jsonl"
    done = procs.run("submit", "--model", "efficientnet_lite0", "--input",
                     *[str(p) for p in paths.values()], "--chunk-size", "1", "--wait",
                     "--output", str(output), "--timeout", "400", timeout=500)
    assert done.returncode == 0, done.stderr
    by_item = {line["item"]: line for line in read_lines(output)}
    assert len(by_item) == len(paths)
    assert {line["worker"] for line in by_item.values()} == {"worker-lite"}
    assert by_item[str(paths["coffee"])]["top_k"][0]["class_id"] == 967  # type: ignore[index]
    assert by_item[str(paths["corrupt"])]["status"] == "error"
    assert "declined" in procs.log("worker-sim")


def _job_lines(config: Config, job_id: str) -> list[dict[str, object]]:
    return list(Client(config).job(job_id).results())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_two_thousand_items_each_exactly_once(
    procs: Processes, config: Config, tmp_path: Path, guarantee: str
) -> None:
    listing = tmp_path / "items.txt"
    names = [f"item-{i:05d}" for i in range(2000)]
    listing.write_text("\n".join(names) + "\n")
    procs.controller()
    procs.worker("sim:ms=2", "--guarantee", guarantee, name="worker-1")
    procs.worker("sim:ms=2", "--guarantee", guarantee, name="worker-2")
    procs.wait_for_group("worker-1", "worker-2")
    job = Client(config).submit("sim:ms=2", [f"@{listing}"], chunk_size=16)
    status = job.wait(timeout_s=300)
    assert status.total_items == 2000 and status.ok_items == 2000
    lines = _job_lines(config, job.job_id)
    assert sorted(line["item"] for line in lines) == names  # each exactly once
    assert {line["worker"] for line in lines} == {"worker-1", "worker-2"}


@pytest.mark.timeout(600)
def test_sigterm_worker_exits_zero_and_job_completes_on_the_other(
    procs: Processes, config: Config, tmp_path: Path
) -> None:
    listing = tmp_path / "items.txt"
    names = [f"item-{i:05d}" for i in range(3000)]
    listing.write_text("\n".join(names) + "\n")
    procs.controller()
    leaving = procs.worker("sim:ms=5", name="leaving")
    procs.worker("sim:ms=5", name="staying")
    procs.wait_for_group("leaving", "staying")
    job = Client(config).submit("sim:ms=5", [f"@{listing}"], chunk_size=20)
    for status in job.events():
        if status.done_items >= 300:
            break
    leaving.send_signal(signal.SIGTERM)
    assert leaving.wait(timeout=120) == 0, procs.log("leaving")
    status = job.wait(timeout_s=400)
    assert status.done_items == 3000
    lines = _job_lines(config, job.job_id)
    assert sorted(line["item"] for line in lines) == names
    workers = {line["worker"] for line in lines}
    assert workers == {"leaving", "staying"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("model", "inputs", "reason"),
    [
        ("no such net", ["x.jpg"], "no such net"),
        ("resnet50:2", ["x.jpg"], "only repository models have versions"),
        ("sim:ms=1", ["EMPTY_DIR"], "empty input"),
    ],
)
def test_bad_jobs_are_rejected_with_the_reason(
    procs: Processes, tmp_path: Path, model: str, inputs: list[str], reason: str
) -> None:
    (tmp_path / "empty").mkdir()
    inputs = [str(tmp_path / "empty") if i == "EMPTY_DIR" else i for i in inputs]
    procs.controller()
    done = procs.run("submit", "--model", model, "--input", *inputs, "--wait",
                     "--timeout", "120")
    assert done.returncode != 0
    assert "rejected" in done.stderr and reason in done.stderr, done.stderr


@pytest.mark.timeout(900)
def test_counts_equal_the_output_after_controller_kills_at_random_points(
    procs: Processes, config: Config, tmp_path: Path
) -> None:
    """Issue 9.2: kill -9 the controller at random points of a job and start another; the
    final counts equal the output (they came out 2872/3000 for a 3,000-line output)."""
    rng = random.Random(9)
    listing = tmp_path / "items.txt"
    names = [f"item-{i:05d}" for i in range(3000)]
    listing.write_text("\n".join(names) + "\n")
    quick = ["--kafka-config", "session.timeout.ms=6000",
             "--kafka-config", "heartbeat.interval.ms=1000"]
    controller = procs.controller(*quick)
    procs.worker("sim:ms=2", name="worker-1")
    procs.worker("sim:ms=2", name="worker-2")
    procs.wait_for_group("worker-1", "worker-2")
    job = Client(config).submit("sim:ms=2", [f"@{listing}"], chunk_size=10)
    killed_at = []
    for fraction in sorted(rng.uniform(0.1, 0.8) for _ in range(3)):
        for status in job.events(timeout_s=300):
            if status.done_items >= fraction * len(names):
                break
        killed_at.append(status.done_items)
        controller.kill()  # SIGKILL
        controller.wait(timeout=30)
        controller = procs.controller(*quick)
    status = job.wait(timeout_s=600)
    assert min(killed_at) < len(names), killed_at  # at least one kill fell inside the job
    lines = _job_lines(config, job.job_id)
    assert sorted(line["item"] for line in lines) == names
    ok_lines = sum(1 for line in lines if line["status"] == "ok")
    assert (status.done_items, status.ok_items, status.error_items) == (3000, ok_lines, 0)
