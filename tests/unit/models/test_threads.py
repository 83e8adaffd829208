"""Threads sized on purpose (issue 16): torch's and the decode pool's, derived from the cores
and the device unless given, and per thread, so decode threads run torch one-threaded while
the inference thread keeps its count."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from inferstream.models.threads import available_cores, plan_threads, thread_initializer


@pytest.mark.parametrize(("device", "cores", "torch_threads", "decode_threads"), [
    ("cpu", 2, 2, 1), ("cpu", 16, 16, 4), ("cpu", 1, 1, 1),
    ("cuda", 16, 1, 15), ("cuda:1", 2, 1, 1), ("cuda", 1, 1, 1)])
def test_derived_from_the_cores_and_the_device(device: str, cores: int, torch_threads: int,
                                               decode_threads: int) -> None:
    plan = plan_threads(device, cores=cores)
    assert (plan.torch_threads, plan.decode_threads) == (torch_threads, decode_threads)
    assert plan.derived == ("torch_threads", "decode_threads")


def test_given_counts_are_kept_and_said_so() -> None:
    plan = plan_threads("cpu", torch_threads=3, cores=8)
    assert (plan.torch_threads, plan.decode_threads) == (3, 2)
    assert plan.describe() == ("threads: torch 3 (set), decode 2 (derived); 8 cores, "
                               "device cpu")


@pytest.mark.parametrize(("cpu_max", "expected"), [
    ("150000 100000\n", 2), ("50000 100000\n", 1), ("max 100000\n", None), ("junk", None)])
def test_a_cgroup_quota_caps_the_cores(tmp_path: Path, cpu_max: str,
                                       expected: int | None) -> None:
    limit = tmp_path / "cpu.max"
    limit.write_text(cpu_max)
    unlimited = available_cores(str(tmp_path / "absent"))
    assert available_cores(str(limit)) == min(unlimited, expected or unlimited)


def test_each_pool_thread_keeps_its_own_torch_thread_count() -> None:
    def threads() -> int:
        torch.ones(4).add_(1)  # torch initialises the thread's pool on first use
        return torch.get_num_threads()

    with ThreadPoolExecutor(1, initializer=thread_initializer(2)) as inference:
        assert inference.submit(threads).result() == 2
        with ThreadPoolExecutor(2, initializer=thread_initializer(1)) as decoders:
            assert set(decoders.map(lambda _: threads(), range(4))) == {1}
        assert inference.submit(threads).result() == 2
