"""The bundled photos (scikit-image's), encoded as a user's files are."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from skimage import data as photos

CAT_CLASSES = {281, 282, 285}  # tabby, tiger cat, Egyptian cat


def encode(image: Any, fmt: str = "JPEG", **options: object) -> bytes:
    """`image` (an array of pixels) as the bytes of a `fmt` file, saved with `options`."""
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image)).save(buffer, fmt, **options)
    return buffer.getvalue()


def write_photos(folder: Path) -> list[str]:
    """chelsea.png (a cat) and coffee.png (an espresso) written in `folder`; their paths."""
    paths = []
    for name, image in (("chelsea", photos.chelsea()), ("coffee", photos.coffee())):
        path = folder / f"{name}.png"
        path.write_bytes(encode(image, "PNG"))
        paths.append(str(path))
    return paths
