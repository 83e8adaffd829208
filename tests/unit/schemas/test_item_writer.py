"""The TaskResult items that item_writer.py writes by hand are fastavro's bytes, for every
shape of item; items of other shapes or of wrong values go to fastavro, which writes them
or says why they do not fit."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import pytest

from inferstream.schemas import Codec, SchemaError, load_schema
from inferstream.schemas.item_writer import ItemWriter
from inferstream.schemas.records import ItemStatus, TaskResult, encode_result

CODEC = Codec()
HEAD: dict[str, Any] = dict(job_id="j", task_id=1, attempt=1, worker="w", model="m",
                            model_version=None, started_at=0, finished_at=0,
                            decode_seconds=0.0, inference_seconds=0.0)


def fastavro_bytes(items: list[dict[str, Any]]) -> bytes:
    """The record as the codec writes it, counts and all, without item_writer."""
    ok = sum(1 for item in items if item["status"] == "OK")
    return CODEC.encode("TaskResult", {**HEAD, "items": items, "ok_count": ok,
                                       "error_count": len(items) - ok})


def random_item(rng: random.Random, index: int) -> dict[str, Any]:
    names = ["a.jpg", "", "/data/ñandú/图像.png", "x" * rng.randrange(200)]
    item: dict[str, Any] = {"index": rng.choice([index, -index, 2**63 - 1 - index, -(2**63)]),
                            "name": rng.choice(names), "status": "OK", "top_k": [],
                            "embedding": None, "tensors": [], "error": None}
    kind = rng.randrange(5)
    if kind == 0:
        item.update(status="ERROR", error=rng.choice(["corrupt", "", "é" * 300]))
    elif kind == 1:
        item["embedding"] = [rng.uniform(-2, 2) for _ in range(rng.randrange(4))]
    elif kind == 2:
        item["tensors"] = [{"name": "t", "dtype": "uint8", "shape": [3], "data": b"abc"}]
    else:
        item["top_k"] = [{"class_id": rng.choice([0, 63, 64, 8191, 8192, -1, 2**31 - 1,
                                                  -(2**31), rng.randrange(1000)]),
                          "label": rng.choice(["tabby", "", "Ärger", "l" * 130]),
                          "score": rng.choice([rng.random(), 0.0, 1, math.inf, -0.0, 1e39,
                                               -3.4028235677973366e38])}
                         for _ in range(rng.randrange(6))]
    return item


@pytest.mark.parametrize("seed", range(20))
def test_random_items_are_written_as_fastavro_writes_them(seed: int) -> None:
    rng = random.Random(seed)
    items = [random_item(rng, i) for i in range(rng.choice([0, 1, 2, 63, 64, 65, 300]))]
    result = TaskResult(**HEAD, items=items)  # type: ignore[typeddict-item]
    assert encode_result(CODEC, result) == fastavro_bytes(items)


def test_a_nan_score_and_the_pair_store_starting_again_write_the_same_bytes() -> None:
    writer = ItemWriter(load_schema("TaskResult"), most_pairs=8)
    items = [{"index": i, "name": "n", "status": "OK", "embedding": None, "tensors": [],
              "error": None, "top_k": [{"class_id": i % 11, "label": "x", "score": math.nan}]}
             for i in range(30)]
    written = writer.items_array(items)
    assert written == fastavro_bytes(items)[-len(written):]


def common_item(index: int, name: str = "n", top_k: int = 1) -> dict[str, Any]:
    return {"index": index, "name": name, "status": "OK", "embedding": None, "tensors": [],
            "error": None, "top_k": [{"class_id": j, "label": "l", "score": 0.25}
                                     for j in range(top_k)]}


def test_numbers_on_either_side_of_the_kept_small_ones_write_the_same_bytes() -> None:
    edges = [0, 1, 63, 64, 4094, 4095, 4096, 4097, 2**20]
    items = [common_item(n, "é" * (n // 2) if n < 5000 else "x" * 4096, top_k=1)
             for n in edges]
    items += [common_item(7, top_k=k) for k in (0, 63, 64)]
    result = TaskResult(**HEAD, items=items)  # type: ignore[typeddict-item]
    assert encode_result(CODEC, result) == fastavro_bytes(items)


def test_an_item_left_to_fastavro_halfway_through_leaves_none_of_its_own_parts() -> None:
    odd = common_item(2, top_k=3)
    odd["top_k"][2]["class_id"] = 2**31  # its first predictions were written by hand
    items = [common_item(1), odd, common_item(3)]
    result = TaskResult(**HEAD, items=items)  # type: ignore[typeddict-item]
    assert encode_result(CODEC, result) == fastavro_bytes(items)


@pytest.mark.parametrize("change", [
    {"index": 1.5}, {"index": True}, {"status": ItemStatus.ERROR, "error": "e"},
    {"top_k": [{"class_id": 2**31, "label": "a", "score": 0.5}]},
    {"top_k": [{"class_id": False, "label": "a", "score": 0.5}]},
    {"top_k": ()}, {"tensors": ()},
])
def test_values_outside_the_common_shape_that_fastavro_takes_are_written_by_it(
        change: dict[str, Any]) -> None:
    item = {"index": 0, "name": "n", "status": "OK", "top_k": [], "embedding": None,
            "tensors": [], "error": None, **change}
    result = TaskResult(**HEAD, items=[item])  # type: ignore[typeddict-item]
    assert encode_result(CODEC, result) == fastavro_bytes([item])


@pytest.mark.parametrize("change", [
    {"index": 2**63}, {"name": None}, {"status": "MAYBE"}, {"error": 3}, {"extra": 1},
    {"top_k": None}, {"tensors": None},
    {"top_k": [{"class_id": "7", "label": "a", "score": 0.5}]},
    {"top_k": [{"class_id": 7, "label": "a", "score": "high"}]},
    {"top_k": [{"class_id": 7, "label": "a", "score": 0.5, "extra": 1}]},
    {"top_k": [{"class_id": 7, "score": 0.5}]},
])
def test_an_item_that_does_not_fit_is_the_codecs_schema_error(change: dict[str, Any]) -> None:
    item = {"index": 0, "name": "n", "status": "OK", "top_k": [], "embedding": None,
            "tensors": [], "error": None, **change}
    with pytest.raises(SchemaError):
        CODEC.encode("TaskResult", {**HEAD, "items": [item]})
    with pytest.raises(SchemaError):
        encode_result(CODEC, TaskResult(**HEAD, items=[item]))  # type: ignore[typeddict-item]


def test_fields_left_at_their_defaults_are_written_as_fastavro_writes_them() -> None:
    item = {"index": 4, "name": "n", "status": "ERROR", "error": "bad"}
    result = TaskResult(**HEAD, items=[item])  # type: ignore[typeddict-item]
    full = {**item, "top_k": [], "embedding": None, "tensors": []}
    assert encode_result(CODEC, result) == fastavro_bytes([full])


def test_a_schema_the_writer_does_not_know_is_refused() -> None:
    schema = load_schema("TaskResult")
    changed = copy.deepcopy(schema)
    item = next(f for f in changed["fields"] if f["name"] == "items")["type"]["items"]
    item["fields"].insert(2, {"name": "weight", "type": "float", "default": 1.0})
    with pytest.raises(SchemaError, match=r"not the one item_writer\.py writes"):
        ItemWriter(changed)
    ItemWriter(schema)
