"""`framework.coordination.election`: each step of `LeaderElection.lead` against an
in-memory ZooKeeper (the lock queue, the fencing token, dead contenders, the session)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from framework.coordination import election as election_module
from framework.coordination.election import LeaderElection, Leadership
from framework.errors import CoordinationError, Fenced

PATH = "/flamepipe/app/leaders/acker"


class _Store:
    """Znodes: path -> [data, version, owner session]."""

    def __init__(self) -> None:
        self.nodes: dict[str, list[Any]] = {}
        self.lock = threading.Lock()
        self.sequence = 0

    def children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(p[len(prefix) :] for p in self.nodes if p.startswith(prefix))


class _Lock:
    """kazoo's Lock recipe as the election uses it: sequential nodes, lowest leads."""

    def __init__(self, client: _Client, path: str, identifier: str = "") -> None:
        self.client, self.path, self.identifier = client, path, identifier
        self.node: str | None = None

    def acquire(self, timeout: float | None = None) -> bool:
        store = self.client.store
        with store.lock:
            store.sequence += 1
            self.node = f"x__lock__{store.sequence:010d}"
            store.nodes[f"{self.path}/{self.node}"] = [
                self.identifier.encode(),
                0,
                self.client.session,
            ]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with store.lock:
                names = store.children(self.path)
                if names and names[0] == self.node:
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                self.release()
                return False
            time.sleep(0.01)

    def release(self) -> None:
        if self.node is not None:
            self.client.store.nodes.pop(f"{self.path}/{self.node}", None)
            self.node = None

    def contenders(self) -> list[str]:
        store = self.client.store
        return [store.nodes[f"{self.path}/{n}"][0].decode() for n in store.children(self.path)]


class _Client:
    def __init__(self, store: _Store, session: int) -> None:
        self.store, self.session = store, session
        self.state = KazooState.CONNECTED
        self.client_id = (session, b"")
        self.listeners: list[Callable[[str], bool]] = []

    def Lock(self, path: str, identifier: str = "") -> _Lock:  # noqa: N802 - kazoo's name
        return _Lock(self, path, identifier)

    def get_children(self, path: str) -> list[str]:
        names = self.store.children(path)
        if not names and path not in self.store.nodes:
            raise NoNodeError(path)
        return names

    def get(self, path: str) -> tuple[bytes, Any]:
        if path not in self.store.nodes:
            raise NoNodeError(path)
        data, version, _ = self.store.nodes[path]
        return data, SimpleNamespace(version=version)

    def delete(self, path: str) -> None:
        if self.store.nodes.pop(path, None) is None:
            raise NoNodeError(path)

    def create(self, path: str, data: bytes) -> None:
        if path in self.store.nodes:
            raise NodeExistsError(path)
        self.store.nodes[path] = [data, 0, 0]

    def set(self, path: str, data: bytes, version: int) -> None:
        node = self.store.nodes[path]
        if node[1] != version:
            raise BadVersionError(path)
        node[0], node[1] = data, version + 1

    def exists(self, path: str) -> Any:
        node = self.store.nodes.get(path)
        return None if node is None else SimpleNamespace(ephemeralOwner=node[2])

    def add_listener(self, listener: Callable[[str], bool]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], bool]) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    def retry(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    def lose_session(self) -> None:
        self.state = KazooState.LOST
        for listener in list(self.listeners):
            if listener(KazooState.LOST):
                self.listeners.remove(listener)


def _election(
    store: _Store, identity: str, session: int, **kwargs: Any
) -> tuple[LeaderElection, _Client]:
    client = _Client(store, session)
    return LeaderElection(client, PATH, identity, **kwargs), client  # type: ignore[arg-type]


def _leading(election: LeaderElection, stop: threading.Event) -> list[Leadership]:
    terms: list[Leadership] = []

    def body() -> None:
        with election.lead(timeout_s=10) as term:
            terms.append(term)
            stop.wait(10)

    threading.Thread(target=body, daemon=True).start()
    return terms


def _wait_for(condition: Callable[[], object], within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_steps_1_and_2_a_lone_candidate_leads_and_each_term_gets_a_larger_token() -> None:
    store = _Store()
    election, _ = _election(store, "a", 1)
    tokens = [election.run(lambda term: term.token) for _ in range(3)]
    assert tokens == [1, 2, 3]
    assert store.children(f"{PATH}/lock") == [], "step 5: the lock is released"


def test_step_0_a_contender_proved_dead_is_removed_and_the_candidate_leads_at_once() -> None:
    store = _Store()
    store.nodes[f"{PATH}/lock/x__lock__0000000000"] = [b"dead-one", 0, 99]
    election, _ = _election(store, "b", 2, is_dead=lambda identity: identity == "dead-one")
    assert election.run(lambda term: term.identity, timeout_s=1) == "b"


def test_a_live_contender_is_never_removed_and_waiting_can_time_out() -> None:
    store = _Store()
    store.nodes[f"{PATH}/lock/x__lock__0000000000"] = [b"alive", 0, 99]
    election, _ = _election(store, "b", 2, is_dead=lambda identity: False)
    with pytest.raises(CoordinationError, match="'alive' leads"):
        election.run(lambda term: None, timeout_s=0.3)
    assert election.contenders() == ["alive"]


def test_step_1_a_waiting_standby_clears_a_leader_that_dies_while_it_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(election_module, "_DEAD_POLL_S", 0.02)
    store, stop, dead = _Store(), threading.Event(), threading.Event()
    leader, _ = _election(store, "leader", 1)
    standby, _ = _election(store, "standby", 2, is_dead=lambda i: dead.is_set())
    try:
        leader_terms = _leading(leader, stop)
        assert _wait_for(lambda: leader_terms)
        standby_terms = _leading(standby, stop)
        assert _wait_for(lambda: len(standby.contenders()) == 2)
        time.sleep(0.1)
        assert not standby_terms, "the standby waits while the leader lives"
        dead.set()  # the leader's process is gone; its znode stays (its session lives on)
        assert _wait_for(lambda: standby_terms, 2.0), "the standby did not take over"
        assert standby_terms[0].token == leader_terms[0].token + 1
    finally:
        stop.set()


def test_step_3_a_lost_session_ends_the_term_and_fences_the_leader() -> None:
    store, stop = _Store(), threading.Event()
    lost: list[Leadership] = []
    election, client = _election(store, "a", 1, on_lost=lost.append)
    terms = _leading(election, stop)
    try:
        assert _wait_for(lambda: terms)
        terms[0].check()
        client.lose_session()
        assert terms[0].is_lost and lost == terms
        with pytest.raises(Fenced, match="a is no longer the leader"):
            terms[0].check()
    finally:
        stop.set()


def test_step_4_a_lock_no_longer_owned_by_this_session_starts_the_term_lost() -> None:
    store = _Store()
    election, client = _election(store, "a", 1)
    real_exists = client.exists

    def exists(path: str) -> Any:
        stat = real_exists(path)
        return None if stat is None else SimpleNamespace(ephemeralOwner=7)  # another session

    client.exists = exists  # type: ignore[method-assign]
    assert election.run(lambda term: term.is_lost) is True
