"""The state of a stage that starts with a grouping or an aggregate, and its changelog.

A changelog record per changed key holds the key's bucket; an aggregate adds its min time
(layout: `framework.wire.changelog`). Replaying the records, oldest first, rebuilds the
state (latest wins).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from framework.core.grouping import Grouping
from framework.core.ids import stable_id
from framework.core.windows import WindowAggregator
from framework.wire.changelog import bucket_record, min_time_record, read_record

__all__ = ["StageState", "apply_changelog", "changelog_records", "hold_value"]

StageState = Grouping | WindowAggregator
"""The state of a stage that starts with a grouping or an aggregate."""


def changelog_records(state: StageState) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` records of every bucket changed since the last call, the min time."""
    records: list[tuple[bytes, bytes]] = []
    if isinstance(state, WindowAggregator) and state.min_time:
        records.append(min_time_record(state.min_time))
    records.extend(
        bucket_record(key, _plain_state(state.bucket_state(key))) for key in state.take_changed()
    )
    return records


def _plain_state(state: tuple[Any, ...] | None) -> Any:
    """A bucket state with its metas as plain tuples (`meta_from_plain` reads both).

    Pickling a NamedTuple costs a Python call per object: plain tuples make the changelog
    3x cheaper to write (measured: 1.3 instead of 4.0 us per item). A rolling aggregate's
    carried value, a fourth element, stays as it is.
    """
    if state is None:
        return None
    metas, values, early, *carried = state
    return (
        [(tuple(m[0]), m[1], m[2], m[3]) for m in metas],
        values,
        [((tuple(m[0]), m[1], m[2], m[3]), v) for m, v in early],
        *carried,
    )


def hold_value(op_id: int, partition: int, slot: int) -> int:
    """The ack value of an aggregate's hold: fixed, so a release needs no memory of it."""
    return stable_id(f"{op_id}/{partition}/{slot}", 64) | 1


def apply_changelog(
    state: StageState, records: Iterable[tuple[bytes | None, bytes | None]]
) -> None:
    """Replay changelog ``(key, value)`` records, oldest first, into ``state`` (latest wins)."""
    for kafka_key, value in records:
        if value is None:
            continue
        is_min_time, key, bucket = read_record(kafka_key, value)
        if is_min_time:
            if isinstance(state, WindowAggregator):
                state.put_min_time(bucket)
        else:
            state.put_bucket(key, bucket)
