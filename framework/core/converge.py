"""Per key, the join of every payload so far, as of each payload's global time.

The keyed state a loop can hold (docs/decisions/cyclic-dataflows.md, "Keyed state inside
a loop"): ``join`` must be commutative, associative and idempotent (a join-semilattice:
min of labels, union of sets, max of versions). The value of a key *as of* a global time
is the join of its payloads at or before it; every payload emits the key's value as of its
own time when that value grew, so an output never holds anything from a later time. Items
may arrive in any order: a payload that arrives after later ones re-emits the values as of
those later times that it changed (as a grouping repairs its windows), with a new child id
each time. What is emitted depends on the arrival order; what the outputs say as of any
time does not: the join of the values emitted at or before it is the value as of it.
Consume them with an idempotent aggregate (per key and pane, the join so far) and the
result is the same in every run.

Protocol on a payload ``x`` of key ``k`` with meta ``m``:

1. Find ``k``'s history: its base (the join of everything below min time) and its
   payloads at or above it, sorted by meta, each with its value as of it.
2. Its value as of ``m`` is the value before its position ``i`` joined with ``x``. If
   that did not grow the value before ``i``, ``x`` is subsumed: values only grow, so it
   changes no value, now or later; drop it and stop.
3. Insert ``x`` at ``i`` and emit ``(k, value)`` at ``m``.
4. For each later payload in order, join ``x`` into its value and emit at that payload's
   meta (a child id one higher than its last emission), until a value that holds ``x``
   already: every value after it does too.

Min time prunes: payloads below it are joined into the base and dropped.

As a stage's state (`framework.plan.stage_state`) a key's history is one changelog bucket:
``(metas, [(value, payload, emissions), ...], [], base, has_base)``, the layout of an
aggregate's (its early tombstones always empty, the base carried), so a snapshot cuts it
as it cuts an aggregate's image: the entries below the cut stay, and their values and
emissions do not depend on anything at or after it (step 4 changes later entries only).

Example::

    >>> from framework.core.ops import Keyed
    >>> from framework.core.time import GlobalTime
    >>> def item(slot, value):
    ...     return Record(Meta(GlobalTime(slot, 0, 0)), Keyed("v", 0, value))
    >>> op = Converge(7, min)
    >>> [out.value.value for out in op.push(item(5, 3))]
    [3]
    >>> [out.value.value for out in op.push(item(2, 4))]  # earlier, and 3 was later
    [4]
    >>> [out.value.value for out in op.push(item(1, 1))]  # changes both later values
    [1, 1, 1]
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from framework.core.grouping import keyed_of, meta_from_plain
from framework.core.meta import Meta, Record
from framework.core.values import UserValue
from framework.core.windows import KeyValue
from framework.errors import ProtocolViolation, UserFunctionError

# Values are the user's lattice elements: any type ``join`` takes.
Join = Callable[[UserValue, UserValue], UserValue]


@dataclass(slots=True)
class _History:
    """One key: the join below min time, and each later payload with its value as of it."""

    base: UserValue = None
    has_base: bool = False
    metas: list[Meta] = field(default_factory=list)
    values: list[UserValue] = field(default_factory=list)  # the value as of each payload
    payloads: list[UserValue] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)  # emissions at each payload so far


class Converge:
    """The converge physical operation with op id ``op_id`` over `Keyed` records."""

    __slots__ = ("_changed", "_histories", "join", "min_time", "op_id")

    def __init__(self, op_id: int, join: Join) -> None:
        self.op_id = op_id
        self.join = join
        self.min_time = 0  # the highest min time pruned by
        self._histories: dict[object, _History] = {}
        self._changed: dict[object, None] = {}  # keys changed since `take_changed`

    def push(self, record: Record) -> list[Record]:
        """Take one payload (module docstring, steps 1-4); the outputs in emission order."""
        if record.meta.tombstone:
            raise ProtocolViolation(
                "converge got a tombstone: a join cannot take a payload back (the graph "
                "refuses a grouping before converge without an aggregate between)"
            )
        keyed = keyed_of(record)
        # Step 1
        history = self._histories.get(keyed.key)
        if history is None:
            history = self._histories[keyed.key] = _History()
        # Step 2
        at = bisect_right(history.metas, record.meta)
        before, known = self._value_before(history, at)
        value = self._join(before, keyed.value) if known else keyed.value
        if known and value == before:
            # Subsumed: values only grow, so it changes no value now or ever (measured: a
            # loop's traffic is mostly such proposals; kept, they made histories, and each
            # late payload's walk over them, grow without bound until min time).
            return []
        history.metas.insert(at, record.meta)
        history.payloads.insert(at, keyed.value)
        history.values.insert(at, value)
        history.emitted.insert(at, 0)
        # Step 3
        self._changed[keyed.key] = None
        out = [self._emit(history, at, keyed.key)]
        # Step 4
        for later in range(at + 1, len(history.metas)):
            grown = self._join(history.values[later], keyed.value)
            if grown == history.values[later]:
                break  # it holds the payload already, and so does every value after it
            history.values[later] = grown
            out.append(self._emit(history, later, keyed.key))
        return out

    def on_min_time(self, slot: int) -> None:
        """Join the payloads below ``slot`` into their key's base and drop them.

        A pruned key is not marked changed: its older bucket in the changelog says the
        same as of every time at or after ``slot``, and a restore prunes it again."""
        if slot <= self.min_time:
            return
        self.min_time = slot
        for history in self._histories.values():
            below = 0
            while below < len(history.metas) and history.metas[below].gt.slot < slot:
                below += 1
            if below:
                history.base, history.has_base = history.values[below - 1], True
                for column in (history.metas, history.values, history.payloads):
                    del column[:below]
                del history.emitted[:below]

    def value(self, key: object) -> UserValue:
        """``key``'s value as of everything received (None before any payload)."""
        history = self._histories.get(key)
        if history is None:
            return None
        if history.values:
            return history.values[-1]
        return history.base

    # -- as a stage's state: one changelog bucket per key (module docstring) -------------

    def take_changed(self) -> list[object]:
        """The keys changed since the last call."""
        changed, self._changed = list(self._changed), {}
        return changed

    def bucket_state(self, key: object) -> tuple[Any, ...] | None:
        """``key``'s history as a changelog bucket (module docstring), None if none."""
        h = self._histories.get(key)
        if h is None:
            return None
        entries = list(zip(h.values, h.payloads, h.emitted, strict=True))
        return (list(h.metas), entries, [], h.base, h.has_base)

    def put_bucket(self, key: object, state: tuple[Any, ...] | None) -> None:
        """``key``'s history from its changelog bucket (None or empty: gone)."""
        metas, entries, _early, base, has_base = state or ((), (), (), None, False)
        if not metas and not has_base:  # a snapshot's cut above none of its payloads
            self._histories.pop(key, None)
            return
        self._histories[key] = _History(
            base,
            bool(has_base),
            [meta_from_plain(m) for m in metas],
            [e[0] for e in entries],
            [e[1] for e in entries],
            [int(e[2]) for e in entries],
        )

    def put_min_time(self, slot: int) -> None:
        """A changelog's min time: prune by it."""
        self.on_min_time(slot)

    def put_floor(self, slot: int) -> None:
        """A restore's floor: nothing to do (a converge's emissions at or after it are
        released or not by the barrier, which knows what it released)."""

    def _value_before(self, history: _History, at: int) -> tuple[UserValue, bool]:
        if at > 0:
            return history.values[at - 1], True
        return history.base, history.has_base

    def _join(self, a: UserValue, b: UserValue) -> UserValue:
        try:
            return self.join(a, b)
        except Exception as exc:
            raise UserFunctionError(f"converge's join failed on {a!r} and {b!r}: {exc!r}") from exc

    def _emit(self, history: _History, at: int, key: object) -> Record:
        child = history.emitted[at]
        history.emitted[at] = child + 1
        meta = history.metas[at].child(self.op_id, child)
        return Record(meta, KeyValue(key, history.values[at]))
