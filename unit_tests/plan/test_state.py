"""Changelog replay (`framework.plan.state`): a grouping restored from each key's last
record equals one restored from every record."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.grouping import Grouping
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.time import GlobalTime
from framework.plan.state import apply_changelog, apply_record, changelog_records
from framework.wire.changelog import read_record

_STEPS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", 1, 2.0]), st.booleans()), min_size=1, max_size=60
)


def _changelog(steps: list[tuple[object, bool]], window: int) -> list[tuple[bytes, bytes]]:
    """What a grouping writes while taking ``steps`` (an item, and min time moved or not)."""
    grouping = Grouping(7, window)
    out: list[tuple[bytes, bytes]] = []
    for slot, (key, prune) in enumerate(steps, start=1):
        grouping.push(Record(Meta(GlobalTime(slot, 1, 0)), Keyed(key, key_hash(key), slot)))
        if prune:
            grouping.on_min_time(slot + 1)
        out.extend(changelog_records(grouping))
    return out


def _buckets(grouping: Grouping) -> dict[object, object]:
    snapshot = grouping.snapshot()
    return {key: rest for key, *rest in snapshot["buckets"]}


@settings(max_examples=60, deadline=None)
@given(_STEPS, st.integers(1, 3))
def test_the_last_record_of_each_key_restores_what_every_record_does(
    steps: list[tuple[object, bool]], window: int
) -> None:
    records = _changelog(steps, window)
    every = Grouping(7, window)
    for kafka_key, value in records:
        apply_record(every, *read_record(kafka_key, value))
    last = Grouping(7, window)
    apply_changelog(last, [*records, (records[0][0], None)])  # a deletion is skipped
    # The same buckets; their order in the dictionary carries no meaning (a key deleted
    # and written again comes where it first came, not last).
    assert _buckets(last) == _buckets(every)
    assert last.keys() == every.keys() and last.size() == every.size()


def test_a_grouping_pruned_to_nothing_is_restored_without_the_key() -> None:
    grouping = Grouping(7, 1)
    grouping.push(Record(Meta(GlobalTime(1, 1, 0)), Keyed("k", key_hash("k"), 1)))
    records = changelog_records(grouping)
    grouping.on_min_time(5)
    records += changelog_records(grouping)
    restored = Grouping(7, 1)
    apply_changelog(restored, records)
    assert len(records) == 2
    assert restored.keys() == grouping.keys() == 0
