"""Step 1-2 of an aggregate stage that reduces per pane (`framework.core.panes`), in bulk.

Such a stage's items go nowhere but into their key's cell, and a cell is the same whatever
order its items arrive in (``combinable``: the reduction's order is immaterial; the
largest meta is the largest in any order). So the batch needs no record per item, no sort
by meta and no walk through the stage's nodes: each frame's rows are read as they were
written, its receipts are acked per slot in one pass (`framework.plan.columnar`), and each
row is reduced into its cell. What the per-item path would do, to the same state,
changelog, holds and acks (results may leave in another order); a unit test compares the
two.

Protocol of `take_frames`:

1. Authenticate and read every frame; a record that is no authentic keyed frame leaves
   the whole batch to the per-item path (nothing is changed before).
2. Ack every item's receipt into the stage's segment: one XOR per slot.
3. Reduce each item into its cell; an item whose reduction raises becomes a dead letter
   (or fails the task), as on the per-item path. Which item of a cell that is depends on
   the order the items reach it (here the frames', there meta order within a batch), as it
   does across batches on either path: a ``combinable`` reduce that raises is not
   commutative after all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from framework.core.meta import Meta, Record
from framework.core.ops import Keyed
from framework.core.panes import PaneAggregator
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation, UserFunctionError
from framework.plan.columnar import slot_xors
from framework.wire.auth import current
from framework.wire.frames import frame_rows
from framework.wire.records import InRecord

if TYPE_CHECKING:
    from framework.plan.task import _TaskRun

_new = tuple.__new__  # builds the NamedTuples without a Python-level __new__ call


def take_frames(run: _TaskRun, state: PaneAggregator, records: list[InRecord]) -> bool:
    """Steps 1-3 for a batch of frames; False (nothing done) to leave it to the per-item
    path (a record that is not an authentic keyed frame: that path says so)."""
    # Step 1
    frames: list[tuple[InRecord, list[tuple[Any, ...]]]] = []
    for record in records:
        rows = _keyed_rows(run, record)
        if rows is None:
            return False
        frames.append((record, rows))
    count = sum(len(rows) for _, rows in frames)
    run.result.items_in = count
    if records:
        run.partition = records[-1].partition
    if not count:
        return True
    # Step 2
    if not run.spec.unacked_input:  # items that came unacked were never sent-acked
        slots = np.fromiter((r[0] for _, rows in frames for r in rows), np.int64, count)
        acks = np.fromiter((r[6] for _, rows in frames for r in rows), np.uint64, count)
        segment, ack = run.entry_segment, run.acker.ack
        for slot, value in slot_xors(slots, acks):
            ack(segment, slot, value)
    # Step 3
    add = state.add
    for record, rows in frames:
        for index, (s, f, o, c, t, b, _, k, _, v) in enumerate(rows):
            meta = _new(Meta, (_new(GlobalTime, (s, f, o)), c, t, b))
            try:
                add(k, meta, v)
            except UserFunctionError as exc:
                item = Record(meta, Keyed(k, rows[index][8], v))
                run.failed(exc, item, record, index)
    return True


def _keyed_rows(run: _TaskRun, record: InRecord) -> list[tuple[Any, ...]] | None:
    """The rows of an authentic keyed frame without tombstones (a tick has none), else
    None."""
    if record.value is None or not current().verify(
        record.topic, record.key, record.value, record.headers
    ):
        return None  # the per-item path counts the refusal, once
    try:
        keyed, rows = frame_rows(record.headers, record.value, "")
    except ProtocolViolation:  # the per-item path names what is wrong with it
        return None
    if keyed is not True or not isinstance(rows, list):
        return None
    if not all(type(r) is tuple and len(r) == 10 and r[5] is False for r in rows):
        return None
    return rows
