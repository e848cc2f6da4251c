"""`restore_epoch`: each step of seeding a new epoch's changelog from a snapshot, with the
broker (topics, the transaction, the committed records of an earlier attempt) faked and
the units in a memory backend (the real round trip: integration_tests/test_snapshots.py,
test_aggregate_snapshots.py)."""

from __future__ import annotations

from typing import Any

import pytest

from framework import Pipeline
from framework.core.grouping import Grouping
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.time import GlobalTime
from framework.errors import ConfigError, SnapshotMissing
from framework.snapshots import restore
from framework.snapshots.backends.memory import MemoryBackend
from framework.snapshots.units import encode_unit, unit_label, unit_name
from framework.testing import ListSink, ListSource
from framework.wire.records import OutRecord
from framework.wire.topics import Topics
from framework.wire.znodes import SnapshotRecord

APP, NODE, SLOT = "rs", "pairs", 50


def _graph(window: int = 2) -> Any:
    p = Pipeline(APP)
    p.source(ListSource([])).key_by(str).group(window=window, name=NODE).sink(ListSink())
    return p.graph()


def _item(key: str, slot: int) -> Record:
    return Record(Meta(GlobalTime(slot, 1, 0)), Keyed(key, key_hash(key), f"{key}{slot}"))


def _backend(keys_per_unit: list[list[str]], window: int = 2) -> MemoryBackend:
    backend = MemoryBackend()
    for p, keys in enumerate(keys_per_unit):
        grouping = Grouping(1, window)
        for key in keys:
            grouping.push(_item(key, 10))
        unit = unit_name(NODE, p)
        backend.put(unit, SLOT, encode_unit(grouping.snapshot(), unit_label(APP, unit, SLOT)))
    return backend


def _record(units: int, epoch: int = 0) -> SnapshotRecord:
    names = tuple(unit_name(NODE, p) for p in range(units))
    return SnapshotRecord(SLOT, {"lines": {0: 5}}, {NODE: names}, epoch, 0)


class _Txn:
    """The one transactional producer: what it writes, and the order of the calls."""

    made: list[_Txn] = []

    def __init__(self, bootstrap: str, transactional_id: str, *_: Any, **__: Any) -> None:
        self.id = transactional_id
        self.calls: list[str] = []
        self.records: list[OutRecord] = []
        _Txn.made.append(self)

    def start(self) -> None:
        self.calls.append("start")

    def begin(self) -> None:
        self.calls.append("begin")

    def produce(self, record: OutRecord) -> None:
        self.records.append(record)

    def commit(self) -> None:
        self.calls.append("commit")

    def abort(self) -> None:
        self.calls.append("abort")

    def close(self) -> None:
        self.calls.append("close")


class _Broker:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.partitions: dict[str, int] = {}
        self.committed: list[Any] = []  # records an earlier attempt committed
        _Txn.made = []
        monkeypatch.setattr(restore, "TransactionalProducer", _Txn)
        monkeypatch.setattr(restore, "ensure_topics", self._ensure)
        monkeypatch.setattr(restore, "partition_count", lambda _b, t: self.partitions[t])
        monkeypatch.setattr(restore, "read_to_end", lambda _b, _t, _n: self.committed)
        monkeypatch.setattr(restore, "authentic_message", lambda _r, _m: True)

    def _ensure(self, _bootstrap: str, specs: list[Any]) -> None:
        for spec in specs:
            self.partitions.setdefault(spec.name, spec.partitions)


class _Msg:
    def __init__(self, key: bytes, value: bytes | None, partition: int) -> None:
        self._key, self._value, self._partition = key, value, partition

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def partition(self) -> int:
        return self._partition


def test_the_snapshot_seeds_one_transaction_with_each_unit_in_its_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = _Broker(monkeypatch)
    backend = _backend([["a", "b"], ["c"]])
    done = restore.restore_epoch("k:9092", _graph(), _record(2), backend, 1)
    (txn,) = _Txn.made
    assert txn.id == f"{APP}.e1.restore", "step 3: an earlier attempt's transaction aborts"
    assert txn.calls == ["start", "begin", "commit", "close"]
    topic = Topics(APP, 1).state(NODE)
    assert broker.partitions == {topic: 2}
    assert sorted((r.partition, r.topic) for r in txn.records) == [(0, topic)] * 2 + [(1, topic)]
    assert (done.units, done.records, done.deleted) == (2, 3, 0)


def test_a_rescale_routes_each_key_to_its_unit_among_the_new_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _Broker(monkeypatch)
    keys = ["a", "b", "c", "d", "e"]
    backend = _backend([keys[:3], keys[3:]])
    restore.restore_epoch("k:9092", _graph(), _record(2), backend, 1, units=3)
    (txn,) = _Txn.made
    assert len(txn.records) == len(keys)
    from framework.plan.stage_state import apply_changelog

    for record in txn.records:
        grouping = Grouping(1, 2)
        apply_changelog(grouping, [(record.key, record.value)])
        ((key, *_),) = grouping.snapshot()["buckets"]
        assert record.partition == key_hash(key) % 3


def test_keys_an_earlier_attempt_committed_that_the_snapshot_lacks_are_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = _Broker(monkeypatch)
    backend = _backend([["a"]])
    first = restore.restore_epoch("k:9092", _graph(), _record(1), backend, 1)
    written = _Txn.made[0].records
    broker.committed = [_Msg(r.key or b"", r.value, r.partition or 0) for r in written]
    broker.committed.append(_Msg(b"item-from-a-crashed-attempt", b"x", 0))
    again = restore.restore_epoch("k:9092", _graph(), _record(1), backend, 1)
    stale = [r for r in _Txn.made[1].records if r.value is None]
    assert [r.key for r in stale] == [b"item-from-a-crashed-attempt"]
    assert (first.records, again.records, again.deleted) == (1, 1, 1)


def test_what_cannot_be_restored_is_refused_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = _Broker(monkeypatch)
    backend = _backend([["a"]])
    with pytest.raises(ConfigError, match="must be after the snapshot's 3"):
        restore.restore_epoch("k:9092", _graph(), _record(1, epoch=3), backend, 2)
    with pytest.raises(ConfigError, match="need units="):
        restore.restore_epoch("k:9092", _graph(), _record(1), backend, 1, empty=frozenset({NODE}))
    with pytest.raises(SnapshotMissing, match="no units of 'pairs'"):
        empty = SnapshotRecord(SLOT, {}, {}, 0, 0)
        restore.restore_epoch("k:9092", _graph(), empty, backend, 1)
    assert _Txn.made == []
    broker.partitions[Topics(APP, 1).state(NODE)] = 4
    with pytest.raises(ConfigError, match="has 4 partitions, the restore needs 1"):
        restore.restore_epoch("k:9092", _graph(), _record(1), backend, 1)
    assert _Txn.made == []


def test_a_unit_of_another_window_aborts_the_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    _Broker(monkeypatch)
    backend = _backend([["a"]], window=3)
    with pytest.raises(ConfigError, match="has window 3, the pipeline's pairs 2"):
        restore.restore_epoch("k:9092", _graph(window=2), _record(1), backend, 1)
    (txn,) = _Txn.made
    assert txn.calls == ["start", "begin", "abort", "close"]
