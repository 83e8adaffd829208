"""Benchmark images: ImageNet-sized JPEGs cut from scikit-image's bundled photos.

Each image is a random crop (4:3 or 3:4) of one photo, maybe mirrored, resized to 500x375 or
375x500 (the most common ImageNet validation sizes) and saved at JPEG quality 85-95. The same
seed gives the same files, so two runs decode exactly the same bytes.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from PIL import Image

# Photos that scikit-image ships (no download); grey ones become RGB.
SOURCES = ("chelsea", "coffee", "rocket", "astronaut", "camera", "hubble_deep_field",
           "immunohistochemistry", "retina", "coins", "brick", "grass", "gravel", "moon",
           "colorwheel", "cat")
LANDSCAPE = (500, 375)


def _sources() -> list[Image.Image]:
    from skimage import data

    photos = []
    for name in SOURCES:
        pixels = np.asarray(getattr(data, name)())
        photos.append(Image.fromarray(pixels).convert("RGB"))
    return photos


def _variant(photo: Image.Image, rng: random.Random) -> tuple[Image.Image, int]:
    """A random crop of `photo`, maybe mirrored, at ImageNet size, with a JPEG quality."""
    width, height = photo.size
    size = LANDSCAPE if rng.random() < 0.75 else LANDSCAPE[::-1]
    aspect = size[0] / size[1]
    # The largest crop of that aspect, scaled down by a random factor.
    crop_w = min(width, height * aspect) * rng.uniform(0.55, 1.0)
    crop_h = crop_w / aspect
    left = rng.uniform(0, width - crop_w)
    top = rng.uniform(0, height - crop_h)
    img = photo.resize(size, Image.Resampling.BILINEAR,
                       box=(left, top, left + crop_w, top + crop_h))
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return img, rng.randint(85, 95)


def make_images(directory: Path, count: int, seed: int = 0) -> list[Path]:
    """`count` JPEGs in `directory` (reused when already made with the same seed), sorted."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"img-{i:05d}.jpg" for i in range(count)]
    stamp = directory / f".made-{count}-{seed}"
    if stamp.exists() and all(p.exists() for p in paths):
        return paths
    rng = random.Random(seed)
    photos = _sources()
    for path in paths:
        img, quality = _variant(photos[rng.randrange(len(photos))], rng)
        img.save(path, format="JPEG", quality=quality)
    stamp.touch()
    return paths
