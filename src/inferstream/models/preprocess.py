"""Image bytes to a normalised CHW tensor: decode, resize, center crop, normalise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from inferstream.models.decode import DEFAULT_MAX_PIXELS, decode_image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocessing:
    """How a model wants its input; mean and std are in the 0..1 range, like torchvision's."""

    resize_size: int = 256
    crop_size: int = 224
    interpolation: Image.Resampling = Image.Resampling.BILINEAR
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    #: (height, width) of the input where it is not a `crop_size` square (a repository card's)
    size: tuple[int, int] | None = None
    #: False: the whole image is resized to the input's size, its aspect ratio not kept
    crop: bool = True
    #: True: a photo is turned as its EXIF orientation says (a phone photo held upright);
    #: False: taken as stored, as torchvision's loader (`Image.open(f).convert("RGB")`) does
    exif_orientation: bool = True
    #: True: transparent pixels flattened onto white; False: the colour under them, as
    #: `convert("RGB")` keeps it (`decode.to_rgb`)
    alpha_on_white: bool = True

    @property
    def output_size(self) -> tuple[int, int]:
        """(height, width) of the preprocessed image."""
        return self.size or (self.crop_size, self.crop_size)

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) a `width` x `height` image is resized to before its centre crop,
        as torchvision's `Resize(resize_size)` computes it (the longer side truncated), or
        the output's size where there is no crop (`Resize((height, width))`)."""
        if not self.crop:
            out_height, out_width = self.output_size
            return (out_width, out_height)
        short, long = min(width, height), max(width, height)
        new_long = int(self.resize_size * long / short)
        return (self.resize_size, new_long) if width <= height else (new_long, self.resize_size)

    def crop_box(self, resized_width: int, resized_height: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) of the input in the image resized to `resized_size`:
        torchvision's `CenterCrop`, its offsets rounded as it rounds them (half to even)."""
        out_height, out_width = self.output_size
        left = round((resized_width - out_width) / 2.0)
        top = round((resized_height - out_height) / 2.0)
        return (left, top, left + out_width, top + out_height)


class ImagePreprocessor:
    """Turns image bytes into a float CHW tensor; thread-safe, most time spent without the GIL.

    The pixels of torchvision's Resize(resize_size) + CenterCrop(crop_size) + ToTensor +
    Normalize (or Resize(size) without a crop) on the image PIL decodes, made by the same PIL
    calls. Not by shortcuts, which all change pixels: resampling only the crop's region (a
    `box`: up to 20 levels of 255 apart on a photo enlarged 2x), reducing by whole factors
    first (`reducing_gap`), decoding a large JPEG at a reduced scale (`Image.draft`).
    """

    def __init__(self, spec: Preprocessing, *, max_pixels: int = DEFAULT_MAX_PIXELS):
        self.spec = spec
        self.max_pixels = max_pixels
        # Normalising in 0..255 space saves a division per pixel.
        self._mean = torch.tensor(spec.mean).mul(255.0).view(3, 1, 1)
        self._std = torch.tensor(spec.std).mul(255.0).view(3, 1, 1)

    def __call__(self, data: bytes) -> torch.Tensor:
        img = decode_image(data, max_pixels=self.max_pixels,
                           exif_orientation=self.spec.exif_orientation,
                           alpha_on_white=self.spec.alpha_on_white)
        return self.to_tensor(self.resize_crop(img))

    def resize_crop(self, img: Image.Image) -> Image.Image:
        """Resize the shorter side to resize_size and cut the central crop, as torchvision's
        Resize and CenterCrop do."""
        resized = img.resize(self.spec.resized_size(*img.size), self.spec.interpolation)
        if not self.spec.crop:
            return resized
        return resized.crop(self.spec.crop_box(*resized.size))

    def to_tensor(self, img: Image.Image) -> torch.Tensor:
        """RGB image to a normalised float32 CHW tensor."""
        # np.array copies: torch.from_numpy refuses (with a warning) PIL's read-only buffer.
        hwc = torch.from_numpy(np.array(img, dtype=np.uint8))
        chw = hwc.permute(2, 0, 1).contiguous().to(torch.float32)
        return chw.sub_(self._mean).div_(self._std)
