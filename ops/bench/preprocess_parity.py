"""Benchmark: the worker's image preprocessing against torchvision's reference (2026-12-08).

The reference for a card is what its model was trained with: `Image.open(f).convert("RGB")`,
then torchvision's `Resize(resize)` + `CenterCrop(size)` (or `Resize(size)` where the card
has no `resize`), `ToTensor` and `Normalize(mean, std)`. Each path a worker can take is
compared with it on the same bytes: `cpu` (`ImagePreprocessor`, the decode threads) and
`device` (`DeviceDecoder` on the CPU device: `torchvision.io.decode_jpeg`, then the crop and
resize in torch). Reported per card and path: the largest and the mean absolute difference
of the normalised tensors (the mean of the images' means), and how many items
efficientnet_lite0's top-1 class differs for; `decode noise` is PIL against torchvision's
JPEG decoder on the same bytes, both resized by the reference: the difference any decoder
change makes.

The corpus: `--items` photos made from scikit-image's (a random size from 160 to 4032 on
their short side, random aspect, some grain, JPEG at quality 85-95 or PNG), and the odd
images (tiny, huge, very wide, grey, RGBA, palette, 16-bit PNG, CMYK JPEG, EXIF-rotated).

`--time SRC ...` times each source tree's `cpu` preprocessing of the corpus in a child
process (its `src` folder by PYTHONPATH; `torchvision`: the reference pipeline itself), one
thread, alternated over `--rounds`, each file's best round kept:

    python ops/bench/preprocess_parity.py --items 300
    python ops/bench/preprocess_parity.py --items 300 --time /tmp/base/src src torchvision
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

Item = tuple[str, bytes]
_SIDES = (160, 256, 300, 375, 480, 768, 1080, 1536, 3024)


def _skimage(name: str) -> np.ndarray:
    """One of scikit-image's bundled photos (its functions are untyped)."""
    from skimage import data

    photo: Callable[[], Any] = getattr(data, name)
    pixels = photo()
    return np.asarray(pixels[0] if isinstance(pixels, tuple) else pixels)


def _photos() -> list[np.ndarray]:
    return [_skimage(name) for name in (
        "astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry",
        "retina", "colorwheel", "stereo_motorcycle", "camera")]


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def corpus(count: int, seed: int = 0) -> list[Item]:
    """`count` photo files of random sizes and aspects, from scikit-image's photos."""
    rng = np.random.default_rng(seed)
    photos = [Image.fromarray(p) for p in _photos()]
    items = []
    for i in range(count):
        photo = photos[i % len(photos)]
        short = int(rng.choice(_SIDES))
        aspect = float(rng.uniform(0.6, 1.8))
        size = (max(1, round(short * max(aspect, 1))), max(1, round(short / min(aspect, 1))))
        pixels = np.asarray(photo.resize(size, Image.Resampling.BICUBIC), dtype=np.int16)
        grain = rng.integers(-6, 7, pixels.shape, dtype=np.int16)
        image = Image.fromarray(np.clip(pixels + grain, 0, 255).astype(np.uint8))
        if rng.random() < 0.1:
            items.append((f"photo{i}.png", _encode(image, "PNG")))
        else:
            quality = int(rng.integers(85, 96))
            items.append((f"photo{i}.jpg", _encode(image, "JPEG", quality=quality)))
    return items


def odd_images() -> list[Item]:
    """One file of each kind a worker must take as torchvision + PIL would."""
    chelsea = Image.fromarray(_skimage("chelsea"))
    coffee = Image.fromarray(_skimage("coffee"))
    rotated = chelsea.copy()
    exif = rotated.getexif()
    exif[0x0112] = 6
    rgba = np.dstack([_skimage("coffee"), np.full(_skimage("coffee").shape[:2], 255, np.uint8)])
    rgba[:, :150, 3] = 0  # a transparent band, black-free RGB under it
    wide16 = (np.asarray(coffee.convert("L"), dtype=np.uint16) * 257).astype(np.uint16)
    return [
        ("tiny.png", _encode(chelsea.resize((12, 8), Image.Resampling.BOX), "PNG")),
        ("huge.jpg", _encode(coffee.resize((6000, 4000), Image.Resampling.BICUBIC),
                             "JPEG", quality=92)),
        ("wide.jpg", _encode(coffee.resize((3000, 120), Image.Resampling.BICUBIC), "JPEG")),
        ("grey.jpg", _encode(Image.fromarray(_skimage("camera")), "JPEG", quality=92)),
        ("rgba.png", _encode(Image.fromarray(rgba), "PNG")),
        ("palette.png", _encode(coffee.convert("P", palette=Image.Palette.ADAPTIVE), "PNG")),
        ("grey16.png", _encode(Image.fromarray(wide16), "PNG")),
        ("cmyk.jpg", _encode(coffee.convert("CMYK"), "JPEG", quality=92)),
        ("exif6.jpg", _encode(rotated, "JPEG", quality=92, exif=exif)),
    ]


def reference(spec: object, data: bytes | Image.Image) -> torch.Tensor:
    """The card's torchvision pipeline on `Image.open(f).convert("RGB")` (or on an image)."""
    from torchvision import transforms as T

    from inferstream.models.preprocess import Preprocessing

    assert isinstance(spec, Preprocessing)  # noqa: S101
    mode = T.InterpolationMode(spec.interpolation.name.lower())
    steps: list[Callable[..., object]] = (
        [T.Resize(spec.resize_size, mode), T.CenterCrop(spec.output_size)] if spec.crop
        else [T.Resize(spec.output_size, mode)])
    pipeline = T.Compose([*steps, T.ToTensor(), T.Normalize(spec.mean, spec.std)])
    if isinstance(data, Image.Image):
        out = pipeline(data)
    else:
        with Image.open(io.BytesIO(data)) as img:
            out = pipeline(img.convert("RGB"))
    assert isinstance(out, torch.Tensor)  # noqa: S101
    return out


def _decoder_reference(spec: object, data: bytes) -> torch.Tensor | None:
    """The reference with torchvision's JPEG decoder in PIL's place (None: not a JPEG)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    if not data.startswith(b"\xff\xd8"):
        return None
    with Image.open(io.BytesIO(data)) as img:
        if img.mode not in ("RGB", "L"):
            return None
    pixels = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                         mode=ImageReadMode.RGB)
    return reference(spec, Image.fromarray(pixels.permute(1, 2, 0).numpy()))


def cards() -> dict[str, object]:
    """Four repository cards (`models.repository.inputs.image_preprocessing`), the first with
    efficientnet_lite0's own preprocessing, all with its mean and std."""
    from inferstream.models.repository.card import InputSpec
    from inferstream.models.repository.inputs import image_preprocessing

    lite = {"mean": (127 / 255,) * 3, "std": (128 / 255,) * 3}
    specs = {
        "resize 256 crop 224 bicubic (lite0's)": InputSpec(
            size=(224, 224), resize=256, interpolation="bicubic", **lite),  # type: ignore[arg-type]
        "resize 256 crop 224 bilinear": InputSpec(size=(224, 224), resize=256, **lite),  # type: ignore[arg-type]
        "resize (224, 224) bilinear": InputSpec(size=(224, 224), **lite),  # type: ignore[arg-type]
        "resize 320 crop 200x300 bicubic": InputSpec(
            size=(200, 300), resize=320, interpolation="bicubic", **lite),  # type: ignore[arg-type]
    }
    return {name: image_preprocessing(spec) for name, spec in specs.items()}


def _paths(spec: object) -> dict[str, Callable[[bytes], torch.Tensor | str]]:
    from inferstream.models.device_decode import DeviceDecoder
    from inferstream.models.errors import ItemError
    from inferstream.models.preprocess import ImagePreprocessor, Preprocessing

    assert isinstance(spec, Preprocessing)  # noqa: S101
    cpu = ImagePreprocessor(spec)
    decoder = DeviceDecoder(spec, torch.device("cpu"), cpu, cpu.max_pixels)

    def on_device(data: bytes) -> torch.Tensor | str:
        try:
            (out,) = decoder.ready([decoder.encode_item(data)])
        except ItemError as exc:
            return exc.reason
        return out

    def on_cpu(data: bytes) -> torch.Tensor | str:
        try:
            return cpu(data)
        except ItemError as exc:
            return exc.reason

    return {"cpu": on_cpu, "device": on_device}


class Tally:
    """Differences from the reference over a corpus, and top-1 disagreements."""

    def __init__(self) -> None:
        self.max, self.count = 0.0, 0
        self.means: list[float] = []
        self.flips: list[str] = []
        self.errors: list[str] = []

    def add(self, name: str, got: torch.Tensor | str, want: torch.Tensor,
            tops: tuple[int, int] | None) -> None:
        self.count += 1
        if isinstance(got, str) or got.shape != want.shape:
            self.errors.append(f"{name}: {got if isinstance(got, str) else tuple(got.shape)}")
            return
        diff = (got - want).abs()
        self.max = max(self.max, float(diff.max()))
        self.means.append(float(diff.mean()))
        if tops is not None and tops[0] != tops[1]:
            self.flips.append(name)

    def line(self) -> str:
        mean = float(np.mean(self.means)) if self.means else float("nan")
        flips = f"{len(self.flips)}/{self.count}" + (f" {self.flips[:6]}" if self.flips else "")
        errors = f"; errors {self.errors}" if self.errors else ""
        return f"max {self.max:.3f} mean {mean:.4f} top-1 differs {flips}{errors}"


def _top1(module: torch.nn.Module, tensors: list[torch.Tensor]) -> list[int]:
    """efficientnet_lite0's top-1 class of each tensor (one batch per shape)."""
    out: list[int] = [-1] * len(tensors)
    shapes = {tuple(t.shape) for t in tensors}
    with torch.inference_mode():
        for shape in shapes:
            where = [i for i, t in enumerate(tensors) if tuple(t.shape) == shape]
            for start in range(0, len(where), 32):
                chunk = where[start:start + 32]
                classes = module(torch.stack([tensors[i] for i in chunk])).argmax(1)
                for i, cls in zip(chunk, classes.tolist(), strict=True):
                    out[i] = int(cls)
    return out


def compare(items: list[Item], odd: list[Item]) -> None:
    from inferstream.models import TorchModel, load_model

    model = load_model("efficientnet_lite0")
    assert isinstance(model, TorchModel)  # noqa: S101
    module = model.module
    odd_names = {name for name, _ in odd}
    for card, spec in cards().items():
        paths = _paths(spec)
        tallies = {"decode noise": Tally(), **{path: Tally() for path in paths}}
        odd_lines: dict[str, list[str]] = {}
        for start in range(0, len(items) + len(odd), 16):
            rows: list[tuple[str, str, torch.Tensor | str, torch.Tensor]] = []
            for name, data in [*items, *odd][start:start + 16]:
                want = reference(spec, data)
                noise = _decoder_reference(spec, data) if name not in odd_names else None
                if noise is not None:
                    rows.append((name, "decode noise", noise, want))
                rows.extend((name, path, run(data), want) for path, run in paths.items())
            pairs = [(i, got, want) for i, (_, _, got, want) in enumerate(rows)
                     if isinstance(got, torch.Tensor) and got.shape == want.shape]
            unique = list({id(t): t for _, got, want in pairs for t in (got, want)}.values())
            tops = dict(zip((id(t) for t in unique), _top1(module, unique), strict=True))
            top_of = {i: (tops[id(got)], tops[id(want)]) for i, got, want in pairs}
            for i, (name, path, got, want) in enumerate(rows):
                if name in odd_names:
                    odd_lines.setdefault(name, []).append(
                        f"{path} {_one(got, want, top_of.get(i))}")
                else:
                    tallies[path].add(name, got, want, top_of.get(i))
        print(f"\n== {card}, {len(items)} photos", flush=True)
        for path, tally in tallies.items():
            print(f"  {path:13} {tally.line()}")
        for name, lines in odd_lines.items():
            print(f"  {name:13} " + " | ".join(lines), flush=True)


def _one(got: torch.Tensor | str, want: torch.Tensor, tops: tuple[int, int] | None) -> str:
    if isinstance(got, str):
        return f"error: {got}"
    if got.shape != want.shape or tops is None:
        return f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    diff = (got - want).abs()
    same = "same" if tops[0] == tops[1] else f"{tops[0]} != {tops[1]}"
    return f"max {float(diff.max()):.3f} mean {float(diff.mean()):.4f} top-1 {same}"


def time_tree(folder: Path, torchvision: bool) -> dict[str, float]:
    """In this process (a child run on one tree): each file's seconds to preprocess on the
    CPU path with every card (or torchvision's pipeline), the best of 2 passes, one thread."""
    from inferstream.models.preprocess import ImagePreprocessor

    torch.set_num_threads(1)
    files = sorted(folder.iterdir())
    items = [p.read_bytes() for p in files]
    runs: list[Callable[[bytes], object]] = [
        partial(reference, spec) if torchvision else ImagePreprocessor(spec)  # type: ignore[arg-type]
        for spec in cards().values()]
    best = [float("inf")] * len(items)
    for _ in range(2):
        for i, data in enumerate(items):
            started = time.perf_counter()
            for run in runs:
                run(data)
            best[i] = min(best[i], time.perf_counter() - started)
    return {p.name: seconds for p, seconds in zip(files, best, strict=True)}


def _short_side(data: bytes) -> int:
    with Image.open(io.BytesIO(data)) as img:
        return min(img.size)


def time_trees(items: list[Item], trees: list[str], rounds: int) -> None:
    """Each tree's time for the corpus, by the photos' short side, alternated over `rounds`
    (each file's best round kept)."""
    names = [f"{i:04d}-{name}" for i, (name, _) in enumerate(items)]
    sides = {name: _short_side(data) for name, (_, data) in zip(names, items, strict=True)}
    best: dict[str, dict[str, float]] = {tree: {} for tree in trees}
    with tempfile.TemporaryDirectory() as folder:
        for name, (_, data) in zip(names, items, strict=True):
            (Path(folder) / name).write_bytes(data)
        for _ in range(rounds):
            for tree in trees:
                # `torchvision`: the reference pipeline, this tree's inferstream for its cards
                src = "src" if tree == "torchvision" else tree
                env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{Path.cwd()}"}
                flag = ["--torchvision"] if tree == "torchvision" else []
                out = subprocess.run([sys.executable, __file__, "--child", folder, *flag],
                                     env=env, check=True, capture_output=True,
                                     text=True).stdout
                for name, seconds in json.loads(out).items():
                    best[tree][name] = min(best[tree].get(name, float("inf")), seconds)
    buckets = [(0, 500), (500, 1000), (1000, 2000), (2000, 10**6)]
    print(f"ms per item, {len(cards())} cards each, one thread; by the short side")
    print(f"{'tree':24}" + "".join(f"{f'{low}-{high}':>12}" for low, high in buckets[:-1])
          + f"{'>=2000':>12}{'all':>12}")
    for tree in trees:
        cells = []
        for low, high in [*buckets, (0, 10**6)]:
            chosen = [best[tree][n] for n in names if low <= sides[n] < high]
            cells.append(f"{1000 * sum(chosen) / max(1, len(chosen)):8.1f} ({len(chosen)})")
        ratio = sum(best[tree].values()) / sum(best[trees[0]].values())
        print(f"{tree[-24:]:24}" + "".join(f"{c:>12}" for c in cells)
              + f"  {ratio:.2f}x {trees[0]}'s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--time", nargs="+", metavar="SRC", help="source trees to time")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--torchvision", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(time_tree(Path(args.child), args.torchvision)))
        return
    items = corpus(args.items)
    if args.time:
        time_trees(items, args.time, args.rounds)
    else:
        compare(items, odd_images())


if __name__ == "__main__":
    main()
