"""A restarted acker replays its shard and holds back what it had published already."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.acker.service import ReplayGate, report_key
from framework.core.acker.sharded import AckerShard, MinTimeListener
from framework.core.messages import Ack, AckerInput, Heartbeat, MinTimeNotification, NodeTime
from framework.errors import ProtocolViolation


def test_report_keys_name_shard_and_segment() -> None:
    assert report_key(MinTimeNotification("s1", 4, shard=2)) == "2:s1"
    assert report_key(MinTimeNotification(None, 4, shard=0)) == "0:*"


def test_gate_holds_back_reports_up_to_the_published_vector() -> None:
    gate = ReplayGate({1: 3, 2: 1})
    assert not gate.admit([NodeTime(1, 2)])
    assert not gate.admit([NodeTime(1, 3), NodeTime(2, 1)])
    assert gate.admit([NodeTime(1, 3), NodeTime(2, 2)])
    assert gate.admit([NodeTime(1, 1)])  # once open, always open
    assert ReplayGate({}).admit([])


def test_gate_reports_acks_lost_since_the_published_reports() -> None:
    gate = ReplayGate({1: 3})
    gate.admit([NodeTime(1, 3)])
    gate.caught_up([NodeTime(1, 3)], "acks[0]")
    with pytest.raises(ProtocolViolation, match=r"acks\[0\]: the mintime topic holds reports"):
        ReplayGate({1: 3}).caught_up([NodeTime(1, 2)], "acks[0]")


def batches(seed: int, count: int) -> list[list[tuple[int, AckerInput]]]:
    """Random sender batches for shard 0 of 1: (node, message) lists, each closed."""
    rng = random.Random(seed)
    times = {0: 0, 1: 0, 2: 0}
    out: list[list[tuple[int, AckerInput]]] = []
    beat = 0
    for _ in range(count):
        node = rng.randrange(3)
        batch: list[tuple[int, AckerInput]] = []
        for _ in range(rng.randint(0, 3)):
            batch.append((node, Ack(rng.choice("ab"), beat + rng.randint(0, 3), rng.randint(1, 3))))
        if node == 0 and rng.random() < 0.5:
            beat += rng.randint(1, 2)
            batch.append((node, Heartbeat(9, beat)))
        times[node] += rng.randint(1, 2)  # node times may skip (aborted transactions)
        batch.append((node, NodeTime(node, times[node])))
        out.append(batch)
    return out


SEGMENTS = {"a": [], "b": ["a"]}


def reports(inputs: list[list[tuple[int, AckerInput]]]) -> list[MinTimeNotification]:
    shard = AckerShard(0, 1, SEGMENTS, [9])
    return [note for batch in inputs for node, m in batch for note in shard.receive(node, m)]


def replay(
    shard: AckerShard,
    inputs: list[list[tuple[int, AckerInput]]],
    full: list[MinTimeNotification],
    crash: int,
) -> list[MinTimeNotification]:
    """What listeners see: ``full[:crash]``, then the gated replay of ``inputs`` on ``shard``.

    Checks that the replay re-sends exactly the notes after the last global one that went
    out: the segment notes of a report cut short by the crash, then everything new.
    """
    published = full[:crash]
    last_global = next((n for n in reversed(published) if n.segment is None), None)
    gate = ReplayGate(
        {} if last_global is None else {nt.node: nt.time for nt in last_global.node_times}
    )
    for batch in inputs:
        for node, message in batch:
            notes = shard.receive(node, message)
            if notes and gate.admit(notes[-1].node_times):
                published += notes
    gate.caught_up(shard.vector, "acks[0]")
    done = 0 if last_global is None else full.index(last_global) + 1
    assert published[crash:] == full[done:]
    return published


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), count=st.integers(1, 30), data=st.data())
def test_a_restart_continues_the_report_stream(seed: int, count: int, data: st.DataObject) -> None:
    inputs = batches(seed, count)
    full = reports(inputs)
    crash = data.draw(st.integers(0, len(full)), label="reports published before the crash")
    # The replay from the beginning of the acks topic.
    published = replay(AckerShard(0, 1, SEGMENTS, [9]), inputs, full, crash)
    # ...and a listener takes the stream without ever seeing a vector go back.
    listener = MinTimeListener(1, SEGMENTS)
    for note in published:
        listener.receive(note)
    final = MinTimeListener(1, SEGMENTS)
    for note in full:
        final.receive(note)
    assert listener.min_time() == final.min_time()


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), count=st.integers(1, 30), data=st.data())
def test_a_restart_from_a_saved_state_continues_the_report_stream(
    seed: int, count: int, data: st.DataObject
) -> None:
    inputs = batches(seed, count)
    full = reports(inputs)
    saved_at = data.draw(st.integers(0, len(inputs)), label="batches before the checkpoint")
    original = AckerShard(0, 1, SEGMENTS, [9])
    before = [
        n for batch in inputs[:saved_at] for node, m in batch for n in original.receive(node, m)
    ]
    saved = original.state()
    # The acker saves a state only once the reports of its batches were delivered, so the
    # crash loses at most reports made after it.
    crash = data.draw(st.integers(len(before), len(full)), label="reports out at the crash")
    shard = AckerShard(0, 1, SEGMENTS, [9])
    shard.restore(saved)
    replay(shard, inputs[saved_at:], full, crash)  # from the checkpoint's offset
    assert shard.state() == original_after(inputs)


def original_after(inputs: list[list[tuple[int, AckerInput]]]) -> object:
    shard = AckerShard(0, 1, SEGMENTS, [9])
    for batch in inputs:
        for node, message in batch:
            shard.receive(node, message)
    return shard.state()


def test_a_state_is_refused_inside_a_batch_and_by_another_pipeline() -> None:
    shard = AckerShard(0, 1, SEGMENTS, [9])
    shard.receive(1, Ack("a", 3, 5))
    with pytest.raises(ProtocolViolation, match="inside a sender batch"):
        shard.state()
    shard.receive(1, NodeTime(1, 1))
    saved = shard.state()
    assert saved.xor["a"] == {3: 5}
    with pytest.raises(ProtocolViolation, match="does not fit this pipeline"):
        AckerShard(0, 1, {"a": [], "c": ["a"]}, [9]).restore(saved)
    with pytest.raises(ProtocolViolation, match="does not fit this pipeline"):
        AckerShard(0, 1, SEGMENTS, [9, 10]).restore(saved)
