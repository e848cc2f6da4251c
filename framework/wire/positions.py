"""The barrier's positions on its pre-barrier topic: what is read and what is still needed.

Per partition the barrier commits ``P_rel``, the group offset: the lowest offset of a
record the barrier may still need (buffered, not yet released). A restarted barrier seeks
there and buffers again. Nothing is acked on receipt (a frame counts as received when the
transaction that wrote it commits: docs/decisions/barrier-positions.md), so a record read
twice costs a replay, never a stalled min time.

A record is done once its global time is at or before ``GT_last``: it was released, or
cancelled, or dropped as a replay. A record is a frame of items with several global times
(`framework.wire.frames`): it is done once its latest item is, and the bookkeeping stays
per offset, i.e. per frame (a frame is read and needed whole).

``GT_last`` travels in the offset's metadata, so a restart never resumes with a
``GT_last`` older than the one its ``P_rel`` was computed with; that would re-read a
tombstone without the item it cancelled.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from framework.core.time import GlobalTime
from framework.errors import DecodeError, ProtocolViolation

_VERSION = "fp1"
_BARRIER_VERSION = "fp2"  # fp1 barrier marks also held P_ack and a node time (receipt acks)


def format_gt(gt: GlobalTime | None) -> str:
    """``slot,front,offset`` (``-`` for None): a global time inside offset metadata."""
    return "-" if gt is None else f"{gt.slot},{gt.front},{gt.offset}"


def parse_gt(text: str) -> GlobalTime | None:
    """Inverse of `format_gt`; `DecodeError` on anything else."""
    if text == "-":
        return None
    try:
        slot, front, offset = (int(part) for part in text.split(","))
    except ValueError:
        raise DecodeError(f"{text[:40]!r} is not a global time 'slot,front,offset'") from None
    return GlobalTime(slot, front, offset)


@dataclass(frozen=True, slots=True)
class BarrierMark:
    """What the barrier commits as the offset metadata of each pre-barrier partition."""

    gt_last: GlobalTime | None

    def encode(self) -> str:
        """``fp2 gt=<GT_last>``."""
        return f"{_BARRIER_VERSION} gt={format_gt(self.gt_last)}"

    @classmethod
    def decode(cls, text: str, where: str) -> BarrierMark:
        """Inverse of `encode`; `ProtocolViolation` naming ``where`` on foreign metadata."""
        try:
            version, *fields = text.split(" ")
            values = dict(field.split("=", 1) for field in fields)
            if version != _BARRIER_VERSION:
                raise ValueError(f"version {version!r}")
            return cls(parse_gt(values["gt"]))
        except (ValueError, KeyError, DecodeError) as exc:
            raise ProtocolViolation(
                f"{where}: offset metadata {text!r} was not written by a flamepipe barrier "
                f"({exc}); reset the barrier's consumer group only together with its output"
            ) from exc


@dataclass(frozen=True, slots=True)
class BundleMark:
    """What a `BundleConsumer` commits as offset metadata: the bundle it received last."""

    seq: int
    gt_last: GlobalTime

    def encode(self) -> str:
        """``fp1 seq=<seq> gt=<gt_last>``."""
        return f"{_VERSION} seq={self.seq} gt={format_gt(self.gt_last)}"

    @classmethod
    def decode(cls, text: str, where: str) -> BundleMark:
        """Inverse of `encode`; `ProtocolViolation` naming ``where`` on foreign metadata."""
        try:
            version, seq, gt = text.split(" ")
            gt_last = parse_gt(gt.removeprefix("gt="))
            if version != _VERSION or not seq.startswith("seq=") or gt_last is None:
                raise ValueError("not fp1 seq=<n> gt=<slot,front,offset>")
            return cls(int(seq.removeprefix("seq=")), gt_last)
        except (ValueError, DecodeError) as exc:
            raise ProtocolViolation(
                f"{where}: offset metadata {text!r} was not written by a BundleConsumer ({exc})"
            ) from exc


@dataclass(frozen=True, slots=True)
class TaskCounts:
    """What a continuous stage task commits as its position's metadata: its partition's
    counts since the epoch began, committed with the work they count (so a restart
    neither loses nor counts anything twice), read by the driver for its figures."""

    records_in: int = 0
    items_in: int = 0
    items_out: int = 0
    dead_letters: int = 0
    tombstones: int = 0
    commits: int = 0
    lifted: int = 0  # source records whose slot a lift moved (`framework.wire.lifts`)
    last_ms: int = -1  # the latest timestamp of a record committed (-1: none yet)
    # How far the task's clock ran ahead of the broker's at its last heartbeat (ms; 0 when
    # behind or not measured): the heartbeats it sends take that much off its clock.
    clock_ahead_ms: int = 0

    def encode(self) -> str:
        """``fp1 r=<records in> i=<items in> o=<items out> d=<dead letters> t=<tombstones>
        c=<commits> l=<lifted> m=<latest timestamp> k=<clock ahead>``."""
        return (
            f"{_VERSION} r={self.records_in} i={self.items_in} o={self.items_out} "
            f"d={self.dead_letters} t={self.tombstones} c={self.commits} l={self.lifted} "
            f"m={self.last_ms} k={self.clock_ahead_ms}"
        )

    @classmethod
    def decode(cls, text: str, where: str) -> TaskCounts:
        """Inverse of `encode` (empty metadata: nothing counted yet); `ProtocolViolation`
        naming ``where`` on foreign metadata."""
        if not text:
            return cls()
        try:
            version, *fields = text.split(" ")
            values = {k: int(v) for k, v in (field.split("=", 1) for field in fields)}
            if version != _VERSION:
                raise ValueError(f"version {version!r}")
            fields_ = (values["r"], values["i"], values["o"], values["d"], values["t"])
            return cls(*fields_, values["c"], values["l"], values["m"], values.get("k", 0))
        except (ValueError, KeyError) as exc:
            raise ProtocolViolation(
                f"{where}: offset metadata {text!r} was not written by a flamepipe stage "
                f"task ({exc})"
            ) from exc

    def add(self, commit: TaskCounts) -> TaskCounts:
        """These counts plus one commit's (its ``commits`` is not read: it is one; its
        ``clock_ahead_ms`` is the latest)."""
        return TaskCounts(
            self.records_in + commit.records_in,
            self.items_in + commit.items_in,
            self.items_out + commit.items_out,
            self.dead_letters + commit.dead_letters,
            self.tombstones + commit.tombstones,
            self.commits + 1,
            self.lifted + commit.lifted,
            max(self.last_ms, commit.last_ms),
            commit.clock_ahead_ms,
        )


class PartitionLedger:
    """Offsets of one pre-barrier partition (see the module docstring)."""

    __slots__ = ("_held", "position")

    def __init__(self, start: int) -> None:
        """Resume reading at ``start`` (``P_rel``)."""
        self.position = start
        self._held: deque[tuple[int, GlobalTime]] = deque()

    def read(self, offset: int, gt: GlobalTime) -> None:
        """Record that the record at ``offset`` was read; ``gt``: its latest item's time."""
        if offset < self.position:
            raise ProtocolViolation(f"offset {offset} read again (position {self.position})")
        self.position = offset + 1
        self._held.append((offset, gt))

    def skip(self, offset: int) -> None:
        """Record that the record at ``offset`` was read and refused: nothing to hold."""
        if offset < self.position:
            raise ProtocolViolation(f"offset {offset} read again (position {self.position})")
        self.position = offset + 1

    def release_position(self, gt_last: GlobalTime | None) -> int:
        """``P_rel``: the lowest offset of a record after ``gt_last``, else the position.

        Records leave in offset order only, so one with a late global time keeps the
        records after it; they are read again after a restart and dropped as replays.
        """
        held = self._held
        if gt_last is not None:
            while held and held[0][1] <= gt_last:
                held.popleft()
        return held[0][0] if held else self.position
