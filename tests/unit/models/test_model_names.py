"""Model references as the client and the controller check them (`check_model_name`, no
torch): any well-formed name, a version only on a repository model."""

from __future__ import annotations

import pytest

from inferstream.models import UnknownModelError, check_model_name
from inferstream.schemas.records import model_ref, serves, split_ref


@pytest.mark.parametrize(("reference", "parsed"), [
    ("efficientnet_lite0", ("efficientnet_lite0", None)),
    ("sim:ms=5,jitter=0.1", ("sim:ms=5,jitter=0.1", None)),
    ("faces", ("faces", None)),
    ("product-classes.v2_ft", ("product-classes.v2_ft", None)),
    ("faces:3", ("faces", 3)),
    ("Faces9:12", ("Faces9", 12)),
    ("faces:1796608800", ("faces", 1796608800)),  # a version in seconds since the epoch
    ("faces:2147483647", ("faces", 2147483647)),
])
def test_a_well_formed_reference_gives_its_name_and_version(
        reference: str, parsed: tuple[str, int | None]) -> None:
    assert check_model_name(reference) == parsed
    assert model_ref(*parsed) == reference and split_ref(reference) == parsed


@pytest.mark.parametrize(("reference", "says"), [
    ("resnet50:2", "resnet50 is a built-in model: only repository models have versions"),
    ("sim:ms=5:2", "a simulated model has no versions"),
    ("sim:speed=3", "expected ms=N"),
    ("faces:0", "the version after faces: is a whole number from 1 to 2147483647"),
    ("faces:v2", "the version after faces: is a whole number from 1 to 2147483647"),
    ("faces:1:2", "the version after faces: is a whole number from 1 to 2147483647"),
    ("faces:2147483648", "the version after faces: is a whole number from 1 to 2147483647"),
    ("faces:202612071053", "the version after faces: is a whole number from 1 to 2147483647"),
    ("faces:" + "9" * 5000, "the version after faces: is a whole number from 1"),
    ("no such model", "a repository model's name is made of letters, digits"),
    ("", "a repository model's name is made of"),
    ("-faces", "a repository model's name is made of"),
    ("faces/1", "a repository model's name is made of"),
    ("x" * 129, "at most 128 characters"),
])
def test_a_malformed_reference_says_what_is_wrong(reference: str, says: str) -> None:
    with pytest.raises(UnknownModelError, match=says):
        check_model_name(reference)


def test_a_version_answers_only_a_task_of_that_version_or_of_none() -> None:
    assert serves("faces:2", "faces:2") and serves("faces:2", "faces")
    assert serves("faces", "faces:2")  # a worker whose versions are not known (yet)
    assert not serves("faces:1", "faces:2") and not serves("faces:2", "cats:2")
    assert serves("sim:ms=1", "sim:ms=5") and not serves("sim:ms=1", "faces")
