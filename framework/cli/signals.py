"""Stopping a command the way Ctrl-C does, whatever ends it.

A terminal that closes sends its foreground process SIGHUP, a service manager or
``kill`` sends SIGTERM; by default either ends Python at once, so nothing a command started
is stopped: the embedded Kafka and ZooKeeper run in sessions of their own and outlive it.
`interrupt_on_signals` turns the first such signal into a `KeyboardInterrupt`, so every
``finally`` and context manager on the way out runs, as for Ctrl-C. A second signal while
that runs is ignored: it would interrupt the stopping itself.
"""

from __future__ import annotations

import signal
from types import FrameType

_STOPPING = (signal.SIGTERM, signal.SIGHUP)


def interrupt_on_signals() -> None:
    """SIGTERM and SIGHUP raise `KeyboardInterrupt` once (in the main thread)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        for sig in _STOPPING:
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in _STOPPING:
        signal.signal(sig, handler)
