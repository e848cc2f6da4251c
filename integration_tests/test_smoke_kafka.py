"""A transactional consume-transform-produce loop on the real broker."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from framework.runners.spark.smoke import read_all


def _consumer(bootstrap: str, group: str, isolation: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )


def _transform_loop(bootstrap: str, source: str, sink: str, group: str, count: int) -> None:
    consumer = _consumer(bootstrap, group, "read_committed")
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"smoke-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    consumer.subscribe([source])
    done = 0
    while done < count:
        batch = consumer.consume(num_messages=50, timeout=1.0)
        batch = [m for m in batch if not m.error()]
        if not batch:
            continue
        producer.begin_transaction()
        for msg in batch:
            producer.produce(sink, key=msg.key(), value=(msg.value() or b"").upper())
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
        )
        producer.commit_transaction(30)
        done += len(batch)
    consumer.close()
    # An aborted transaction must stay invisible to read_committed readers.
    producer.begin_transaction()
    for i in range(5):
        producer.produce(sink, key=b"aborted", value=f"ABORTED {i}".encode())
    producer.flush(10)
    producer.abort_transaction(30)


def test_transactional_loop_is_exactly_once(
    bootstrap: str, new_topics: Callable[..., list[str]]
) -> None:
    source, sink = new_topics("tx-in", "tx-out", partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap})
    count = 300
    for i in range(count):
        producer.produce(source, key=str(i).encode(), value=f"value {i}".encode())
    producer.flush(30)
    group = f"smoke-{uuid.uuid4().hex}"

    _transform_loop(bootstrap, source, sink, group, count)

    committed = read_all(bootstrap, sink, count + 5, timeout_s=8)
    assert sorted(v for _, v, _ in committed) == sorted(f"VALUE {i}" for i in range(count))
    uncommitted = _read_uncommitted(bootstrap, sink, count + 5)
    assert sum(1 for v in uncommitted if v.startswith("ABORTED")) == 5
    offsets = _consumer(bootstrap, group, "read_committed").committed(
        [TopicPartition(source, p) for p in range(2)], timeout=10
    )
    assert sum(tp.offset for tp in offsets) == count


def _read_uncommitted(bootstrap: str, topic: str, expected: int) -> list[str]:
    consumer = _consumer(bootstrap, f"raw-{uuid.uuid4().hex}", "read_uncommitted")
    consumer.subscribe([topic])
    values: list[str] = []
    for _ in range(40):
        if len(values) >= expected:
            break
        for msg in consumer.consume(num_messages=500, timeout=0.5):
            if not msg.error():
                values.append((msg.value() or b"").decode())
    consumer.close()
    return values
