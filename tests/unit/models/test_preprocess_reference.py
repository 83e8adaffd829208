"""An image item's tensor is what torchvision's transforms make of PIL's image for the same
card (`Image.open(f).convert("RGB")`, Resize, CenterCrop, ToTensor, Normalize), on the decode
threads' path exactly and on the device-decode path (on the CPU) within PIL's rounding."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image
from skimage import data as photos
from torchvision import transforms

from inferstream.models.device_decode import DeviceDecoder, is_encoded
from inferstream.models.preprocess import ImagePreprocessor, Preprocessing

LITE = {"mean": (127 / 255,) * 3, "std": (128 / 255,) * 3}
CARDS = {
    "crop bicubic": Preprocessing(resize_size=64, crop_size=56,  # type: ignore[arg-type]
                                  interpolation=Image.Resampling.BICUBIC, **LITE),
    "crop bilinear": Preprocessing(resize_size=64, crop_size=56),
    "rectangle": Preprocessing(resize_size=80, size=(50, 70),  # type: ignore[arg-type]
                               interpolation=Image.Resampling.BICUBIC, **LITE),
    "no crop": Preprocessing(size=(56, 48), crop=False),
}


def encode(img: Image.Image, fmt: str = "JPEG", **options: object) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **options)
    return out.getvalue()


def reference(spec: Preprocessing, data: bytes) -> torch.Tensor:
    """The card's torchvision pipeline, as its model was trained."""
    mode = transforms.InterpolationMode(spec.interpolation.name.lower())
    steps = ([transforms.Resize(spec.resize_size, mode), transforms.CenterCrop(spec.output_size)]
             if spec.crop else [transforms.Resize(spec.output_size, mode)])
    pipeline = transforms.Compose(
        [*steps, transforms.ToTensor(), transforms.Normalize(spec.mean, spec.std)])
    with Image.open(io.BytesIO(data)) as img:
        out = pipeline(img.convert("RGB"))
    assert isinstance(out, torch.Tensor)
    return out


def levels(spec: Preprocessing, diff: torch.Tensor, *, mean: bool = False) -> float:
    """The largest (or the mean) difference of normalised tensors, in 8-bit levels."""
    scaled = diff.abs() * torch.tensor(spec.std).view(3, 1, 1) * 255
    return float(scaled.mean() if mean else scaled.max())


# A photo enlarged (its crop resampled alone comes out up to 20 levels off), one reduced more
# than 2x (a JPEG PIL would decode at a reduced scale, reduced by whole factors first), one
# tall, one wide.
SIZES = {"enlarged": (51, 37), "reduced 5x": (300, 230), "tall": (90, 170), "wide": (211, 66)}


def photo(size: tuple[int, int]) -> Image.Image:
    return Image.fromarray(photos.chelsea()).resize(size, Image.Resampling.BICUBIC)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("card", CARDS.values(), ids=CARDS.keys())
def test_the_cpu_path_makes_torchvisions_tensor(card: Preprocessing,
                                                size: tuple[int, int]) -> None:
    data = encode(photo(size), quality=92)
    ours = ImagePreprocessor(card)(data)
    want = reference(card, data)
    assert ours.shape == want.shape
    assert levels(card, ours - want) < 1e-3


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("card", CARDS.values(), ids=CARDS.keys())
def test_the_device_path_makes_torchvisions_tensor_within_pils_rounding(
        card: Preprocessing, size: tuple[int, int]) -> None:
    cpu = ImagePreprocessor(card)
    decoder = DeviceDecoder(card, torch.device("cpu"), cpu, cpu.max_pixels)
    data = encode(photo(size), quality=92)
    item = decoder.encode_item(data)
    assert is_encoded(item)
    (ours,) = decoder.ready([item])
    assert isinstance(ours, torch.Tensor)
    want = reference(card, data)
    assert ours.shape == want.shape
    # PIL computes in fixed point: a level or two apart on some pixels, none on most
    assert levels(card, ours - want) <= 2.001
    assert levels(card, ours - want, mean=True) < 0.25
