"""An image item's tensor is what torchvision's transforms make of PIL's image for the same
card (`Image.open(f).convert("RGB")`, Resize, CenterCrop, ToTensor, Normalize), on the decode
threads' path exactly and on the device-decode path (on the CPU) within PIL's rounding; a
card's image is made RGB as `convert("RGB")` makes it and turned by its EXIF orientation only
where the card says so."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from skimage import data as photos
from torchvision import transforms

from inferstream.models.device_decode import DeviceDecoder, is_encoded
from inferstream.models.preprocess import ImagePreprocessor, Preprocessing
from inferstream.models.repository.card import InputSpec
from inferstream.models.repository.inputs import image_preprocessing

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


def card(**keys: object) -> Preprocessing:
    """A repository card's preprocessing: by default [input] size = [56, 56], resize = 64."""
    fields: dict[str, object] = {"size": (56, 56), "resize": 64, **keys}
    return image_preprocessing(InputSpec(**fields))  # type: ignore[arg-type]


def modes() -> dict[str, bytes]:
    coffee = Image.fromarray(photos.coffee()).resize((120, 80))
    rgba = np.dstack([np.asarray(coffee), np.full((80, 120), 255, np.uint8)])
    rgba[:, :50, 3] = 0  # transparent, the photo's colours under it
    palette = coffee.convert("P", palette=Image.Palette.ADAPTIVE)
    palette.info["transparency"] = 0
    return {
        "grey": encode(coffee.convert("L")),
        "RGBA": encode(Image.fromarray(rgba), "PNG"),
        "LA": encode(Image.fromarray(rgba[:, :, [0, 3]], "LA"), "PNG"),
        "palette": encode(coffee.convert("P", palette=Image.Palette.ADAPTIVE), "PNG"),
        "palette with transparency": encode(palette, "PNG"),
        "CMYK": encode(coffee.convert("CMYK")),
    }


@pytest.mark.parametrize("name", modes().keys())
def test_a_cards_image_is_made_rgb_as_convert_rgb_makes_it(name: str) -> None:
    data = modes()[name]
    spec = card()
    assert levels(spec, ImagePreprocessor(spec)(data) - reference(spec, data)) < 1e-3


def test_a_built_in_models_transparent_pixels_stay_white() -> None:
    spec = Preprocessing(resize_size=64, crop_size=56, size=(56, 56), crop=False)
    tensor = ImagePreprocessor(spec)(modes()["RGBA"])
    white = (1 - torch.tensor(spec.mean)) / torch.tensor(spec.std)
    assert torch.allclose(tensor[:, :, 0], white.view(3, 1).expand(3, 56), atol=1e-5)


def rotated_photo() -> bytes:
    """A phone photo held upright: stored 120x80 (wide), EXIF orientation 6 (turn 90 degrees)."""
    img = Image.fromarray(photos.chelsea()).resize((120, 80))
    exif = img.getexif()
    exif[0x0112] = 6
    return encode(img, quality=92, exif=exif)


def test_a_cards_photo_is_taken_as_stored_unless_the_card_says_to_turn_it() -> None:
    data = rotated_photo()
    stored = card(resize=None, size=(40, 60))  # the input is as wide as the file's pixels
    assert levels(stored, ImagePreprocessor(stored)(data) - reference(stored, data)) < 1e-3
    turned = card(resize=None, size=(40, 60), exif_orientation=True)
    with Image.open(io.BytesIO(data)) as img:
        upright = encode(img.transpose(Image.Transpose.ROTATE_270), "PNG")
    assert levels(turned, ImagePreprocessor(turned)(data) - reference(turned, upright)) < 1e-3


def test_only_a_photo_to_be_turned_leaves_the_device_path() -> None:
    data = rotated_photo()
    for turn in (False, True):
        spec = card(exif_orientation=turn)
        cpu = ImagePreprocessor(spec)
        decoder = DeviceDecoder(spec, torch.device("cpu"), cpu, cpu.max_pixels)
        item = decoder.encode_item(data)
        assert is_encoded(item) is not turn
        (ours,) = decoder.ready([item])
        assert isinstance(ours, torch.Tensor)
        assert levels(spec, ours - cpu(data)) <= 2.001
