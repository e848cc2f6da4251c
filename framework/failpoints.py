"""Failpoints: crash a process at a named point, for crash tests that need a precise moment.

``FLAMEPIPE_FAILPOINTS="barrier.bundle=3"`` makes the third `hit` of ``barrier.bundle``
kill the process with SIGKILL (what ``kill -9`` does: no cleanup, no flush, no atexit).
Unset, `hit` costs one dictionary lookup. Only tests and soak harnesses set it.

A few failpoints are values, not crashes (`value`): ``clock.skew_ms=2000`` sets the
driver's clock for front heartbeats 2 s ahead, as a skewed host clock would;
``fronts.ahead_ms=3000`` makes caught-up source partitions promise 3 s past the broker's
time, as a broker that exposes records that long after stamping them would.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

from framework.errors import ConfigError

ENV = "FLAMEPIPE_FAILPOINTS"

_lock = threading.Lock()
_counts: dict[str, int] = {}
_armed: dict[str, dict[str, int]] = {}  # "env" -> parsed, read at the first hit


def parse(text: str) -> dict[str, int]:
    """``"name=n,other=m"`` -> ``{"name": n, "other": m}``; `ConfigError` if malformed."""
    armed: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, count = part.partition("=")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise ConfigError(f"{ENV}={text!r}: write name=count[,name=count], count >= 1")
        armed[name] = int(count)
    return armed


def hit(name: str, before: Callable[[], object] | None = None) -> None:
    """Count a pass through ``name``; on the armed count run ``before``, then SIGKILL self."""
    with _lock:
        if "env" not in _armed:
            _armed["env"] = parse(os.environ.get(ENV, ""))
        armed = _armed["env"]
        if name not in armed:
            return
        _counts[name] = _counts.get(name, 0) + 1
        if _counts[name] != armed[name]:
            return
    if before is not None:
        before()
    os.kill(os.getpid(), signal.SIGKILL)


def value(name: str) -> int:
    """The number armed for ``name`` in the environment now, 0 if none."""
    return parse(os.environ.get(ENV, "")).get(name, 0)
