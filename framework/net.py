"""Is anything listening there? A TCP probe, so an address nobody serves fails in seconds.

Kafka and ZooKeeper clients retry an unreachable address for their whole timeout (30 s)
and log every attempt; probing the bootstrap or connect string first turns a typo or a
stopped server into one line that names the address.

Example::

    >>> unreachable("127.0.0.1:1", timeout_s=1.0)
    ['127.0.0.1:1: Connection refused']
"""

from __future__ import annotations

import socket

REACH_TIMEOUT_S = 5.0
"""How long `unreachable` tries each address."""


def unreachable(addresses: str, timeout_s: float = REACH_TIMEOUT_S) -> list[str] | None:
    """None if some ``host:port`` of the comma-separated ``addresses`` accepts a TCP
    connection within ``timeout_s``; else why each did not (``address: reason``)."""
    reasons = []
    for address in (a.strip() for a in addresses.split(",") if a.strip()):
        # "SASL_SSL://host:9093" (a listener name) and "[::1]:2181" are both addresses.
        host, _, port = address.split("://")[-1].rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return None
        except (OSError, ValueError) as exc:
            reasons.append(f"{address}: {getattr(exc, 'strerror', None) or exc}")
    return reasons or [f"{addresses!r}: no address"]
