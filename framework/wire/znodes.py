"""What flamepipe stores in ZooKeeper: snapshot and epoch records, as versioned JSON.

JSON is written with sorted keys and no spaces, so equal records are equal bytes (the
registry relies on it to recognise its own commit after a lost connection). Partition
numbers are JSON object keys, so they travel as strings and are parsed back to ints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from framework.errors import DecodeError

RECORD_VERSION = 1

Offsets = Mapping[str, Mapping[int, int]]
"""Per source topic, per partition: the offset to replay from."""


def _count(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}={value!r} must be an int >= 0")
    return value


def _freeze_offsets(offsets: Offsets) -> Offsets:
    frozen: dict[str, Mapping[int, int]] = {}
    for topic, parts in offsets.items():
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic {topic!r} must be a non-empty str")
        frozen[topic] = MappingProxyType(
            {_count(p, "partition"): _count(o, f"offset of {topic}") for p, o in parts.items()}
        )
    return MappingProxyType(frozen)


def _plain_offsets(offsets: Offsets) -> dict[str, dict[str, int]]:
    return {t: {str(p): o for p, o in parts.items()} for t, parts in offsets.items()}


def _parse_offsets(data: dict[str, dict[str, int]]) -> dict[str, dict[int, int]]:
    return {t: {int(p): o for p, o in parts.items()} for t, parts in data.items()}


def _to_json(kind: str, fields: dict[str, Any]) -> bytes:
    body = {"version": RECORD_VERSION, "kind": kind, **fields}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _from_json(data: bytes, kind: str, where: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        # RecursionError: nesting deeper than Python's stack (b"[" * 1000).
        raise DecodeError(f"{where}: not a JSON {kind} record: {exc}") from None
    if not isinstance(body, dict) or body.get("kind") != kind:
        raise DecodeError(f"{where}: not a {kind} record: {data[:80]!r}")
    if body.get("version") != RECORD_VERSION:
        raise DecodeError(
            f"{where}: {kind} record version {body.get('version')!r}; this flamepipe reads "
            f"version {RECORD_VERSION} only (upgrade flamepipe)"
        )
    return body


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """A snapshot the whole pipeline can resume from (its global time, kept in ZooKeeper).

    ``slot`` is the snapshot's global time; ``offsets`` where sources replay from;
    ``units`` the hash units each stateful node saved at ``slot``; ``epoch`` the
    pipeline generation that took it; ``created_ms`` wall-clock time of the commit.
    """

    slot: int
    offsets: Offsets
    units: Mapping[str, tuple[str, ...]]
    epoch: int
    created_ms: int

    def __post_init__(self) -> None:
        for name in ("slot", "epoch", "created_ms"):
            _count(getattr(self, name), name)
        # Private frozen copies: a record must not change under the registry's feet.
        object.__setattr__(self, "offsets", _freeze_offsets(self.offsets))
        units = {str(node): tuple(str(u) for u in us) for node, us in self.units.items()}
        object.__setattr__(self, "units", MappingProxyType(units))

    def to_json(self) -> bytes:
        """The record as canonical JSON bytes."""
        return _to_json(
            "snapshot",
            {
                "slot": self.slot,
                "offsets": _plain_offsets(self.offsets),
                "units": {node: list(us) for node, us in self.units.items()},
                "epoch": self.epoch,
                "created_ms": self.created_ms,
            },
        )

    @classmethod
    def from_json(cls, data: bytes, where: str) -> SnapshotRecord:
        """Parse `to_json` output; `DecodeError` naming ``where`` if it is not one."""
        body = _from_json(data, "snapshot", where)
        try:
            return cls(
                slot=body["slot"],
                offsets=_parse_offsets(body["offsets"]),
                units={node: tuple(us) for node, us in body["units"].items()},
                epoch=body["epoch"],
                created_ms=body["created_ms"],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DecodeError(f"{where}: malformed snapshot record: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """One generation of the pipeline's internal topics.

    ``reason`` says why it started (``"start"``, ``"recovery"``, ``"replay"``...);
    ``snapshot`` the snapshot slot it resumes from and ``offsets`` where sources start
    (None: from the beginning, or as the snapshot says).
    """

    epoch: int
    reason: str
    snapshot: int | None
    offsets: Offsets | None
    created_ms: int

    def __post_init__(self) -> None:
        for name in ("epoch", "created_ms"):
            _count(getattr(self, name), name)
        if self.snapshot is not None:
            _count(self.snapshot, "snapshot")
        if self.offsets is not None:
            object.__setattr__(self, "offsets", _freeze_offsets(self.offsets))

    def to_json(self) -> bytes:
        """The record as canonical JSON bytes."""
        offsets = None if self.offsets is None else _plain_offsets(self.offsets)
        return _to_json(
            "epoch",
            {
                "epoch": self.epoch,
                "reason": self.reason,
                "snapshot": self.snapshot,
                "offsets": offsets,
                "created_ms": self.created_ms,
            },
        )

    @classmethod
    def from_json(cls, data: bytes, where: str) -> EpochRecord:
        """Parse `to_json` output; `DecodeError` naming ``where`` if it is not one."""
        body = _from_json(data, "epoch", where)
        try:
            offsets = body["offsets"]
            return cls(
                epoch=body["epoch"],
                reason=str(body["reason"]),
                snapshot=body["snapshot"],
                offsets=None if offsets is None else _parse_offsets(offsets),
                created_ms=body["created_ms"],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DecodeError(f"{where}: malformed epoch record: {exc!r}") from None
