"""Stateless physical operations (FlameStream runtime), deterministic on the payload.

Every physical operation has a 64-bit id derived from the pipeline name and the node's id
(its position and kind), so a replay or a restart computes the same ids and therefore the
same traces. Meta rules:

* ``map``, ``flat_map``, ``filter`` and ``broadcast`` append a child id (the ordinal of the
  output) and XOR the op id into the trace (`Meta.child`). ``filter`` is a ``flat_map``
  with zero or one output, as in FlameStream.
* ``key_by`` and ``merge`` only XOR the op id (`Meta.through`); ``key_by`` is the
  balancing function of the grouping that follows it.

A tombstone goes through the same code as its item: the meta keeps its tombstone flag,
and because the functions are deterministic on the payload the tombstone yields exactly
the tombstones of the outputs the item yielded (``filter`` passes it iff it passed the
item).
"""

from __future__ import annotations

import math
import reprlib
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from hashlib import blake2b as _blake2b
from typing import Any, NamedTuple, Protocol

from framework.core.ids import stable_id
from framework.core.meta import Meta, Record
from framework.errors import DecodeError, LoopUnsettled, UserFunctionError

# tuple.__new__ skips a NamedTuple's Python-level argument parsing: these run per item
# (measured: the source stage of a word count spends a third of its time building them).
_new = tuple.__new__
_HASHES = 1 << 16  # keys whose hash a key_by remembers


def op_id_of(pipeline: str, node_id: str) -> int:
    """The 64-bit id of physical operation ``node_id`` of ``pipeline``, equal across runs."""
    return stable_id(f"{pipeline}\x00{node_id}", 64)


class Keyed(NamedTuple):
    """A payload tagged by ``key_by``: its key, the key's stable hash, and the payload."""

    key: object
    hash: int
    value: object


def key_bytes(key: object) -> bytes:
    """Canonical bytes of a key; keys equal in Python encode equally (``1 == 1.0 == True``).

    Raises `PipelineError` for types without a canonical encoding: their ``repr`` or
    ``hash()`` may differ between processes, which would route one key to two places.
    """
    if type(key) is str:  # the common key, without the general walk (as `key_hash`)
        return _str_bytes(key)
    out = bytearray()
    _encode(key, out)
    return bytes(out)


def key_from_bytes(data: bytes) -> object:
    """The key `key_bytes` encoded (equal to it: ``True`` and ``1.0`` come back as ``1``,
    a list as a tuple). Parses only; `DecodeError` for bytes `key_bytes` never makes."""
    key, end = read_key(data)
    if end != len(data):
        raise DecodeError(f"not a key's canonical bytes: {len(data) - end} bytes after the key")
    return key


def read_key(data: bytes, start: int = 0) -> tuple[object, int]:
    """The key whose `key_bytes` begin at ``start`` of ``data``, and where they end (the
    encoding is self-delimiting); `DecodeError` if there is none, or if the bytes are not
    the key's canonical ones (``i+1;`` parses as ``1``, but only ``i1;`` names it)."""
    try:
        key, end = _decode(data, start)
        canonical = key_bytes(key)
    except (IndexError, ValueError, RecursionError, struct.error, UserFunctionError) as exc:
        raise DecodeError(f"not a key's canonical bytes: {exc}") from None
    if data[start:end] != canonical:
        raise DecodeError(f"not a key's canonical bytes: {bytes(data[start:end])!r}")
    return key, end


def key_hash(key: object) -> int:
    """A stable 64-bit hash of ``key`` (blake2b of `key_bytes`), never Python's salted hash."""
    if type(key) is str:  # the common key, without the general walk: 7 -> 2 us a word
        digest = _blake2b(_str_bytes(key), digest_size=8).digest()
        return int.from_bytes(digest, "big")
    return stable_id(key_bytes(key), 64)


def _str_bytes(key: str) -> bytes:
    """A string key's canonical bytes: ``s<length>:<utf-8>``."""
    data = key.encode()
    return b"s%d:%b" % (len(data), data)


def _encode(key: object, out: bytearray) -> None:
    if key is None:
        out += b"N"
    elif isinstance(key, bool | int) or (
        isinstance(key, float) and math.isfinite(key) and key.is_integer()
    ):
        text = str(int(key)).encode()
        out += b"i" + text + b";"
    elif isinstance(key, float):
        out += b"f" + struct.pack(">d", key)
    elif isinstance(key, str):
        out += _str_bytes(key)
    elif isinstance(key, bytes):
        out += b"b" + str(len(key)).encode() + b":" + key
    elif isinstance(key, tuple | list):
        out += b"("
        for item in key:
            _encode(item, out)
        out += b")"
    else:
        raise UserFunctionError(
            f"key {reprlib.repr(key)} of type {type(key).__name__} has no stable encoding; "
            "key_by must return None, bool, int, float, str, bytes or a tuple of them"
        )


def _decode(data: bytes, pos: int) -> tuple[object, int]:
    """Step back from `_encode`: the key starting at ``pos`` and the position after it."""
    tag = data[pos : pos + 1]
    pos += 1
    if tag == b"N":
        return None, pos
    if tag == b"i":
        end = data.index(b";", pos)
        return int(data[pos:end]), end + 1
    if tag == b"f":
        return struct.unpack_from(">d", data, pos)[0], pos + 8
    if tag in (b"s", b"b"):
        colon = data.index(b":", pos)
        size = int(data[pos:colon])
        end = colon + 1 + size
        if size < 0 or end > len(data):
            raise ValueError(f"a string of {size} bytes at {pos}")
        raw = bytes(data[colon + 1 : end])
        return (raw.decode() if tag == b"s" else raw), end
    if tag == b"(":
        items = []
        while data[pos : pos + 1] != b")":
            item, pos = _decode(data, pos)
            items.append(item)
        return tuple(items), pos + 1
    raise ValueError(f"unknown tag {tag!r} at {pos - 1}")


class Operation(Protocol):
    """A stateless physical operation: one record in, its outputs out (in child order)."""

    @property
    def op_id(self) -> int: ...

    def apply(self, record: Record) -> list[Record]: ...


def _fail(name: str, value: object, exc: Exception) -> UserFunctionError:
    return UserFunctionError(f"{name} failed on {reprlib.repr(value)}: {exc!r}")


@dataclass(frozen=True, slots=True)
class MapOp:
    """``map``: exactly one output, child id 0."""

    name: str
    op_id: int
    fn: Callable[[Any], Any]

    def apply(self, record: Record) -> list[Record]:
        try:
            value = self.fn(record.value)
        except Exception as exc:
            raise _fail(self.name, record.value, exc) from exc
        return [Record(record.meta.child(self.op_id, 0), value)]


@dataclass(frozen=True, slots=True)
class FlatMapOp:
    """``flat_map``: zero or more outputs, child ids 0, 1, ... in the function's order."""

    name: str
    op_id: int
    fn: Callable[[Any], Iterable[Any]]

    def apply(self, record: Record) -> list[Record]:
        gt, child_ids, trace, tombstone = record.meta
        try:
            values = list(self.fn(record.value))
        except Exception as exc:
            raise _fail(self.name, record.value, exc) from exc
        trace ^= self.op_id
        return [
            _new(Record, (_new(Meta, (gt, (*child_ids, i), trace, tombstone)), value))
            for i, value in enumerate(values)
        ]


@dataclass(frozen=True, slots=True)
class FilterOp:
    """``filter``: the record itself (child id 0) iff the predicate holds on its payload."""

    name: str
    op_id: int
    fn: Callable[[Any], object]

    def apply(self, record: Record) -> list[Record]:
        try:
            keep = self.fn(record.value)
        except Exception as exc:
            raise _fail(self.name, record.value, exc) from exc
        if not keep:
            return []
        return [Record(record.meta.child(self.op_id, 0), record.value)]


@dataclass(frozen=True, slots=True)
class KeyByOp:
    """``key_by``: wraps the payload as `Keyed` (key, stable hash, payload); trace XOR only."""

    name: str
    op_id: int
    fn: Callable[[Any], Any]
    hashes: dict[Any, int] = field(default_factory=dict, compare=False, repr=False)
    """Hashes of recent keys: equal keys have equal canonical bytes, so equal hashes."""

    def apply(self, record: Record) -> list[Record]:
        value = record.value
        try:
            key = self.fn(value)
        except Exception as exc:
            raise _fail(self.name, value, exc) from exc
        try:
            hash_ = self.hashes[key]
        except KeyError:
            hash_ = key_hash(key)
            if len(self.hashes) >= _HASHES:
                self.hashes.clear()
            self.hashes[key] = hash_
        except TypeError:  # unhashable (a list): nothing to remember it by
            hash_ = key_hash(key)
        gt, child_ids, trace, tombstone = record.meta
        meta = _new(Meta, (gt, child_ids, trace ^ self.op_id, tombstone))
        return [_new(Record, (meta, _new(Keyed, (key, hash_, value))))]


@dataclass(frozen=True, slots=True)
class MergeOp:
    """``merge``: passes every record of every input through; trace XOR only."""

    name: str
    op_id: int

    def apply(self, record: Record) -> list[Record]:
        return [Record(record.meta.through(self.op_id), record.value)]


def loop_marker(op_id: int) -> int:
    """The child id a loop's feedback ``op_id`` appends on every round: negative, so never
    an operation's output index, and its own, so nested loops count apart."""
    return -1 - (op_id >> 1)


@dataclass(frozen=True, slots=True)
class FeedbackOp:
    """A loop's feedback: the record goes round again with one more of the loop's marker
    in its child ids (its rounds so far: `rounds`); one that has gone ``max_rounds``
    times raises `LoopUnsettled` instead (the dead letters, with the reason).

    >>> from framework.core.time import GlobalTime
    >>> op = FeedbackOp("feedback hops", 12, max_rounds=1, loop="hops")
    >>> again = op.apply(Record(Meta(GlobalTime(3, 0, 0)), "x"))[0]
    >>> op.rounds(again.meta)
    1
    >>> op.apply(again)
    Traceback (most recent call last):
    ...
    framework.errors.LoopUnsettled: loop 'hops' did not settle within 1 round(s): 'x'
    """

    name: str
    op_id: int
    max_rounds: int
    loop: str

    def rounds(self, meta: Meta) -> int:
        """How many times the record was sent round this loop."""
        return meta.child_ids.count(loop_marker(self.op_id))

    def apply(self, record: Record) -> list[Record]:
        if self.rounds(record.meta) >= self.max_rounds:
            raise LoopUnsettled(
                f"loop {self.loop!r} did not settle within {self.max_rounds} round(s): "
                f"{reprlib.repr(record.value)}"
            )
        return [Record(record.meta.child(self.op_id, loop_marker(self.op_id)), record.value)]


@dataclass(frozen=True, slots=True)
class BroadcastOp:
    """``broadcast``: one copy per output port; copy ``i`` has child id ``i``, goes to port i."""

    name: str
    op_id: int
    ports: int

    def apply(self, record: Record) -> list[Record]:
        meta = record.meta
        return [Record(meta.child(self.op_id, i), record.value) for i in range(self.ports)]
