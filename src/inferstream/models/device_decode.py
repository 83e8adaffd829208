"""JPEG decoding where the model runs (nvJPEG on CUDA), for nodes whose cores cannot decode as
fast as their GPU infers.

With it, a decode thread only fetches an item and reads its JPEG header (size limits, colour
model, EXIF orientation); an RGB or grey JPEG goes on as its bytes, anything else (PNG,
CMYK, a phone photo to be turned by its EXIF orientation, a header that fails, no end marker)
is preprocessed on the CPU as without it. The batch step then decodes the batch's JPEGs in one
`torchvision.io.decode_jpeg` call on the device, and resizes (antialiased, the model's
interpolation), crops and normalises them there: the steps of `preprocess.ImagePreprocessor`
(torchvision's Resize and CenterCrop on PIL's image), each resampling pass rounded to 8 bits
as PIL's is. What is left is PIL's fixed-point arithmetic (a level or two of 255 on some
pixels) and, on CUDA, what nvJPEG decodes differently from libjpeg-turbo.
A JPEG the device cannot decode is decoded again on the CPU, which names what is wrong with it.

`[worker] decode_on_device`: `off`; `on` (on a CPU device too, where it decodes on the
inference thread: for tests); `auto`, on CUDA only, measured at load (`choose_decoding`): a
synthetic photo-sized JPEG batch decoded on the device plus the forward pass, against the
decode threads' rate and the forward pass overlapped; the faster path is kept.
"""

from __future__ import annotations

import io
import logging
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from inferstream.models.decode import check_dimensions
from inferstream.models.errors import ItemError
from inferstream.models.preprocess import Preprocessing
from inferstream.models.timing import best_seconds

log = logging.getLogger(__name__)

_JPEG = b"\xff\xd8\xff"
_EOI = b"\xff\xd9"
_EXIF_ORIENTATION = 0x0112
_MODES = {Image.Resampling.BILINEAR: "bilinear", Image.Resampling.BICUBIC: "bicubic"}
#: the device path is kept under `auto` only when its estimate beats the CPU path's by this
DEVICE_MARGIN = 1.05


def is_encoded(item: torch.Tensor) -> bool:
    """Whether a preprocessed item is a JPEG's bytes waiting for the device (else a CHW image)."""
    return item.dim() == 1 and item.dtype == torch.uint8


class DeviceDecoder:
    """Decodes a batch's JPEGs on `device` and preprocesses them as `spec` says; `fallback`
    preprocesses one item on the CPU (`ImagePreprocessor`)."""

    def __init__(self, spec: Preprocessing, device: torch.device,
                 fallback: Callable[[bytes], torch.Tensor], max_pixels: int) -> None:
        self.spec, self.device, self.fallback, self.max_pixels = spec, device, fallback, max_pixels
        self.mode = _MODES.get(spec.interpolation, "bilinear")
        self._mean = torch.tensor(spec.mean, device=device).mul(255.0).view(3, 1, 1)
        self._std = torch.tensor(spec.std, device=device).mul(255.0).view(3, 1, 1)

    def encode_item(self, data: bytes) -> torch.Tensor:
        """On a decode thread: an upright RGB or grey JPEG within the limits as its bytes
        (uint8, 1-D), anything else preprocessed on the CPU (ItemError for a bad item)."""
        if not self._device_can_decode(data):
            return self.fallback(data)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)

    def _device_can_decode(self, data: bytes) -> bool:
        # A JPEG ends with its EOI marker; a truncated one goes the CPU way, which says so.
        if not data.startswith(_JPEG) or not data.endswith(_EOI):
            return False
        try:
            with Image.open(io.BytesIO(data)) as img:  # reads the header only
                check_dimensions(img.size, self.max_pixels)
                # a photo to be turned as its EXIF orientation says is turned on the CPU
                upright = not self.spec.exif_orientation or \
                    img.getexif().get(_EXIF_ORIENTATION, 1) == 1
                return upright and img.mode in ("RGB", "L")
        except ItemError:
            raise
        except Exception:  # the CPU path names what is wrong with the file
            return False

    def ready(self, items: Sequence[torch.Tensor]) -> list[torch.Tensor | str]:
        """On the inference thread: every item as a preprocessed CHW image on the device, or
        the reason it is bad (a str)."""
        encoded = [i for i, item in enumerate(items) if is_encoded(item)]
        # a JPEG's bytes are decoded from the host (decode_jpeg takes them there), the rest
        # are ready images: only those are copied to the device
        out: list[torch.Tensor | str] = [
            item if is_encoded(item) else item.to(self.device, non_blocking=item.is_pinned())
            for item in items]
        for position, image in zip(encoded, self._decode([items[i] for i in encoded]),
                                   strict=True):
            out[position] = image if isinstance(image, str) else self._preprocess(image)
        return out

    def _decode(self, encoded: list[torch.Tensor]) -> list[torch.Tensor | str]:
        if not encoded:
            return []
        try:  # one call for the batch: nvJPEG decodes it in parallel
            return list(self._decode_jpeg(encoded))
        except RuntimeError:
            return [self._decode_one(data) for data in encoded]

    def _decode_one(self, data: torch.Tensor) -> torch.Tensor | str:
        try:
            (image,) = self._decode_jpeg([data])
            return image
        except RuntimeError:
            try:
                return self.fallback(data.numpy().tobytes())
            except ItemError as exc:
                return exc.reason

    def _decode_jpeg(self, encoded: list[torch.Tensor]) -> list[torch.Tensor]:
        """RuntimeError where the decoder fails or warns (libjpeg warns of corrupt data and
        goes on): such an image is decoded again on the CPU, which refuses it by name."""
        from torchvision.io import ImageReadMode, decode_jpeg

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            images: list[torch.Tensor] = decode_jpeg(encoded, mode=ImageReadMode.RGB,
                                                     device=self.device)
        if any(not issubclass(w.category, DeprecationWarning) for w in caught):
            raise RuntimeError(f"decoder warned: {caught[0].message}")
        return images

    def _preprocess(self, image: torch.Tensor) -> torch.Tensor:
        """A decoded CHW uint8 image (or one the CPU preprocessed) to the model's input: the
        steps of `preprocess.ImagePreprocessor` (torchvision's Resize, CenterCrop), each of
        PIL's two resampling passes (the width, then the height) rounded to 8 bits as PIL
        rounds them."""
        if image.dtype != torch.uint8:
            return image.to(self.device)
        _, height, width = image.shape
        resized_width, resized_height = self.spec.resized_size(width, height)
        pixels = image.unsqueeze(0).float()
        for size in ((height, resized_width), (resized_height, resized_width)):
            pixels = torch.nn.functional.interpolate(
                pixels, size=size, mode=self.mode, antialias=True, align_corners=False,
            ).round_().clamp_(0, 255)
        left, top, right, bottom = (self.spec.crop_box(resized_width, resized_height)
                                    if self.spec.crop else (0, 0, resized_width, resized_height))
        return pixels[0, :, top:bottom, left:right].sub(self._mean).div_(self._std)


@dataclass(frozen=True)
class DecodeChoice:
    on_device: bool
    why: str


def choose_decoding(decoder: DeviceDecoder, predict: Callable[[torch.Tensor], object],
                    decode_threads: int, max_batch: int) -> DecodeChoice:
    """Whether decoding on the device makes a faster pipeline than `decode_threads` CPU
    threads, from timings of a synthetic photo-sized JPEG: the CPU path runs at the slower of
    its decode threads and the forward pass (they overlap), the device path at one decode plus
    one forward pass per batch."""
    data = synthetic_jpeg()
    started = time.perf_counter()
    for _ in range(4):
        decoder.fallback(data)
    cpu_rate = decode_threads * 4 / (time.perf_counter() - started)
    encoded = [decoder.encode_item(data)] * max_batch
    batch = torch.stack([t for t in decoder.ready(encoded) if not isinstance(t, str)])
    decode_s = best_seconds(lambda: decoder.ready(encoded))
    forward_s = best_seconds(lambda: predict(batch))
    cpu_path = min(cpu_rate, max_batch / forward_s)
    device_path = max_batch / (decode_s + forward_s)
    figures = (f"estimated {device_path:.0f} items/s decoding on {decoder.device} against "
               f"{cpu_path:.0f} on {decode_threads} decode threads")
    return DecodeChoice(device_path > cpu_path * DEVICE_MARGIN, figures)


def synthetic_jpeg(size: tuple[int, int] = (500, 375), seed: int = 0) -> bytes:
    """A photo-sized JPEG with a photo's texture (smooth shapes and some grain): what a
    decoder's speed is measured on."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    smooth = np.asarray(coarse.resize(size, Image.Resampling.BICUBIC), dtype=np.int16)
    grain = rng.integers(-12, 13, smooth.shape, dtype=np.int16)
    pixels = np.clip(smooth + grain, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90)
    return out.getvalue()
