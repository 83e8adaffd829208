"""JPEGs decoded where the model runs (issue 16.5), exercised on the CPU device: the same code
decodes with nvJPEG on CUDA, where only `torchvision.io.decode_jpeg`'s device differs."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image
from skimage import data as photos

from inferstream.models import ItemError, LoadedModel, TorchModel, load_model
from inferstream.models.device_decode import DeviceDecoder, choose_decoding, is_encoded
from inferstream.models.forward import prepare_device_decode, prepare_forward
from inferstream.models.preprocess import ImagePreprocessor, Preprocessing
from tests.unit.support.photos import CAT_CLASSES, encode


@pytest.fixture(scope="module")
def decoding() -> TorchModel:
    """efficientnet_lite0 of its own, prepared to decode its JPEGs on its device."""
    model = load_model("efficientnet_lite0")
    assert isinstance(model, TorchModel)
    prepare_forward(model, compile_mode="off")
    assert prepare_device_decode(model, "on", 1, 8) is not None
    assert model.decoder is not None
    return model


def test_the_bundled_photos_keep_their_labels_decoded_on_the_device(decoding: TorchModel) -> None:
    items = [decoding.preprocess(encode(photo)) for photo in
             (photos.chelsea(), photos.coffee(), photos.rocket(), photos.camera())]
    assert all(is_encoded(item) for item in items)  # the decode threads only read headers
    cat, coffee, rocket, camera = (p[0] for p in decoding.predict_items(items, top_k=5))
    assert not isinstance(cat, str) and cat[0] in CAT_CLASSES
    assert not isinstance(coffee, str) and coffee[0] == 967  # espresso
    assert not isinstance(rocket, str) and rocket[0] in {657, 744}  # missile, projectile
    assert not isinstance(camera, str) and camera[0] == 872  # tripod (a grey JPEG)


def test_device_preprocessing_matches_the_cpu_path(decoding: TorchModel) -> None:
    assert decoding.decoder is not None
    preprocessor = decoding.preprocessor
    assert isinstance(preprocessor, ImagePreprocessor)
    data = encode(photos.coffee(), quality=95)
    (on_device,) = decoding.decoder.ready([decoding.preprocess(data)])
    assert isinstance(on_device, torch.Tensor)
    on_cpu = preprocessor(data)
    assert on_device.shape == on_cpu.shape
    # JPEG decoders and resamplers differ in rounding, not in the picture
    assert (on_device - on_cpu).abs().mean() < 0.05


@pytest.mark.parametrize("spec", [Preprocessing(resize_size=240, size=(200, 300)),
                                  Preprocessing(size=(150, 100), crop=False)],
                         ids=["rectangle", "no crop"])
def test_a_repository_cards_shapes_decode_on_the_device_as_on_the_cpu(
        spec: Preprocessing) -> None:
    cpu = ImagePreprocessor(spec)
    decoder = DeviceDecoder(spec, torch.device("cpu"), cpu, cpu.max_pixels)
    data = encode(photos.coffee(), quality=95)
    (on_device,) = decoder.ready([decoder.encode_item(data)])
    assert isinstance(on_device, torch.Tensor)
    assert on_device.shape == cpu(data).shape == (3, *spec.output_size)
    assert (on_device - cpu(data)).abs().mean() < 0.05


def test_what_the_device_should_not_decode_goes_the_cpu_way(decoding: TorchModel) -> None:
    rotated = Image.fromarray(photos.chelsea())
    exif = rotated.getexif()
    exif[0x0112] = 6  # a phone photo held upright: rotate 90 degrees
    rotated_jpeg = io.BytesIO()
    rotated.save(rotated_jpeg, "JPEG", exif=exif)
    cmyk = io.BytesIO()
    Image.fromarray(photos.coffee()).convert("CMYK").save(cmyk, "JPEG")
    for data in (encode(photos.coffee(), "PNG"), rotated_jpeg.getvalue(), cmyk.getvalue()):
        item = decoding.preprocess(data)
        assert not is_encoded(item) and item.shape == (3, 224, 224)


def test_a_bad_jpeg_fails_alone_with_the_cpu_paths_reason(decoding: TorchModel) -> None:
    good = encode(photos.coffee())
    with pytest.raises(ItemError, match="truncated image"):  # no end marker: the CPU's way
        decoding.preprocess(good[: len(good) // 3])
    huffman = good.index(b"\xff\xc4") + 5  # the counts of its first Huffman table
    bogus = good[:huffman] + b"\xff" * 16 + good[huffman + 16:]
    items = [decoding.preprocess(good), decoding.preprocess(bogus), decoding.preprocess(good)]
    assert all(is_encoded(item) for item in items)  # its header reads fine
    first, bad, last = decoding.predict_items(items, top_k=1)
    assert bad == "corrupt image: broken data stream when reading image file"
    assert not isinstance(first, str) and first[0][0] == 967
    assert not isinstance(last, str) and last[0][0] == 967


def test_auto_keeps_the_cpu_path_on_a_cpu_device_and_measures_elsewhere(
        decoding: TorchModel, lite0: LoadedModel) -> None:
    other = lite0  # one nobody prepared
    assert prepare_device_decode(other, "auto", 1, 8) is None
    assert isinstance(other, TorchModel) and other.decoder is None
    assert decoding.decoder is not None
    choice = choose_decoding(decoding.decoder, lambda batch: decoding.predict(batch, 1),
                             decode_threads=1, max_batch=4)
    assert "items/s decoding on cpu against" in choice.why
    assert "on 1 decode threads" in choice.why


def test_a_decoder_sends_ready_items_to_the_device_untouched(lite0: LoadedModel) -> None:
    spec_model = lite0
    assert isinstance(spec_model, TorchModel)
    preprocessor = spec_model.preprocessor
    assert isinstance(preprocessor, ImagePreprocessor)
    decoder = DeviceDecoder(preprocessor.spec, torch.device("cpu"), preprocessor,
                            preprocessor.max_pixels)
    ready = torch.rand(3, 224, 224)
    (out,) = decoder.ready([ready])
    assert isinstance(out, torch.Tensor) and torch.equal(out, ready)
