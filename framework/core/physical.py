"""Physical operations of logical nodes, shared by every runner."""

from __future__ import annotations

from typing import Any

from framework.core.batches import (
    FilterBatchesOp,
    FlatMapBatchesOp,
    KeyByBatchesOp,
    MapBatchesOp,
)
from framework.core.calls import MapAsyncOp
from framework.core.graph import Kind, Node
from framework.core.ops import (
    BroadcastOp,
    FeedbackOp,
    FilterOp,
    FlatMapOp,
    KeyByOp,
    MapOp,
    MergeOp,
    Operation,
    op_id_of,
)
from framework.errors import PipelineError

# The stateless operations that take the node's function, per kind: per item, and on
# columns (``batch``).
_WITH_FN: dict[Kind, Any] = {
    Kind.MAP: MapOp,
    Kind.FLAT_MAP: FlatMapOp,
    Kind.FILTER: FilterOp,
    Kind.KEY_BY: KeyByOp,
}
_BATCH: dict[Kind, Any] = {
    Kind.MAP: MapBatchesOp,
    Kind.FLAT_MAP: FlatMapBatchesOp,
    Kind.FILTER: FilterBatchesOp,
    Kind.KEY_BY: KeyByBatchesOp,
}


def stateless_operation(pipeline: str, node: Node) -> Operation:
    """The physical operation of a stateless ``node`` of pipeline ``pipeline``."""
    op_id = op_id_of(pipeline, node.id)
    name = f"{node.kind} {node.describe()}"
    kinds = _BATCH if node.batch else _WITH_FN
    if node.kind in kinds:
        op: Operation = kinds[node.kind](name, op_id, node.fn)
        return op
    if node.batch:
        raise PipelineError(f"{node.describe()} has no batch form")
    if node.kind is Kind.MAP_ASYNC:
        assert node.call is not None  # validated
        call: Any = node.fn  # a coroutine function: the node types it as any function
        return MapAsyncOp(name, op_id, call, node.call)
    if node.kind in (Kind.MERGE, Kind.LOOP):  # a loop merges its input and its feedback
        return MergeOp(name, op_id)
    if node.kind is Kind.FEEDBACK:
        return FeedbackOp(name, op_id, node.max_rounds, node.label or node.id)
    if node.kind is Kind.BROADCAST:
        return BroadcastOp(name, op_id, node.ports)
    raise PipelineError(f"{node.describe()} is not a stateless operation")
