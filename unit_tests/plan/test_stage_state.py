"""Changelog replay (`framework.plan.stage_state`): a grouping's changelog of items rebuilds the
grouping, whether read at once, in pieces, or with deletions among the records."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.grouping import Grouping
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.time import GlobalTime
from framework.plan.stage_state import apply_changelog, changelog_records

_KEYS = st.sampled_from(["a", "b", "c", 1, 2.0, ("t", None)])
# A step: push an item (key, slot, value) or its tombstone, or move min time to a slot.
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("item"), _KEYS, st.integers(1, 12), st.integers(0, 2)),
        st.tuples(st.just("tombstone"), _KEYS, st.integers(1, 12), st.integers(0, 2)),
        st.tuples(st.just("prune"), st.none(), st.integers(1, 12), st.none()),
    ),
    min_size=1,
    max_size=60,
)


def _record(key: object, slot: int, value: int, *, tombstone: bool) -> Record:
    meta = Meta(GlobalTime(slot, 1, value), tombstone=tombstone)
    return Record(meta, Keyed(key, key_hash(key), value))


def _live(
    steps: list[tuple[str, Any, int, Any]], window: int
) -> tuple[Grouping, list[list[tuple[bytes, bytes | None]]]]:
    """A grouping after ``steps``, and the changelog records written after each step."""
    grouping = Grouping(7, window)
    written = []
    min_time = 0
    for action, key, slot, value in steps:
        if action == "prune":
            min_time = max(min_time, slot)
            grouping.on_min_time(min_time)
        else:
            grouping.push(_record(key, slot, value, tombstone=action == "tombstone"))
        written.append(changelog_records(grouping))
    return grouping, written


def _state(grouping: Grouping) -> dict[object, object]:
    """Every bucket; early tombstones in a canonical order (theirs carries no meaning)."""
    found: dict[object, object] = {}
    for key, items, early in grouping.snapshot()["buckets"]:
        found[key] = (items, sorted(early, key=repr))
    return found


@settings(max_examples=150, deadline=None)
@given(_STEPS, st.integers(1, 3), st.integers(1, 5))
def test_the_changelog_rebuilds_the_grouping_read_at_once_or_in_pieces(
    steps: list[tuple[str, Any, int, Any]], window: int, pieces: int
) -> None:
    live, written = _live(steps, window)
    records = [record for batch in written for record in batch]
    at_once = Grouping(7, window)
    apply_changelog(at_once, records)
    assert _state(at_once) == _state(live)
    assert at_once.size() == live.size()  # (live may keep an emptied bucket until pruned)
    # A copy reads what was committed since its last read (`ChangelogCopies.catch_up`).
    incremental = Grouping(7, window)
    size = max(1, len(records) // pieces)
    for start in range(0, len(records), size):
        apply_changelog(incremental, records[start : start + size])
    assert _state(incremental) == _state(live)


def test_a_commit_writes_the_items_it_changed_not_their_bucket() -> None:
    grouping = Grouping(7, 2)
    for slot in range(1, 501):
        grouping.push(_record("hot", slot, 0, tombstone=False))
    assert len(changelog_records(grouping)) == 500
    grouping.push(_record("hot", 501, 0, tombstone=False))
    records = changelog_records(grouping)
    assert len(records) == 1 and len(records[0][1] or b"") < 200
    # Pruning to the last item below slot 400 deletes 398 items: one deletion each.
    grouping.on_min_time(400)
    deletions = changelog_records(grouping)
    assert len(deletions) == 398 and all(value is None for _, value in deletions)


def test_a_grouping_pruned_to_nothing_is_restored_without_the_key() -> None:
    grouping = Grouping(7, 1)
    grouping.push(_record("k", 1, 1, tombstone=False))
    records = changelog_records(grouping)
    grouping.on_min_time(5)
    records += changelog_records(grouping)
    restored = Grouping(7, 1)
    apply_changelog(restored, records)
    assert len(records) == 2 and records[-1][1] is None
    assert restored.keys() == grouping.keys() == 0
