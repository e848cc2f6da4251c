"""The harness's columnar ingest: a run of one front's items through the chain of stateless
operations after its source, on columns (`framework.core.columns`), as a Spark source
stage task runs a batch (`framework.plan.columnar`).

Ack discipline: the items of a run are ingested and received by the chain in one step, so
their ingest and receipt acks (one segment: a chain has no segment head) cancel and are
not sent; each output is acked as sent into its target's segment (none into a sink), as
the per-item path acks it. A function that raises leaves the run to the per-item path,
which makes the one item a dead letter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from framework.core.columns import COLUMN_OPS, Columns, apply
from framework.core.meta import Record
from framework.core.ops import Keyed, Operation
from framework.core.time import GlobalTime
from framework.errors import EncodeError, UserFunctionError


@dataclass(frozen=True, slots=True)
class Chain:
    """The operations from a source's target on, and the node their outputs go to."""

    ops: tuple[Operation, ...]
    exit: str


def chain_from(head: str, ops: dict[str, Operation], routes: dict[str, list[str]]) -> Chain | None:
    """The chain that starts at ``head`` (a source's target), if ``head`` runs on columns."""
    chain: list[Operation] = []
    node = head
    while isinstance(ops.get(node), COLUMN_OPS) and len(routes[node]) == 1:
        chain.append(ops[node])
        node = routes[node][0]
    return Chain(tuple(chain), node) if chain else None


def run_chain(
    chain: Chain, front: int, items: Sequence[tuple[GlobalTime, object]]
) -> list[Record] | None:
    """The chain's outputs for ``items`` (one front's, in offset order), in meta order;
    None if a function raised on one of them."""
    slots = np.fromiter((gt.slot for gt, _ in items), np.int64, len(items))
    offsets = np.fromiter((gt.offset for gt, _ in items), np.int64, len(items))
    try:
        cols = Columns.of([payload for _, payload in items])
        for op in chain.ops:
            cols = apply(op, cols)
        values = cols.pylist()
    except (UserFunctionError, EncodeError):
        return None
    metas = cols.metas(slots, offsets, front)
    if cols.keys is not None and cols.hashes is not None:
        values = [Keyed(k, h, v) for k, h, v in zip(cols.keys, cols.hashes, values, strict=True)]
    return [Record(meta, value) for meta, value in zip(metas, values, strict=True)]
