"""A TaskResult's items in Avro binary, written here rather than by fastavro: the worker's
largest cost per item where its model is fast (BENCHMARKS.md, "The controller reads no item,
and the worker writes its items").

fastavro walks the schema for every value, 7.7 us an item of five predictions; the same bytes
written here took about 2.9 (ops/bench/result_codec.py), and about two thirds of that since
the whole array is one list of parts and one join: each (class id, label) pair's bytes, and
the numbers below 4,096, are kept once made. Only the common shapes are
written here: an item whose `embedding` is null and whose `tensors` are an empty list, with
values of the schema's types. Any other item (an embedding or tensor model's, or a value of
another type) goes to fastavro, which writes it, or says why it does not fit, as
`Codec.encode` would. The bytes are the same either way (tests/unit/schemas/
test_item_writer.py compares them on random items), and `ItemWriter` refuses to start where
the schema's ItemResult is not the one this code writes.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from fastavro import parse_schema, schemaless_writer

from inferstream.schemas.errors import SchemaError

#: ItemResult's fields and Prediction's, in the order this module writes them.
ITEM_FIELDS = ("index", "name", "status", "top_k", "embedding", "tensors", "error")
PREDICTION_FIELDS = ("class_id", "label", "score")
#: ItemStatus's symbols: an enum is written as its symbol's index.
STATUS_BYTES = {"OK": b"\x00", "ERROR": b"\x02"}
#: The (class id, label) pairs whose bytes are kept; the store starts again past this.
MOST_PAIRS = 65_536

_INT_LIMIT = 2**31
_LONG_LIMIT = 2**63
_FLOAT = struct.Struct("<f").pack
#: An empty array, and a union's null branch (index 0).
_EMPTY = _NULL = b"\x00"
#: A union's second branch (index 1: the string of a nullable string).
_SECOND = b"\x02"
#: What follows an item's predictions: their array's end, a null embedding, no tensors.
_AFTER_TOP_K = _EMPTY + _NULL + _EMPTY


def _varint(n: int) -> bytes:
    """An Avro int or long: zigzag, then 7 bits a byte, lowest first."""
    n = (n << 1) ^ (n >> 63)
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: The numbers 0 to _SMALLS - 1 as Avro longs, made once: a task's item indices, a name's
#: length, a top-k's count.
_SMALLS = 4096
_SMALL = tuple(_varint(n) for n in range(_SMALLS))


def _string(text: str) -> bytes:
    data = text.encode()
    return _varint(len(data)) + data


class ItemWriter:
    """Writes the `items` array of a TaskResult (`items_array`); one a process
    (`records.summary`), shared by its threads: a race on the pair store writes the same
    bytes twice at worst."""

    def __init__(self, task_result_schema: Mapping[str, Any], most_pairs: int = MOST_PAIRS
                 ) -> None:
        item = next(f["type"]["items"] for f in task_result_schema["fields"]
                    if f["name"] == "items")
        _check(item)
        self._fallback = parse_schema(item)
        self._pairs: dict[tuple[int, str], bytes] = {}
        self._most_pairs = most_pairs

    def items_array(self, items: Sequence[Mapping[str, Any]]) -> bytes:
        """`items` as the Avro array of ItemResult; SchemaError for an item that does not
        fit the schema: one block of every item, then the array's end. One pass, one list
        of parts for the whole array: a list and a join an item, and a call for each small
        number, were a third of its time."""
        if not items:
            return _EMPTY
        parts, pairs, small = [_varint(len(items))], self._pairs, _SMALL
        append = parts.append
        for item in items:
            mark = len(parts)
            try:  # an item of the common shape, in the order of ITEM_FIELDS
                index, top_k, error, tensors = (item["index"], item["top_k"], item["error"],
                                                item["tensors"])
                if (item["embedding"] is not None or type(tensors) is not list or tensors
                        or type(index) is not int or not -_LONG_LIMIT <= index < _LONG_LIMIT
                        or type(top_k) is not list or len(item) != len(ITEM_FIELDS)):
                    raise ValueError("not the common shape")
                name = item["name"].encode()
                append(small[index] if 0 <= index < _SMALLS else _varint(index))
                append(small[len(name)] if len(name) < _SMALLS else _varint(len(name)))
                append(name)
                append(STATUS_BYTES[item["status"]])
                if top_k:
                    append(small[len(top_k)] if len(top_k) < _SMALLS else _varint(len(top_k)))
                    for prediction in top_k:
                        class_id, label = prediction["class_id"], prediction["label"]
                        if type(class_id) is not int or len(prediction) != len(PREDICTION_FIELDS):
                            raise ValueError("not a Prediction of the common shape")
                        append(pairs.get((class_id, label)) or self._pair(class_id, label))
                        append(_FLOAT(prediction["score"]))
                append(_AFTER_TOP_K)
                append(_NULL if error is None else _SECOND + _string(error))
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError, struct.error):
                del parts[mark:]  # fastavro writes it, or says what does not fit
                append(self._fastavro(item))
        append(_EMPTY)
        return b"".join(parts)

    def _pair(self, class_id: int, label: str) -> bytes:
        """The bytes of a Prediction's class id and label, kept for the next time."""
        if not -_INT_LIMIT <= class_id < _INT_LIMIT:
            raise ValueError("class_id is not an Avro int")
        if len(self._pairs) >= self._most_pairs:
            self._pairs.clear()
        pair = self._pairs[(class_id, label)] = _varint(class_id) + _string(label)
        return pair

    def _fastavro(self, item: Mapping[str, Any]) -> bytes:
        buffer = io.BytesIO()
        try:
            schemaless_writer(buffer, self._fallback, item, strict_allow_default=True)
        except Exception as exc:  # fastavro raises ValueError, TypeError, KeyError, ...
            raise SchemaError(f"an item does not fit schema ItemResult: {exc}") from exc
        return buffer.getvalue()


def _check(item: Mapping[str, Any]) -> None:
    """SchemaError unless `item` is the ItemResult schema this module writes."""
    fields = {f["name"]: f["type"] for f in item["fields"]}
    top_k = fields.get("top_k", {})
    prediction = top_k.get("items", {}) if isinstance(top_k, dict) else {}
    written = (
        tuple(fields) == ITEM_FIELDS
        and fields["index"] == "long" and fields["name"] == "string"
        and fields["status"].get("symbols") == list(STATUS_BYTES)
        and fields["embedding"][0] == "null" and fields["error"] == ["null", "string"]
        and tuple(f["name"] for f in prediction.get("fields", ())) == PREDICTION_FIELDS
        and [f["type"] for f in prediction["fields"]] == ["int", "string", "float"]
    )
    if not written:
        raise SchemaError("the ItemResult schema is not the one item_writer.py writes: "
                          "change the module with the schema")
