"""Decoding untrusted image bytes into RGB, turning every way it can fail into an ItemError."""

from __future__ import annotations

import io
import math
import struct

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from inferstream.models.errors import ItemError

DEFAULT_MAX_PIXELS = 64_000_000
"""Largest decoded image accepted (about 8000x8000); below PIL's own bomb threshold."""

MAX_ASPECT_RATIO = 100
"""Wider than this (1x100000) is no photo, and resizing its short side would explode it."""

# What PIL raises on malformed files besides OSError: its parsers are not uniform about it.
_CORRUPT = (OSError, SyntaxError, ValueError, struct.error, EOFError, IndexError, TypeError)
_BOMB = (Image.DecompressionBombError, Image.DecompressionBombWarning)
# Signatures of common formats: a file that starts like one but will not open is corrupt.
_SIGNATURES = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF8", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
_ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})
_WIDE_GREY_MODES = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N"})


def decode_image(
    data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS, min_side: int | None = None,
    exif_orientation: bool = True, alpha_on_white: bool = True,
) -> Image.Image:
    """Decode `data` fully into an RGB image; raise ItemError with a short reason.

    `min_side` lets JPEG decode at a reduced scale whose shorter side is still >= min_side.
    `exif_orientation`: turn a photo as its EXIF orientation says (False: as stored, as
    `Image.open` gives it); `alpha_on_white`: see `to_rgb`.
    """
    if not data:
        raise ItemError("empty data")
    # A truncated image must fail rather than come back half grey; nothing of ours sets it.
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        img = Image.open(io.BytesIO(data))
        check_dimensions(img.size, max_pixels)
        if min_side is not None and img.format == "JPEG":
            _draft(img, min_side)
        img.load()
    except ItemError:
        raise
    except _BOMB:
        # PIL's check fires at open for images over its own (higher) limit; warnings may be errors.
        limit = min(max_pixels, Image.MAX_IMAGE_PIXELS or max_pixels)
        raise ItemError(f"image too large: over {limit} pixels") from None
    except UnidentifiedImageError:
        kind = _sniff(data)
        raise ItemError(f"corrupt image: bad {kind} header" if kind else "not an image") from None
    except _CORRUPT as exc:
        raise ItemError(_corrupt_reason(exc)) from None
    return to_rgb(_upright(img) if exif_orientation else img, alpha_on_white=alpha_on_white)


def check_dimensions(size: tuple[int, int], max_pixels: int) -> None:
    """ItemError for an image of `size` (width, height) that no photo has or that is too big."""
    width, height = size
    if width <= 0 or height <= 0:
        raise ItemError(f"corrupt image: size {width}x{height}")
    if width * height > max_pixels:
        raise ItemError(f"image too large: {width}x{height} pixels > limit {max_pixels}")
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise ItemError(f"absurd dimensions: {width}x{height}")


def _sniff(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return next((kind for magic, kind in _SIGNATURES if data.startswith(magic)), None)


def _draft(img: Image.Image, min_side: int) -> None:
    # libjpeg can decode at 1/2, 1/4 or 1/8 scale: far cheaper than decoding full size.
    width, height = img.size
    scale = min_side / min(width, height)
    if scale < 1:
        img.draft(None, (math.ceil(width * scale), math.ceil(height * scale)))


def _corrupt_reason(exc: BaseException) -> str:
    message = str(exc)
    if "truncat" in message.lower():
        return "truncated image"
    short = message.splitlines()[0][:80] if message else type(exc).__name__
    return f"corrupt image: {short}"


def _upright(img: Image.Image) -> Image.Image:
    """Apply the EXIF orientation of phone photos; a broken EXIF block is ignored, not fatal."""
    try:
        return ImageOps.exif_transpose(img)
    except _CORRUPT:
        return img


def to_rgb(img: Image.Image, *, alpha_on_white: bool = True) -> Image.Image:
    """Convert any PIL mode (grey, 16-bit, palette, CMYK, with alpha) to 8-bit RGB, as PIL's
    `convert("RGB")` does (torchvision's image loader), except: 16-bit and 32-bit grey are
    scaled to 8 bits (65535 -> 255), where `convert` clips them at 255 (a white image); and
    with `alpha_on_white`, transparent pixels are flattened onto white, where `convert` keeps
    the colour under them (often black)."""
    if img.mode == "RGB":
        return img
    if img.mode in _WIDE_GREY_MODES or img.mode == "F":
        return _grey_to_rgb(img)
    if alpha_on_white and (img.mode in _ALPHA_MODES or
                           (img.mode == "P" and "transparency" in img.info)):
        # Flatten onto white: transparent pixels are often black underneath.
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    try:
        return img.convert("RGB")
    except ValueError:
        raise ItemError(f"unsupported image mode {img.mode}") from None


def _grey_to_rgb(img: Image.Image) -> Image.Image:
    values = np.asarray(img, dtype=np.float32)
    if img.mode == "F":
        # Float images are usually 0..1; anything else is clipped to the 8-bit range.
        top = float(values.max(initial=0.0))
        values = values * 255.0 if top <= 1.0 else values
    elif img.mode != "I" or float(values.max(initial=0.0)) > 255.0:
        values = values / 257.0  # 16-bit to 8-bit: 65535 -> 255
    grey = np.clip(values, 0, 255).astype(np.uint8)
    return Image.fromarray(grey).convert("RGB")
