"""Frames: many items in one Kafka record on flamepipe's internal topics.

Why: a record per item made the per-record costs dominate both stages (an Avro header
encoded and decoded per item, a pickle call per payload, a Kafka record and a Spark row
per item; measured in ``docs/decisions/framed-items.md``). A task therefore writes the
items it sends to one partition of a shuffle or pre-barrier topic as a few frames.

Wire format, version 1:

* header ``fp.frame`` = the version in ASCII (``b"1"``); no key (the writer picks the
  partition, and every item of a frame goes to that partition);
* value = pickle (protocol 5) of ``(keyed, rows)``, one row per item in the order written:
  ``(slot, front, offset, child_ids, trace, tombstone, ack, *payload)``, where payload is
  ``key, hash, value`` of a `Keyed` if ``keyed``, else the payload alone. Plain tuples, not
  `Meta` and `Keyed`: pickling a NamedTuple costs a Python call per object (3x slower).
* a *tick* is a keyed frame without items: the driver sends one to make an aggregate
  stage run a batch when its min time completes a window and no data is arriving;
* a frame holds at most ``FRAME_ITEMS`` items and ``FRAME_BYTES`` (one larger item
  travels alone), well below the broker's default 1 MB record limit.

Each item keeps its own ack value: the receiver acks exactly what a record per item would
have made it ack. A record that is not a frame is a `ProtocolViolation` and fails the
task: only flamepipe writes these topics, and a frame sent to the dead letters whole would
take its items' acks with it, stalling the min time without a word.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import Any

from framework.core.meta import Meta
from framework.core.ops import Keyed
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation

FRAME_HEADER = "fp.frame"
"""Header of a frame: its format version in ASCII."""
FRAME_VERSION = 1
FRAME_HEADERS: tuple[tuple[str, bytes], ...] = ((FRAME_HEADER, str(FRAME_VERSION).encode()),)
"""The headers every frame of this version carries."""
FRAME_BYTES = 512 * 1024
"""Most bytes in one frame's value, unless a single item needs more."""
FRAME_ITEMS = 4096
"""Most items in one frame: a stage reading N frames reads at most N * FRAME_ITEMS items."""

_PROBE = 64  # items encoded first to learn the size of one
_FILL = 0.75  # aim below the limit: item sizes vary

FrameItem = tuple[Meta, int, Any]
"""An item in a frame: its meta, its ack value, its payload."""
Headers = Mapping[str, bytes | str | None] | Iterable[tuple[str, bytes | str | None]]
"""Record headers, as a task or confluent_kafka has them."""
_new = tuple.__new__  # builds the NamedTuples without a Python-level __new__ call


class FrameBuilder:
    """The items one task sends to one partition, turned into frames at the end."""

    __slots__ = ("keyed", "rows")

    def __init__(self, keyed: bool) -> None:
        """``keyed``: every payload is a `Keyed` (a shuffle topic)."""
        self.keyed = keyed
        self.rows: list[tuple[Any, ...]] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, meta: Meta, ack: int, payload: Any) -> None:
        """Append one item; on a keyed builder ``payload`` must be a `Keyed`."""
        gt = meta[0]
        if self.keyed:
            self.rows.append(
                (
                    gt[0],
                    gt[1],
                    gt[2],
                    meta[1],
                    meta[2],
                    meta[3],
                    ack,
                    payload[0],
                    payload[1],
                    payload[2],
                )
            )
        else:
            self.rows.append((gt[0], gt[1], gt[2], meta[1], meta[2], meta[3], ack, payload))

    def add_columns(
        self,
        slots: list[int],
        offsets: list[int],
        child_ids: Iterable[tuple[int, ...]],
        acks: list[int],
        payload: list[list[Any]],
        *,
        front: int,
        trace: int,
    ) -> None:
        """Append items given as columns, all of one front and trace and none a tombstone:
        what `add` appends item by item. ``payload``: the keys, hashes and values on a
        keyed builder, else the payloads."""
        if len(payload) != (3 if self.keyed else 1):
            raise ValueError(f"{len(payload)} payload columns for a keyed={self.keyed} frame")
        count = len(acks)
        self.rows.extend(
            zip(
                slots,
                repeat(front, count),
                offsets,
                child_ids,
                repeat(trace, count),
                repeat(False, count),
                acks,
                *payload,
                strict=True,
            )
        )

    def frames(self, max_bytes: int = FRAME_BYTES, max_items: int = FRAME_ITEMS) -> list[bytes]:
        """The values of the frames holding every item added, in order."""
        rows, keyed = self.rows, self.keyed
        if not rows:
            return []
        # Bytes per item, from the first few: a frame size to aim at.
        probe = pickle.dumps((keyed, rows[: min(_PROBE, max_items)]), protocol=5)
        if len(rows) <= min(_PROBE, max_items) and len(probe) <= max_bytes:
            return [probe]
        count = max(1, int(max_bytes * _FILL * min(len(rows), _PROBE) / len(probe)))
        count = min(count, max_items)
        out: list[bytes] = []
        start = 0
        while start < len(rows):
            chunk = rows[start : start + count]
            data = pickle.dumps((keyed, chunk), protocol=5)
            if len(data) > max_bytes and len(chunk) > 1:
                count = len(chunk) // 2  # too big: the same items in smaller frames
                continue
            out.append(data)
            start += len(chunk)
            count = min(max_items, max(1, int(max_bytes * _FILL * len(chunk) / len(data))))
        return out


def decode_frame(version: bytes, value: bytes, where: str) -> list[FrameItem]:
    """The items of the frame ``value`` with header value ``version``, read at ``where``."""
    _check_version(version, where)
    try:
        keyed, rows = _loads(value)
        if keyed is True:
            return [
                (_new(Meta, (_new(GlobalTime, (s, f, o)), c, t, b)), a, _new(Keyed, (k, h, v)))
                for s, f, o, c, t, b, a, k, h, v in rows
            ]
        if keyed is False:
            return [
                (_new(Meta, (_new(GlobalTime, (s, f, o)), c, t, b)), a, v)
                for s, f, o, c, t, b, a, v in rows
            ]
        raise TypeError(f"keyed flag {keyed!r}")
    except Exception as exc:  # garbage makes pickle and unpacking raise almost anything
        raise ProtocolViolation(
            f"{where}: malformed frame ({type(exc).__name__}: {exc}); only flamepipe may "
            "write to its internal topics"
        ) from exc


def _loads(value: bytes) -> tuple[Any, list[Any]]:
    keyed, rows = pickle.loads(value)
    if not rows and keyed is not True:
        raise ValueError("no items")  # only a tick (keyed) is an empty frame
    return keyed, rows


def frame_rows(
    headers: Headers | None, value: bytes | None, where: str
) -> tuple[bool, list[tuple[Any, ...]]]:
    """A frame's keyed flag and its rows as written (see the format above), unchecked: for
    a reader that checks what it uses. `ProtocolViolation` if it is no frame."""
    _check_version(_version(headers, value, where), where)
    assert value is not None  # _version
    try:
        keyed, rows = _loads(value)
    except Exception as exc:
        raise ProtocolViolation(f"{where}: malformed frame ({type(exc).__name__}: {exc})") from exc
    if keyed not in (True, False) or not isinstance(rows, list):
        raise ProtocolViolation(f"{where}: malformed frame (keyed flag {keyed!r})")
    return keyed, rows


def _version(headers: Headers | None, value: bytes | None, where: str) -> bytes:
    version = None
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    for name, raw in pairs:
        if name == FRAME_HEADER:
            version = raw
    if value is None or version is None:
        raise ProtocolViolation(
            f"{where}: no {FRAME_HEADER} header or no value: only flamepipe may write to its "
            "internal topics"
        )
    return _bytes(version)


def read_items(headers: Headers | None, value: bytes | None, where: str) -> list[FrameItem]:
    """The items of a record on an internal topic (a frame)."""
    return decode_frame(_version(headers, value, where), value or b"", where)


def _check_version(version: bytes, where: str) -> None:
    if version != FRAME_HEADERS[0][1]:
        raise ProtocolViolation(
            f"{where}: frame version {bytes(version)!r} is unknown to this flamepipe (it "
            f"reads version {FRAME_VERSION}); upgrade every reader before any writer"
        )


def _bytes(raw: bytes | str | None) -> bytes:
    return raw.encode() if isinstance(raw, str) else (raw or b"")


def tick_frame() -> bytes:
    """A frame without items: it makes a stage run a batch (an aggregate emit its windows)."""
    return pickle.dumps((True, []), protocol=5)
