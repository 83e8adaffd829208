"""The items of the ImageNet-sized benchmarks: ImageNet-like paths in an @LIST file, and a
check of a job's JSON-lines output against them (every item exactly once, all ok), read in
bounded memory. Used by `imagenet_job.py` and `kafka_ceiling.py`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

IMAGENET_TRAIN = 1_281_167
_NAME_INDEX = re.compile(r"_(\d+)\.JPEG$")


def item_name(index: int) -> str:
    """Item `index`'s path, shaped like ImageNet's (sim models never open it)."""
    synset = f"n{index % 1000:08d}"
    return f"/data/imagenet/train/{synset}/{synset}_{index:07d}.JPEG"


def write_imagenet_listing(path: Path, items: int) -> Path:
    """An @LIST file of `items` ImageNet-like paths, written in blocks of lines."""
    with path.open("w") as handle:
        for start in range(0, items, 100_000):
            handle.write("".join(f"{item_name(i)}\n"
                                 for i in range(start, min(start + 100_000, items))))
    return path


@dataclass
class OutputCheck:
    """What an output file of a job of `items` items held: lines, ok and error items, items
    missing, items seen more than once and lines naming no item of the job."""

    items: int
    lines: int = 0
    ok: int = 0
    errors: int = 0
    missing: int = 0
    repeated: int = 0
    foreign: int = 0

    @property
    def passed(self) -> bool:
        return self.ok == self.lines == self.items and not (self.missing or self.repeated
                                                            or self.foreign)


def check_output(path: Path, items: int) -> OutputCheck:
    """Read a JSON-lines output of `items` items named by `item_name`, in bounded memory."""
    seen = bytearray(items)
    check = OutputCheck(items)
    with path.open("rb") as handle:
        for line in handle:
            check.lines += 1
            record = json.loads(line)
            match = _NAME_INDEX.search(record["item"])
            index = int(match[1]) if match else -1
            if not 0 <= index < items or record["item"] != item_name(index):
                check.foreign += 1
                continue
            check.repeated += seen[index] > 0
            seen[index] = 1
            if record["status"] == "ok":
                check.ok += 1
            else:
                check.errors += 1
    check.missing = items - sum(seen)
    return check
