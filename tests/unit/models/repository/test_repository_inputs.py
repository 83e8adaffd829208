"""A tensor model's JSON array items converted to the card's dtype: every number keeps its
value in kind or the item fails naming the first that does not (never a wraparound nor an
overflow to inf); a `.npy` item keeps needing the card's exact dtype."""

from __future__ import annotations

import io

import numpy as np
import pytest

from inferstream.models.errors import ItemError
from inferstream.models.repository.inputs import TensorPreprocessor


def converted(dtype: str, text: str, shape: tuple[int, ...] = (4,)) -> list[object]:
    return TensorPreprocessor(shape, dtype)(text.encode()).tolist()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("dtype", "text", "expected"), [
    ("uint8", "[1, 2, 3, 255]", [1, 2, 3, 255]),
    ("int8", "[-128, 127, 0, 1]", [-128, 127, 0, 1]),
    ("int16", "[-32768, 32767, true, false]", [-32768, 32767, 1, 0]),
    ("int64", "[9223372036854775807, -9223372036854775808, 0, 1]",
     [9223372036854775807, -9223372036854775808, 0, 1]),
    ("float16", "[65504, -65504, 0.5, 1e-9]", [65504.0, -65504.0, 0.5, 0.0]),
    ("float32", "[1e38, 2, 0.1, -3]", [np.float32(1e38), 2.0, np.float32(0.1), -3.0]),
    ("bool", "[true, false, true, false]", [True, False, True, False]),
])
def test_numbers_that_fit_the_dtype_are_converted(dtype: str, text: str,
                                                  expected: list[object]) -> None:
    assert converted(dtype, text) == expected


@pytest.mark.parametrize(("dtype", "text", "reason"), [
    ("int8", "[1, 300, -200, 2]", "value 300 at [1] is outside int8's range -128 to 127"),
    ("uint8", "[0, 1, 2, -1]", "value -1 at [3] is outside uint8's range 0 to 255"),
    ("int32", "[4294967297, 0, 0, 0]",
     "value 4294967297 at [0] is outside int32's range -2147483648 to 2147483647"),
    # beyond int64: numpy would read these as uint64, float64 or Python objects
    ("int64", "[9223372036854775808, 0, 0, 0]",
     "value 9223372036854775808 at [0] is outside int64's range"),
    ("int16", "[-1, 18446744073709551615, 0, 0]", "value 18446744073709551615 at [1]"),
    ("float16", "[1e30, 0, 0, 0]", "value 1e+30 at [0] is outside float16's range "
     "-65504.0 to 65504.0"),
    ("float16", "[0, 70000, 0, 0]", "value 70000 at [1] is outside float16's range"),
    ("float32", "[0, 0, 1e300, 0]", "value 1e+300 at [2] is outside float32's range"),
    ("float64", "[0, 0, 0, 1" + "0" * 400 + "]",
     "value 100000000000... (401 digits) at [3] is outside float64's range"),
    ("int32", "[1.0, 2, 3, 4]", "a JSON array of float64 values; the model takes int32"),
    ("bool", "[1, 0, 1, 0]", "a JSON array of int64 values; the model takes bool"),
])
def test_a_number_the_dtype_cannot_hold_is_a_one_line_item_error(dtype: str, text: str,
                                                                 reason: str) -> None:
    with pytest.raises(ItemError) as caught:
        converted(dtype, text)
    assert reason in str(caught.value) and "\n" not in str(caught.value)


def test_the_first_number_that_does_not_fit_is_named_by_its_place() -> None:
    with pytest.raises(ItemError, match=r"value 400 at \[1, 0\] is outside int8's range"):
        converted("int8", "[[1, 2], [400, -300]]", shape=(2, 2))


@pytest.mark.parametrize(("dtype", "text", "reason"), [
    ("float32", "[[1, 2], [null, 4]]", "value null at [1, 0] is not a number"),
    ("float32", '[1, 2, 3, "4"]', 'value "4" at [3] is not a number'),
    ("int64", '[[1, 2], ["a", "b"]]', 'value "a" at [1, 0] is not a number'),
    ("int64", '[1, {"x": 1}, 3, 4]', 'value {"x": 1} at [1] is not a number'),
    ("float32", "[[1, 2], [3]]", "not a JSON array of one shape: its nested arrays differ in "
     "length, or an array stands beside a number"),
])
def test_a_value_that_is_no_number_is_named_by_its_place(dtype: str, text: str,
                                                         reason: str) -> None:
    """A missing value (null) or a string in a row is named, not the dtype numpy gave the
    array (`a JSON array of object values`, `<U21 values`) nor numpy's words for an array
    of no one shape."""
    with pytest.raises(ItemError) as caught:
        converted(dtype, text, shape=(2, 2) if text.startswith("[[") else (4,))
    assert caught.value.reason == reason

def test_large_integers_round_to_the_nearest_float_and_nan_stays() -> None:
    """Accepted, as documented: a float dtype holds an integer to its precision."""
    assert converted("float32", "[16777217, 0, 0, 0]") == [16777216.0, 0.0, 0.0, 0.0]
    assert converted("float64", "[9007199254740993, 0, 0, 0]")[0] == 9007199254740992.0
    got = converted("float16", "[NaN, Infinity, -Infinity, 1]")
    assert np.isnan(got[0]) and got[1:] == [np.inf, -np.inf, 1.0]


def test_a_npy_item_keeps_needing_the_exact_dtype() -> None:
    out = io.BytesIO()
    np.save(out, np.array([300, 1, 2, 3], dtype=np.int64), allow_pickle=False)
    assert TensorPreprocessor((4,), "int64")(out.getvalue()).tolist() == [300, 1, 2, 3]
    with pytest.raises(ItemError, match=r"a tensor of shape \[4\] int64; the model takes "
                       r"\[4\] int8"):
        TensorPreprocessor((4,), "int8")(out.getvalue())


@pytest.mark.parametrize("dtype", ["float32", "int16"])
def test_a_npy_of_the_other_byte_order_is_its_values(dtype: str) -> None:
    """numpy.save keeps an array's byte order: a big-endian float32 is float32 values (it
    was refused as '>f4; the model takes float32')."""
    out = io.BytesIO()
    values = np.array([1.5, -2.0, 300.0, 0.25]) if dtype == "float32" else np.arange(4)
    swapped = values.astype(np.dtype(dtype).newbyteorder(">" if np.little_endian else "<"))
    np.save(out, swapped, allow_pickle=False)
    tensor = TensorPreprocessor((4,), dtype)(out.getvalue())
    assert tensor.tolist() == values.astype(dtype).tolist()


def test_a_json_number_beyond_float64_fails_naming_it() -> None:
    """`1e400` was read as inf without a word; NaN and Infinity written as such stay."""
    with pytest.raises(ItemError, match="value 1e400 is beyond float64's range"):
        converted("float32", "[1e400, 0, 0, 0]")
    assert converted("float64", "[1e300, -1.5e-300, 0, 2]") == [1e300, -1.5e-300, 0.0, 2.0]
