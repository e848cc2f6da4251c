"""Joins as compositions of tagged, merged, keyed streams; deterministic under replay.

Both sides are tagged (`Tag`: a `Side` with 0 for the left or stream side, 1 for the right
or table side), keyed by the user's key functions of the untagged payload (`SideKey`),
merged, and fed to one stateful operation:

* **Windowed join** (``Stream.join_window``): a tumbling `aggregate` collects each key's
  items per window in global-time order; `WindowPairs` turns the window into `Joined`
  pairs, every left with every right (inner), and a left without any right with None
  (left). Final once min time passes the window's end: a side that never arrives does not
  stall anything, the window closes on min time.
* **Temporal table join** (``Stream.join_table``): a rolling operation (`TableLookup`)
  per key in global-time order: a table item replaces the key's value (`deletes` says
  which rows delete it), a stream item is joined with the value as of its own global time. The
  same input gives the same output whatever the timing; a key never in the table answers
  "absent" (left: None; inner: no output, counted as an item without output).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from framework.core.values import UserValue
from framework.core.windows import NO_VALUE, WindowResult
from framework.errors import PipelineError

LEFT, RIGHT = 0, 1
How = Literal["inner", "left"]


def check_how(how: str) -> None:
    """`PipelineError` unless ``how`` is a join kind flamepipe has."""
    if how not in ("inner", "left"):
        raise PipelineError(f"how must be 'inner' or 'left', got {how!r}")


class Joined(NamedTuple):
    """A join's output: the key, the left (stream) payload, the right (table) payload or
    None where a left join found none."""

    key: object
    left: object
    right: object


class Side(NamedTuple):
    """A payload tagged with its side of a join (0: left / stream, 1: right / table)."""

    side: int
    value: object


@dataclass(frozen=True, slots=True)
class Tag:
    """``map`` function: the payload as a `Side`."""

    side: int

    def __call__(self, payload: UserValue) -> Side:
        return Side(self.side, payload)


@dataclass(frozen=True, slots=True)
class SideKey:
    """``key_by`` function of a tagged payload: the user's key of the payload inside."""

    fn: Callable[[UserValue], UserValue]

    def __call__(self, tagged: Side) -> UserValue:
        return self.fn(tagged.value)


@dataclass(frozen=True, slots=True)
class WindowPairs:
    """``flat_map`` of a window's tagged items: the `Joined` pairs, in global-time order."""

    how: How

    def __call__(self, result: WindowResult) -> list[Joined]:
        items: Sequence[Side] = result.value  # type: ignore[assignment]
        lefts = [item.value for item in items if item.side == LEFT]
        rights = [item.value for item in items if item.side == RIGHT]
        if not rights:
            return [Joined(result.key, left, None) for left in lefts] if self.how == "left" else []
        return [Joined(result.key, left, right) for left in lefts for right in rights]


def deletes(row: object) -> bool:
    """Whether a table row deletes its key: None, or ``(key, None)`` (a tombstone read by
    ``KafkaSource(key=..., tombstones=True)``)."""
    return row is None or (type(row) is tuple and len(row) == 2 and row[1] is None)


@dataclass(frozen=True, slots=True)
class TableLookup:
    """The `framework.core.windows.Step` of a temporal table join."""

    how: How

    def __call__(
        self, key: object, acc: UserValue, payload: Side
    ) -> tuple[UserValue, Sequence[UserValue]]:
        if payload.side == RIGHT:
            return (NO_VALUE if deletes(payload.value) else payload.value), ()
        if acc is NO_VALUE:
            return acc, (Joined(key, payload.value, None),) if self.how == "left" else ()
        return acc, (Joined(key, payload.value, acc),)
