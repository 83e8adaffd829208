"""What a member tells the leader in its subscription, and the leader tells it back.

Both travel as the `user_data` bytes of the classic consumer protocol, as compact JSON with
a version number: a newer member may add keys, an older leader ignores them. Metadata that
cannot be read (a foreign assignor's, a corrupt one) reads as a member that owns nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: Version of both documents below.
VERSION = 1


@dataclass(frozen=True)
class MemberMetadata:
    """A member as it joins: its worker id, served models, the partitions it owns now by
    topic (as of assignment `epoch`), and its calibrated items/s (None: not measured)."""

    worker: str
    models: tuple[str, ...] = ()
    owned: dict[str, tuple[int, ...]] = field(default_factory=dict)
    epoch: int = 0
    calibration_items_per_s: float | None = None


@dataclass(frozen=True)
class AssignmentInfo:
    """What the leader adds to an assignment: its epoch (one more than the newest a member
    reported) and the leader's worker id, so each member knows whether it leads."""

    epoch: int
    leader: str


def encode_member(meta: MemberMetadata) -> bytes:
    doc = {"v": VERSION, "worker": meta.worker, "models": list(meta.models),
           "owned": {t: list(ps) for t, ps in sorted(meta.owned.items())},
           "epoch": meta.epoch, "calibration": meta.calibration_items_per_s}
    return _dump(doc)


def decode_member(data: bytes | None, fallback_worker: str) -> MemberMetadata:
    """The metadata in `data`; a member of worker `fallback_worker` owning nothing when it
    cannot be read."""
    doc = _load(data)
    try:
        calibration = doc.get("calibration")
        return MemberMetadata(
            worker=str(doc.get("worker") or fallback_worker),
            models=tuple(str(m) for m in doc.get("models", ())),
            owned={str(t): tuple(int(p) for p in ps)
                   for t, ps in dict(doc.get("owned", {})).items()},
            epoch=int(doc.get("epoch", 0)),
            calibration_items_per_s=None if calibration is None else float(calibration))
    except (TypeError, ValueError, AttributeError) as exc:
        log.warning("member metadata of %s unreadable, taken as owning nothing: %s",
                    fallback_worker, exc)
        return MemberMetadata(worker=fallback_worker)


def encode_assignment(info: AssignmentInfo) -> bytes:
    return _dump({"v": VERSION, "epoch": info.epoch, "leader": info.leader})


def decode_assignment(data: bytes | None) -> AssignmentInfo:
    doc = _load(data)
    try:
        return AssignmentInfo(int(doc.get("epoch", 0)), str(doc.get("leader", "")))
    except (TypeError, ValueError) as exc:
        log.warning("assignment user data unreadable: %s", exc)
        return AssignmentInfo(0, "")


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _load(data: bytes | None) -> dict[str, Any]:
    if not data:
        return {}
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}
