"""One way to connect to ZooKeeper, bounded in time, with errors that say what to fix."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from framework.errors import CoordinationError, ZooKeeperUnreachable

__all__ = ["DEFAULT_TIMEOUT_S", "Connection", "close_client", "zk_client"]

DEFAULT_TIMEOUT_S = 10.0


def zk_client(connect: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """A started `KazooClient` of ``connect`` (``host:port,...``).

    ``timeout_s`` bounds the connection attempt and is the session timeout; every
    command retries a lost connection for at most ``timeout_s``. Raises
    `ZooKeeperUnreachable` naming the address and the setting if no server answers.
    """
    try:
        client = KazooClient(
            hosts=connect,
            timeout=timeout_s,
            connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=-1, max_delay=1.0, deadline=timeout_s),
        )
    except (ValueError, KazooException) as exc:
        raise CoordinationError(
            f"ZooKeeper address {connect!r} is invalid: {exc}; fix zookeeper_connect "
            "(FLAMEPIPE_ZOOKEEPER_CONNECT), e.g. host1:2181,host2:2181"
        ) from exc
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError:
        # start() gave up waiting, but the client keeps reconnecting until stopped.
        close_client(client)
        raise ZooKeeperUnreachable(
            f"no ZooKeeper answered at {connect} within {timeout_s:g}s: check "
            "zookeeper_connect (FLAMEPIPE_ZOOKEEPER_CONNECT) and that ZooKeeper is running"
        ) from None
    return client


def close_client(client: Any) -> None:
    """Stop and close ``client``; errors of an already broken connection are moot."""
    with contextlib.suppress(KazooException, OSError):
        client.stop()
    with contextlib.suppress(KazooException, OSError):
        client.close()


class Connection:
    """A client given (shared, left open) or made from a connect string (closed by us)."""

    def __init__(self, zk: str | Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.owned = isinstance(zk, str)
        self.client: Any = zk_client(zk, timeout_s) if isinstance(zk, str) else zk
        self.where = zk if isinstance(zk, str) else "the given client"

    def retry(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)``, retried over lost connections for the client's deadline.

        Past the deadline, a `CoordinationError` saying ``what`` failed and where.
        """
        try:
            return self.client.retry(call, *args, **kwargs)
        except RetryFailedError as exc:
            raise CoordinationError(
                f"ZooKeeper at {self.where}: {what} failed, connection lost for too long "
                "(zookeeper_connect / FLAMEPIPE_ZOOKEEPER_CONNECT)"
            ) from exc

    def close(self) -> None:
        """Close the client if this connection made it."""
        if self.owned:
            close_client(self.client)
