"""`make demo`: classify scikit-image's photos end to end on a local Apache Kafka.

Starts a one-broker cluster (unless one already runs in var/demo-kafka), creates the topics,
starts a controller and two efficientnet_lite0 workers, submits the photos, prints a table of
image -> top-1 label and score, and stops everything it started, also on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
VAR = REPO / "var" / "demo"
KAFKA_DIR = REPO / "var" / "demo-kafka"
CLUSTER = [sys.executable, str(REPO / "ops" / "kafka" / "cluster")]
INFERSTREAM = [sys.executable, "-m", "inferstream"]
MODEL = "efficientnet_lite0"
# Photos bundled with scikit-image (no download needed).
PHOTOS = ("chelsea", "coffee", "rocket", "camera", "astronaut", "coins", "moon", "horse",
          "hubble_deep_field", "immunohistochemistry", "brick", "grass", "gravel", "page")


def write_photos(directory: Path) -> list[Path]:
    from skimage import data

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in PHOTOS:
        try:
            pixels = np.asarray(getattr(data, name)())
        except Exception as exc:  # a photo that needs a download on this install: skip it
            print(f"demo: skipping {name}: {exc}", file=sys.stderr)
            continue
        if pixels.dtype == bool:
            pixels = pixels.astype(np.uint8) * 255
        path = directory / f"{name}.jpg"
        Image.fromarray(pixels).convert("RGB").save(path, quality=92)
        paths.append(path)
    return paths


def start_kafka() -> tuple[str, bool]:
    """Bootstrap servers, and whether this run started the cluster (and so stops it)."""
    status = subprocess.run([*CLUSTER, "status", "--dir", str(KAFKA_DIR)],
                            capture_output=True, text=True, check=False)
    already = status.returncode == 0
    started = subprocess.run([*CLUSTER, "start", "--dir", str(KAFKA_DIR), "--port", "auto"],
                             capture_output=True, text=True, check=False)
    if started.returncode != 0:
        sys.exit(f"demo: cannot start Kafka:\n{started.stderr}")
    return started.stdout.strip().splitlines()[-1], not already


def main() -> int:
    servers, own_cluster = start_kafka()
    env = {**os.environ, "INFERSTREAM_BOOTSTRAP_SERVERS": servers,
           "INFERSTREAM_TOPIC_PREFIX": "demo.", "INFERSTREAM_PARTITIONS": "4",
           "INFERSTREAM_TASK_PARTITIONS": "4", "PYTHONUNBUFFERED": "1"}
    children: list[subprocess.Popen[bytes]] = []
    try:
        print(f"demo: Kafka at {servers}", file=sys.stderr)
        subprocess.run([*INFERSTREAM, "topics", "create"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        photos = write_photos(VAR / "photos")
        # A dozen photos take less than compiling the forward pass would (docs/models.md):
        # the demo's workers run eager.
        worker = ["worker", "--model", MODEL, "--compile", "off"]
        for name, args in (("controller", ["controller"]),
                           ("worker-1", [*worker, "--worker-id", "worker-1"]),
                           ("worker-2", [*worker, "--worker-id", "worker-2"])):
            with open(VAR / f"{name}.log", "wb") as log:
                children.append(subprocess.Popen([*INFERSTREAM, *args], env=env, stdout=log,
                                                 stderr=subprocess.STDOUT))
        print(f"demo: controller and two {MODEL} workers started (logs in {VAR})",
              file=sys.stderr)
        output = VAR / "output.jsonl"
        submit = subprocess.run([*INFERSTREAM, "submit", "--model", MODEL, "--input",
                                 *map(str, photos), "--chunk-size", "2", "--wait",
                                 "--output", str(output), "--timeout", "600"], env=env,
                                check=False)
        if submit.returncode != 0:
            return submit.returncode
        print_table(output)
        return 0
    finally:
        stop(children)
        if own_cluster:
            subprocess.run([*CLUSTER, "stop", "--dir", str(KAFKA_DIR)], capture_output=True,
                           check=False)


def print_table(output: Path) -> None:
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    print(f"\n{'image':<28} {'top-1 label':<34} {'score':>6}")
    print(f"{'-' * 28} {'-' * 34} {'-' * 6}")
    for line in lines:
        name = Path(line["item"]).name
        if line["status"] == "ok":
            top = line["top_k"][0]
            print(f"{name:<28} {top['label'][:34]:<34} {top['score']:>6.3f}")
        else:
            print(f"{name:<28} error: {line['error']}")


def stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
