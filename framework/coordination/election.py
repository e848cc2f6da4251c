"""Leader election for standby instances of the acker and the barrier.

Candidates queue on kazoo's `Lock` recipe (ephemeral sequential znodes under
``<path>/lock``; the lowest is the leader, and each candidate watches only the one before
it). A new leader increments ``<path>/token``: the fencing token, larger than every
earlier leader's, for anything that can compare it (records, logs).

ZooKeeper alone cannot stop a deposed leader that has not noticed yet (a long GC pause,
a partition). It learns it from its session: SUSPENDED (connection lost: the lock znode
may be gone any moment) and LOST (session expired: it is gone) both end the leadership
here. What the old leader already sends to Kafka is fenced there: the new leader's
producer uses the same ``transactional.id``, so the old producer's transactions abort.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState
from kazoo.recipe.lock import Lock

from framework.coordination.client import DEFAULT_TIMEOUT_S, Connection, OnConnection
from framework.errors import CoordinationError, Fenced

T = TypeVar("T")

_log = logging.getLogger(__name__)

# How often a waiting candidate looks for a dead leader: reading the lock's children and
# each one's identity (/proc for those on this host) costs ~1 ms; a takeover waits at
# most this long more than the ready of the services it starts.
_DEAD_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class Leadership:
    """One term of office: who leads, its fencing token, and whether it already ended."""

    identity: str
    token: int
    lost: threading.Event = field(default_factory=threading.Event, compare=False)

    @property
    def is_lost(self) -> bool:
        """True once the session was suspended or lost: stop leading."""
        return self.lost.is_set()

    def check(self) -> None:
        """`Fenced` if this term ended; call before every step that acts as the leader."""
        if self.lost.is_set():
            raise Fenced(f"{self.identity} is no longer the leader (token {self.token})")


class LeaderElection(OnConnection):
    """Elects one leader among the candidates sharing ``path``."""

    def __init__(
        self,
        zk: str | KazooClient,
        path: str,
        identity: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        on_lost: Callable[[Leadership], None] | None = None,
        is_dead: Callable[[str], bool] | None = None,
    ) -> None:
        """``is_dead``: whether a contender's identity is proved dead (step 0), e.g.
        `framework.coordination.processes.dead_on_this_host`; None proves nothing."""
        if not path.startswith("/") or path.endswith("/"):
            raise ValueError(f"path {path!r} must be an absolute znode path, no trailing /")
        self.path = path
        self.identity = identity
        self.on_lost = on_lost
        self.is_dead = is_dead
        self._conn = Connection(zk, timeout_s)
        self.client: KazooClient = self._conn.client

    @contextlib.contextmanager
    def lead(self, timeout_s: float | None = None) -> Iterator[Leadership]:
        """Block until elected (or `CoordinationError` after ``timeout_s``), then lead.

        0. Remove the lock znodes of contenders ``is_dead`` proves dead: a leader killed
           -9 keeps its znode until its session expires, and its successor would wait.
        1. Queue on the lock; the candidate with the lowest sequence number leads. While
           it waits, a standby repeats step 0 every `_DEAD_POLL_S`: a standby already
           running takes over from a leader killed -9 on its host at once, not after the
           leader's session expires (measured: 0.2 s against a 30 s session).
        2. Increment the fencing token (compare-and-set on its znode version).
        3. Watch the session: SUSPENDED or LOST sets ``lost`` and calls ``on_lost``.
        4. Check that the lock znode is still owned by the live session: a session lost
           before step 3 was not seen by the watch, so the term starts lost.
        5. On exit, delete the lock znode: the next candidate is elected.
        """
        lock = self.client.Lock(f"{self.path}/lock", self.identity)
        # Step 0
        self._remove_the_dead()
        # Step 1
        with self._clearing_the_dead():
            self._acquire(lock, timeout_s)
        try:
            # Step 2
            leadership = Leadership(self.identity, self._next_token())
            # Step 3
            watch = self._watch(leadership)
            self.client.add_listener(watch)
            # Step 4
            if not self._still_owner(lock):
                watch(KazooState.LOST)
            try:
                yield leadership
            finally:
                self.client.remove_listener(watch)
        finally:
            # Step 5
            self._release(lock)

    def run(self, on_elected: Callable[[Leadership], T], timeout_s: float | None = None) -> T:
        """Wait to be elected, run ``on_elected(leadership)``, then step down.

        ``on_elected`` must return soon after ``leadership.lost`` is set.
        """
        with self.lead(timeout_s) as leadership:
            return on_elected(leadership)

    def contenders(self) -> list[str]:
        """Identities of the candidates, the leader first."""
        names: list[str] = self.client.Lock(f"{self.path}/lock").contenders()
        return names

    def _remove_the_dead(self) -> None:
        if self.is_dead is None:
            return
        where = f"{self.path}/lock"
        try:
            names = self.client.get_children(where)
        except NoNodeError:
            return
        for name in names:
            with contextlib.suppress(NoNodeError):
                data, _ = self.client.get(f"{where}/{name}")
                identity = data.decode("utf-8", "replace")
                if identity != self.identity and self.is_dead(identity):
                    _log.warning("%s: removing the lock of %s, dead", self.path, identity)
                    self.client.delete(f"{where}/{name}")

    @contextlib.contextmanager
    def _clearing_the_dead(self) -> Iterator[None]:
        """Step 0 again every `_DEAD_POLL_S` in a thread of its own while the body waits."""
        if self.is_dead is None:
            yield
            return
        done = threading.Event()

        def clear() -> None:
            while not done.wait(_DEAD_POLL_S):
                try:
                    self._remove_the_dead()
                except KazooException as exc:
                    # ZooKeeper away: the lock's own wait sees that; try again next poll.
                    _log.debug("%s: checking for dead contenders: %s", self.path, exc)

        thread = threading.Thread(target=clear, name=f"dead-contenders {self.path}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _acquire(self, lock: Lock, timeout_s: float | None) -> None:
        try:
            elected = lock.acquire(timeout=timeout_s)
        except LockTimeout:
            elected = False
        if not elected:
            leaders = self.contenders()[:1] or ["nobody"]
            raise CoordinationError(
                f"{self.identity} not elected at {self.path} within {timeout_s}s: "
                f"{leaders[0]!r} leads"
            )

    def _next_token(self) -> int:
        token_path = f"{self.path}/token"
        with contextlib.suppress(NodeExistsError):
            self._conn.retry("creating the token", self.client.create, token_path, b"0")
        while True:
            data, stat = self._conn.retry("reading the token", self.client.get, token_path)
            token = int(data or b"0") + 1
            try:
                self.client.set(token_path, str(token).encode(), version=stat.version)
            except (BadVersionError, ConnectionLoss, SessionExpiredError):
                # Read again. A lost write that landed costs one token number; tokens
                # still only grow. A lost session is caught by step 4.
                continue
            return token

    def _still_owner(self, lock: Lock) -> bool:
        if self.client.state != KazooState.CONNECTED or lock.node is None:
            return False
        try:
            stat = self.client.exists(f"{lock.path}/{lock.node}")
        except KazooException:
            return False
        return stat is not None and stat.ephemeralOwner == self.client.client_id[0]

    def _watch(self, leadership: Leadership) -> Callable[[str], bool]:
        def listener(state: str) -> bool:
            if state == KazooState.CONNECTED:
                return False
            # Runs on kazoo's thread: set the flag, let on_lost only signal, never block.
            leadership.lost.set()
            if self.on_lost is not None:
                self.on_lost(leadership)
            return True  # one notice per term: remove this listener

        return listener

    def _release(self, lock: Lock) -> None:
        # After a lost session the znode is gone, or the client is stopped: nothing to do.
        with contextlib.suppress(KazooException):
            lock.release()
