"""`connectors.bundles.BundleConsumer`: how it waits for records (a fake consumer)."""

from __future__ import annotations

from typing import Any

from connectors.bundles import BundleConsumer
from framework.kafka.clients import take


class _Consumer:
    """Records every ``consume`` call; returns one message once, then nothing."""

    def __init__(self, messages: list[Any]) -> None:
        self.calls: list[tuple[int, float]] = []
        self.messages = messages

    def consume(self, most: int, timeout: float) -> list[Any]:
        self.calls.append((most, timeout))
        out, self.messages = self.messages[:most], self.messages[most:]
        return out


def test_take_waits_only_for_the_first_message() -> None:
    consumer = _Consumer(["a", "b"])
    assert take(consumer, 1000, 0.5) == ["a", "b"]  # type: ignore[arg-type]
    # consume(most > 1, timeout > 0) waits out the timeout unless ``most`` messages come
    assert all(most == 1 or timeout == 0 for most, timeout in consumer.calls)


def test_a_bundle_consumer_never_waits_out_its_poll_for_a_full_batch() -> None:
    """A bundle must reach its reader when it is readable, not a poll interval later: the
    demo's reader waited ~50 ms a bundle (latency p50 163 -> 100 ms without the wait)."""
    reader = BundleConsumer("127.0.0.1:1", "out", "group")
    fake = _Consumer([])
    reader._consumer = fake  # type: ignore[assignment]
    reader._fill(0.05)
    assert fake.calls, "no read"
    assert all(most == 1 or timeout == 0 for most, timeout in fake.calls)
