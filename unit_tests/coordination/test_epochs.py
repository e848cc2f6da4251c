"""Epochs: each step of `Epochs.bump` against a fake ZooKeeper client that loses writes
and races other bumpers on cue (the real server: integration_tests/test_zk.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError

from framework.coordination.epochs import Epochs
from framework.coordination.paths import epoch_path
from framework.wire.znodes import EpochRecord


@dataclass
class _Stat:
    version: int


class _ZooKeeper:
    """One znode store with versions; ``before_set`` runs before each conditional set (a
    rival's write, or a connection lost after the write landed)."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[bytes, int]] = {}
        self.before_set: list[Callable[[str, int], None]] = []

    def retry(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    def create(self, path: str, value: bytes, makepath: bool = False) -> None:
        if path in self.data:
            raise NodeExistsError()
        self.data[path] = (value, 0)

    def get(self, path: str) -> tuple[bytes, _Stat]:
        value, version = self.data[path]
        return value, _Stat(version)

    def set(self, path: str, value: bytes, version: int) -> None:
        if self.before_set:
            self.before_set.pop(0)(path, version)
        if self.data[path][1] != version:
            raise BadVersionError()
        self.data[path] = (value, version + 1)

    def epoch(self, app: str) -> int:
        return EpochRecord.from_json(self.data[epoch_path(app)][0], "").epoch


@pytest.fixture
def zk() -> _ZooKeeper:
    return _ZooKeeper()


def test_the_first_bump_is_epoch_one_and_each_next_one_more(zk: _ZooKeeper) -> None:
    epochs = Epochs(zk, "app")
    assert epochs.current() is None
    first = epochs.bump("replay", from_snapshot=7)
    assert (first.epoch, first.reason, first.snapshot) == (1, "replay", 7)
    assert epochs.bump("recovery").epoch == 2
    assert epochs.current() == EpochRecord.from_json(zk.data[epoch_path("app")][0], "")
    # A second Epochs of the app finds the znode there and reads the same epoch.
    assert Epochs(zk, "app").bump("rescale").epoch == 3


def test_a_rival_bump_between_read_and_write_sends_this_one_back_to_step_one(
    zk: _ZooKeeper,
) -> None:
    epochs, rival = Epochs(zk, "app"), Epochs(zk, "app")
    zk.before_set.append(lambda _path, _version: rival_bumps())

    def rival_bumps() -> None:
        assert rival.bump("rival").epoch == 1

    # Step 3 loses to the rival's write (BadVersion), step 4 reads again: epoch 2.
    assert epochs.bump("mine").epoch == 2
    assert zk.epoch("app") == 2


def test_a_write_that_landed_before_the_connection_was_lost_costs_one_epoch_number(
    zk: _ZooKeeper,
) -> None:
    epochs = Epochs(zk, "app")
    path = epoch_path("app")

    def lands_then_lost(_path: str, version: int) -> None:
        zk.data[path] = (
            EpochRecord(1, "mine", None, None, 0).to_json(),
            version + 1,
        )
        raise ConnectionLoss()

    zk.before_set.append(lands_then_lost)
    # The lost write did happen (epoch 1); the retry starts epoch 2: strictly increasing,
    # and the caller gets an epoch no one else got.
    assert epochs.bump("mine").epoch == 2
    assert zk.epoch("app") == 2
