"""Every kind of bad item becomes an ItemError with a short reason; odd modes decode to RGB."""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from inferstream.models import (
    DEFAULT_MAX_BYTES,
    ImagePreprocessor,
    ItemError,
    Preprocessing,
    decode_image,
    fetch_item,
)
from inferstream.models import items as items_module


def encode(img: Image.Image, fmt: str = "PNG", **params: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **params)
    return buf.getvalue()


def photo(size: tuple[int, int] = (320, 240)) -> Image.Image:
    """A smooth RGB gradient: compresses like a photo, decodes to known colours."""
    x = np.linspace(0, 255, size[0], dtype=np.float32)
    y = np.linspace(0, 255, size[1], dtype=np.float32)
    rgb = np.stack(np.broadcast_arrays(x[None, :], y[:, None], (x[None, :] + y[:, None]) / 2), -1)
    return Image.fromarray(rgb.astype(np.uint8))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims width x height but holds almost nothing: a decompression bomb's shape."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def reason_of(data: bytes, **kwargs: int) -> str:
    with pytest.raises(ItemError) as info:
        decode_image(data, **kwargs)
    return info.value.reason


def fetch_reason(name: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    with pytest.raises(ItemError) as info:
        fetch_item(name, max_bytes=max_bytes)
    return info.value.reason


# -- fetching local items --------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jpg"
    assert fetch_reason(str(missing)) == f"missing file: {missing}"


def test_directory(tmp_path: Path) -> None:
    assert fetch_reason(str(tmp_path)) == f"is a directory: {tmp_path}"


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert fetch_reason(str(fifo)) == f"not a regular file: {fifo}"


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "secret.png"
    path.write_bytes(encode(photo()))
    path.chmod(0)
    if os.geteuid() == 0:
        # root reads anything; make open() fail the way it does for everyone else.
        def deny(*_: object, **__: object) -> None:
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(items_module, "open", deny, raising=False)
    assert fetch_reason(str(path)) == f"permission denied: {path}"


def test_file_uri_and_size_cap(tmp_path: Path) -> None:
    path = tmp_path / "a b.png"
    data = encode(photo())
    path.write_bytes(data)
    assert fetch_item(path.as_uri()) == data
    assert fetch_item(str(path)) == data
    assert fetch_reason(str(path), max_bytes=100).startswith("too large")


def test_inline_data_and_unsupported_scheme() -> None:
    assert fetch_item("whatever", b"abc") == b"abc"
    assert fetch_reason("ftp://example.org/x.jpg") == "unsupported URI scheme: ftp"
    assert fetch_reason("file://otherhost/x.jpg").startswith("file URI on another host")


def test_zero_byte_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    assert reason_of(fetch_item(str(path))) == "empty data"


# -- decoding --------------------------------------------------------------------------------


def test_not_an_image() -> None:
    assert reason_of(b"hello, this is text and not a picture") == "not an image"


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("min_side", [None, 64])
def test_truncated_image(fmt: str, min_side: int | None) -> None:
    data = encode(photo((640, 480)), fmt)
    kwargs = {} if min_side is None else {"min_side": min_side}
    assert reason_of(data[: len(data) // 2], **kwargs) == "truncated image"


def test_corrupt_png() -> None:
    data = bytearray(encode(photo()))
    data[60] ^= 0xFF  # inside the first IDAT: its CRC no longer matches
    assert reason_of(bytes(data)).startswith("corrupt image")


def test_corrupt_header() -> None:
    data = bytearray(encode(photo()))
    data[37:41] = b"XXXX"  # the IDAT chunk's name
    assert reason_of(bytes(data)) == "corrupt image: bad PNG header"


def test_partly_downloaded_jpeg_padded_with_zeros() -> None:
    # What a preallocated file holds when its download died half way.
    data = encode(photo((640, 480)), "JPEG")
    half = len(data) // 2
    assert reason_of(data[:half] + bytes(len(data) - half)) == "truncated image"


def test_decompression_bomb_error() -> None:
    # 400M pixels: over twice PIL's limit, so PIL raises DecompressionBombError itself.
    assert reason_of(png_header_only(20000, 20000)).startswith("image too large")


def test_decompression_bomb_warning() -> None:
    # 100M pixels: PIL only warns; pytest (like -W error) turns that into an exception.
    assert reason_of(png_header_only(10000, 10000)).startswith("image too large")


def test_pixel_limit() -> None:
    reason = reason_of(encode(photo((200, 100))), max_pixels=10_000)
    assert reason == "image too large: 200x100 pixels > limit 10000"


def test_absurd_dimensions() -> None:
    assert reason_of(encode(Image.new("L", (1, 100000)))) == "absurd dimensions: 1x100000"


@pytest.mark.parametrize(
    "img",
    [
        Image.new("L", (40, 30), 90),
        Image.new("1", (40, 30), 1),
        Image.new("P", (40, 30), 7),
        Image.new("RGBA", (40, 30), (10, 20, 30, 255)),
        Image.new("LA", (40, 30), (90, 255)),
        Image.new("CMYK", (40, 30), (0, 0, 0, 0)),
    ],
    ids=lambda img: img.mode,
)
def test_modes_become_rgb(img: Image.Image) -> None:
    fmt = "JPEG" if img.mode == "CMYK" else "PNG"
    decoded = decode_image(encode(img, fmt))
    assert decoded.mode == "RGB"
    assert decoded.size == (40, 30)


def test_sixteen_bit_grey_scales_down() -> None:
    wide = Image.fromarray(np.full((30, 40), 65535 // 2, dtype=np.uint16))
    decoded = decode_image(encode(wide))
    assert decoded.getpixel((0, 0)) == (127, 127, 127)


def test_transparent_pixels_become_white() -> None:
    clear = Image.new("RGBA", (40, 30), (0, 0, 0, 0))
    assert decode_image(encode(clear)).getpixel((5, 5)) == (255, 255, 255)


# -- preprocessing ---------------------------------------------------------------------------


def test_preprocess_shape_and_normalisation() -> None:
    grey = Image.new("L", (500, 300), 128)
    spec = Preprocessing(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    tensor = ImagePreprocessor(spec)(encode(grey, "JPEG", quality=95))
    assert tensor.shape == (3, 224, 224)
    assert tensor.dtype == torch.float32
    assert torch.allclose(tensor, torch.zeros_like(tensor), atol=0.03)


def test_preprocess_matches_resize_then_crop() -> None:
    img = photo((400, 300))
    spec = Preprocessing(resize_size=150, crop_size=120)
    ours = ImagePreprocessor(spec)(encode(img))
    resized = img.resize((200, 150), Image.Resampling.BILINEAR)
    reference = ImagePreprocessor(spec).to_tensor(resized.crop((40, 15, 160, 135)))
    assert (ours - reference).abs().mean() < 0.05


def test_preprocess_a_rectangle_matches_resize_then_crop() -> None:
    img = photo((400, 300))
    spec = Preprocessing(resize_size=150, size=(120, 160))  # a repository card's [h, w]
    ours = ImagePreprocessor(spec)(encode(img))
    resized = img.resize((200, 150), Image.Resampling.BILINEAR)
    reference = ImagePreprocessor(spec).to_tensor(resized.crop((20, 15, 180, 135)))
    assert ours.shape == (3, 120, 160)
    assert (ours - reference).abs().mean() < 0.05


def test_preprocess_without_a_crop_resizes_the_whole_image() -> None:
    img = photo((400, 300))
    spec = Preprocessing(size=(100, 50), crop=False)
    ours = ImagePreprocessor(spec)(encode(img))
    reference = ImagePreprocessor(spec).to_tensor(img.resize((50, 100),
                                                             Image.Resampling.BILINEAR))
    assert ours.shape == (3, 100, 50)
    assert (ours - reference).abs().mean() < 0.05
