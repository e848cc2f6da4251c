"""kazoo against the real ZooKeeper: create, read, watch."""

from __future__ import annotations

import threading
import uuid

from kazoo.client import KazooClient

from framework.config import Settings


def test_create_read_and_watch_a_znode(stack: Settings) -> None:
    client = KazooClient(hosts=stack.zookeeper, timeout=10)
    client.start(timeout=15)
    try:
        path = f"/flamepipe-smoke/{uuid.uuid4().hex}"
        client.create(path, b"v1", makepath=True)
        data, stat = client.get(path)
        assert data == b"v1" and stat.version == 0

        seen: list[bytes] = []
        changed = threading.Event()

        @client.DataWatch(path)  # type: ignore[misc]
        def _watch(value: bytes | None, _stat: object) -> None:
            seen.append(value or b"")
            if value == b"v2":
                changed.set()

        client.set(path, b"v2")
        assert changed.wait(10), f"watch never fired with v2, saw {seen}"
        assert seen[0] == b"v1"
        client.delete(path)
        assert client.exists(path) is None
    finally:
        client.stop()
        client.close()
