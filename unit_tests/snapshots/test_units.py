"""Unit snapshots: saved bytes -> changelog records -> the same grouping as a restore."""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.grouping import Grouping
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.time import GlobalTime
from framework.errors import DecodeError, Unauthenticated
from framework.plan.stage_state import apply_changelog
from framework.plan.stage_state import changelog_records as task_records
from framework.snapshots.units import (
    changelog_records,
    decode_unit,
    encode_unit,
    parse_unit,
    unit_name,
)
from framework.wire import auth
from framework.wire.changelog import ITEM_PREFIX

OP = 0xFEED
LABEL = "app/g/0@5"


def item(slot: int, value: object, key: object = "k", offset: int = 0) -> Record:
    return Record(Meta(GlobalTime(slot, 1, offset)), Keyed(key, key_hash(key), value))


def canonical(state: dict[str, Any]) -> dict[object, tuple[Any, ...]]:
    """A snapshot as comparable plain data: key -> (items, early), metas as plain tuples."""

    def plain(meta: Any) -> tuple[Any, ...]:
        return (tuple(meta[0]), tuple(meta[1]), int(meta[2]), bool(meta[3]))

    return {
        key: (
            [(plain(m), v) for m, v in items],
            [(plain(m), v) for m, v in early],
        )
        for key, items, early in state["buckets"]
    }


def through_changelog(data: bytes, window: int) -> Grouping:
    """A fresh grouping fed the changelog records seeded from saved unit bytes."""
    grouping = Grouping(OP, window)
    apply_changelog(grouping, changelog_records(decode_unit(data, LABEL, "t")))
    return grouping


def test_unit_names() -> None:
    assert unit_name("group_2", 3) == "group_2/3"
    assert parse_unit("group_2/3") == ("group_2", 3)
    for bad in ("", "node", "node/", "/3", "node/x"):
        with pytest.raises(ValueError, match="not '<node>/<partition>'"):
            parse_unit(bad)
    with pytest.raises(ValueError, match="no '/'"):
        unit_name("a/b", 0)
    with pytest.raises(ValueError, match=">= 0"):
        unit_name("a", -1)


def test_snapshot_below_a_slot_survives_the_round_trip() -> None:
    grouping = Grouping(OP, 3)
    # Out of order, several keys, some items at or after the snapshot slot 5.
    for record in [
        item(1, "a"),
        item(4, "c"),
        item(2, "b"),
        item(7, "late"),
        item(3, "x", key=("t", 1)),
        item(5, "at", key=("t", 1)),
        item(0, "p", key=2),
        item(6, "q", key=3),
    ]:
        grouping.push(record)
    state = grouping.snapshot(below=5)
    data = encode_unit(state, LABEL)
    restored = Grouping.restore(OP, decode_unit(data, LABEL, "t"))
    seeded = through_changelog(data, 3)

    def plain(slot: int) -> tuple[Any, ...]:
        return ((slot, 1, 0), (), 0, False)

    assert canonical(state) == {
        "k": ([(plain(2), "b"), (plain(4), "c")], []),
        ("t", 1): ([(plain(3), "x")], []),
        2: ([(plain(0), "p")], []),
    }
    assert canonical(seeded.snapshot()) == canonical(restored.snapshot()) == canonical(state)
    # Both continue alike: a new item sees the same window.
    after = item(9, "d")
    assert seeded.push(after) == restored.push(after)


def test_seeded_records_are_what_a_task_writes() -> None:
    grouping = Grouping(OP, 2)
    for record in [item(1, ["w", "1"], "w"), item(2, ["w", "2"], "w"), item(1, ["v", "1"], "v")]:
        grouping.push(record)
    seeded = dict(changelog_records(encode_unit_state(grouping)))
    written = dict(task_records(grouping))
    assert len(seeded) == 3 and all(k.startswith(ITEM_PREFIX) for k in seeded)
    assert seeded == written


def encode_unit_state(grouping: Grouping) -> dict[str, Any]:
    """The whole state (no slot bound), through the saved bytes."""
    return decode_unit(encode_unit(grouping.snapshot(), LABEL), LABEL, "t")


def _signed(body: bytes, label: str = LABEL) -> bytes:
    mac = auth.current().sign(label, None, body)
    return b"fpu1" + struct.pack(">H", len(mac)) + mac + body


def test_decode_rejects_what_it_did_not_write() -> None:
    with pytest.raises(DecodeError, match="not a unit snapshot"):
        decode_unit(_signed(b"garbage"), LABEL, "u/0@5")
    with pytest.raises(DecodeError, match="format 2"):
        decode_unit(_signed(pickle.dumps({"format": 2})), LABEL, "u/0@5")
    with pytest.raises(DecodeError, match="format 'list'"):
        decode_unit(_signed(pickle.dumps([1])), LABEL, "u/0@5")


class _RunsACommand:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("touch /tmp/flamepipe-pwned-by-a-snapshot",))


def test_a_unit_not_signed_for_its_label_is_never_unpickled() -> None:
    marker = Path("/tmp/flamepipe-pwned-by-a-snapshot")
    marker.unlink(missing_ok=True)
    evil = pickle.dumps(_RunsACommand())
    good = encode_unit(Grouping(OP, 2).snapshot(), LABEL)
    attacker = auth.Keyring((b"an-attackers-key-0123456789abcdef",))
    mac = attacker.sign(LABEL, None, evil)
    for data in (
        evil,  # a plain pickle
        b"fpu1" + struct.pack(">H", len(mac)) + mac + evil,  # another key
        _signed(evil, "app/g/0@6"),  # signed for another slot
        good[:-2] + bytes([good[-2] ^ 1]) + good[-1:],  # tampered
    ):
        with pytest.raises(Unauthenticated):
            decode_unit(data, LABEL, "u/0@5")
    assert decode_unit(good, LABEL, "u/0@5")["window"] == 2
    with pytest.raises(Unauthenticated):
        decode_unit(good, "app/g/1@5", "u/1@5")  # moved to another unit
    assert not marker.exists()


_items = st.lists(
    st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", 7]), st.integers(0, 3)),
    max_size=25,
    unique_by=lambda t: (t[0], t[2], t[1]),
)


@settings(max_examples=200, deadline=None)
@given(_items, st.integers(1, 4), st.integers(0, 8), st.integers(0, 8))
def test_any_state_restores_through_the_changelog(
    items: list[tuple[int, object, int]], window: int, prune: int, below: int
) -> None:
    grouping = Grouping(OP, window)
    for slot, key, offset in items:
        grouping.push(item(slot, f"{key}@{slot}.{offset}", key, offset))
    # Pruning below the snapshot slot only, as the prune rule promises.
    grouping.on_min_time(min(prune, below))
    state = grouping.snapshot(below=below)
    data = encode_unit(state, LABEL)
    seeded = through_changelog(data, window)
    restored = Grouping.restore(OP, decode_unit(data, LABEL, "t"))
    assert canonical(seeded.snapshot()) == canonical(restored.snapshot()) == canonical(state)
    # The pruned grouping still yields the snapshot of the unpruned one.
    whole = Grouping(OP, window)
    for slot, key, offset in items:
        whole.push(item(slot, f"{key}@{slot}.{offset}", key, offset))
    assert canonical(whole.snapshot(below=below)) == canonical(state)


def test_pruning_past_the_snapshot_slot_loses_what_it_needs() -> None:
    # Why groupings may prune only below the committed snapshot slot: pruned at min time
    # 4, the bucket keeps only its last item below 4 (slot 3), and a snapshot at slot 2
    # no longer finds the slot-1 item a restored window would start with.
    early, late = item(1, "a"), item(3, "b")
    kept = Grouping(OP, 2)
    pruned = Grouping(OP, 2)
    for grouping in (kept, pruned):
        grouping.push(early)
        grouping.push(late)
    kept.on_min_time(2)
    pruned.on_min_time(4)
    assert canonical(kept.snapshot(below=2)) == {"k": ([(((1, 1, 0), (), 0, False), "a")], [])}
    assert canonical(pruned.snapshot(below=2)) == {}
