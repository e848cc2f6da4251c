"""A restarted acker takes each shard's last readable checkpoint and skips the others."""

from __future__ import annotations

from dataclasses import dataclass

from framework.acker.checkpoints import latest
from framework.core.acker.sharded import ShardState
from framework.wire import auth
from framework.wire.checkpoints import encode_checkpoint


@dataclass
class _Message:
    k: bytes | None
    v: bytes | None
    o: int

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def topic(self) -> str:
        return "app.acker"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.o

    def headers(self) -> list[tuple[str, bytes]]:
        mac = auth.current().sign(self.topic(), self.k, self.v)
        return [(auth.MAC_HEADER, mac)]


def _state(n: int) -> ShardState:
    return ShardState({"s": {n: 1}}, {}, {}, {})


def test_the_last_readable_checkpoint_of_each_wanted_shard_wins() -> None:
    records = [
        _Message(b"0", encode_checkpoint(10, _state(1)), 0),
        _Message(b"1", encode_checkpoint(20, _state(2)), 1),
        _Message(b"0", encode_checkpoint(30, _state(3)), 2),
        _Message(b"0", b"garbage", 3),  # unreadable: skipped, the one before stands
        _Message(b"1", None, 4),  # a deletion marker: skipped
        _Message(b"2", encode_checkpoint(50, _state(5)), 5),  # a shard not asked for
    ]
    assert latest(records, [0, 1]) == {0: (30, _state(3)), 1: (20, _state(2))}  # type: ignore[arg-type]
