"""Stable ids: the same name gives the same number in every process and after restarts.

Python's ``hash`` of a string is salted per process, so every id that must survive a
restart or match across processes (acker node ids, operation ids, shard choice) is a
BLAKE2b digest of its name.
"""

from __future__ import annotations

import hashlib


def stable_id(text: str | bytes, bits: int = 63) -> int:
    """A ``bits``-bit number of ``text`` (at most 64), the same everywhere and always."""
    data = text.encode() if isinstance(text, str) else text
    digest = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
    return digest >> (64 - bits)


def service_node_id(app: str, *parts: str) -> int:
    """A stable 63-bit acker node id for a service of ``app`` (same across restarts)."""
    return stable_id("/".join((app, *parts)))


def heartbeat_node_id(text: str) -> int:
    """A negative acker node id, for a sender of heartbeats only (never an ack).

    The min-time listener leaves such nodes out of its vector cut
    (`framework.core.acker.sharded`): a sender killed between the ack batches of one round
    leaves that round on some shards only, and a node in the cut that never sends again
    would hold every later report back forever.
    """
    return -(stable_id(text) or 1)


def is_heartbeat_node(node: int) -> bool:
    """Whether ``node`` is a heartbeat-only sender (`heartbeat_node_id`)."""
    return node < 0
