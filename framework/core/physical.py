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


def stateless_operation(pipeline: str, node: Node) -> Operation:
    """The physical operation of a stateless ``node`` of pipeline ``pipeline``."""
    op_id = op_id_of(pipeline, node.id)
    name = f"{node.kind} {node.describe()}"
    fn: Any = node.fn
    if node.batch:
        return _batch_operation(name, op_id, node)
    if node.kind is Kind.MAP:
        return MapOp(name, op_id, fn)
    if node.kind is Kind.MAP_ASYNC:
        assert node.call is not None  # validated
        return MapAsyncOp(name, op_id, fn, node.call)
    if node.kind is Kind.FLAT_MAP:
        return FlatMapOp(name, op_id, fn)
    if node.kind is Kind.FILTER:
        return FilterOp(name, op_id, fn)
    if node.kind is Kind.KEY_BY:
        return KeyByOp(name, op_id, fn)
    if node.kind in (Kind.MERGE, Kind.LOOP):  # a loop merges its input and its feedback
        return MergeOp(name, op_id)
    if node.kind is Kind.FEEDBACK:
        return FeedbackOp(name, op_id, node.max_rounds, node.label or node.id)
    if node.kind is Kind.BROADCAST:
        return BroadcastOp(name, op_id, node.ports)
    raise PipelineError(f"{node.describe()} is not a stateless operation")


def _batch_operation(name: str, op_id: int, node: Node) -> Operation:
    fn: Any = node.fn
    if node.kind is Kind.MAP:
        return MapBatchesOp(name, op_id, fn)
    if node.kind is Kind.FLAT_MAP:
        return FlatMapBatchesOp(name, op_id, fn)
    if node.kind is Kind.FILTER:
        return FilterBatchesOp(name, op_id, fn)
    if node.kind is Kind.KEY_BY:
        return KeyByBatchesOp(name, op_id, fn)
    raise PipelineError(f"{node.describe()} has no batch form")
