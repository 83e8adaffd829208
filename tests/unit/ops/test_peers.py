"""ops/bench/peer_ray_data.py and peer_quix.py without Ray, Quix or a broker: their arguments,
the top-1 agreement check and the tables (the runs need their own venvs and a broker:
`python ops/bench/peer_ray_data.py --images 1200`, `python ops/bench/peer_quix.py`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import peer_quix
import peer_ray_data
from peer_ray_data import Run


def test_settings_are_actors_by_threads() -> None:
    args = peer_ray_data.parse_args(["--settings", "1x2, 2x1", "--images", "600"])
    assert args.settings == [(1, 2), (2, 1)]
    assert args.images == 600
    assert peer_ray_data.parse_args([]).settings == [(1, 1), (1, 2), (2, 1)]


@pytest.mark.parametrize("text", ["2", "x2", "1x", "0x2", "1x0", "1 by 2", "1x2,"])
def test_a_setting_that_is_not_actors_by_threads_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="ACTORSxTHREADS"):
        peer_ray_data.parse_settings(text)


def test_agreement_counts_the_photos_with_the_same_top1_class() -> None:
    first = {"img-00000.jpg": 281, "img-00001.jpg": 504, "img-00002.jpg": 7}
    second = {"img-00000.jpg": 281, "img-00001.jpg": 505, "img-00002.jpg": 7}
    assert peer_ray_data.agreement(first, second) == (2, 3)
    assert peer_ray_data.agreement(first, first) == (3, 3)


def test_agreement_refuses_photos_labelled_by_one_side_only() -> None:
    with pytest.raises(ValueError, match=r"1 photos labelled by one side only, e\.g\. img-2"):
        peer_ray_data.agreement({"img-1": 1, "img-2": 2}, {"img-1": 1})


def test_top_class_is_the_first_prediction_and_a_bad_item_is_an_error() -> None:
    assert peer_ray_data.top_class([(281, "tabby", 0.75), (282, "tiger cat", 0.2)]) == (
        281, "tabby", 0.75)
    with pytest.raises(ValueError, match="not a classifier's output"):
        peer_ray_data.top_class("corrupt image")


def test_the_table_gives_each_sides_best_run_against_the_reference() -> None:
    top1 = {"a": 1, "b": 2}
    runs = [Run("inferstream warm", 10.0, top1), Run("Ray Data 1x2", 30.0, top1, 9.0, 35.0),
            Run("inferstream warm", 8.0, top1),
            Run("Ray Data 1x2", 28.0, {"a": 1, "b": 3}, 8.5, 40.0)]
    rows = peer_ray_data.ratio_table(runs, "inferstream warm", 1200)
    assert "| images/s | after the first output /s | inferstream warm over it |" in rows[0]
    assert [row.rsplit("|", 2)[0] for row in rows[2:]] == [
        "| inferstream warm | - | 8.0 | 150.0 | - | 1.00 | 2/2 ",
        "| Ray Data 1x2 | 8.5 | 28.0 | 42.9 | 40.0 | 3.50 | 1/2 "]


def test_quix_arguments_and_the_top1_of_an_output_record() -> None:
    args = peer_quix.parse_args(["--images", "300", "--rounds", "1"])
    assert (args.images, args.rounds, args.quix_side) == (300, 1, None)
    assert peer_quix.top1(b'{"status":"ok","top_k":[{"class_id":281,"label":"tabby"}]}') == 281


def test_latency_rows_are_the_round_where_quix_was_fastest() -> None:
    slow = {0.25: (5.0, 0.2, 0.4), 0.5: (10.0, 0.3, 0.5), 0.75: (15.0, 0.4, 0.9)}
    fast = {0.25: (6.0, 0.1, 0.2), 0.5: (12.0, 0.1, 0.3), 0.75: (18.0, 0.2, 0.4)}
    rounds = [[(Run("Quix Streams", 50.0, {}), fast), (Run("inferstream stream", 10.0, {}), fast)],
              [(Run("Quix Streams", 40.0, {}), slow), (Run("inferstream stream", 20.0, {}), fast)]]
    rows = peer_quix.latency_rows(rounds)
    assert rows[0] == ("| input rate | records/s | Quix Streams p50 / p95 ms | "
                       "inferstream stream p50 / p95 ms |")
    assert rows[3] == "| 0.50 x Quix's throughput | 10.0 | 300 / 500 | 100 / 300 |"
