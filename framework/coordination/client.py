"""One way to connect to ZooKeeper, bounded in time, with errors that say what to fix.

Every session authenticates with ZooKeeper's ``digest`` scheme under an identity derived
from each key of the pipeline's keyring (`framework.wire.auth`), and every znode it
creates gets the ACL: those identities may do anything, everyone else may only read
(docs/security.md, "ZooKeeper"). So a client without the pipeline's key can neither change
an epoch nor commit a snapshot, and no extra secret needs managing; a rotated key keeps
access to znodes made under the old one while both are in the ring.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
from collections.abc import Callable
from typing import Any, Self, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions, make_digest_acl

from framework.coordination.paths import ROOT
from framework.errors import CoordinationError, ZooKeeperUnreachable
from framework.net import unreachable
from framework.wire.auth import Keyring, current

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0


def digest_identities(keyring: Keyring) -> list[tuple[str, str]]:
    """``(user, password)`` of each key: ``flamepipe-<key id>`` and an HMAC of the key, so
    the password says nothing about the key itself."""
    out = []
    for key_id, key in zip(keyring.ids, keyring.keys, strict=True):
        digest = hmac.new(key, b"flamepipe zookeeper digest 1", hashlib.sha256).digest()
        out.append((f"flamepipe-{key_id.decode()}", base64.b64encode(digest).decode()))
    return out


def _world(perms: int) -> ACL:
    (open_acl,) = OPEN_ACL_UNSAFE
    return ACL(perms, open_acl.id)


def _ensure_root(client: KazooClient, mine: list[ACL]) -> None:
    """``/flamepipe`` is the parent of every pipeline, each with its own key: anyone may add
    or remove a pipeline's root under it (ZooKeeper deletes only an empty node, and each
    pipeline's own znodes are closed to all but its key); nobody else may change it."""
    if client.exists(ROOT) is None:
        world = Permissions.READ | Permissions.CREATE | Permissions.DELETE
        with contextlib.suppress(NodeExistsError):
            client.create(ROOT, b"", acl=[*mine, _world(world)])


def zk_client(connect: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> KazooClient:
    """A started `KazooClient` of ``connect`` (``host:port,...``).

    Authenticated and creating znodes with the pipeline's ACL (see the module docstring).
    ``timeout_s`` bounds the connection attempt and is the session timeout; every
    command retries a lost connection for at most ``timeout_s``. Raises
    `ZooKeeperUnreachable` naming the address and the setting if no server answers.
    """
    identities = digest_identities(current())
    mine = [make_digest_acl(user, password, all=True) for user, password in identities]
    try:
        client = KazooClient(
            hosts=connect,
            timeout=timeout_s,
            auth_data=[("digest", f"{user}:{password}") for user, password in identities],
            default_acl=[*mine, _world(Permissions.READ)],
            connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=-1, max_delay=1.0, deadline=timeout_s),
        )
    except (ValueError, KazooException) as exc:
        raise CoordinationError(
            f"ZooKeeper address {connect!r} is invalid: {exc}; fix zookeeper_connect "
            "(FLAMEPIPE_ZOOKEEPER_CONNECT), e.g. host1:2181,host2:2181"
        ) from exc
    # A chroot ("host:2181/flamepipe") is not part of an address.
    if (reasons := unreachable(connect.split("/", 1)[0])) is not None:
        raise ZooKeeperUnreachable(
            f"cannot reach ZooKeeper at {connect} ({'; '.join(reasons)}): start it "
            "(`flamepipe up`) or point zookeeper_connect (FLAMEPIPE_ZOOKEEPER_CONNECT) at a "
            "running server"
        )
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError:
        # start() gave up waiting, but the client keeps reconnecting until stopped.
        close_client(client)
        raise ZooKeeperUnreachable(
            f"no ZooKeeper answered at {connect} within {timeout_s:g}s: check "
            "zookeeper_connect (FLAMEPIPE_ZOOKEEPER_CONNECT) and that ZooKeeper is running"
        ) from None
    _ensure_root(client, mine)
    return client


def close_client(client: KazooClient) -> None:
    """Stop and close ``client``; errors of an already broken connection are moot."""
    with contextlib.suppress(KazooException, OSError):
        client.stop()
    with contextlib.suppress(KazooException, OSError):
        client.close()


class Connection:
    """A client given (shared, left open) or made from a connect string (closed by us)."""

    def __init__(self, zk: str | KazooClient, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.owned = isinstance(zk, str)
        self.client: KazooClient = zk_client(zk, timeout_s) if isinstance(zk, str) else zk
        self.where = zk if isinstance(zk, str) else "the given client"

    def retry(self, what: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call(*args, **kwargs)``, retried over lost connections for the client's deadline.

        Past the deadline, a `CoordinationError` saying ``what`` failed and where.
        """
        try:
            result: T = self.client.retry(call, *args, **kwargs)
            return result
        except RetryFailedError as exc:
            raise CoordinationError(
                f"ZooKeeper at {self.where}: {what} failed, connection lost for too long "
                "(zookeeper_connect / FLAMEPIPE_ZOOKEEPER_CONNECT)"
            ) from exc

    def close(self) -> None:
        """Close the client if this connection made it."""
        if self.owned:
            close_client(self.client)


class OnConnection:
    """What holds a `Connection` (``_conn``): `close` closes the client if it made it, and
    so does the end of a ``with`` block."""

    _conn: Connection

    def close(self) -> None:
        """Close the ZooKeeper client if this object opened it (ends its session)."""
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
