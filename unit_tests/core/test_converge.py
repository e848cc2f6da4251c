"""`Converge`: per key, the join of its payloads as of each payload's global time."""

from __future__ import annotations

import doctest
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import framework.core.converge
from framework.core.converge import Converge
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation, UserFunctionError
from framework.plan.stage_state import ChangelogImage, apply_changelog, changelog_records
from framework.wire.changelog import bucket_record


def _item(slot: int, value: int, key: str = "k", offset: int = 0) -> Record:
    return Record(Meta(GlobalTime(slot, 0, offset)), Keyed(key, 0, value))


def test_the_module_example() -> None:
    failed, tried = doctest.testmod(framework.core.converge)
    assert tried and not failed


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 50)), min_size=1, max_size=15),
    seed=st.integers(0, 2**16),
)
def test_what_the_outputs_say_as_of_any_time_is_the_join_up_to_it(
    payloads: list[tuple[int, int]], seed: int
) -> None:
    """Whatever the arrival order: for every slot, the least value emitted at or before it
    is the least payload at or before it, and no output holds a later payload."""
    records = [_item(slot, value, offset=i) for i, (slot, value) in enumerate(payloads)]
    random.Random(seed).shuffle(records)
    op = Converge(3, min)
    emitted: list[tuple[int, int]] = []
    for record in records:
        for out in op.push(record):
            slot = out.meta.gt.slot
            emitted.append((slot, out.value.value))  # type: ignore[union-attr]
            assert out.value.value >= min(v for s, v in payloads if s <= slot)  # type: ignore[union-attr]
    for slot in range(10):
        upto = [v for s, v in payloads if s <= slot]
        said = [v for s, v in emitted if s <= slot]
        assert (min(said) if said else None) == (min(upto) if upto else None), slot
    assert op.value("k") == min(v for _, v in payloads)


def test_each_emission_at_one_item_has_its_own_child_id() -> None:
    op = Converge(3, min)
    first = op.push(_item(5, 9))[0]
    again = op.push(_item(1, 2))[1]  # repairs the item of slot 5
    assert first.meta.gt == again.meta.gt
    assert first.meta.child_ids != again.meta.child_ids


def test_min_time_folds_the_past_into_a_base() -> None:
    op = Converge(3, min)
    op.push(_item(1, 5))
    op.push(_item(2, 7))
    op.on_min_time(3)
    assert op.value("k") == 5
    assert [o.value.value for o in op.push(_item(4, 6))] == []  # type: ignore[union-attr]
    assert [o.value.value for o in op.push(_item(4, 1, offset=1))] == [1]  # type: ignore[union-attr]


def test_a_tombstone_or_a_failing_join_is_refused() -> None:
    op = Converge(3, min)
    with pytest.raises(ProtocolViolation, match="cannot take a payload back"):
        op.push(_item(1, 1).tombstone())

    def broken(a: int, b: int) -> int:
        raise ValueError("no")

    failing = Converge(3, broken)
    failing.push(_item(1, 1))
    with pytest.raises(UserFunctionError, match="join failed"):
        failing.push(_item(2, 2))


def _restored(records: list[tuple[bytes, bytes | None]]) -> Converge:
    state = Converge(7, min)
    apply_changelog(state, records)
    state.take_changed()
    return state


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(
        st.tuples(st.integers(0, 9), st.integers(0, 50), st.sampled_from("ab")),
        min_size=1,
        max_size=20,
    ),
    split=st.integers(0, 20),
    pruned=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_a_state_restored_from_its_changelog_goes_on_as_the_one_that_wrote_it(
    payloads: list[tuple[int, int, str]], split: int, pruned: int, seed: int
) -> None:
    """A task's converge restored from the changelog its batches wrote (some pruned by a
    min time) emits what the original emits for the rest of the payloads."""
    records = [_item(s, v, key, offset=i) for i, (s, v, key) in enumerate(payloads)]
    random.Random(seed).shuffle(records)
    first, rest = records[:split], records[split:]
    writer = Converge(7, min)
    written: list[tuple[bytes, bytes | None]] = []
    for record in first:
        writer.push(record)
        written += changelog_records(writer)
    writer.on_min_time(pruned)  # what a batch's min time prunes is not written again
    written += changelog_records(writer)
    reader = _restored(written)
    rest = [r for r in rest if r.meta.gt.slot >= pruned]  # min time: none below it comes
    for record in rest:
        assert reader.push(record) == writer.push(record)
    for key in "ab":
        assert reader.value(key) == writer.value(key)


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 50)), min_size=1, max_size=15),
    cut=st.integers(0, 10),
    seed=st.integers(0, 2**16),
)
def test_a_snapshot_cut_at_a_slot_is_the_state_of_the_payloads_below_it(
    payloads: list[tuple[int, int]], cut: int, seed: int
) -> None:
    """An image of a converge's changelog cut at a slot (as a snapshot cuts an aggregate's)
    restores the state that the payloads below the slot alone make, emissions included: a
    replay from the slot then goes on as a run that never saw the later ones."""
    records = [_item(slot, value, offset=i) for i, (slot, value) in enumerate(payloads)]
    random.Random(seed).shuffle(records)
    full = Converge(7, min)
    image = ChangelogImage()
    for record in records:
        full.push(record)
        apply_changelog(image, changelog_records(full))
    below = Converge(7, min)
    for record in records:
        if record.meta.gt.slot < cut:
            below.push(record)
    cut_state = _restored([bucket_record(k, b) for k, b in image.cut(cut)])
    assert cut_state.bucket_state("k") == below.bucket_state("k")
