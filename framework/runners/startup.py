"""Starting a driver while Kafka or ZooKeeper is down: wait, bounded, then start.

A supervisor that restarts a driver during a broker or ZooKeeper outage must not see a
crash loop, and a person who starts one before the cluster must see why it waits. So the
driver waits as ``flamepipe acker`` and ``flamepipe barrier`` do:

1. Until Kafka (some bootstrap server) and ZooKeeper accept TCP connections, probing every
   second, with a line every 10 s that names what is still missing.
2. Start; a start the cluster fails while it is still coming up (no partition leader yet,
   the group coordinator loading, ZooKeeper's session not yet established) is tried again
   every 5 s.
3. Both within ``startup_wait_ms`` in all (0: no waiting, the first failure stops it); past
   that, the last failure is raised.

A bad configuration (a wrong address among them) costs that wait before it is reported;
the progress lines name the addresses, so a person sees it long before.

Example::

    >>> from framework.config import Settings
    >>> await_cluster(Settings(bootstrap_servers="127.0.0.1:1", zookeeper_connect="127.0.0.1:1",
    ...                        startup_wait_ms=0))
    Traceback (most recent call last):
    ...
    framework.errors.ConfigError: cannot reach Kafka at 127.0.0.1:1 ...
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from framework.config import Settings
from framework.deadline import Deadline
from framework.errors import (
    ConfigError,
    CoordinationError,
    DeadlineExceeded,
    Fenced,
    KafkaClientError,
    ServiceFailed,
)
from framework.net import unreachable

_log = logging.getLogger(__name__)

T = TypeVar("T")

PROGRESS_S = 10.0
START_PAUSE_S = 5.0
_PROBE_S = 1.0

PASSING = (KafkaClientError, DeadlineExceeded, ServiceFailed, CoordinationError)
"""What a cluster that is coming up, or going through a broker or ZooKeeper restart, fails
a start or a running service with; never a fencing (`is_passing`)."""


def is_passing(exc: BaseException) -> bool:
    """Whether ``exc`` passes with the cluster's outage: one of `PASSING`, not `Fenced` (a
    driver or service fenced by a successor must stop)."""
    return isinstance(exc, PASSING) and not isinstance(exc, Fenced)


def _missing(settings: Settings) -> list[str]:
    """What does not accept connections yet, each with its reasons."""
    missing = []
    for what, addresses, setting in (
        ("Kafka", settings.kafka_bootstrap, "bootstrap_servers (FLAMEPIPE_BOOTSTRAP_SERVERS)"),
        (
            "ZooKeeper",
            settings.zookeeper.split("/", 1)[0],
            "zookeeper_connect (FLAMEPIPE_ZOOKEEPER_CONNECT)",
        ),
    ):
        reasons = unreachable(addresses, timeout_s=_PROBE_S)
        if reasons is not None:
            missing.append(f"cannot reach {what} at {addresses} ({'; '.join(reasons)}): {setting}")
    return missing


def await_cluster(settings: Settings, deadline: Deadline | None = None) -> None:
    """Step 1: return once Kafka and ZooKeeper accept connections; `ConfigError` naming
    what is missing once ``deadline`` (default: ``startup_wait_ms`` from now) passes."""
    deadline = deadline or Deadline(settings.startup_wait_ms / 1000)
    began = last_line = time.monotonic()
    while missing := _missing(settings):
        if deadline.expired:
            raise ConfigError(
                "; ".join(missing) + f" (waited {time.monotonic() - began:.0f} s: startup_wait_ms="
                f"{settings.startup_wait_ms}); start it or point the setting at it"
            )
        if time.monotonic() - last_line >= PROGRESS_S:
            last_line = time.monotonic()
            _log.warning(
                "waiting for the cluster (%.0f s so far): %s",
                last_line - began,
                "; ".join(missing),
            )
        time.sleep(_PROBE_S)
    if time.monotonic() - began >= _PROBE_S:
        _log.info("the cluster answers after %.0f s of waiting", time.monotonic() - began)


def start_retrying(settings: Settings, start: Callable[[], T]) -> T:
    """Steps 1-3: ``start()`` once the cluster answers, again while a cluster that is
    still coming up fails it, all within ``startup_wait_ms``."""
    deadline = Deadline(settings.startup_wait_ms / 1000)
    while True:
        await_cluster(settings, deadline)
        try:
            return start()
        except PASSING as exc:
            if not is_passing(exc) or deadline.expired:
                raise
            _log.warning("start failed (%s); trying again in %.0f s", exc, START_PAUSE_S)
        time.sleep(START_PAUSE_S)
