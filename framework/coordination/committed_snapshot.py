"""The committed snapshot of an application in ZooKeeper: the last step of FlameStream's
snapshot protocol.

When the acker has every acceptance of a snapshot, it commits the snapshot's record here;
recovery resumes from `SnapshotRegistry.latest`.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

from framework.coordination.client import DEFAULT_TIMEOUT_S, Connection, OnConnection
from framework.coordination.paths import committed_path, snapshot_path, snapshots_path
from framework.errors import CoordinationError, Fenced, ProtocolViolation
from framework.wire.znodes import SnapshotRecord


def read_latest(zk: str, app: str) -> SnapshotRecord | None:
    """The committed snapshot of ``app`` (None before the first), through a ZooKeeper
    session opened for this one read."""
    registry = SnapshotRegistry(zk, app)
    try:
        return registry.latest()
    finally:
        registry.close()


class SnapshotRegistry(OnConnection):
    """Commits, reads and garbage-collects the snapshot records of ``app``.

    A registry remembers the version of ``/committed`` it saw when opened; its commits
    expect that version (then the one its own commit made). A registry opened by an old
    leader therefore fails with `Fenced` once another registry committed, and so does a
    record with an epoch older than the committed one.
    """

    def __init__(
        self, zk: str | KazooClient, app: str, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.app = app
        self._committed = committed_path(app)
        self._conn = Connection(zk, timeout_s)
        self.client: KazooClient = self._conn.client
        self._conn.retry("creating the registry's znodes", self._ensure_znodes)
        _, stat = self._conn.retry(
            "reading the committed snapshot", self.client.get, self._committed
        )
        self._version: int = stat.version

    def commit(self, record: SnapshotRecord) -> None:
        """Make ``record`` the committed snapshot, atomically with its per-slot record.

        1. Read ``/committed`` with its version. A version other than the one this
           registry last saw means another committer wrote since: `Fenced`.
        2. Check the record against it: an older epoch is `Fenced`; a slot at or below
           the committed one is a `ProtocolViolation` (slots strictly increase).
        3. In one transaction, create ``snapshots/<slot>`` and set ``/committed``
           expecting the version of step 1: both happen or neither does.
        4. A version conflict in step 3 means a committer raced in: `Fenced`.
        5. A connection lost during step 3 leaves the outcome unknown: read
           ``/committed`` again; holding our bytes, the commit happened.
        """
        # Step 1
        current, version = self._read_committed()
        if version != self._version:
            raise Fenced(
                f"{self._committed} changed since this registry read it (version "
                f"{self._version} -> {version}): another committer took over"
            )
        # Step 2
        self._check_successor(current, record)
        payload = record.to_json()
        # Step 3
        tx = self.client.transaction()
        tx.create(snapshot_path(self.app, record.slot), payload)
        tx.set_data(self._committed, payload, version=version)
        try:
            results = tx.commit()
        except (ConnectionLoss, SessionExpiredError) as exc:
            # Step 5
            self._settle_unknown(record, payload, version, exc)
            return
        # Step 4
        self._check_results(results, record)
        self._version = version + 1

    def latest(self) -> SnapshotRecord | None:
        """The committed snapshot, or None before the first commit."""
        return self._read_committed()[0]

    def at_or_below(self, slot: int) -> SnapshotRecord | None:
        """The newest kept snapshot with a slot at or below ``slot``, or None."""
        for candidate in sorted((s for s in self.slots() if s <= slot), reverse=True):
            try:
                data, _ = self._conn.retry(
                    "reading a snapshot record", self.client.get, snapshot_path(self.app, candidate)
                )
            except NoNodeError:
                continue  # garbage-collected between listing and reading
            return SnapshotRecord.from_json(data, snapshot_path(self.app, candidate))
        return None

    def slots(self) -> list[int]:
        """Slots of the kept snapshot records, ascending."""
        names = self._conn.retry(
            "listing snapshot records", self.client.get_children, snapshots_path(self.app)
        )
        return sorted(int(name) for name in names if name.isdigit())

    def gc(self, keep: int = 2) -> list[int]:
        """Delete all but the newest ``keep`` snapshot records (never the committed one).

        Returns the deleted slots, ascending.
        """
        if keep < 1:
            raise ValueError(f"keep={keep} must be >= 1: the committed snapshot stays")
        committed = self.latest()
        doomed = [s for s in self.slots()[:-keep] if committed is None or s != committed.slot]
        for slot in doomed:
            # NoNode: a concurrent gc, or our own retried delete, got there first.
            with contextlib.suppress(NoNodeError):
                self._conn.retry(
                    "deleting a snapshot record", self.client.delete, snapshot_path(self.app, slot)
                )
        return doomed

    def _ensure_znodes(self) -> None:
        self.client.ensure_path(snapshots_path(self.app))
        with contextlib.suppress(NodeExistsError):
            self.client.create(self._committed, b"")

    def _read_committed(self) -> tuple[SnapshotRecord | None, int]:
        data, stat = self._conn.retry(
            "reading the committed snapshot", self.client.get, self._committed
        )
        version: int = stat.version
        if not data:
            return None, version
        return SnapshotRecord.from_json(data, self._committed), version

    def _check_successor(self, current: SnapshotRecord | None, record: SnapshotRecord) -> None:
        if current is None:
            return
        if record.epoch < current.epoch:
            raise Fenced(
                f"snapshot of epoch {record.epoch} after one of epoch {current.epoch}: "
                "a newer generation of the pipeline runs"
            )
        if record.slot <= current.slot:
            raise ProtocolViolation(
                f"snapshot slot {record.slot} is not after the committed slot {current.slot}: "
                "snapshot slots must strictly increase"
            )

    def _check_results(self, results: list[Any], record: SnapshotRecord) -> None:
        created, updated = results
        if isinstance(updated, BadVersionError):
            raise Fenced(
                f"{self._committed} changed during the commit of slot {record.slot}: "
                "another committer took over"
            )
        if isinstance(created, NodeExistsError):
            raise ProtocolViolation(
                f"snapshot record {snapshot_path(self.app, record.slot)} exists already "
                "although the committed slot is lower"
            )
        for result in results:
            if isinstance(result, Exception):
                raise CoordinationError(f"commit of slot {record.slot} failed: {result!r}")

    def _settle_unknown(
        self, record: SnapshotRecord, payload: bytes, version: int, exc: Exception
    ) -> None:
        data, stat = self._conn.retry(
            "re-reading after a lost commit", self.client.get, self._committed
        )
        if data == payload:
            self._version = stat.version
            return
        if stat.version != version:
            raise Fenced(f"{self._committed} was written by another committer") from exc
        raise CoordinationError(
            f"commit of slot {record.slot} did not happen (connection lost: {exc!r}); "
            "commit it again"
        ) from exc
