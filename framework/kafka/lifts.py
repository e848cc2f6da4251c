"""Reading a pipeline's lifts (`framework.wire.lifts`) for its source tasks and oracles.

Only authenticated lifts count: a lift moves global time, so a forged one is refused
(counted and logged by `framework.wire.auth.authentic`), never applied.
"""

from __future__ import annotations

import logging

from framework.kafka.admin import partitions_if_exists
from framework.kafka.clients import authentic_message, read_to_end
from framework.wire.lifts import Lift
from framework.wire.topics import Topics

_log = logging.getLogger(__name__)


def read_lifts(bootstrap: str, app: str) -> dict[str, tuple[Lift, ...]]:
    """Every committed lift of ``app``, by source topic ({} before its topic exists)."""
    topic = Topics(app).lifts
    if not partitions_if_exists(bootstrap, topic):
        return {}
    found: dict[str, list[Lift]] = {}
    for msg in read_to_end(bootstrap, topic):
        where = f"{topic}[{msg.partition()}]@{msg.offset()}"
        if not authentic_message("lifts reader", msg):
            continue
        lift = Lift.decode(msg.value(), where)
        found.setdefault(lift.topic, []).append(lift)
    if found:
        _log.info(
            "%s: %d lifted ranges of late source records apply to replays",
            app,
            sum(len(v) for v in found.values()),
        )
    return {name: tuple(lifts) for name, lifts in found.items()}
