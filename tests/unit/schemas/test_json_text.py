"""Strict JSON text: NaN and +-inf become null wherever they sit, everything else is written
as `json` writes it, with the encoder's own options."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from inferstream.client.admin import print_json
from inferstream.schemas.json_text import encode, strict_encoder
from tests.unit.support.records import strict_loads


def test_non_finite_floats_are_null_at_any_depth() -> None:
    value = {"score": math.nan, "top_k": [{"score": math.inf}, {"score": 0.5}],
             "embedding": (-math.inf, 1.25), "label": "café", "count": 3, "ok": True}
    text = encode(strict_encoder(ensure_ascii=False), value)
    assert strict_loads(text) == {"score": None, "top_k": [{"score": None}, {"score": 0.5}],
                                  "embedding": [None, 1.25], "label": "café", "count": 3,
                                  "ok": True}


@pytest.mark.parametrize("options", [{}, {"ensure_ascii": False},
                                     {"separators": (",", ":")},
                                     {"indent": 2, "sort_keys": True}])
def test_a_finite_value_is_written_as_json_writes_it(options: dict[str, Any]) -> None:
    value = {"b": [0.1, 1e300, -0.0, 2], "a": {"label": "Egyptian cat é", "none": None}}
    assert encode(strict_encoder(**options), value) == json.dumps(value, **options)


def test_print_json_prints_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` of `jobs status`, `top` and `config show`."""
    print_json({"items_per_s": math.nan, "share": 0.25})
    assert strict_loads(capsys.readouterr().out) == {"items_per_s": None, "share": 0.25}
