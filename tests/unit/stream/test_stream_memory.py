"""A stream member on the in-memory transport: one output record per input record, keyed
like it, with its origin; photos get their labels, bad records a reason; every input format;
dead letters with `--on-error dlq`; a fenced commit redone without a duplicate."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from prometheus_client import CollectorRegistry
from skimage import data as photos

from inferstream.config import Config, StreamConfig
from inferstream.errors import ConfigError
from inferstream.kafka.settings import partition_of_key
from inferstream.models import LoadedModel, load_model
from inferstream.models.sim import sim_embedding
from inferstream.schemas.codec import schema_fingerprint
from inferstream.schemas.records import StreamOrigin, TaskItem, ok_item
from inferstream.serving.loop import Worker
from inferstream.stream.formats import OutputWriter, stream_result
from inferstream.stream.metrics import StreamMetrics
from inferstream.stream.source import ORIGIN_OFFSET, ORIGIN_TOPIC, new_member
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.testing.log import StoredRecord
from tests.unit.support.fencing import fenced_mid_commit
from tests.unit.support.memory import CODEC, as_worker
from tests.unit.support.memory import make_config as base_config
from tests.unit.support.photos import encode
from tests.unit.support.records import consumed, strict_loads
from tests.unit.support.running import Running

LITE0 = "efficientnet_lite0"
IN, OUT = "uploads", "labels"


def make_config(model: str = "sim:ms=0", **stream: Any) -> Config:
    return base_config(worker={"models": (model,), "worker_id": "s1", "calibration_items": 0},
                       stream={"input_topic": IN, "output_topic": OUT, **stream})


def streams(broker: MemoryBroker, partitions: tuple[int, int] = (3, 3)) -> MemoryBroker:
    """`broker` with the input and output topics, of `partitions` partitions."""
    broker.create_topic(IN, partitions[0])
    broker.create_topic(OUT, partitions[1])
    return broker


def png(image: Any) -> bytes:
    return encode(image, "PNG")


def all_read(broker: MemoryBroker, members: list[Worker]) -> Any:
    def done() -> bool:
        """every input record's offset committed by the members' group"""
        return consumed(broker, members[0].group_id, IN)
    return done


def run_members(running: Running, config: Config, model: LoadedModel, count: int = 1,
                metrics: StreamMetrics | None = None) -> None:
    """`count` members over the input, until they have read all of it."""
    clients = MemoryKafkaClients(running.broker)
    members = [new_member(as_worker(config, f"s{i}"), model, codec=CODEC, clients=clients,
                          hooks=metrics) for i in range(count)]
    running.workers(*members)
    running.until(all_read(running.broker, members))


def outputs(broker: MemoryBroker, topic: str = OUT) -> list[StoredRecord]:
    return broker.records(topic, read_committed=True)


def decoded(record: StoredRecord) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(record.value or b"")
    return value


def origin_offsets(records: list[StoredRecord]) -> Counter[tuple[int, int]]:
    return Counter((decoded(r)["origin"]["partition"], decoded(r)["origin"]["offset"])
                   for r in records)


def test_photos_get_their_labels_and_bad_records_a_reason_once_each(
        broker: MemoryBroker, running: Running, lite0: LoadedModel) -> None:
    config = make_config(LITE0)
    streams(broker)
    cat, coffee = png(photos.chelsea()), png(photos.coffee())
    inputs = {b"cat": cat, b"coffee": coffee, b"truncated": cat[: len(cat) // 2],
              b"zero": b"", b"text": b"hello, not an image", b"null": None}
    for i, (key, value) in enumerate(inputs.items()):
        broker.produce(IN, i % 3, key, value, headers=(("trace", b"t-" + key),))
    metrics = StreamMetrics(CollectorRegistry())
    run_members(running, config, lite0, metrics=metrics)

    found = {r.key: r for r in outputs(broker)}
    assert set(found) == set(inputs) and len(outputs(broker)) == len(inputs)
    assert decoded(found[b"cat"])["top_k"][0]["label"] == "tiger cat"
    assert decoded(found[b"coffee"])["top_k"][0]["label"] == "espresso"
    for key in (b"truncated", b"zero", b"text", b"null"):
        line = decoded(found[key])
        assert line["status"] == "error" and line["error"] and line["top_k"] == [], key
    cat_out = found[b"cat"]
    assert decoded(cat_out)["origin"] == {"topic": IN, "partition": 0, "offset": 0}
    assert cat_out.partition == 0  # as many output partitions: the input's index
    headers = dict(cat_out.headers)
    assert headers["trace"] == b"t-cat"  # the input's own headers are kept
    assert headers[ORIGIN_TOPIC] == IN.encode() and headers[ORIGIN_OFFSET] == b"0"
    assert metrics.records.labels("ok")._value.get() == 2
    assert metrics.records.labels("error")._value.get() == 4


def test_two_members_share_the_partitions_and_write_each_output_once(
        broker: MemoryBroker, running: Running) -> None:
    config = make_config()
    streams(broker, (4, 3))
    for offset in range(60):
        broker.produce(IN, offset % 4, f"k{offset}".encode(), f"image-{offset}".encode())
    run_members(running, config, load_model("sim:ms=1"), count=2)

    found = outputs(broker)
    assert len(found) == 60
    assert set(origin_offsets(found).values()) == {1}
    # 4 input partitions, 3 output ones: by key, as the Java client would place it
    assert all(r.partition == partition_of_key(r.key or b"", 3) for r in found)
    assert {decoded(r)["worker"] for r in found} <= {"s0", "s1"}


def test_a_fenced_commit_is_redone_and_no_output_is_duplicated(
        broker: MemoryBroker, running: Running) -> None:
    config = make_config()
    streams(broker)
    for offset in range(30):
        broker.produce(IN, 1, f"k{offset}".encode(), f"image-{offset}".encode())
    pool = config.stream.pool(config.topic_prefix)
    tid = f"{config.topic_prefix}{pool}.{IN}.1"
    with fenced_mid_commit(broker, tid):
        run_members(running, config, load_model("sim:ms=0"))
    found = outputs(broker)
    assert len(found) == 30 and set(origin_offsets(found).values()) == {1}
    assert len(broker.records(OUT, read_committed=False)) > 30  # the aborted ones


def labelled(running: Running, config: Config, inputs: dict[bytes, bytes],
             model: LoadedModel) -> dict[bytes, dict[str, Any]]:
    """Run one member over `inputs` (key: value, on partition 0); the outputs by key."""
    broker = streams(running.broker)
    for key, value in inputs.items():
        broker.produce(IN, 0, key, value)
    run_members(running, config, model)
    return {r.key or b"": decoded(r) for r in outputs(broker)}


def test_url_input_reads_paths_and_file_uris(
        tmp_path: Path, running: Running, lite0: LoadedModel) -> None:
    cat = tmp_path / "cat.png"
    cat.write_bytes(png(photos.chelsea()))
    found = labelled(running, make_config(LITE0, input_format="url"), {
        b"path": str(cat).encode(), b"uri": cat.as_uri().encode(),
        b"missing": b"/nowhere/x.png", b"binary": b"\xff\xfe\x00"}, lite0)
    assert found[b"path"]["top_k"][0]["label"] == "tiger cat"
    assert found[b"uri"]["top_k"][0]["label"] == "tiger cat"
    assert "/nowhere/x.png" in found[b"missing"]["error"]
    assert "UTF-8" in found[b"binary"]["error"]


def test_json_input_reads_base64_or_a_uri_from_a_nested_field(
        tmp_path: Path, running: Running, lite0: LoadedModel) -> None:
    cat = tmp_path / "cat.png"
    cat.write_bytes(png(photos.chelsea()))
    encoded = base64.b64encode(cat.read_bytes()).decode()
    values: dict[bytes, Any] = {b"b64": {"image": {"data": encoded}},
                                b"uri": {"image": {"data": cat.as_uri()}},
                                b"nofield": {"image": {}}, b"list": [1, 2]}
    inputs = {key: json.dumps(value).encode() for key, value in values.items()}
    found = labelled(running, make_config(LITE0, input_format="json", field="image.data"),
                     {**inputs, b"notjson": b"{oops"}, lite0)
    assert found[b"b64"]["top_k"][0]["label"] == "tiger cat"
    assert found[b"uri"]["top_k"][0]["label"] == "tiger cat"
    assert "no field 'image.data'" in found[b"nofield"]["error"]
    assert "not an object" in found[b"list"]["error"]
    assert "not JSON" in found[b"notjson"]["error"]


def test_avro_input_in_single_object_encoding(
        tmp_path: Path, broker: MemoryBroker, running: Running) -> None:
    schema = {"type": "record", "name": "Upload", "namespace": "com.example",
              "fields": [{"name": "id", "type": "string"}, {"name": "image", "type": "bytes"}]}
    path = tmp_path / "Upload.avsc"
    path.write_text(json.dumps(schema))
    config = make_config(input_format="avro", field="image", input_schema=str(path),
                         output_format="avro")
    streams(broker)
    buffer = io.BytesIO()
    buffer.write(b"\xc3\x01" + schema_fingerprint(schema))
    schemaless_writer(buffer, parse_schema(schema), {"id": "a", "image": b"pixels"})
    broker.produce(IN, 0, b"good", buffer.getvalue())
    broker.produce(IN, 0, b"bad", b"\xc3\x01" + b"\x00" * 8 + b"x")
    run_members(running, config, load_model("sim:ms=0"))
    found = {r.key: CODEC.decode(r.value or b"", expected="StreamResult")
             for r in outputs(broker)}
    assert found[b"good"]["status"] == "OK" and found[b"good"]["top_k"]
    assert "unknown writer fingerprint" in (found[b"bad"]["error"] or "")


def test_a_json_output_record_writes_non_finite_values_as_null() -> None:
    """A model's NaN or inf score and embedding values: strict JSON, the status ok."""
    outcome = ok_item(TaskItem(index=0, name="a", data=None), embedding=[math.nan, 0.5],
                      top_k=[{"class_id": 1, "label": "b", "score": -math.inf}])
    origin = StreamOrigin(topic=IN, partition=0, offset=7, timestamp=None)
    value = OutputWriter(make_config(), CODEC).value(
        stream_result(outcome, "m", None, "s1", origin, labelled_at=0))
    shown = strict_loads(value)
    assert (shown["status"], shown["embedding"]) == ("ok", [None, 0.5])
    assert shown["top_k"] == [{"class_id": 1, "label": "b", "score": None}]


@pytest.mark.parametrize("output_format", ["json", "avro"])
def test_an_embedding_model_answers_each_record_with_its_vector_and_version(
        broker: MemoryBroker, running: Running, output_format: str) -> None:
    name = "sim:ms=0,embedding=8"
    streams(broker)
    broker.produce(IN, 0, b"a", b"image-a")
    broker.produce(IN, 1, b"tombstone", None)
    model = load_model(name)
    run_members(running, make_config(name, output_format=output_format), model)
    if output_format == "json":
        found = {r.key: decoded(r) for r in outputs(broker)}
    else:
        found = {r.key: CODEC.decode(r.value or b"", expected="StreamResult")
                 for r in outputs(broker)}
    expected = sim_embedding(int(model.preprocess(b"image-a")[0]), 8).vector
    assert found[b"a"]["embedding"] == pytest.approx(expected, rel=1e-7)
    assert (found[b"a"]["top_k"], found[b"a"]["model_version"]) == ([], "sim")
    assert found[b"tombstone"]["model_version"] == "sim"
    assert found[b"tombstone"]["status"].upper() == "ERROR"


def test_avro_input_needs_a_schema_source() -> None:
    with pytest.raises(ConfigError, match="--input-schema"):
        new_member(make_config(input_format="avro", field="image"), load_model("sim:ms=0"),
                   codec=CODEC, clients=MemoryKafkaClients(MemoryBroker()))


def test_on_error_dlq_sends_bad_records_to_the_dead_letter_topic_only(
        broker: MemoryBroker, running: Running, lite0: LoadedModel) -> None:
    config = make_config(LITE0, on_error="dlq")
    streams(broker)
    broker.produce(IN, 2, b"good", png(photos.chelsea()))
    broker.produce(IN, 2, b"bad", b"not an image")
    run_members(running, config, lite0)
    assert [r.key for r in outputs(broker)] == [b"good"]
    letters = [CODEC.decode(v, expected="DeadLetter")
               for v in broker.values(config.topic("dlq"), read_committed=True)]
    assert len(letters) == 1
    assert (letters[0]["origin_topic"], letters[0]["origin_partition"],
            letters[0]["origin_offset"]) == (IN, 2, 1)
    assert letters[0]["value"] == b"not an image" and letters[0]["key"] == b"bad"


def test_start_from_latest_skips_what_was_there_before(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    config = make_config(start_from="latest")
    streams(broker)
    broker.produce(IN, 0, b"old", b"before the stream")
    member = new_member(config, load_model("sim:ms=0"), codec=CODEC, clients=clients)
    running.workers(member)

    def reading_from_the_end() -> bool:
        """the member holds every input partition, each read from its end"""
        held = getattr(member, "ownership", None)
        return held is not None and sorted(
            (tp.partition, offset) for tp, offset in held.offsets.items()) == [
            (0, 1), (1, 0), (2, 0)]
    running.until(reading_from_the_end)
    assert outputs(broker) == []


def test_open_stream_from_python_applies_the_settings_given(
        broker: MemoryBroker, clients: MemoryKafkaClients, running: Running) -> None:
    from inferstream.stream import open_stream

    config = make_config()
    streams(broker)
    broker.produce(IN, 1, b"k", b"bytes")
    base = dataclasses.replace(config, stream=StreamConfig())
    member = open_stream(base, "sim:ms=0", clients=clients, input_topic=IN, output_topic=OUT)
    running.workers(member)
    running.until(all_read(broker, [member]))
    assert [(r.key, decoded(r)["status"]) for r in outputs(broker)] == [(b"k", "ok")]
    with pytest.raises(ConfigError, match="--input-topic"):
        open_stream(base, "sim:ms=0", output_topic=OUT)


@pytest.mark.parametrize(("settings", "message"), [
    ({"input_topc": IN}, "stream.input_topc is not an inferstream setting (did you mean "
                         "stream.input_topic?)"),
    ({"idle_exit_s": 5}, "stream.idle_exit_s is not an inferstream setting; "
                         "worker.idle_exit_s is: load_config(flags={'worker': "
                         "{'idle_exit_s': ...}})"),
    ({"top_k": "many"}, "stream.top_k must be an integer, got 'many'"),
])
def test_open_stream_refuses_a_setting_it_has_not_in_load_configs_words(
        settings: dict[str, object], message: str) -> None:
    """dataclasses.replace raised TypeError: StreamConfig.__init__() got an unexpected
    keyword argument, for a misspelt name and for the worker's idle_exit_s alike."""
    from inferstream.stream import open_stream

    base = dataclasses.replace(make_config(), stream=StreamConfig())
    with pytest.raises(ConfigError) as raised:
        open_stream(base, "sim:ms=0", **{"input_topic": IN, "output_topic": OUT, **settings})
    assert str(raised.value) == message
