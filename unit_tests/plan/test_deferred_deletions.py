"""A combinable window's deletions put off to the next commit (`changelog_records` with
``defer_deletions``): a restore from a changelog cut between an emission and that next
commit (`PaneAggregator.settle`) goes on exactly as the state that never stopped, and the
acker sees every hold released once."""

from __future__ import annotations

import operator

from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.aggregate import aggregator
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.panes import PaneAggregator
from framework.core.time import GlobalTime
from framework.core.windows import Aggregation, Sliding, Tumbling, WindowAggregator
from framework.plan.stage_state import apply_changelog, changelog_records
from framework.wire.auth import Keyring, install

OP, DELTA = 0xD1F, 10

# Each step is one commit: items pushed (key, slot ahead of min time) or min time moved.
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from("abcd"), st.integers(0, 25)),
        st.tuples(st.just("min"), st.just(""), st.integers(0, 12)),
    ),
    min_size=1,
    max_size=60,
)
_WINDOWS = st.sampled_from([Tumbling(50), Tumbling(10), Sliding(60, 20), Sliding(40, 40)])

Changelog = list[tuple[bytes, bytes | None]]


def _new(window: Tumbling | Sliding) -> WindowAggregator:
    return aggregator(OP, Aggregation(window, reduce=operator.add, combinable=True), DELTA)


def _item(slot: int, offset: int, key: str) -> Record:
    return Record(Meta(GlobalTime(slot, 1, offset)), Keyed(key, key_hash(key), offset))


def _acker(agg: WindowAggregator, held: set[int]) -> set[int]:
    """What the acker holds after ``agg``'s hold acks of one commit (XOR per slot)."""
    acquired, released = agg.take_holds()
    for slot in acquired + released:
        held ^= {slot}
    return held


def _restored(window: Tumbling | Sliding, log: Changelog) -> WindowAggregator:
    """What a restarted task restores: the changelog replayed, then settled."""
    state = _new(window)
    apply_changelog(state, log)
    state.take_changed()
    assert isinstance(state, PaneAggregator)
    state.settle()
    return state


@settings(max_examples=400, deadline=None)
@given(_WINDOWS, _STEPS, st.integers(0, 60))
def test_a_restore_between_an_emission_and_its_deletions_goes_on_alike(
    window: Tumbling | Sliding, steps: list[tuple[str, str, int]], cut: int
) -> None:
    install(Keyring((b"deferred-deletions-test-key-0123456789",)))
    live, reference = _new(window), _new(window)
    log: Changelog = []
    held: set[int] = set()
    min_time = offset = 0
    for index, (kind, key, amount) in enumerate(steps):
        if index == cut:  # the task stops after the last commit; a new one restores
            live = _restored(window, log)
            assert live.take_holds() == ([], [])  # settled silently
            assert set(live.held) == held  # holds what the acker has it hold
        if kind == "push":
            offset += 1
            for agg in (live, reference):
                agg.push(_item(min_time + amount, offset, key))
        else:
            min_time += amount
            assert sorted(live.on_min_time(min_time), key=lambda r: r.meta) == sorted(
                reference.on_min_time(min_time), key=lambda r: r.meta
            )
        log += changelog_records(live, defer_deletions=True)
        held = _acker(live, held)
    final = min_time + 1000
    assert sorted(live.on_min_time(final), key=lambda r: r.meta) == sorted(
        reference.on_min_time(final), key=lambda r: r.meta
    )
    assert _acker(live, held) == set() == set(live.held)
    # The deletions come with the next commit; replayed then, nothing is left.
    log += changelog_records(live, defer_deletions=True)
    log += changelog_records(live, defer_deletions=True)
    assert not _restored(window, log).held


def test_an_emissions_deletions_wait_for_the_next_commit() -> None:
    install(Keyring((b"deferred-deletions-test-key-0123456789",)))
    agg = _new(Tumbling(50))
    assert isinstance(agg, PaneAggregator)
    for offset, key in enumerate("abc"):
        agg.push(_item(1, offset, key))
    changelog_records(agg, defer_deletions=True)
    assert len(agg.on_min_time(5)) == 3
    emission = changelog_records(agg, defer_deletions=True)
    assert len(emission) == 1  # the min time alone: no deletion of a, b, c yet
    assert agg.deferred == 3
    after = changelog_records(agg, defer_deletions=True)
    assert len(after) == 4 and agg.deferred == 0  # the min time and the three deletions
    # Without deferring (a micro-batch task), the emission's commit deletes at once.
    agg.push(_item(7, 9, "a"))
    changelog_records(agg)
    agg.on_min_time(10)
    assert len(changelog_records(agg)) == 2
