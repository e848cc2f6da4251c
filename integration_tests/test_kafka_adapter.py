"""The Kafka adapter on the real broker: topic admin, transactional task commits, fencing,
retries detected by the marker, and changelog catch-up that never shows aborted writes."""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, overload

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from framework.errors import ConfigError, KafkaClientError
from framework.kafka import admin, transactions
from framework.kafka.admin import (
    TopicSpec,
    compacted_spec,
    end_offsets,
    ensure_topics,
    input_topic_spec,
    partition_count,
    require_log_append_time,
    timestamp_type,
)
from framework.kafka.transactions import (
    ChangelogReader,
    TaskCommitter,
    TransactionalProducer,
    close_cached,
    must_restart,
)
from framework.wire import auth

OLD_MS = 1_000_000_000_000  # 2001-09-09: a producer timestamp far in the past


class Out(NamedTuple):
    """A record to commit (the shape of the runtime's OutRecord)."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@pytest.fixture(autouse=True)
def _close_cached() -> Iterator[None]:
    yield
    close_cached()
    admin.close_cached()
    # A producer dropped after fencing is freed by the cycle collector, not at once.
    gc.collect()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _read(bootstrap: str, topic: str, isolation: str, timeout_s: float = 3.0) -> list[Any]:
    """Every record of ``topic`` visible with ``isolation``, read until the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": _name("reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )
    try:
        partitions = partition_count(bootstrap, topic)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: list[Any] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is None:
                records.append(message)
            else:
                at_end.add(message.partition() or 0)
        return records
    finally:
        consumer.close()


def _values(records: list[Any]) -> list[bytes]:
    return [message.value() for message in records]


# -- admin ----------------------------------------------------------------------------------


def test_ensure_topics_is_idempotent_and_checks_partitions(bootstrap: str) -> None:
    name = _name("adm")
    spec = input_topic_spec(name, 2)
    ensure_topics(bootstrap, [spec])
    ensure_topics(bootstrap, [spec])
    ensure_topics(bootstrap, [TopicSpec(name, 1)])  # fewer wanted: fine
    assert partition_count(bootstrap, name) == 2
    assert end_offsets(bootstrap, name) == {0: 0, 1: 0}
    with pytest.raises(ConfigError, match=f"topic '{name}' has 2 partition"):
        ensure_topics(bootstrap, [TopicSpec(name, 3)])
    with pytest.raises(ConfigError, match="does not exist"):
        partition_count(bootstrap, _name("missing"))


def test_input_topics_use_log_append_time(
    bootstrap: str, new_topics: Callable[..., list[str]]
) -> None:
    appended = _name("lat")
    ensure_topics(bootstrap, [input_topic_spec(appended, 1)])
    (created,) = new_topics("ct")
    assert timestamp_type(bootstrap, appended) == "LogAppendTime"
    assert timestamp_type(bootstrap, created) == "CreateTime"
    producer = Producer({"bootstrap.servers": bootstrap})
    for topic in (appended, created):
        producer.produce(topic, value=b"old", timestamp=OLD_MS)
    assert producer.flush(10) == 0
    producer.close()
    (log_record,) = _read(bootstrap, appended, "read_uncommitted")
    (create_record,) = _read(bootstrap, created, "read_uncommitted")
    kind, stamp = log_record.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    assert abs(stamp - time.time() * 1000) < 60_000  # the broker's clock, not the producer's
    assert create_record.timestamp()[1] == OLD_MS


def test_require_log_append_time_says_the_fix(
    bootstrap: str, new_topics: Callable[..., list[str]]
) -> None:
    (topic,) = new_topics("ct")
    with pytest.raises(ConfigError) as caught:
        require_log_append_time(bootstrap, topic)
    fix = (
        f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics "
        f"--entity-name {topic} --add-config message.timestamp.type=LogAppendTime"
    )
    assert fix in str(caught.value)
    # Applying the fix (the same alteration through the admin API) makes the topic pass.
    entry = ConfigEntry(
        "message.timestamp.type",
        "LogAppendTime",
        incremental_operation=AlterConfigOpType.SET,
    )
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    client = AdminClient({"bootstrap.servers": bootstrap})
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    require_log_append_time(bootstrap, topic)
    with pytest.raises(ConfigError, match="no such topic"):
        require_log_append_time(bootstrap, _name("missing"))


def test_compacted_spec_creates_a_compacted_topic(bootstrap: str) -> None:
    name = _name("cmp")
    ensure_topics(bootstrap, [compacted_spec(name, 1, {"min.cleanable.dirty.ratio": "0.2"})])
    client = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = client.describe_configs([ConfigResource(ResourceType.TOPIC, name)]).values()
    configs = future.result(timeout=30)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["min.cleanable.dirty.ratio"].value == "0.2"


def test_end_offsets_committed_stop_before_an_open_transaction(bootstrap: str) -> None:
    topic = _name("end")
    ensure_topics(bootstrap, [TopicSpec(topic, 1)])
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        plain.produce(topic, value=b"%d" % i, partition=0)
    assert plain.flush(10) == 0
    plain.close()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": _name("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    assert producer.flush(10) == 0
    try:
        assert end_offsets(bootstrap, topic) == {0: 4}
        assert end_offsets(bootstrap, topic, committed=True) == {0: 3}
    finally:
        producer.abort_transaction(30)
        producer.close()


# -- task commits ---------------------------------------------------------------------------


@pytest.fixture
def io_topics(bootstrap: str) -> tuple[str, str]:
    """An input topic (whose offsets the markers name) and an output topic, 1 partition."""
    source, sink = _name("in"), _name("out")
    ensure_topics(bootstrap, [TopicSpec(source, 1), TopicSpec(sink, 1)])
    return source, sink


_TAG_HEADER = "fp.test.tag"


def _batch(topic: str, tag: str, n: int = 3, partition: int = 0) -> list[Out]:
    header = ((_TAG_HEADER, tag.encode()),)
    return [Out(topic, partition, b"k%d" % i, f"{tag}-{i}".encode(), header) for i in range(n)]


def test_commit_makes_records_and_marker_visible(
    bootstrap: str, io_topics: tuple[str, str]
) -> None:
    source, sink = io_topics
    group = _name("app.s1.p0")
    committer = TaskCommitter(bootstrap, _name("app.s1.p0"))
    try:
        assert committer.committed_position(group, source, 0) is None
        committer.commit(_batch(sink, "a"), group, {(source, 0): 10})
        assert committer.committed_position(group, source, 0) == 10
        records = _read(bootstrap, sink, "read_committed")
    finally:
        committer.close()
    assert _values(records) == [b"a-0", b"a-1", b"a-2"]
    assert [m.key() for m in records] == [b"k0", b"k1", b"k2"]
    assert all(m.headers()[:-1] == [(_TAG_HEADER, b"a")] for m in records)
    # Every record flamepipe writes is signed: the MAC comes last and verifies.
    assert all(m.headers()[-1][0] == auth.MAC_HEADER for m in records)
    assert all(auth.current().verify(sink, m.key(), m.value(), m.headers()) for m in records)


def test_partitioner_chooses_when_partition_is_none(bootstrap: str) -> None:
    source, sink = _name("in"), _name("out")
    ensure_topics(bootstrap, [TopicSpec(source, 1), TopicSpec(sink, 4)])
    committer = TaskCommitter(bootstrap, _name("tx"))
    try:
        records = [Out(sink, None, b"key-%d" % i, b"v") for i in range(40)]
        committer.commit(records, _name("g"), {(source, 0): 1})
    finally:
        committer.close()
    visible = _read(bootstrap, sink, "read_committed")
    assert len(visible) == 40
    assert len({m.partition() for m in visible}) > 1


class _Interleaved(Sequence[Out]):
    """Records whose first iteration runs ``hook`` before record ``at``: a commit paused
    midway."""

    def __init__(self, records: list[Out], at: int, hook: Callable[[], None]) -> None:
        self._records, self._at = records, at
        self._hook: Callable[[], None] | None = hook

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> Out: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Out]: ...
    def __getitem__(self, index: int | slice) -> Out | Sequence[Out]:
        return self._records[index]

    def __iter__(self) -> Iterator[Out]:
        for i, record in enumerate(self._records):
            if i == self._at and self._hook is not None:
                hook, self._hook = self._hook, None
                hook()
            yield record


def _await_uncommitted(bootstrap: str, topic: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(_read(bootstrap, topic, "read_uncommitted", 1.0)) < count:
        assert time.monotonic() < deadline, "the first records never reached the broker"


def test_a_new_attempt_fences_the_old_one_mid_transaction(
    bootstrap: str, io_topics: tuple[str, str]
) -> None:
    source, sink = io_topics
    group, transactional_id = _name("g"), _name("app.s1.p0")
    old = TaskCommitter(bootstrap, transactional_id)
    new = TaskCommitter(bootstrap, transactional_id)
    try:
        old.commit(_batch(sink, "first"), group, {(source, 0): 1})

        def new_attempt_takes_over() -> None:
            # The old attempt's first records are in the log, uncommitted, when the new
            # attempt of the same batch starts (fencing the old producer, aborting its
            # transaction) and commits it.
            _await_uncommitted(bootstrap, sink, 3 + 4)
            new.commit(_batch(sink, "new"), group, {(source, 0): 5})

        zombie = _Interleaved(_batch(sink, "zombie", 8), 4, new_attempt_takes_over)
        # The old attempt finds itself fenced, restarts, sees the batch committed: done.
        old.commit(zombie, group, {(source, 0): 5})
        assert old.committed_position(group, source, 0) == 5
    finally:
        old.close()
        new.close()
    committed = _values(_read(bootstrap, sink, "read_committed"))
    assert committed == [b"first-0", b"first-1", b"first-2", b"new-0", b"new-1", b"new-2"]
    raw = _values(_read(bootstrap, sink, "read_uncommitted"))
    assert [v for v in raw if v.startswith(b"zombie")] == [b"zombie-%d" % i for i in range(4)]


@pytest.mark.parametrize("ending", ["commit", "abort_or_replace"])
def test_a_fenced_transactional_producer_stays_fenced(
    bootstrap: str, io_topics: tuple[str, str], ending: str
) -> None:
    """A barrier's producer (no restart on fencing) cannot commit once a successor with its
    transactional.id started: its open transaction is aborted and it drops its producer
    instead of fencing the successor back; `abort_or_replace` raises and starts nothing."""
    _, sink = io_topics
    transactional_id = _name("app.sink.barrier")
    old = TransactionalProducer(bootstrap, transactional_id)
    successor = TransactionalProducer(bootstrap, transactional_id)
    try:
        old.start()
        old.begin()
        for record in _batch(sink, "old"):
            old.produce(record)
        successor.start()  # fences ``old`` and aborts its open transaction
        if ending == "commit":
            with pytest.raises(KafkaException) as raised:
                old.commit()
            assert must_restart(raised.value)
            assert old.abort() is False and old.producer is None  # dropped, not restarted
        else:
            with pytest.raises(KafkaClientError, match="cannot abort"):
                old.abort_or_replace()
            assert old.producer is None and old.replaced == 0
        successor.begin()
        for record in _batch(sink, "new"):
            successor.produce(record)
        successor.commit()
    finally:
        old.close()
        successor.close()
    assert _values(_read(bootstrap, sink, "read_committed")) == [b"new-0", b"new-1", b"new-2"]


def test_a_producer_that_cannot_abort_is_replaced_and_its_transaction_aborted(
    bootstrap: str, io_topics: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka's abort may fail fatally with INVALID_TXN_STATE (its EndTxn overtaking the
    registration of the transaction's partitions: a race no test can time, so the first
    abort of this real producer raises that error). `abort_or_replace` starts a new
    producer of the id, whose init_transactions makes the broker abort the old
    transaction: its records are in the log and never visible."""
    _, sink = io_topics
    failed: list[str] = []

    class RacingProducer(Producer):
        def abort_transaction(self, *args: Any) -> None:
            if not failed:
                failed.append("abort")
                raise KafkaException(
                    KafkaError(
                        KafkaError.INVALID_TXN_STATE, "Failed to end transaction", fatal=True
                    )
                )
            super().abort_transaction(*args)

    monkeypatch.setattr(transactions, "Producer", RacingProducer)
    txn = TransactionalProducer(bootstrap, _name("app.sink.barrier.bundles"))
    try:
        txn.start()
        txn.begin()
        for record in _batch(sink, "old"):
            txn.produce(record)
        txn.flush()  # in the log, uncommitted
        txn.abort_or_replace()
        assert failed and txn.replaced == 1 and txn.producer is not None
        txn.begin()
        for record in _batch(sink, "new"):
            txn.produce(record)
        txn.commit()
    finally:
        txn.close()
    assert _values(_read(bootstrap, sink, "read_committed")) == [b"new-0", b"new-1", b"new-2"]
    assert b"old-0" in _values(_read(bootstrap, sink, "read_uncommitted"))


def test_workers_taking_turns_with_one_transactional_id(
    bootstrap: str, io_topics: tuple[str, str]
) -> None:
    """Two Python workers serve the same partition in turn: each finds its cached
    producer fenced by the other, restarts it and commits its own batch."""
    source, sink = io_topics
    group, transactional_id = _name("g"), _name("app.s1.p0")
    workers = [TaskCommitter(bootstrap, transactional_id) for _ in range(2)]
    try:
        for batch in range(4):
            worker = workers[batch % 2]
            end = 2 * (batch + 1)
            assert not worker.is_committed(group, source, 0, end)
            worker.commit(_batch(sink, f"b{batch}", 2), group, {(source, 0): end})
            assert worker.is_committed(group, source, 0, end)
        # is_committed saw each sibling's marker and restarted the producer up front.
        assert [w.fenced_attempts for w in workers] == [0, 0]
        for batch in range(4, 6):  # without asking first, the fenced producer is found late
            worker = workers[batch % 2]
            worker.commit(_batch(sink, f"b{batch}", 2), group, {(source, 0): 2 * (batch + 1)})
        assert sum(w.fenced_attempts for w in workers) == 2
    finally:
        for worker in workers:
            worker.close()
    committed = _values(_read(bootstrap, sink, "read_committed"))
    assert committed == [b"b%d-%d" % (batch, i) for batch in range(6) for i in range(2)]


def _failing(bootstrap: str, topic: str, tag: str, partition: int = 0) -> _Interleaved:
    """Three records, then one the producer refuses (too large), produced once the three
    are in the log: the transaction fails after writing."""
    # Larger than the producer's message.max.bytes (16 MB): refused locally, not by the broker.
    records = [*_batch(topic, tag, 3, partition), Out(topic, partition, b"big", b"x" * 2**25)]
    before = len(_read(bootstrap, topic, "read_uncommitted"))
    return _Interleaved(records, 3, lambda: _await_uncommitted(bootstrap, topic, before + 3))


def test_failed_commit_aborts_and_the_committer_recovers(
    bootstrap: str, io_topics: tuple[str, str]
) -> None:
    source, sink = io_topics
    group = _name("g")
    committer = TaskCommitter(bootstrap, _name("tx"))
    try:
        with pytest.raises(KafkaClientError, match=r"transaction of .* failed"):
            committer.commit(_failing(bootstrap, sink, "lost"), group, {(source, 0): 5})
        assert committer.committed_position(group, source, 0) is None
        committer.commit(_batch(sink, "kept"), group, {(source, 0): 5})
        assert committer.committed_position(group, source, 0) == 5
    finally:
        committer.close()
    assert _values(_read(bootstrap, sink, "read_committed")) == [b"kept-0", b"kept-1", b"kept-2"]
    raw = _values(_read(bootstrap, sink, "read_uncommitted"))
    assert raw[:3] == [b"lost-0", b"lost-1", b"lost-2"]  # the aborted records were written


def test_a_retried_batch_is_detected_as_committed(
    bootstrap: str, io_topics: tuple[str, str]
) -> None:
    source, sink = io_topics
    group, transactional_id = _name("g"), _name("app.s1.p0")

    def run_task(first: int, end: int) -> bool:
        """A task over input [first, end): skip if committed, else commit. Did it write?"""
        committer = TaskCommitter.cached(bootstrap, transactional_id)
        if committer.is_committed(group, source, 0, end):
            return False
        committer.commit(_batch(sink, f"{first}-{end}", 2), group, {(source, 0): end})
        return True

    assert run_task(0, 5) is True
    close_cached()  # the retry runs in a fresh worker
    assert run_task(0, 5) is False
    assert run_task(5, 9) is True
    assert run_task(5, 9) is False
    committed = _values(_read(bootstrap, sink, "read_committed"))
    assert committed == [b"0-5-0", b"0-5-1", b"5-9-0", b"5-9-1"]


def test_cached_committers_are_per_transactional_id(bootstrap: str) -> None:
    a = TaskCommitter.cached(bootstrap, "app.s.p0")
    assert TaskCommitter.cached(bootstrap, "app.s.p0") is a
    assert TaskCommitter.cached(bootstrap, "app.s.p1") is not a
    close_cached()
    assert TaskCommitter.cached(bootstrap, "app.s.p0") is not a


# -- changelog ------------------------------------------------------------------------------


def test_changelog_catches_up_incrementally_without_aborted_writes(
    bootstrap: str, io_topics: tuple[str, str]
) -> None:
    source, _ = io_topics
    changelog = _name("app.g.state")
    ensure_topics(bootstrap, [compacted_spec(changelog, 2)])
    group = _name("g")
    committer = TaskCommitter(bootstrap, _name("app.g.p1"))
    reader = ChangelogReader.cached(bootstrap, changelog, 1)

    def write(entries: list[tuple[bytes, bytes | None]], end: int) -> None:
        records = [Out(changelog, 1, key, value) for key, value in entries]
        committer.commit(records, group, {(source, 0): end})

    try:
        assert reader.catch_up() == []
        write([(b"a", b"1"), (b"b", b"2")], 1)
        assert reader.catch_up() == [(b"a", b"1"), (b"b", b"2")]
        write([(b"a", None), (b"c", b"3")], 2)
        assert reader.catch_up() == [(b"a", None), (b"c", b"3")]
        with pytest.raises(KafkaClientError):
            aborted = _failing(bootstrap, changelog, "aborted", partition=1)
            committer.commit(aborted, group, {(source, 0): 3})
        write([(b"d", b"4")], 3)
        assert reader.catch_up() == [(b"d", b"4")]
        # Right after each commit: the reader must wait for the commit markers.
        for i in range(10):
            write([(b"e", b"%d" % i)], 4 + i)
            assert reader.catch_up() == [(b"e", b"%d" % i)]
        assert ChangelogReader.cached(bootstrap, changelog, 1) is reader
        fresh = ChangelogReader(bootstrap, changelog, 1).catch_up()
        assert ChangelogReader(bootstrap, changelog, 0).catch_up() == []
    finally:
        committer.close()
    expected = [(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"3"), (b"d", b"4")]
    assert fresh == expected + [(b"e", b"%d" % i) for i in range(10)]


def test_a_task_skips_its_own_changelog_writes_but_reads_everyone_elses(
    bootstrap: str, io_topics: tuple[str, str]
) -> None:
    source, _ = io_topics
    changelog = _name("app.g.state")
    ensure_topics(bootstrap, [compacted_spec(changelog, 1)])
    group = _name("g")
    mine, other = TaskCommitter(bootstrap, _name("mine")), TaskCommitter(bootstrap, _name("other"))
    reader = ChangelogReader(bootstrap, changelog, 0)
    records = [
        Out(source, 0, None, b"out"),
        Out(changelog, 0, b"a", b"1"),
        Out(changelog, 0, b"b", b"2"),
    ]
    try:
        assert reader.catch_up() == []
        offsets = mine.commit(records, group, {(source, 0): 1})
        assert offsets is not None and offsets[1:] == [0, 1]  # delivered offsets, in order
        assert reader.skip_own(offsets[1:]) and reader.position == 2
        other.commit([Out(changelog, 0, b"c", b"3")], group, {(source, 0): 2})
        assert reader.catch_up() == [(b"c", b"3")]  # the other writer's, not ours again
        # Something foreign lies before our next write: nothing is skipped.
        other.commit([Out(changelog, 0, b"d", b"4")], group, {(source, 0): 3})
        offsets = mine.commit([Out(changelog, 0, b"e", b"5")], group, {(source, 0): 4})
        assert offsets is not None and not reader.skip_own(offsets)
        assert reader.catch_up() == [(b"d", b"4"), (b"e", b"5")]
    finally:
        mine.close()
        other.close()


def test_changelog_reset_rereads(bootstrap: str) -> None:
    changelog = _name("state")
    ensure_topics(bootstrap, [compacted_spec(changelog, 1)])
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        key = b"k%d" % i
        headers = auth.signed(changelog, key, b"v")  # as every flamepipe writer signs
        producer.produce(changelog, key=key, value=b"v", partition=0, headers=list(headers))
    producer.produce(changelog, key=b"forged", value=b"v", partition=0)  # not signed
    assert producer.flush(10) == 0
    producer.close()
    reader = ChangelogReader(bootstrap, changelog, 0)
    assert len(reader.catch_up()) == 3  # the forged record is refused, never decoded
    assert reader.position == 4
    reader.reset(1)
    assert [key for key, _ in reader.catch_up()] == [b"k1", b"k2"]
