"""framework.coordination on a real ZooKeeper: snapshots, fencing, epochs, leader election."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from framework.config import Settings
from framework.coordination.client import close_client, zk_client
from framework.coordination.committed_snapshot import SnapshotRegistry
from framework.coordination.election import LeaderElection, Leadership
from framework.coordination.epochs import Epochs
from framework.coordination.paths import app_root, leader_path
from framework.coordination.processes import dead_on_this_host, process_identity
from framework.errors import CoordinationError, Fenced, ProtocolViolation, ZooKeeperUnreachable
from framework.local.provision import free_port
from framework.wire.znodes import SnapshotRecord

TAKEOVER_S = 10.0


@pytest.fixture(scope="module")
def admin(stack: Settings) -> Iterator[Any]:
    client = zk_client(stack.zookeeper)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def app(admin: Any) -> Iterator[str]:
    """A fresh application name; its znodes are deleted afterwards."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    with contextlib.suppress(NoNodeError):
        admin.delete(app_root(name), recursive=True)


def record(slot: int, epoch: int = 1) -> SnapshotRecord:
    return SnapshotRecord(
        slot=slot,
        offsets={"in": {0: slot * 10, 1: slot * 10 + 1}},
        units={"count": (f"count.p0@{slot}", f"count.p1@{slot}")},
        epoch=epoch,
        created_ms=1_700_000_000_000 + slot,
    )


def test_commit_latest_at_or_below_and_gc(stack: Settings, admin: Any, app: str) -> None:
    with SnapshotRegistry(stack.zookeeper, app) as registry:
        assert registry.latest() is None and registry.at_or_below(10**9) is None
        for slot in (100, 200, 300, 400):
            registry.commit(record(slot))
            assert registry.latest() == record(slot)
        committed = admin.get(f"{app_root(app)}/committed")[0]
        assert SnapshotRecord.from_json(committed, "committed") == record(400)
        assert registry.at_or_below(399) == record(300)
        assert registry.at_or_below(400) == record(400)
        assert registry.at_or_below(99) is None
        assert sorted(admin.get_children(f"{app_root(app)}/snapshots")) == [
            f"{s:020d}" for s in (100, 200, 300, 400)
        ]
        assert registry.gc(keep=2) == [100, 200]
        assert registry.slots() == [300, 400]
        assert registry.gc(keep=1) == [300]
        assert registry.gc(keep=1) == []
        assert registry.latest() == record(400)
    with SnapshotRegistry(admin, app) as reader:  # a shared client stays open
        assert reader.latest() == record(400)
    assert admin.connected


def test_slots_must_strictly_increase(stack: Settings, app: str) -> None:
    with SnapshotRegistry(stack.zookeeper, app) as registry:
        registry.commit(record(50))
        for slot in (50, 49):
            with pytest.raises(ProtocolViolation, match="must strictly increase"):
                registry.commit(record(slot))
        assert registry.slots() == [50]
        registry.commit(record(51))  # a refused commit does not fence the registry
        assert registry.latest() == record(51)


def test_a_stale_committer_is_fenced(stack: Settings, app: str) -> None:
    old = SnapshotRegistry(stack.zookeeper, app)
    new = SnapshotRegistry(stack.zookeeper, app)
    try:
        old.commit(record(10))  # the old leader commits while it leads
        with pytest.raises(Fenced, match="another committer"):
            new.commit(record(20))  # opened before that commit: it must not overwrite
        late = SnapshotRegistry(stack.zookeeper, app)  # the new leader, after takeover
        late.commit(record(20, epoch=2))
        with pytest.raises(Fenced, match="another committer took over"):
            old.commit(record(30))  # the old leader wakes up: fenced by version
        with pytest.raises(Fenced, match="epoch 1 after one of epoch 2"):
            SnapshotRegistry(stack.zookeeper, app).commit(record(40, epoch=1))
        assert late.latest() == record(20, epoch=2)
        assert late.slots() == [10, 20]
        late.close()
    finally:
        old.close()
        new.close()


def test_epochs_bump_atomically(stack: Settings, app: str) -> None:
    with Epochs(stack.zookeeper, app) as epochs:
        assert epochs.current() is None
        first = epochs.bump("start")
        assert first.epoch == 1 and first.reason == "start"
        assert first.snapshot is None and first.offsets is None
        second = epochs.bump("recovery", from_snapshot=300, offsets={"in": {0: 3000}})
        assert second.epoch == 2 and epochs.current() == second
        assert second.snapshot == 300 and second.offsets == {"in": {0: 3000}}


def test_concurrent_bumps_get_distinct_consecutive_epochs(stack: Settings, app: str) -> None:
    per_thread = 15
    start = threading.Barrier(2)
    got: list[list[int]] = [[], []]

    def bumper(i: int) -> None:
        with Epochs(stack.zookeeper, app) as epochs:
            start.wait()
            for _ in range(per_thread):
                got[i].append(epochs.bump(f"replay by {i}").epoch)

    threads = [threading.Thread(target=bumper, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(got[0] + got[1]) == list(range(1, 2 * per_thread + 1))
    assert all(a < b for a, b in zip(got[0], got[0][1:], strict=False))


def _lead_in_thread(
    election: LeaderElection, terms: list[Leadership], stop: threading.Event
) -> threading.Thread:
    def body() -> None:
        with election.lead() as leadership:
            terms.append(leadership)
            while not (leadership.is_lost or stop.is_set()):
                time.sleep(0.02)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def _wait_for(condition: Any, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_standby_takes_over_when_the_leaders_session_ends(stack: Settings, app: str) -> None:
    path = leader_path(app, "acker")
    lost: list[Leadership] = []
    a = LeaderElection(stack.zookeeper, path, "acker-a", on_lost=lost.append)
    b = LeaderElection(stack.zookeeper, path, "acker-b")
    stop = threading.Event()
    a_terms: list[Leadership] = []
    b_terms: list[Leadership] = []
    try:
        _lead_in_thread(a, a_terms, stop)
        assert _wait_for(lambda: a_terms, TAKEOVER_S)
        _lead_in_thread(b, b_terms, stop)
        assert _wait_for(lambda: b.contenders() == ["acker-a", "acker-b"], TAKEOVER_S)
        time.sleep(0.3)
        assert not b_terms, "the standby must wait while the leader lives"
        a.client.stop()  # the leader's session ends (crash, or kill)
        assert _wait_for(lambda: b_terms, TAKEOVER_S), "standby not elected"
        assert a_terms[0].is_lost and lost == a_terms
        with pytest.raises(Fenced, match="acker-a is no longer the leader"):
            a_terms[0].check()
        assert b_terms[0].token > a_terms[0].token
        b_terms[0].check()
    finally:
        stop.set()
        a.close()
        b.close()


_LEADER = """
import sys, time
from framework.config import Settings
from framework.coordination.election import LeaderElection
from framework.coordination.processes import process_identity
from framework.runners.keys import install_keys
install_keys(Settings.load())  # FLAMEPIPE_SECRET is inherited
with LeaderElection(sys.argv[1], sys.argv[2], process_identity(), timeout_s=30) as e:
    with e.lead(timeout_s=30):
        print("leading", flush=True)
        time.sleep(120)
"""


def test_a_leader_killed_on_this_host_is_replaced_before_its_session_ends(
    stack: Settings, app: str
) -> None:
    """Its session lasts 30 s; a successor that proves it dead (same host and namespace,
    no such process) removes its lock and leads at once. A live contender's stays."""
    path = leader_path(app, "barrier")
    cmd = [sys.executable, "-c", _LEADER, stack.zookeeper, path]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as leader:
        try:
            assert leader.stdout is not None and leader.stdout.readline() == "leading\n"
            identity = process_identity(leader.pid)
            alive = LeaderElection(stack.zookeeper, path, "alive", is_dead=dead_on_this_host)
            with alive, pytest.raises(CoordinationError, match="leads"):
                alive.run(lambda _: None, timeout_s=1.0)  # the leader lives: no takeover
            leader.kill()
            leader.wait()
        finally:
            leader.kill()
    successor = LeaderElection(stack.zookeeper, path, "next", is_dead=dead_on_this_host)
    with successor:
        assert successor.contenders() == [identity], "the dead leader's lock is still there"
        began = time.monotonic()
        token = successor.run(lambda term: term.token, timeout_s=10.0)
        assert time.monotonic() - began < 3.0
        assert token == 2


def test_a_waiting_standby_replaces_a_leader_killed_on_this_host_at_once(
    stack: Settings, app: str
) -> None:
    """A standby already queued behind a leader whose session lasts 30 s: the kill -9 of
    the leader's process is seen by the standby's own checks, which remove the dead lock
    while it waits; nothing else (no restarted process) has to clear it."""
    path = leader_path(app, "acker")
    cmd = [sys.executable, "-c", _LEADER, stack.zookeeper, path]
    standby = LeaderElection(stack.zookeeper, path, "standby", is_dead=dead_on_this_host)
    terms: list[Leadership] = []
    stop = threading.Event()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as leader, standby:
        try:
            assert leader.stdout is not None and leader.stdout.readline() == "leading\n"
            _lead_in_thread(standby, terms, stop)
            assert _wait_for(lambda: len(standby.contenders()) == 2, TAKEOVER_S)
            time.sleep(0.6)  # three of the standby's checks: the leader lives
            assert not terms, "the standby must wait while the leader lives"
            leader.kill()
            leader.wait()
            killed = time.monotonic()
            assert _wait_for(lambda: terms, 10.0), "standby not elected"
            took_s = time.monotonic() - killed
        finally:
            stop.set()
            leader.kill()
    print(f"standby led {took_s:.2f} s after the leader's kill (its session: 30 s)")
    assert took_s < 2.0
    assert terms[0].token == 2


def test_an_expired_session_is_noticed_and_replaced(stack: Settings, app: str) -> None:
    path = leader_path(app, "barrier")
    a = LeaderElection(stack.zookeeper, path, "barrier-a", timeout_s=4)
    b = LeaderElection(stack.zookeeper, path, "barrier-b", timeout_s=4)
    stop = threading.Event()
    a_terms: list[Leadership] = []
    b_terms: list[Leadership] = []
    try:
        _lead_in_thread(a, a_terms, stop)
        assert _wait_for(lambda: a_terms, TAKEOVER_S)
        _lead_in_thread(b, b_terms, stop)
        _expire(stack, a.client)
        assert _wait_for(lambda: a_terms[0].is_lost, TAKEOVER_S), "expiry not noticed"
        assert _wait_for(lambda: b_terms, TAKEOVER_S), "standby not elected"
        assert b_terms[0].token == a_terms[0].token + 1
    finally:
        stop.set()
        a.close()
        b.close()


def test_stepping_down_elects_the_next_and_waiting_can_time_out(
    stack: Settings, admin: Any, app: str
) -> None:
    path = leader_path(app, "acker")
    with (
        LeaderElection(stack.zookeeper, path, "one") as one,
        LeaderElection(admin, path, "two") as two,
    ):
        with one.lead() as first:
            start = time.monotonic()
            with (
                pytest.raises(CoordinationError, match=r"two not elected .* 'one' leads"),
                two.lead(timeout_s=0.5),
            ):
                pass
            assert time.monotonic() - start < 5
            assert one.contenders() == ["one"]
        token = two.run(lambda leadership: leadership.token)
        assert token == first.token + 1
    assert admin.connected  # the shared client is not closed by the election


def test_unreachable_zookeeper_fails_fast_and_says_where() -> None:
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(ZooKeeperUnreachable) as caught:
        zk_client(address, timeout_s=1.0)
    assert time.monotonic() - start < 5
    message = str(caught.value)
    assert address in message and "zookeeper_connect" in message
    assert "FLAMEPIPE_ZOOKEEPER_CONNECT" in message
    with pytest.raises(ZooKeeperUnreachable):
        SnapshotRegistry(address, "nowhere", timeout_s=1.0)


def _expire(stack: Settings, client: Any) -> None:
    """Expire ``client``'s session: open it again elsewhere and close it."""
    twin = KazooClient(hosts=stack.zookeeper, client_id=client.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_a_session_lost_before_the_watch_starts_the_term_lost(stack: Settings, app: str) -> None:
    class Unlucky(LeaderElection):
        def _next_token(self) -> int:
            _expire(stack, self.client)  # between winning the lock and watching the session
            assert _wait_for(lambda: self.client.connected, TAKEOVER_S)
            return super()._next_token()

    election = Unlucky(stack.zookeeper, leader_path(app, "acker"), "unlucky")
    try:
        with election.lead() as leadership:
            assert leadership.is_lost
            with pytest.raises(Fenced):
                leadership.check()
    finally:
        election.close()


def test_without_the_pipelines_key_znodes_can_be_read_but_not_changed(
    stack: Settings, app: str
) -> None:
    """Every znode flamepipe creates carries its ACL (`framework.coordination.client`):
    a client without the pipeline's key, or with another pipeline's, may read but not
    create, change or delete."""
    from kazoo.exceptions import NoAuthError

    from framework.coordination.paths import committed_path, epoch_path, snapshot_path
    from framework.wire import auth

    with SnapshotRegistry(stack.zookeeper, app) as registry:
        registry.commit(record(7))
    with Epochs(stack.zookeeper, app) as epochs:
        epochs.bump("start")
    mine = auth.current()
    auth.install(auth.Keyring((b"another-pipelines-key-0123456789ab",)))
    try:
        other = zk_client(stack.zookeeper)
    finally:
        auth.install(mine)
    anonymous = KazooClient(hosts=stack.zookeeper, timeout=10)
    anonymous.start(timeout=10)
    try:
        for intruder in (anonymous, other):
            assert SnapshotRecord.from_json(intruder.get(committed_path(app))[0], "c").slot == 7
            attempts = [
                lambda c=intruder: c.set(committed_path(app), record(10**9).to_json()),
                lambda c=intruder: c.set(epoch_path(app), b"{}"),
                lambda c=intruder: c.delete(committed_path(app)),
                lambda c=intruder: c.create(snapshot_path(app, 10**9), b""),
            ]
            for attempt in attempts:
                with pytest.raises(NoAuthError):
                    attempt()
    finally:
        close_client(other)
        anonymous.stop()
        anonymous.close()
    with SnapshotRegistry(stack.zookeeper, app) as registry:
        assert registry.latest() == record(7)
