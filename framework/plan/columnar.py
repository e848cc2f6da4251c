"""A source stage's chain of stateless operations run on columns (`framework.core.columns`).

A source stage whose nodes form one chain of ``map``, ``flat_map``, ``filter`` and
``key_by`` (and their batch twins) into one exit runs its batch as columns: no record and
meta objects per item between the operations, map-side combining without a meta per item,
metas made only for the items that leave. The output is the per-item path's exactly (same
items, metas, frames and order; `framework.plan.task`), which a unit test checks on random
chains.

Protocol of `flow_columns`, steps 1-2 of the stage task (`framework.plan.task`):

1. Decode every record and order the batch by global time (slot from the timestamp or a
   lift, then offset; one front per task).
2. Run each operation of the chain over all items.
3. Leave the stage: into the map-side partials of a combinable aggregate (per key and
   pane, reduced in item order; the partial's meta is the pane's last item's), or every
   item emitted with its meta.

Everything that would make one record a dead letter (an undecodable record, a user
function or a sink's encoder that raises) happens before anything is emitted; then the
batch is left to the per-item path, which finds the record and sends it to the dead
letters exactly as without columns. The caller counts such fallbacks.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from framework.core.columns import Columns, apply
from framework.core.meta import Meta, Record
from framework.core.ops import Operation
from framework.core.reducers import Reducer, combine_runs
from framework.errors import DecodeError, EncodeError, UserFunctionError
from framework.wire.bundles import barrier_instance
from framework.wire.records import InRecord

if TYPE_CHECKING:
    from framework.plan.task import _ExitRoute, _TaskRun

log = logging.getLogger(__name__)

_ITEM_ERRORS = (DecodeError, UserFunctionError, EncodeError)
_new = tuple.__new__  # a NamedTuple without its keyword-handling constructor


def flow_columns(
    run: _TaskRun, ops: Sequence[Operation], route: _ExitRoute, records: list[InRecord]
) -> bool:
    """Steps 1-3 for a source batch; False (nothing emitted) to leave it to the per-item
    path: one of its records is a dead letter, or the batch reads more than one front."""
    first = records[0]
    if any(r.partition != first.partition or r.topic != first.topic for r in records):
        return False
    spec = run.spec
    assert spec.source is not None  # a source stage (`StageProgram`)
    try:
        # Step 1
        decode = spec.source.payload
        payloads = [decode(r) for r in records]
        offsets = np.fromiter((r.offset for r in records), np.int64, len(records))
        stamps = np.fromiter((r.timestamp_ms for r in records), np.int64, len(records))
        slots = stamps // spec.graph.delta_ms
        if run.slots:
            for i, offset in enumerate(offsets.tolist()):
                slots[i] = run.slots.get(offset, slots[i])
        order = np.lexsort((offsets, slots))
        if np.any(order != np.arange(len(order))):
            payloads = [payloads[i] for i in order.tolist()]
            offsets, slots = offsets[order], slots[order]
        # Step 2
        cols = Columns.of(payloads)
        for op in ops:
            cols = apply(op, cols)
        # Step 3
        front = run.front_of(first.topic, first.partition)
        partials = sent = None
        if route.aggregation is not None:
            partials = _combine(route, cols, slots)
        elif route.encode is None:
            if route.shuffle and cols.keys is None:
                return False  # unkeyed into a grouping: the per-item path says so per record
            cols = replace(cols, values=cols.pylist())
        else:
            sent = _outputs(route, cols, cols.metas(slots, offsets, front))
    except _ITEM_ERRORS as exc:
        where = f"{first.topic}[{first.partition}]"
        log.debug("a batch of %s is left to the per-item path: %s", where, exc)
        return False
    if route.aggregation is not None and partials is None:
        return False
    run.partition = first.partition
    run.result.items_in = len(records)
    if partials is not None:
        parents = partials.parents
        _send_columns(run, route, partials, slots[parents], offsets[parents], front=front)
    elif sent is not None:
        for meta, value in sent:
            run.send(route, meta, value)
    else:
        _send_columns(run, route, cols, slots[cols.parents], offsets[cols.parents], front=front)
    return True


def emit_results(
    run: _TaskRun, ops: Sequence[Operation], route: _ExitRoute, results: list[Record]
) -> bool:
    """An aggregate's window results through the stage's chain into a sink, on columns:
    what `_TaskRun.emit_windows` does result by result (the same metas, records, ack
    values, frames and order), without a record per result between the operations or a
    send per item. False (nothing emitted) for a tombstone, which no aggregate emits."""
    metas_in = [r.meta for r in results]
    if any(m.tombstone for m in metas_in):
        return False
    cols = Columns.of([r.value for r in results])
    for op in ops:
        cols = apply(op, cols)
    trace = cols.trace
    parents = map(metas_in.__getitem__, cols.parents.tolist())
    metas = [
        _new(Meta, (p.gt, p.child_ids + path, p.trace ^ trace, False))
        for p, path in zip(parents, cols.paths(), strict=True)
    ]
    encode = route.encode_many
    assert encode is not None
    _send_outputs(run, route, metas, encode(metas, cols.pylist()))
    return True


def _send_outputs(run: _TaskRun, route: _ExitRoute, metas: list[Meta], values: list[Any]) -> None:
    """`_TaskRun.send` of each sink record in ``values``, the acks XORed per slot."""
    count = len(metas)
    if not count:
        return
    acks = run.ack_values(count)
    if route.acked:
        slots = np.fromiter((m.gt.slot for m in metas), np.int64, count)
        for slot, value in slot_xors(slots, np.asarray(acks, np.uint64)):
            run.acker.ack(route.segment, slot, value)
    partitions, spread = route.partitions, route.sink_partitions
    builder = run.builder
    for meta, ack, value in zip(metas, acks, values, strict=True):
        if spread:
            partition = barrier_instance(value[0], meta, spread, partitions)
        else:
            partition = meta.gt.front % partitions
        builder(route, partition).add(meta, ack, value)
    run.result.items_out += count


def _send_columns(
    run: _TaskRun, route: _ExitRoute, cols: Columns, slots: Any, offsets: Any, *, front: int
) -> None:
    """Step 3 for items leaving as they are (into a shuffle or another stage): what
    `_TaskRun.send` does item by item, on columns."""
    count = len(cols)
    if not count:
        return
    acks = run.ack_values(count)
    if route.acked:
        for slot, value in slot_xors(slots, np.asarray(acks, np.uint64)):
            run.acker.ack(route.segment, slot, value)
    if route.shuffle:
        assert cols.keys is not None and cols.hashes is not None
        payload = [cols.keys, cols.hashes, cols.pylist()]
        partitions = np.asarray(cols.hashes, np.uint64) % np.uint64(route.partitions)
    else:
        payload = [cols.pylist()]
        partitions = np.full(count, front % route.partitions, np.uint64)
    columns = [slots.tolist(), offsets.tolist(), cols.paths(), acks, *payload]
    firsts = np.unique(partitions, return_index=True)[1]
    for partition in partitions[np.sort(firsts)].tolist():
        builder = run.builder(route, partition)
        if len(firsts) == 1:
            part = columns
        else:
            rows = np.flatnonzero(partitions == partition).tolist()
            part = [[column[i] for i in rows] for column in columns]
        slot_l, offset_l, paths, ack_l, *payload_l = part
        builder.add_columns(
            slot_l, offset_l, paths, ack_l, payload_l, front=front, trace=cols.trace
        )
    run.result.items_out += count


def slot_xors(slots: Any, acks: Any) -> list[tuple[int, int]]:
    """Each slot once, with the XOR of its items' ack values, in the order the per-item
    path first acks it. Items in meta order make each slot one run (O(n)); partials are in
    first-seen order, so their slots are grouped by sorting."""
    if np.all(slots[1:] >= slots[:-1]):
        starts = np.flatnonzero(np.diff(slots, prepend=slots[0] - 1))
        xors = np.bitwise_xor.reduceat(acks, starts)
        return list(zip(slots[starts].tolist(), xors.tolist(), strict=True))
    found, firsts, inverse = np.unique(slots, return_index=True, return_inverse=True)
    grouped = np.zeros(len(found), np.uint64)
    np.bitwise_xor.at(grouped, inverse, acks)
    order = np.argsort(firsts, kind="stable")
    return list(zip(found[order].tolist(), grouped[order].tolist(), strict=True))


def _outputs(route: _ExitRoute, cols: Columns, metas: list[Meta]) -> list[tuple[Meta, Any]]:
    """Step 3 into a sink: every item's meta and its output record."""
    encode = route.encode_many
    assert encode is not None
    return list(zip(metas, encode(metas, cols.pylist()), strict=True))


def _combine(route: _ExitRoute, cols: Columns, slots: Any) -> Columns | None:
    """Step 3 into a combinable aggregate: one partial per key and pane, reduced in item
    order, with the meta of its last item (the largest: items are in meta order)."""
    if cols.keys is None or cols.hashes is None:
        return None
    aggregation = route.aggregation
    assert aggregation is not None and aggregation.reduce is not None
    reduce = aggregation.reduce
    panes = slots[cols.parents] // route.pane
    if isinstance(reduce, Reducer):
        try:
            runs_of = combine_runs(reduce, panes, cols.keys, cols.values)
        except Exception as exc:  # a field the payloads lack, say: the per-item path names it
            raise UserFunctionError(f"reduce of {route.target} failed") from exc
        if runs_of is not None:
            return _partials(cols, runs_of)
    keys, values = cols.keys, cols.pylist()
    first_of = reduce.start if isinstance(reduce, Reducer) else None
    # Items are in meta order, so panes never decrease: one dictionary per run of a pane,
    # whose keys are first seen in the order the per-item path's would be.
    bounds = [0, *(np.flatnonzero(np.diff(panes)) + 1).tolist(), len(panes)]
    runs: list[tuple[int, dict[Any, list[Any]]]] = []
    try:
        for start, end in itertools.pairwise(bounds):
            partials: dict[Any, list[Any]] = {}
            get = partials.get
            for i in range(start, end):
                key, value = keys[i], values[i]
                pending = get(key)
                if pending is None:
                    partials[key] = [i, value if first_of is None else first_of(value), i]
                else:
                    pending[1] = reduce(pending[1], value)
                    pending[0] = i
            if partials:
                runs.append((int(panes[start]), partials))
    except Exception as exc:
        raise UserFunctionError(f"reduce of {route.target} failed") from exc
    entries = [(pane, p[2], p[0], p[1]) for pane, partials in runs for p in partials.values()]
    return _partials(cols, entries)


def _partials(cols: Columns, entries: list[tuple[int, int, int, Any]]) -> Columns:
    """Per ``(pane, first item, last item, value)``, in that order: the partial as an item
    with its first item's key (the one a dictionary of keys keeps) and hash, and its last
    item's meta (parent and child ids)."""
    last = np.fromiter((e[2] for e in entries), np.int64, len(entries))
    firsts = [e[1] for e in entries]
    keys, hashes = cols.keys, cols.hashes
    assert keys is not None and hashes is not None
    return Columns(
        [e[3] for e in entries],
        cols.parents[last],
        tuple(c[last] for c in cols.children),
        cols.trace,
        [keys[i] for i in firsts],
        [hashes[i] for i in firsts],
    )
