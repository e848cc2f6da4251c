"""Rolling aggregations: per key, the value so far, exact under any arrival order."""

from __future__ import annotations

import doctest
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings

import framework.pipeline
from framework.core.aggregate import aggregator
from framework.core.meta import Record
from framework.core.rolling import First, RollingAggregator
from framework.core.windows import (
    Aggregation,
    Count,
    KeyValue,
    Sliding,
    Tumbling,
    WindowSpec,
)
from framework.errors import PipelineError
from framework.plan.stage_state import apply_changelog, changelog_records
from unit_tests.core.test_windows import DELTA, OP, arrivals, item


def rolling(window: WindowSpec | None = None, **kwargs: Any) -> RollingAggregator:
    return RollingAggregator(OP, Aggregation(window or Count(1), rolling=True, **kwargs), DELTA)


def counter(**kwargs: Any) -> RollingAggregator:
    return rolling(fold=lambda n, _: n + 1, initial=0, **kwargs)


def values(records: list[Record]) -> list[tuple[object, object]]:
    return [(r.value.key, r.value.value) for r in records]


def test_an_update_per_item_once_min_time_passes_it_in_global_time_order() -> None:
    a = rolling(reduce=lambda x, y: x + y)
    a.push(item(3, "c", offset=3))
    a.push(item(1, "a", offset=1))  # arrived late: still folded in order
    assert a.on_min_time(1) == []
    assert a.held == frozenset({1, 3})
    [first] = a.on_min_time(2)
    assert first.value == KeyValue("k", "a") and first.meta.gt.slot == 1
    assert a.held == frozenset({3})
    a.push(item(2, "b", offset=2))
    assert values(a.on_min_time(9)) == [("k", "ab"), ("k", "abc")]
    assert a.held == frozenset() and a.next_due() is None


def test_a_tombstone_removes_its_buffered_item_and_the_state_stays_one_value() -> None:
    a = counter()
    kept, retracted = item(1, "x", offset=1), item(2, "y", offset=2)
    a.push(kept)
    a.push(retracted)
    a.push(retracted.tombstone())
    assert values(a.on_min_time(5)) == [("k", 1)]
    for offset in range(100):
        a.push(item(5 + offset, "w", offset=10 + offset))
    assert values(a.on_min_time(500))[-1] == ("k", 101)
    assert a.bucket_state("k") == ([], [], [], (101, 104))  # the count and its last slot


def test_every_ms_updates_once_per_key_and_pane_and_carries_across_panes() -> None:
    a = rolling(Tumbling(50), reduce=lambda x, y: x + y)  # panes of 5 slots
    for slot, key in [(0, "x"), (1, "y"), (3, "x"), (6, "x"), (7, "y")]:
        a.push(item(slot, 1, key, offset=slot))
    assert a.on_min_time(4) == []
    assert sorted(values(a.on_min_time(5))) == [("x", 2), ("y", 1)]
    assert sorted(values(a.on_min_time(10))) == [("x", 3), ("y", 2)]


def test_the_changelog_carries_the_value_and_a_rebuilt_state_goes_on_from_it() -> None:
    live = counter()
    for i, key in enumerate("abab"):
        live.push(item(i, None, key, offset=i))
    live.on_min_time(2)  # a: 1, b: 1 emitted; a@2 and b@3 still buffered
    records = changelog_records(live)
    rebuilt = counter()
    apply_changelog(rebuilt, records)
    assert rebuilt.take_holds() == ([], []) and rebuilt.hold_counts == live.hold_counts
    assert rebuilt.bucket_state("a") is not None and rebuilt.next_due() == live.next_due()
    assert values(rebuilt.on_min_time(9)) == values(live.on_min_time(9)) == [("a", 2), ("b", 2)]


def test_snapshot_and_restore_keep_the_carried_values() -> None:
    a = counter()
    a.push(item(1, None, "a", offset=1))
    a.on_min_time(2)
    a.push(item(4, None, "a", offset=4))
    restored = aggregator(OP, a.aggregation, DELTA).restore(OP, a.aggregation, DELTA, a.snapshot())
    assert values(restored.on_min_time(9)) == [("a", 2)]


def test_rolling_declarations_that_cannot_work_are_refused() -> None:
    with pytest.raises(PipelineError, match="needs reduce= or fold="):
        rolling()
    with pytest.raises(PipelineError, match="per item or per Tumbling pane"):
        rolling(Sliding(100, 50), reduce=max)
    with pytest.raises(PipelineError, match="combinable=True needs reduce"):
        rolling(fold=max, combinable=True)
    keyed = framework.pipeline.Pipeline("p").source(_source()).key_by(str)
    with pytest.raises(PipelineError, match="every_ms must be a positive"):
        keyed.reduce(max, every_ms=0)


def _source() -> Any:
    from framework.testing import ListSource

    return ListSource([])


@given(arrivals(last_slot=20, keys="xyz"))
@settings(max_examples=300, deadline=None)
def test_updates_equal_in_order_processing_whatever_the_arrival_order(
    case: tuple[list[Record], list[Record], list[bool]],
) -> None:
    kept, order, notify = case
    a = rolling(fold=lambda acc, v: (*acc, v), initial=())
    emitted: list[Record] = []
    for i, record in enumerate(order):
        a.push(record)
        if notify[i]:
            m = min((r.meta.gt.slot for r in order[i + 1 :]), default=30)
            held = min(a.held, default=None)
            out = a.on_min_time(m)
            assert all(held is not None and r.meta.gt.slot >= held for r in out)
            assert all(r.meta.gt.slot < m for r in out)  # never before min time passes it
            emitted += out
    emitted += a.on_min_time(99)
    history: dict[object, tuple[object, ...]] = defaultdict(tuple)
    expected = []
    for r in sorted(kept, key=lambda r: r.meta):
        history[r.value.key] += (r.value.value,)
        expected.append((r.value.key, history[r.value.key]))
    assert sorted(values(emitted), key=repr) == sorted(expected, key=repr)
    assert a.held == frozenset()


def test_the_builder_examples_run() -> None:
    failed, tried = doctest.testmod(framework.pipeline)
    assert tried >= 10 and failed == 0


def test_a_ttl_forgets_a_keys_value_once_min_time_is_that_far_past_its_last_item() -> None:
    a = counter(ttl_ms=50)  # 5 slots
    a.push(item(1, None, "k", offset=1))
    a.push(item(4, None, "k", offset=4))
    assert values(a.on_min_time(5)) == [("k", 1), ("k", 2)]
    a.take_changed()
    assert a.on_min_time(8) == [] and a.bucket_state("k") is not None  # 8 < 4 + 5
    a.on_min_time(9)
    assert a.bucket_state("k") is None and a.expired == 1
    assert a.take_changed() == ["k"]  # the changelog deletes it too
    a.push(item(12, None, "k", offset=12))
    assert values(a.on_min_time(13)) == [("k", 1)]  # afresh


def test_a_ttl_is_decided_at_the_items_own_time_whatever_the_min_time_steps() -> None:
    slots = [1, 3, 9, 10, 30, 31]  # gaps of 6 and 20 slots exceed the TTL of 5
    outputs = []
    for steps in ([40], [2, 4, 9, 11, 31, 40], list(range(1, 41))):
        a = counter(ttl_ms=50)
        for slot in slots:
            a.push(item(slot, None, "k", offset=slot))
        outputs.append([v for step in steps for v in values(a.on_min_time(step))])
        assert a.expired == 3  # twice before an item, once idle at min time 40
    assert outputs[0] == outputs[1] == outputs[2]
    assert [n for _, n in outputs[0]] == [1, 2, 1, 2, 1, 2]


def test_dedup_passes_each_keys_first_payload_in_global_time_order() -> None:
    a = rolling(step=First(), ttl_ms=100)
    a.push(item(3, "late-first", "k", offset=3))
    a.push(item(2, "first", "k", offset=2))
    a.push(item(2, "other", "j", offset=5))
    out = a.on_min_time(4)
    assert sorted(r.value for r in out) == ["first", "other"]
    a.push(item(20, "again", "k", offset=20))  # 20 >= 3 + 10: the key was forgotten
    a.on_min_time(14)
    assert [r.value for r in a.on_min_time(21)] == ["again"]
