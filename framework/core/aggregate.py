"""The physical operation of an ``aggregate`` node, by what the node declares."""

from __future__ import annotations

from framework.core.eventtime import EventTimeAggregator
from framework.core.panes import PaneAggregator, reduces_per_pane
from framework.core.rolling import RollingAggregator
from framework.core.sessions import SessionAggregator
from framework.core.windows import Aggregation, Session, WindowAggregator


def aggregator(op_id: int, aggregation: Aggregation, delta_ms: int) -> WindowAggregator:
    """Rolling (`framework.core.rolling`), event-time (`framework.core.eventtime`),
    session (`framework.core.sessions`), combinable time windows (one reduced value per
    key and pane: `framework.core.panes`) or time and count windows
    (`framework.core.windows`)."""
    if aggregation.rolling:
        return RollingAggregator(op_id, aggregation, delta_ms)
    if aggregation.event_time is not None:
        return EventTimeAggregator(op_id, aggregation, delta_ms)
    if reduces_per_pane(aggregation):
        return PaneAggregator(op_id, aggregation, delta_ms)
    if isinstance(aggregation.window, Session):
        return SessionAggregator(op_id, aggregation, delta_ms)
    return WindowAggregator(op_id, aggregation, delta_ms)
