"""`ServiceSet`: launched at once, then waited for; a failure to open stops them all."""

from __future__ import annotations

import threading

import pytest

from framework.errors import ServiceFailed
from framework.runners.assembly import ServiceSet
from framework.service import Service


class _Opening(Service):
    """A service whose `_open` waits for ``gate`` and then raises ``failure``, if any."""

    def __init__(self, name: str, gate: threading.Event, failure: str | None = None) -> None:
        super().__init__(name)
        self.gate = gate
        self.failure = failure
        self.opened = threading.Event()
        self.closed = threading.Event()

    def _open(self) -> None:
        self.gate.wait(5)
        if self.failure is not None:
            raise ServiceFailed(self.failure)
        self.opened.set()

    def _step(self) -> None:
        self._stopping.wait(0.01)

    def _close(self) -> None:
        self.closed.set()


def test_launch_returns_while_the_services_open_and_wait_ready_waits_for_them() -> None:
    gate = threading.Event()
    barrier = _Opening("barrier", gate)
    services = ServiceSet(barriers=[barrier]).launch()
    try:
        assert barrier.running
        assert not barrier.opened.is_set()  # launch did not wait for the open
        gate.set()
        services.wait_ready()
        assert barrier.opened.is_set()
    finally:
        services.stop()
    assert barrier.closed.is_set()


def test_a_service_that_fails_to_open_stops_every_launched_one() -> None:
    gate = threading.Event()
    good = _Opening("good", gate)
    bad = _Opening("bad", gate, failure="cannot open its producer")
    services = ServiceSet(barriers=[good, bad]).launch()
    gate.set()
    with pytest.raises(ServiceFailed, match="cannot open its producer"):
        services.wait_ready()
    assert not good.running and good.closed.is_set()
    assert not bad.running
