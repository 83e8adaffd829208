"""Submit an inferstream job with plain confluent-kafka and fastavro, and wait for it.

    inferstream schemas export schemas/
    python submit_with_confluent_kafka.py --bootstrap-servers localhost:9092 \
        --schemas schemas/ --model sim:ms=1 /data/photos/cat.jpg /data/photos/dog.jpg

No inferstream code: the Job schema comes from the exported .avsc files, the record is
written in Avro single-object encoding (C3 01, the schema's 8-byte fingerprint, the body),
keyed by its job id on the partition murmur2 of the key picks, and the job's JobEvents are
read back until a final one. Exit 0 when the job COMPLETED, 1 when it ended otherwise,
2 on a timeout.
"""

import argparse
import getpass
import io
import json
import os
import secrets
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

MAGIC = b"\xc3\x01"
FINAL = ("COMPLETED", "REJECTED", "FAILED", "CANCELLED")


def load_schemas(folder):
    """Every exported schema, parsed: {name: (schema, fingerprint)} and {fingerprint: name}."""
    by_name, by_fingerprint = {}, {}
    for path in sorted(Path(folder).glob("*.avsc")):
        schema = parse_schema(json.loads(path.read_text(encoding="utf-8")))
        # CRC-64-AVRO of the Parsing Canonical Form; fastavro gives the hex of its
        # little-endian bytes, the order single-object encoding writes them in.
        canonical = to_parsing_canonical_form(schema)
        fp = bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
        by_name[path.stem] = (schema, fp)
        by_fingerprint[fp] = path.stem
    return by_name, by_fingerprint


def encode(schema, fp, record):
    out = io.BytesIO()
    out.write(MAGIC + fp)
    schemaless_writer(out, schema, record)
    return out.getvalue()


def decode(schemas, by_fingerprint, data):
    """(schema name, record) of a single-object encoded value, or (None, None)."""
    name = by_fingerprint.get(data[2:10]) if data and data[:2] == MAGIC else None
    if name is None:
        return None, None
    return name, schemaless_reader(io.BytesIO(data[10:]), schemas[name][0])


def new_job_id():
    """YYYYmmdd-HHMMSS-<8 hex>, as inferstream's client makes them (they sort by time)."""
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"


def events_from_now(servers, topic):
    """A consumer of every partition of `topic` from its current end, read committed."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "example-unused",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = [TopicPartition(topic, p, consumer.get_watermark_offsets(
        TopicPartition(topic, p), timeout=10)[1]) for p in partitions]
    consumer.assign(ends)
    return consumer


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="paths the controller and workers can read")
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--topic-prefix", default="inferstream.")
    parser.add_argument("--schemas", required=True, help="folder of `inferstream schemas export`")
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--pool", default="default")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds")
    return parser.parse_args()


def submit(args, schemas, job_id):
    """Produce the Job record, keyed by its id, as inferstream's client does."""
    job = {
        "job_id": job_id, "model": args.model, "pool": args.pool, "top_k": 5,
        "chunk_size": 0,  # 0: the controller sizes the tasks
        "inputs": [os.path.abspath(p) for p in args.inputs], "inline_items": [],
        "submitted_at": int(time.time() * 1000), "submitter": getpass.getuser(),
        "output_path": None,
    }
    producer = Producer({"bootstrap.servers": args.bootstrap_servers,
                         "enable.idempotence": True, "acks": "all",
                         "partitioner": "murmur2_random"})  # Java's partitioner, as inferstream
    producer.produce(args.topic_prefix + "jobs", encode(*schemas["Job"], job),
                     key=job_id.encode())
    if producer.flush(30):
        sys.exit(f"job {job_id} not delivered within 30 s")
    print(f"submitted {job_id}", flush=True)


def follow(events, schemas, by_fingerprint, job_id, timeout_s):
    """Print the job's events until a final one: its exit code, or 2 after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = events.poll(0.5)
        if message is None or message.error() or message.value() is None:
            continue
        name, event = decode(schemas, by_fingerprint, message.value())
        if name != "JobEvent" or event["job_id"] != job_id:
            continue
        print(f"{event['type']}: {event['done_items']}/{event['total_items']} items, "
              f"{event['ok_items']} ok, {event['error_items']} errors", flush=True)
        if event["type"] in FINAL:
            if event["reason"]:
                print(f"reason: {event['reason']}")
            return 0 if event["type"] == "COMPLETED" else 1
    print(f"job {job_id} not finished after {timeout_s:g} s", file=sys.stderr)
    return 2


def main():
    args = parse_args()
    schemas, by_fingerprint = load_schemas(args.schemas)
    job_id = new_job_id()
    # The job's events go to partition murmur2(job id) % N of job-events; this reads them
    # all from their current end, taken before the job exists, so no event is missed.
    events = events_from_now(args.bootstrap_servers, args.topic_prefix + "job-events")
    try:
        submit(args, schemas, job_id)
        return follow(events, schemas, by_fingerprint, job_id, args.timeout)
    finally:
        events.close()


if __name__ == "__main__":
    sys.exit(main())
