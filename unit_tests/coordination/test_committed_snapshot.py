"""The committed snapshot: each step of `SnapshotRegistry.commit` against a fake ZooKeeper
with versions and multi-op transactions (the real server: integration_tests/test_snapshots.py
and integration_tests/test_zk.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)

from framework.coordination.committed_snapshot import SnapshotRegistry
from framework.coordination.paths import committed_path, snapshot_path
from framework.errors import CoordinationError, Fenced, ProtocolViolation
from framework.wire.znodes import SnapshotRecord


@dataclass
class _Stat:
    version: int


class _Transaction:
    def __init__(self, zk: _ZooKeeper) -> None:
        self.zk = zk
        self.ops: list[tuple[Any, ...]] = []

    def create(self, path: str, value: bytes) -> None:
        self.ops.append(("create", path, value))

    def set_data(self, path: str, value: bytes, version: int) -> None:
        self.ops.append(("set", path, value, version))

    def commit(self) -> list[Any]:
        zk = self.zk
        if zk.before_commit:
            zk.before_commit.pop(0)()
        errors: list[Exception | None] = []
        for op in self.ops:
            if op[0] == "create":
                errors.append(NodeExistsError() if op[1] in zk.data else None)
            else:
                errors.append(BadVersionError() if zk.data[op[1]][1] != op[3] else None)
        if any(errors):  # all or nothing, as ZooKeeper's multi
            return [e if e is not None else RolledBackError() for e in errors]
        for op in self.ops:
            if op[0] == "create":
                zk.data[op[1]] = (op[2], 0)
            else:
                zk.data[op[1]] = (op[2], op[3] + 1)
        if zk.lose_reply:
            zk.lose_reply = False
            raise ConnectionLoss()
        return [op[1] if op[0] == "create" else _Stat(op[3] + 1) for op in self.ops]


class _ZooKeeper:
    """Znodes with versions; ``before_commit`` runs before a transaction applies (a rival
    committer), ``lose_reply`` drops the reply of the next one that applied."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[bytes, int]] = {}
        self.before_commit: list[Callable[[], None]] = []
        self.lose_reply = False

    def retry(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    def ensure_path(self, path: str) -> None:
        self.data.setdefault(path, (b"", 0))

    def create(self, path: str, value: bytes) -> None:
        if path in self.data:
            raise NodeExistsError()
        self.data[path] = (value, 0)

    def get(self, path: str) -> tuple[bytes, _Stat]:
        if path not in self.data:
            raise NoNodeError()
        value, version = self.data[path]
        return value, _Stat(version)

    def get_children(self, path: str) -> list[str]:
        prefix = path + "/"
        return [p[len(prefix) :] for p in self.data if p.startswith(prefix)]

    def delete(self, path: str) -> None:
        del self.data[path]

    def transaction(self) -> _Transaction:
        return _Transaction(self)


def record(slot: int, epoch: int = 0) -> SnapshotRecord:
    return SnapshotRecord(slot, {"in": {0: slot}}, {"group": ("group/0",)}, epoch, 0)


@pytest.fixture
def zk() -> _ZooKeeper:
    return _ZooKeeper()


def test_a_commit_makes_the_record_committed_with_its_per_slot_record(zk: _ZooKeeper) -> None:
    registry = SnapshotRegistry(zk, "app")
    assert registry.latest() is None
    registry.commit(record(5))
    registry.commit(record(9))
    assert registry.latest() == record(9)
    assert registry.slots() == [5, 9]
    assert registry.at_or_below(8) == record(5)
    assert SnapshotRegistry(zk, "app").latest() == record(9)  # another reader sees it


def test_a_registry_opened_before_another_committed_is_fenced(zk: _ZooKeeper) -> None:
    old, new = SnapshotRegistry(zk, "app"), SnapshotRegistry(zk, "app")
    new.commit(record(5))
    with pytest.raises(Fenced, match="another committer took over"):  # step 1
        old.commit(record(6))
    assert zk.data[committed_path("app")][0] == record(5).to_json()


def test_an_older_epoch_is_fenced_and_a_slot_must_grow(zk: _ZooKeeper) -> None:
    registry = SnapshotRegistry(zk, "app")
    registry.commit(record(5, epoch=2))
    with pytest.raises(Fenced, match="epoch 1 after one of epoch 2"):  # step 2
        registry.commit(record(6, epoch=1))
    with pytest.raises(ProtocolViolation, match="must strictly increase"):
        registry.commit(record(5, epoch=2))


def test_a_committer_racing_in_during_the_transaction_fences_this_one(zk: _ZooKeeper) -> None:
    registry, rival = SnapshotRegistry(zk, "app"), SnapshotRegistry(zk, "app")
    zk.before_commit.append(lambda: rival.commit(record(7)))
    with pytest.raises(Fenced, match="during the commit of slot 6"):  # step 4
        registry.commit(record(6))
    # Neither znode of the lost transaction was written.
    assert snapshot_path("app", 6) not in zk.data
    assert registry.latest() == record(7)


def test_a_lost_reply_after_the_commit_applied_counts_as_committed(zk: _ZooKeeper) -> None:
    registry = SnapshotRegistry(zk, "app")
    zk.lose_reply = True
    registry.commit(record(5))  # step 5: /committed holds our bytes
    assert registry.latest() == record(5)
    registry.commit(record(6))  # and the registry's version followed it
    assert registry.latest() == record(6)


def test_a_lost_commit_that_did_not_happen_says_to_commit_again(zk: _ZooKeeper) -> None:
    registry = SnapshotRegistry(zk, "app")

    def lost() -> None:
        raise ConnectionLoss()

    zk.before_commit.append(lost)
    with pytest.raises(CoordinationError, match=r"did not happen .* commit it again"):
        registry.commit(record(5))
    registry.commit(record(5))
    assert registry.latest() == record(5)


def test_gc_keeps_the_newest_and_never_the_committed_one(zk: _ZooKeeper) -> None:
    registry = SnapshotRegistry(zk, "app")
    for slot in (1, 2, 3, 4):
        registry.commit(record(slot))
    assert registry.gc(keep=2) == [1, 2]
    assert registry.slots() == [3, 4]
    with pytest.raises(ValueError, match="keep=0"):
        registry.gc(keep=0)
