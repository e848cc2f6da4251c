"""The names of flamepipe's own topics: one application's internal topics per epoch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Topics:
    """Names of the framework's own topics for application ``app`` in ``epoch``.

    A replay or a recovery starts a new epoch (`framework.coordination.epochs`): its internal topics
    are new (``<app>.e<epoch>.*``), so nothing of the old epoch's acks, shuffles, state or
    pre-barrier records can leak into the new one. Epoch 0 keeps the plain names. The
    dead-letter topic is for people and the lifts topic for replays: both stay the same
    across epochs.
    """

    app: str
    epoch: int = 0

    @property
    def prefix(self) -> str:
        """``<app>`` in epoch 0, ``<app>.e<epoch>`` after."""
        return self.app if self.epoch == 0 else f"{self.app}.e{self.epoch}"

    @property
    def acks(self) -> str:
        """Acks, heartbeats and node times for the acker, one partition per shard."""
        return f"{self.prefix}.acks"

    @property
    def mintime(self) -> str:
        """Min-time notifications of the acker (compacted)."""
        return f"{self.prefix}.mintime"

    @property
    def acker(self) -> str:
        """Checkpoints of the acker's shards (compacted): where a restart resumes."""
        return f"{self.prefix}.acker"

    @property
    def dlq(self) -> str:
        """Dead letters: records that could not be decoded or processed, with the reason."""
        return f"{self.app}.dlq"

    @property
    def lifts(self) -> str:
        """Source records whose global time was moved up to a heartbeat they arrived after
        (`framework.wire.lifts`, compacted): every epoch's replays read them."""
        return f"{self.app}.lifts"

    def shuffle(self, node: str) -> str:
        """The input of a grouping, aggregate or converge ``node``, partitioned by key, or
        of a loop ``node`` (its input and its feedback), partitioned by front."""
        return f"{self.prefix}.{node}"

    def state(self, node: str) -> str:
        """The changelog of stateful ``node`` (compacted)."""
        return f"{self.prefix}.{node}.state"

    def positions(self, stage: str) -> str:
        """Where continuous ``stage``'s tasks commit their input positions (compacted,
        `framework.kafka.stage_positions`)."""
        return f"{self.prefix}.{stage}.positions"

    def pre(self, sink: str) -> str:
        """Items and tombstones on their way to the barrier of ``sink``."""
        return f"{self.prefix}.{sink}.pre"
