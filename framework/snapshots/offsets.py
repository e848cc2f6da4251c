"""Where sources replay from after a snapshot at a slot: the first offset of that slot.

Input topics stamp records with LogAppendTime, so timestamps never go back inside a
partition and the first offset whose timestamp is at or after ``slot * delta_ms`` is the
first record with a slot at or after ``slot``: every record before it is in the snapshot,
none after it. Lifted records (`framework.wire.lifts`) are the exception: a lift moves
late records up to a slot their timestamps lie below, so a lift at or after ``slot``
starts its partition's replay at its first offset at the latest (every record from there
on has a slot at or after the lift's: lifted, or stamped at or past the heartbeat).
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from framework.deadline import DEFAULT_TIMEOUT_S
from framework.kafka.cache import ProcessCache
from framework.kafka.clients import close_quietly, kafka_retry, new_consumer
from framework.wire.lifts import Lift


def replay_offsets(
    bootstrap: str,
    sources: Mapping[str, int],
    slot: int,
    delta_ms: int,
    lifts: Mapping[str, tuple[Lift, ...]] | None = None,
) -> dict[str, dict[int, int]]:
    """Per topic of ``sources`` (topic -> partition count) and partition: the replay start.

    1. Read each partition's end offset (high watermark).
    2. Ask for the first offset stamped at or after ``slot * delta_ms``.
    3. None (-1): no record that late yet; the end offset of step 1 is the answer. A
       record appended after step 1 was stamped after the caller saw min time ``slot``,
       so it is in ``slot`` or later: starting at that end skips nothing.
    4. No later than the first offset of a lift (``lifts``: by topic) at or after ``slot``.
    """
    if slot < 0 or delta_ms < 1:
        raise ValueError(f"slot={slot} must be >= 0 and delta_ms={delta_ms} >= 1")
    consumer = _consumers.get(bootstrap, lambda: _new_consumer(bootstrap))
    offsets = {
        topic: _topic_offsets(consumer, topic, partitions, slot * delta_ms)
        for topic, partitions in sources.items()
    }
    # Step 4
    for topic, lifted in (lifts or {}).items():
        starts = offsets.get(topic)
        for lift in lifted:
            if starts is not None and lift.slot >= slot and lift.partition in starts:
                starts[lift.partition] = min(starts[lift.partition], lift.first)
    return offsets


# One per broker address and process: a snapshot a second made a new client (connections,
# metadata, a coordinator lookup) every time.
_consumers: ProcessCache[str, Consumer] = ProcessCache(close_quietly, limit=4)


def _new_consumer(bootstrap: str) -> Consumer:
    return new_consumer(bootstrap)  # offsets only; its throwaway group never commits


def _topic_offsets(consumer: Consumer, topic: str, partitions: int, at_ms: int) -> dict[int, int]:
    # Step 1
    ends = {
        p: kafka_retry(
            f"cannot read the end offset of {topic}[{p}]",
            lambda p=p: consumer.get_watermark_offsets(  # type: ignore[misc]
                TopicPartition(topic, p), DEFAULT_TIMEOUT_S, cached=False
            ),
        )[1]
        for p in range(partitions)
    }
    # Step 2
    asked = [TopicPartition(topic, p, at_ms) for p in range(partitions)]
    found = kafka_retry(
        f"cannot look up the offsets of {topic} at {at_ms} ms",
        lambda: consumer.offsets_for_times(asked, DEFAULT_TIMEOUT_S),
    )
    # Step 3
    return {tp.partition: tp.offset if tp.offset >= 0 else int(ends[tp.partition]) for tp in found}
