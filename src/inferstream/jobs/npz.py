"""`results --format npz`: a job's outputs as numpy arrays, one row per item in item order.

`numpy.load(path)` gives these arrays by name:

* `index` (int64: the item's position in the job's input), `item` (str: its path, URI or
  name), `ok` (bool), `model` and `model_version` (str: what answered it);
* `embedding` (float32, rows x D) from an embedding model;
* `class_id` (int32, rows x k) and `score` (float32, rows x k) from a classifier;
* `tensors/NAME` (the tensor's dtype, rows x its shape) for each output of a tensor model.

A failed item's row is `ok` False with NaN (floats), 0 (other numbers) or -1 (`class_id`) in
the output arrays; the reason is in the JSON lines output. The arrays take their names, dtypes
and shapes from the ok items, which must agree: an ok item whose outputs have other names (a
dict output without one of its keys), or another dtype or shape, than the ok items' before it
is an OutputFormatError, never a row of NaN marked ok. A job with no ok item has no output
array: a failed item's result says nothing of the outputs' shapes.

Memory stays flat whatever the job's size: each array's rows go to a temporary file beside
the output as they come, and the `.npy` members of the (uncompressed) zip are copied from
those files at the end. numpy is imported here only, when this format is asked for.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from inferstream.jobs.errors import OutputFormatError
from inferstream.jobs.partial import check_writable, partial_path, spool_prefix
from inferstream.schemas.records import ItemResult, ItemStatus, NamedTensor, TaskResult

_COPY_BYTES = 1 << 18
_TEXT_CHUNK = 1024
_LENGTH = struct.Struct("<I")
#: One output of one item: its dtype, its shape and its bytes.
Output = tuple[np.dtype[Any], tuple[int, ...], bytes]


@dataclass(frozen=True)
class NpzWritten:
    """What `write_npz` wrote: rows (items), and how many of them were ok."""

    rows: int
    ok: int

    @property
    def errors(self) -> int:
        return self.rows - self.ok


class _ArrayColumn:
    """One numeric array's rows, spooled to a file: `put` row `r` fills the rows before it
    that had no value (failed items, or items before the first that had this output)."""

    def __init__(self, folder: str, dtype: np.dtype[Any], shape: tuple[int, ...],
                 fill: float | None = None) -> None:
        self.dtype, self.shape = dtype, shape
        if fill is None:
            fill = np.nan if dtype.kind in "fc" else 0
        self.fill = np.full(shape, fill, dtype).tobytes()
        self.rows = 0
        self.file: IO[bytes] = tempfile.TemporaryFile(dir=folder)

    def put(self, row: int, data: bytes) -> None:
        self.pad(row)
        self.file.write(data)
        self.rows += 1

    def pad(self, rows: int) -> None:
        """Fill rows up to `rows`."""
        while self.rows < rows:
            self.file.write(self.fill)
            self.rows += 1

    def write_member(self, member: IO[bytes]) -> None:
        _header(member, self.dtype, (self.rows, *self.shape))
        self.file.seek(0)
        shutil.copyfileobj(self.file, member, _COPY_BYTES)


class _TextColumn:
    """One string per row, spooled as length-prefixed UTF-8; a fixed-width numpy str array
    (as wide as the longest) once written."""

    def __init__(self, folder: str) -> None:
        self.rows = self.width = 0
        self.file: IO[bytes] = tempfile.TemporaryFile(dir=folder)

    def put(self, text: str) -> None:
        data = text.encode("utf-8")
        self.file.write(_LENGTH.pack(len(data)) + data)
        self.rows += 1
        self.width = max(self.width, len(text))

    def write_member(self, member: IO[bytes]) -> None:
        dtype = np.dtype(f"<U{max(1, self.width)}")
        _header(member, dtype, (self.rows,))
        self.file.seek(0)
        for chunk in self._chunks():
            member.write(np.array(chunk, dtype).data)

    def _chunks(self) -> Iterator[list[str]]:
        left = self.rows
        while left:
            chunk = []
            for _ in range(min(left, _TEXT_CHUNK)):
                (length,) = _LENGTH.unpack(self.file.read(_LENGTH.size))
                chunk.append(self.file.read(length).decode("utf-8"))
            left -= len(chunk)
            yield chunk


def _header(member: IO[bytes], dtype: np.dtype[Any], shape: tuple[int, ...]) -> None:
    np.lib.format.write_array_header_1_0(member, {
        "descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})


class NpzColumns:
    """The arrays of a job's output, filled row by row from its TaskResults."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.rows = self.ok = 0
        self.index = _ArrayColumn(folder, np.dtype("<i8"), ())
        self.okay = _ArrayColumn(folder, np.dtype("?"), ())
        self.texts = {name: _TextColumn(folder) for name in ("item", "model", "model_version")}
        self.outputs: dict[str, _ArrayColumn] = {}
        self.names: frozenset[str] | None = None  # the outputs of the first ok item

    def add(self, result: TaskResult) -> None:
        """The rows of `result`'s items, in item order."""
        for item in sorted(result["items"], key=lambda i: i["index"]):
            row, ok = self.rows, item["status"] == ItemStatus.OK
            self.index.put(row, np.int64(item["index"]).tobytes())
            self.okay.put(row, np.bool_(ok).tobytes())
            for name, text in (("item", item["name"]), ("model", result["model"]),
                               ("model_version", result["model_version"] or "")):
                self.texts[name].put(text)
            if ok:
                self._add_output(row, item)
                self.ok += 1
            self.rows += 1

    def _add_output(self, row: int, item: ItemResult) -> None:
        outputs = _outputs(item)
        if self.names is None:
            self.names = frozenset(outputs)
        elif outputs.keys() != self.names:
            raise OutputFormatError(
                f"item {item['name']!r}: its outputs are {_listed(outputs)}, the items "
                f"before it {_listed(self.names)}: every ok item of an npz file has the same "
                "outputs (use --format jsonl)")
        for name, (dtype, shape, data) in outputs.items():
            self._put(row, item, name, dtype, shape, data)

    def _put(self, row: int, item: ItemResult, name: str, dtype: np.dtype[Any],
             shape: tuple[int, ...], data: bytes) -> None:
        column = self.outputs.get(name)
        if column is None:
            fill = -1 if name == "class_id" else None
            column = self.outputs[name] = _ArrayColumn(self.folder, dtype, shape, fill)
        elif (column.dtype, column.shape) != (dtype, shape):
            what = "dtype" if column.dtype != dtype else "shape"
            raise OutputFormatError(
                f"item {item['name']!r}: {name} is {dtype.name} {list(shape)}, the items "
                f"before it {column.dtype.name} {list(column.shape)}: an npz array has one "
                f"{what} (use --format jsonl)")
        column.put(row, data)

    def _members(self) -> dict[str, _ArrayColumn | _TextColumn]:
        return {"index": self.index, "item": self.texts["item"], "ok": self.okay,
                "model": self.texts["model"], "model_version": self.texts["model_version"],
                **self.outputs}

    def write(self, archive: zipfile.ZipFile) -> None:
        """Every array as a `.npy` member of `archive`."""
        for name, column in self._members().items():
            if isinstance(column, _ArrayColumn):
                column.pad(self.rows)
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                column.write_member(member)

    def close(self) -> None:
        for column in self._members().values():
            column.file.close()


def _outputs(item: ItemResult) -> dict[str, Output]:
    """The values of an ok item's output arrays, by array name."""
    outputs: dict[str, Output] = {}
    if item["embedding"] is not None:
        vector = np.asarray(item["embedding"], "<f4")
        outputs["embedding"] = vector.dtype, vector.shape, vector.tobytes()
    for tensor in item["tensors"]:
        dtype, shape = _tensor_type(tensor, item)
        outputs[f"tensors/{tensor['name']}"] = dtype, shape, tensor["data"]
    if item["top_k"]:
        ids = np.array([p["class_id"] for p in item["top_k"]], "<i4")
        scores = np.array([p["score"] for p in item["top_k"]], "<f4")
        outputs["class_id"] = ids.dtype, ids.shape, ids.tobytes()
        outputs["score"] = scores.dtype, scores.shape, scores.tobytes()
    return outputs


def _listed(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def _tensor_type(tensor: NamedTensor, item: ItemResult) -> tuple[np.dtype[Any],
                                                                  tuple[int, ...]]:
    """The little-endian dtype and the shape of `tensor`; OutputFormatError where its data
    does not hold that many values."""
    try:
        dtype = np.dtype(tensor["dtype"]).newbyteorder("<")
    except TypeError as exc:
        raise OutputFormatError(f"item {item['name']!r}: tensor {tensor['name']!r} has "
                                f"dtype {tensor['dtype']!r}, not a numpy dtype") from exc
    shape = tuple(tensor["shape"])
    if len(tensor["data"]) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise OutputFormatError(f"item {item['name']!r}: tensor {tensor['name']!r} holds "
                                f"{len(tensor['data'])} bytes, not {dtype.name} {list(shape)}")
    return dtype, shape


def write_npz(results: Iterable[TaskResult], path: str) -> NpzWritten:
    """Write the outputs of `results` (a job's, in task order) to `path` atomically (a
    temporary file renamed into place); OutputPathError, before `results` is read, where
    no file can be written at `path`."""
    check_writable(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp = partial_path(path)
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=spool_prefix(folder)) as spool:
            columns = NpzColumns(spool)
            try:
                for result in results:
                    columns.add(result)
                with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
                    columns.write(archive)
            finally:
                columns.close()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return NpzWritten(columns.rows, columns.ok)
