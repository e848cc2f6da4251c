"""The crash harness's output reader gets over a consumer that stops reading."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from framework.runners.spark.smoke import create_topics
from framework.wire.bundles import bundles_topic
from integration_tests.harness.processes import OutputTail


class _StallingTail(OutputTail):
    """Its first consumer reads nothing: every partition paused, as a stalled one."""

    IDLE_S = 1.0
    made = 0

    def _consumer(self) -> Consumer:
        consumer = super()._consumer()
        self.made += 1
        if self.made == 1:
            consumer.pause(consumer.assignment())
        return consumer


def test_a_stalled_reader_is_replaced_and_reads_on(
    bootstrap: str, new_topics: Callable[..., list[str]]
) -> None:
    (out,) = new_topics("tail-out")
    create_topics(bootstrap, [bundles_topic(out)], 1)
    said: list[str] = []
    tail = _StallingTail(bootstrap, out, said.append)
    tail.start()
    try:
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(5):
            producer.produce(out, str(i).encode())
        assert producer.flush(10) == 0
        deadline = time.monotonic() + 20
        while tail.items < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert tail.items == 5
        assert tail.stalls == 1 and tail.made == 2
        assert any("tail-out" in s and "at 0 of 5" in s for s in said), said
    finally:
        tail.stop()
        tail.join(5)
