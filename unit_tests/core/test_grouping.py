"""The grouping: in-order windows, repair under any arrival order, pruning, snapshots."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.grouping import Grouping
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.time import GlobalTime

OP = 0xFEED


def item(slot: int, value: object, key: object = "k", offset: int = 0) -> Record:
    return Record(Meta(GlobalTime(slot, 1, offset)), Keyed(key, key_hash(key), value))


def live(outputs: list[Record]) -> Counter[tuple[Meta, object]]:
    """The multiset of outputs not cancelled by a tombstone."""
    count: Counter[tuple[Meta, object]] = Counter()
    for out in outputs:
        count[(out.meta.as_item(), out.value)] += -1 if out.meta.tombstone else 1
    assert all(n >= 0 for n in count.values()), "a tombstone cancelled nothing"
    return +count


def run(grouping: Grouping, records: list[Record]) -> list[Record]:
    return [out for record in records for out in grouping.push(record)]


def test_in_order_windows() -> None:
    outs = run(Grouping(OP, 2), [item(s, s) for s in range(4)])
    assert [o.value for o in outs] == [(0,), (0, 1), (1, 2), (2, 3)]
    assert [o.meta for o in outs] == [Meta(GlobalTime(s, 1, 0)).through(OP) for s in range(4)]
    assert not any(o.meta.tombstone for o in outs)


def test_keys_are_grouped_separately() -> None:
    outs = run(Grouping(OP, 2), [item(0, "a", "x"), item(1, "b", "y"), item(2, "c", "x")])
    assert [o.value for o in outs] == [("a",), ("b",), ("a", "c")]


def test_out_of_order_item_repairs_followers_with_tombstones() -> None:
    grouping = Grouping(OP, 2)
    run(grouping, [item(0, "a"), item(2, "c"), item(3, "d")])
    outs = grouping.push(item(1, "b"))
    c_meta = Meta(GlobalTime(2, 1, 0)).through(OP)
    assert outs == [
        Record(Meta(GlobalTime(1, 1, 0)).through(OP), ("a", "b")),
        Record(c_meta.as_tombstone(), ("a", "c")),
        Record(c_meta, ("b", "c")),
    ]


def test_tombstone_removes_its_item_and_repairs() -> None:
    grouping = Grouping(OP, 3)
    records = [item(s, s) for s in range(4)]
    run(grouping, records)
    outs = grouping.push(records[1].tombstone())
    assert [(o.meta.tombstone, o.value) for o in outs] == [
        (True, (0, 1)),
        (True, (0, 1, 2)),
        (False, (0, 2)),
        (True, (1, 2, 3)),
        (False, (0, 2, 3)),
    ]


def test_unchanged_windows_are_not_repaired() -> None:
    grouping = Grouping(OP, 2)
    run(grouping, [item(0, "a"), item(2, "a")])
    assert len(grouping.push(item(1, "a"))) == 1


def test_tombstone_overtaking_its_item_cancels_it() -> None:
    grouping = Grouping(OP, 2)
    late = item(1, "b")
    assert grouping.push(late.tombstone()) == []
    assert grouping.push(late) == []
    assert [o.value for o in grouping.push(item(2, "c"))] == [("c",)]


def test_prune_keeps_the_last_window_minus_one_below_min_time() -> None:
    grouping = Grouping(OP, 3)
    run(grouping, [item(s, s) for s in range(10)])
    grouping.on_min_time(6)
    assert grouping.size() == 6  # items 4, 5 below min time; 6..9 above
    assert grouping.push(item(6, "x", offset=1))[0].value == (5, 6, "x")


def test_prune_drops_a_key_whose_items_are_all_below_min_time_with_window_1() -> None:
    grouping = Grouping(OP, 1)
    run(grouping, [item(0, "a", "x"), item(5, "b", "y")])
    grouping.on_min_time(3)
    assert grouping.keys() == 1
    grouping.on_min_time(6)
    assert grouping.keys() == 0


def test_snapshot_restore_round_trip() -> None:
    grouping = Grouping(OP, 2)
    run(grouping, [item(s, s, key=s % 2) for s in range(6)])
    copy = Grouping.restore(OP, grouping.snapshot())
    assert copy.push(item(9, 9, key=0)) == grouping.push(item(9, 9, key=0))


def test_snapshot_below_min_time_is_the_state_of_the_prefix() -> None:
    full = Grouping(OP, 2)
    run(full, [item(s, s) for s in range(6)])
    prefix = Grouping(OP, 2)
    run(prefix, [item(s, s) for s in range(3)])
    state = full.snapshot(below=3)
    assert state == Grouping.restore(OP, prefix.snapshot(below=3)).snapshot()
    restored = Grouping.restore(OP, state)
    assert run(restored, [item(s, s) for s in range(3, 6)]) == run(
        prefix, [item(s, s) for s in range(3, 6)]
    )


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[int, list[Record], list[Record]]:
    """A window, the in-order items, and an arrival order including retractions."""
    window = draw(st.integers(1, 4))
    n = draw(st.integers(1, 14))
    values = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    keys = draw(st.lists(st.sampled_from("xy"), min_size=n, max_size=n))
    items = [
        item(i // 3, v, k, offset=i) for i, (v, k) in enumerate(zip(values, keys, strict=True))
    ]
    retracted = draw(st.lists(st.sampled_from(items), unique=True)) if items else []
    order = draw(st.permutations(items + [r.tombstone() for r in retracted]))
    kept = [r for r in items if r not in retracted]
    return window, kept, list(order)


@given(arrivals())
@settings(max_examples=300, deadline=None)
def test_any_arrival_order_leaves_the_in_order_outputs_live(
    case: tuple[int, list[Record], list[Record]],
) -> None:
    window, kept, order = case
    oracle = run(Grouping(OP, window), kept)
    assert not any(o.meta.tombstone for o in oracle)
    assert live(run(Grouping(OP, window), order)) == live(oracle)


@given(arrivals())
@settings(max_examples=200, deadline=None)
def test_pruning_at_every_legal_min_time_changes_no_output(
    case: tuple[int, list[Record], list[Record]],
) -> None:
    window, _, order = case
    plain, pruned = Grouping(OP, window), Grouping(OP, window)
    for i, record in enumerate(order):
        assert pruned.push(record) == plain.push(record)
        # A legal min time: no later arrival has a smaller slot.
        pruned.on_min_time(min((r.meta.gt.slot for r in order[i + 1 :]), default=99))
    assert pruned.size() <= plain.size()


def test_changed_items_and_their_states_rebuild_the_same_grouping() -> None:
    from framework.core.grouping import Grouping
    from framework.core.meta import Meta, Record
    from framework.core.ops import Keyed, key_hash
    from framework.core.time import GlobalTime

    def item(slot: int, key: str, value: int) -> Record:
        return Record(Meta(GlobalTime(slot, 1, slot)), Keyed(key, key_hash(key), value))

    def copy_changed(source: Grouping, target: Grouping) -> list[tuple[str, int]]:
        changed = source.take_changed()
        for key, meta in changed:
            target.put_item(key, meta, *source.item_state(key, meta))
        return sorted((str(key), meta.gt.slot) for key, meta in changed)

    first = Grouping(op_id=7, window=2)
    for slot, key in [(3, "a"), (1, "a"), (2, "b")]:
        first.push(item(slot, key, slot))
    copy = Grouping(op_id=7, window=2)
    assert copy_changed(first, copy) == [("a", 1), ("a", 3), ("b", 2)]
    assert first.take_changed() == []
    assert all(copy.bucket_state(k) == first.bucket_state(k) for k in "ab")
    later = item(4, "a", 4)
    assert copy.push(later) == first.push(later)
    assert first.take_changed() == copy.take_changed() == [("a", later.meta)]

    # A tombstone ahead of its item is an item state of its own ("early").
    early = Record(Meta(GlobalTime(5, 1, 5), tombstone=True), Keyed("b", key_hash("b"), 5))
    first.push(early)
    assert copy_changed(first, copy) == [("b", 5)]
    assert copy.bucket_state("b") == first.bucket_state("b")

    # Pruning deletes items: "a" keeps the last of its three below slot 10, "b" its one.
    first.on_min_time(10)
    assert copy_changed(first, copy) == [("a", 1), ("a", 3)]
    copy.on_min_time(10)
    copy.take_changed()
    assert all(copy.bucket_state(k) == first.bucket_state(k) for k in "ab")
    assert first.item_state("a", later.meta) == ([4], [])
    assert first.item_state("a", item(1, "a", 1).meta) == ([], [])


def run_batches(grouping: Grouping, batches: list[list[Record]]) -> list[Record]:
    outputs: list[Record] = []
    for batch in batches:
        out = grouping.push_batch(batch)
        assert all(0 <= i < len(batch) for i, _ in out)  # the record each output is due to
        outputs.extend(o for _, o in out)
    return outputs


@given(arrivals(), st.data())
@settings(max_examples=300, deadline=None)
def test_a_batch_leaves_the_same_outputs_live_as_one_record_at_a_time(
    case: tuple[int, list[Record], list[Record]], data: st.DataObject
) -> None:
    window, _, order = case
    cuts = sorted(data.draw(st.sets(st.integers(0, len(order)), max_size=4)))
    batches = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]
    one_by_one, batched = Grouping(OP, window), Grouping(OP, window)
    sequential: list[Record] = []
    together: list[Record] = []
    for batch in batches:  # after every batch, not only at the end
        sequential.extend(run(one_by_one, batch))
        together.extend(run_batches(batched, [batch]))
        assert live(together) == live(sequential)
    assert batched.snapshot() == one_by_one.snapshot()


@given(arrivals())
@settings(max_examples=200, deadline=None)
def test_a_batch_of_items_never_emits_an_output_together_with_its_tombstone(
    case: tuple[int, list[Record], list[Record]],
) -> None:
    # (An item and its own tombstone in one batch may both pass: the item went out in
    # order before the tombstone marked its key.)
    window, kept, _ = case
    grouping = Grouping(OP, window)
    grouping.push_batch(kept[1::2])
    emitted = [o for _, o in grouping.push_batch(sorted(kept[::2], key=lambda r: r.meta))]
    items = {(o.meta, o.value) for o in emitted if not o.meta.tombstone}
    assert not any((o.meta.as_item(), o.value) in items for o in emitted if o.meta.tombstone)


def test_late_items_ahead_of_a_whole_history_repair_each_follower_once() -> None:
    # Two upstream tasks committed apart (a driver killed between them): one key's s items
    # from the later-stamped front arrive a batch before the k items of the earlier one.
    s, k = 50, 40
    grouping = Grouping(OP, 1 << 30)
    followers = [item(2, v, offset=v) for v in range(s)]
    early = [item(1, v, offset=v) for v in range(k)]
    first = grouping.push_batch(followers)
    second = grouping.push_batch(early)
    tombstones = [o for _, o in second if o.meta.tombstone]
    assert len(first) == s
    assert len(tombstones) == s  # each follower's window retracted once
    assert len(second) == k + 2 * s  # not about k * s repairs
    assert [i for i, o in second if o.meta == early[-1].meta.through(OP)] == [k - 1]
    oracle = run(Grouping(OP, 1 << 30), early + followers)
    assert live([o for _, o in first] + [o for _, o in second]) == live(oracle)
    # Records one at a time would have repaired every follower k times.
    sequential = run(Grouping(OP, 1 << 30), followers + early)
    assert len(sequential) == s + k + 2 * s * k
