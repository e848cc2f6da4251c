"""What the services share: a stoppable loop thread, node ids, topic specs, Kafka clients."""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from framework.errors import FlamepipeError, PipelineError
from framework.kafka.admin import TopicSpec, compacted_spec
from framework.runtime.stages import Topics

__all__ = [
    "Service",
    "acks_topic_spec",
    "close_quietly",
    "is_eof",
    "kafka_call",
    "mintime_topic_spec",
    "new_consumer",
    "new_producer",
    "read_to_end",
    "service_node_id",
    "where",
]

T = TypeVar("T")
_TIMEOUT_S = 30.0


def service_node_id(app: str, *parts: str) -> int:
    """A stable 63-bit acker node id for a service of ``app`` (same across restarts)."""
    text = "/".join((app, *parts))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


def acks_topic_spec(app: str, shards: int) -> TopicSpec:
    """``<app>.acks``: one partition per shard, kept forever (the acker replays it all)."""
    config = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
    return TopicSpec(Topics(app).acks, shards, config)


def mintime_topic_spec(app: str, partitions: int = 1) -> TopicSpec:
    """``<app>.mintime``: compacted by ``<shard>:<segment>`` (see `framework.services.mintime`)."""
    return compacted_spec(Topics(app).mintime, partitions)


def kafka_call(what: str, call: Callable[[], T]) -> T:
    """``call()``, with a Kafka failure raised as `PipelineError` saying ``what`` failed."""
    try:
        return call()
    except KafkaException as exc:
        raise PipelineError(f"{what}: {exc}") from exc


def new_consumer(bootstrap: str, group: str | None = None, **config: Any) -> Consumer:
    """A read_committed consumer that never auto-commits (group None: a throwaway id)."""
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group or f"flamepipe-reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        **config,
    }
    return kafka_call(f"cannot create a consumer for {bootstrap}", lambda: Consumer(settings))


def new_producer(bootstrap: str, **config: Any) -> Producer:
    """An idempotent producer (pass ``transactional_id`` as ``**{"transactional.id": ...}``)."""
    settings = {"bootstrap.servers": bootstrap, "enable.idempotence": True, **config}
    return kafka_call(f"cannot create a producer for {bootstrap}", lambda: Producer(settings))


def read_to_end(
    bootstrap: str, topic: str, partitions: int, timeout: float = _TIMEOUT_S
) -> list[Message]:
    """Every committed record of ``topic`` now, partition by partition in offset order."""
    consumer = new_consumer(bootstrap)
    try:
        assign = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        kafka_call(f"cannot read {topic}", lambda: consumer.assign(assign))
        waiting = set(range(partitions))
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        while waiting:
            if time.monotonic() > deadline:
                raise PipelineError(f"reading {topic} to its end took over {timeout} s")
            for msg in consumer.consume(1000, 0.1):
                error = msg.error()
                if error is None:
                    out.append(msg)
                elif error.code() == KafkaError._PARTITION_EOF:
                    waiting.discard(where(msg)[0])
                else:
                    raise PipelineError(f"cannot read {topic}: {error}")
        return out
    finally:
        close_quietly(consumer)


def where(msg: Message) -> tuple[int, int]:
    """``(partition, offset)`` of a consumed record."""
    partition, offset = msg.partition(), msg.offset()
    if partition is None or offset is None:  # only produced-but-unsent messages lack them
        raise PipelineError(f"a consumed record of {msg.topic()} has no partition or offset")
    return partition, offset


def is_eof(msg: Message) -> bool:
    """Whether ``msg`` is the end-of-partition event, not a record."""
    error = msg.error()
    return error is not None and error.code() == KafkaError._PARTITION_EOF


def close_quietly(client: Consumer | Producer | None) -> None:
    """Close a client that may be broken already; nothing is left to report."""
    if client is None:
        return
    with contextlib.suppress(KafkaException, RuntimeError, AttributeError):
        client.close()


class Service(ABC):
    """A loop run by a thread (`start` / `stop`, a context manager) or by the caller.

    The loop opens its resources (`_open`), repeats `_step` until stopped, and always
    closes them (`_close`). A failure stops the loop; `stop`, `check` and `run_forever`
    raise it as a flamepipe error.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: FlamepipeError | None = None

    @property
    def error(self) -> FlamepipeError | None:
        """Why the loop stopped, if it failed."""
        return self._error

    @property
    def running(self) -> bool:
        """Whether the loop thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Self:
        """Run the loop in a daemon thread; returns self."""
        if self._thread is not None:
            raise PipelineError(f"{self.name} was started already")
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout: float = _TIMEOUT_S) -> None:
        """Wait until the loop has opened its resources; raise if it failed or timed out."""
        if not self._ready.wait(timeout):
            raise PipelineError(f"{self.name} did not get ready in {timeout} s")
        self.check()

    def stop(self, timeout: float = _TIMEOUT_S) -> None:
        """Stop the loop and wait for it; raise its failure if it had one."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise PipelineError(f"{self.name} did not stop within {timeout} s")
        self.check()

    def check(self) -> None:
        """Raise the loop's failure, if any."""
        if self._error is not None:
            raise self._error

    def run_forever(self) -> None:
        """Run the loop in this thread until `stop` (or Ctrl-C); raise its failure."""
        with contextlib.suppress(KeyboardInterrupt):
            self._main()
        self.check()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.stop()
        else:  # the block's own exception matters more than ours
            with contextlib.suppress(FlamepipeError):
                self.stop()

    @property
    def stopping(self) -> bool:
        """Whether `stop` was asked for."""
        return self._stopping.is_set()

    def _main(self) -> None:
        try:
            self._open()
            self._ready.set()
            while not self._stopping.is_set():
                self._step()
        except FlamepipeError as exc:
            self._error = exc
        except Exception as exc:  # a loop must report, not die silently
            self._error = PipelineError(f"{self.name} failed: {type(exc).__name__}: {exc}")
            self._error.__cause__ = exc
        finally:
            self._ready.set()
            self._close()

    @abstractmethod
    def _open(self) -> None:
        """Open clients and restore state (runs in the loop's thread)."""

    @abstractmethod
    def _step(self) -> None:
        """One round of the loop; must return within a fraction of a second."""

    @abstractmethod
    def _close(self) -> None:
        """Release everything `_open` took, also after a failure."""
