"""SlotBuffer: a sink's items per slot, the open transaction's prefix of each, releases."""

from __future__ import annotations

import random
import zlib
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.barrier.blocks import SlotBuffer, admit
from framework.barrier.speculation import Hold, Speculation
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation
from framework.wire.auth import MAC_HEADER
from framework.wire.bundles import META_HEADER


def row(
    slot: int, offset: int = 0, key: bytes | None = b"k", ack: int = 1, **kw: Any
) -> tuple[Any, ...]:
    """A pre-barrier frame row: meta fields, ack, and a signed output record."""
    front = kw.get("front", 1)
    value = kw.get("value", f"{slot}:{offset}".encode())
    payload = (key, value, b"meta", b"mac")
    return (slot, front, offset, (0,), 5, kw.get("tomb", False), ack, payload)


def values(items: list[Any]) -> list[bytes]:
    return [item[2] for item in items]


def test_items_are_buffered_per_slot_and_released_in_slot_order() -> None:
    buffer = SlotBuffer(4)
    latest = buffer.take([row(3, 0, ack=5), row(2, 1, ack=6), row(3, 2, ack=1)], "t")
    assert latest == GlobalTime(3, 1, 2)
    assert buffer.pending == 3 and buffer.frontier == 3
    assert not buffer.releasable(2) and buffer.releasable(3)
    bundle = buffer.on_min_time(4)
    assert bundle is not None
    assert values(bundle.unwritten) == [b"2:1", b"3:0", b"3:2"]
    assert (bundle.seq, bundle.gt_last, bundle.items) == (0, GlobalTime.slot_end(3), 3)
    assert bundle.slots == ((2, 1), (3, 2))
    assert buffer.pending == 0 and buffer.next_seq == 1
    assert buffer.on_min_time(4) is None and buffer.on_min_time(6) is None  # gt_last moves
    assert buffer.gt_last == GlobalTime.slot_end(5)


def test_items_become_signed_output_records_on_their_partition() -> None:
    buffer = SlotBuffer(4)
    buffer.take([row(1, key=b"word"), row(1, key=None, front=7)], "t")
    bundle = buffer.on_min_time(2)
    assert bundle is not None
    keyed, unkeyed = bundle.unwritten
    assert keyed[:2] == (zlib.crc32(b"word") % 4, b"word")
    assert unkeyed[:2] == (7 % 4, None)
    assert keyed[3] == [(META_HEADER, b"meta"), (MAC_HEADER, b"mac")]


def test_the_open_transaction_holds_a_prefix_of_each_slot() -> None:
    buffer = SlotBuffer(1)
    buffer.take([row(1, 0), row(2, 0), row(3, 0)], "t")
    written, top = buffer.unwritten(3)  # the frontier's items wait
    assert values(written) == [b"1:0", b"2:0"] and top == 2
    assert buffer.unwritten(3) == ([], -1)
    buffer.take([row(1, 1), row(3, 1)], "t")
    assert values(buffer.unwritten(3)[0]) == [b"1:1"]
    bundle = buffer.on_min_time(3)
    assert bundle is not None and bundle.items == 3 and bundle.unwritten == []
    buffer.take([row(4, 0)], "t")
    assert values(buffer.unwritten(4)[0]) == [b"3:0", b"3:1"]
    buffer.forget_written()  # aborted: everything is to be written again
    assert values(buffer.unwritten(5)[0]) == [b"3:0", b"3:1", b"4:0"]


def test_a_release_that_does_not_cover_the_open_transaction_is_refused() -> None:
    buffer = SlotBuffer(1)
    buffer.take([row(1), row(5), row(6)], "t")
    buffer.unwritten(6)
    with pytest.raises(ProtocolViolation, match="holds items of slot 5"):
        buffer.on_min_time(3)
    assert buffer.pending == 3  # nothing was taken out


def test_replays_are_dropped_and_a_late_item_stops_a_strict_buffer() -> None:
    restored = GlobalTime.slot_end(4)
    buffer = SlotBuffer(1, restored, 7, strict=True)
    buffer.take([row(4, ack=3), row(5, ack=9)], "t")
    assert buffer.replays_dropped == 1 and buffer.pending == 1
    bundle = buffer.on_min_time(6)
    assert bundle is not None and bundle.seq == 7
    with pytest.raises(ProtocolViolation, match="after min time released"):
        buffer.take([row(5, 1)], "t")
    lenient = SlotBuffer(1, restored)
    lenient.on_min_time(6)
    lenient.take([row(5, 1)], "t")
    assert lenient.replays_dropped == 1


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (row(1, tomb=True), "a tombstone at slot 1"),
        (row(1, value="text"), "no output record"),
        ((1, 1, 0, (0,), 5, False, 1, (b"k", b"v")), "malformed pre-barrier item"),
        ((1, 1, 0), "malformed pre-barrier item"),
    ],
)
def test_items_a_sink_without_groupings_cannot_get_are_refused(bad: Any, message: str) -> None:
    with pytest.raises(ProtocolViolation, match=message):
        SlotBuffer(1).take([row(1), bad], "t")


def test_an_empty_frame_is_refused() -> None:
    with pytest.raises(ProtocolViolation, match="without items"):
        SlotBuffer(1).take([], "t")


class _Run:
    """The block writer's rules as the service drives them, without Kafka: what the open
    transaction holds, what each release commits."""

    def __init__(self, min_pending: int) -> None:
        self.spec = Speculation(min_pending=min_pending, max_hold_s=0.1, rewrite_s=0.0, cooldown=2)
        self.buffer = SlotBuffer(3)
        self.held: list[Any] = []
        self.committed: Counter[bytes] = Counter()
        self.now = 0.0
        self.min_time = 0

    def write_ahead(self) -> None:
        self.held.extend(admit(self.spec, self.buffer, self.now))

    def end(self, pause: bool) -> None:
        self.held.clear()
        self.spec.end(pause=pause)
        self.buffer.forget_written()

    def release(self, target: int) -> None:
        verdict = self.spec.hold(target, self.buffer.releasable(target), self.now)
        if verdict is Hold.WAIT:
            return
        if verdict is Hold.ABORT:
            self.end(pause=False)
        self.min_time = target
        bundle = self.buffer.on_min_time(target)
        if bundle is None:
            return
        out = self.held + bundle.unwritten
        assert len(out) == bundle.items
        assert max(int(item[2].split(b":")[0]) for item in out) < target
        self.committed.update(item[2] for item in out)
        self.end(pause=False)
        self.write_ahead()


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 40))
def test_each_item_is_committed_once_in_the_bundle_of_its_slot(seed: int, min_pending: int) -> None:
    """Random frames, releases, holds, aborts and expiries: every item is committed exactly
    once, in a bundle whose min time passed its slot (so no transaction commits an item at
    or after its release's min time)."""
    rng = random.Random(seed)
    run = _Run(min_pending)
    sent: Counter[bytes] = Counter()
    frontier = offset = 0
    for _ in range(rng.randint(1, 30)):
        frontier += rng.randint(0, 2)
        rows = []
        for _ in range(rng.randint(1, 6)):
            slot = max(run.min_time, frontier - rng.randint(0, 3))
            rows.append(row(slot, offset))
            sent[f"{slot}:{offset}".encode()] += 1
            offset += 1
        run.buffer.take(rows, "t")
        run.write_ahead()
        run.now += rng.choice([0.0, 0.05, 0.2])
        if rng.random() < 0.1 and run.spec.size:
            run.end(pause=True)  # expired
        if rng.random() < 0.5:
            run.release(max(run.min_time, min(frontier, run.min_time + rng.randint(0, 3))))
    run.release(frontier + 1)
    if run.buffer.pending:  # a sealed transaction waited: its hold ends it
        run.now += 10.0
        run.release(frontier + 1)
    assert run.buffer.pending == 0
    assert run.committed == sent
