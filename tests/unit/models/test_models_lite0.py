"""EfficientNet-Lite0 with its real ImageNet weights labels real photos correctly."""

from __future__ import annotations

import pytest
import torch
from skimage import data as photos

from inferstream.models import LoadedModel
from inferstream.models.collate import collate
from inferstream.models.efficientnet_lite import SamePadConv2d
from tests.unit.support.photos import CAT_CLASSES, encode


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_real_labels(lite0: LoadedModel, fmt: str) -> None:
    images = [photos.chelsea(), photos.coffee(), photos.rocket(), photos.camera()]
    batch = collate([lite0.preprocess(encode(image, fmt)) for image in images])
    cat, coffee, rocket, camera = (p[0] for p in lite0.predict(batch, top_k=5))
    assert cat[0] in CAT_CLASSES
    assert coffee[:2] == (967, "espresso")
    assert rocket[0] in {657, 744}  # missile, projectile
    assert camera[:2] == (872, "tripod")  # a greyscale photo


def test_predictions_are_sorted_probabilities(lite0: LoadedModel) -> None:
    (prediction,) = lite0.predict(collate([lite0.preprocess(encode(photos.coffee(), "PNG"))]), 5)
    scores = [score for _, _, score in prediction]
    assert scores == sorted(scores, reverse=True)
    assert 0 < sum(scores) <= 1.0 + 1e-6


def test_same_padding_matches_tensorflow() -> None:
    # TF pads a stride-2 3x3 conv on an even input by 0 before and 1 after.
    conv = SamePadConv2d(1, 1, 3, stride=2)
    assert conv(torch.zeros(1, 1, 224, 224)).shape == (1, 1, 112, 112)
    assert conv._same_pad(224, 0) == 1
    assert conv._same_pad(225, 0) == 2
