"""Epochs: numbered generations of a pipeline, one per start, replay or recovery.

A new epoch starts a new generation of the pipeline's internal topics, so nothing of the
old one is read again. ``/flamepipe/<app>/epoch`` holds the current `EpochRecord`.
"""

from __future__ import annotations

import contextlib
import time

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    SessionExpiredError,
)

from framework.coordination.client import DEFAULT_TIMEOUT_S, Connection, OnConnection
from framework.coordination.paths import epoch_path
from framework.wire.znodes import EpochRecord, Offsets


def read_epoch(zk: str, app: str) -> EpochRecord | None:
    """The current epoch of ``app`` (None before its first replay or recovery), through a
    ZooKeeper session opened for this one read."""
    epochs = Epochs(zk, app)
    try:
        return epochs.current()
    finally:
        epochs.close()


class Epochs(OnConnection):
    """The epoch counter of ``app``: read it, or start the next epoch."""

    def __init__(
        self, zk: str | KazooClient, app: str, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.app = app
        self._path = epoch_path(app)
        self._conn = Connection(zk, timeout_s)
        self.client: KazooClient = self._conn.client
        self._conn.retry("creating the epoch znode", self._ensure_znode)

    def current(self) -> EpochRecord | None:
        """The current epoch, or None before the first `bump` (generation 0)."""
        return self._read()[0]

    def bump(
        self,
        reason: str,
        from_snapshot: int | None = None,
        offsets: Offsets | None = None,
    ) -> EpochRecord:
        """Start the next epoch (1 after none) and return its record.

        1. Read the current record with the znode's version.
        2. Build the next record: epoch + 1.
        3. Write it expecting the version of step 1: only one of concurrent bumpers wins.
        4. On a version conflict, or a connection lost mid-write, go back to step 1.
           A lost write that did happen costs one unused epoch number: epochs stay
           strictly increasing and every bump still gets its own.
        """
        while True:
            # Step 1
            current, version = self._read()
            # Step 2
            record = EpochRecord(
                epoch=1 if current is None else current.epoch + 1,
                reason=reason,
                snapshot=from_snapshot,
                offsets=offsets,
                created_ms=time.time_ns() // 1_000_000,
            )
            # Step 3
            try:
                self.client.set(self._path, record.to_json(), version=version)
            except (BadVersionError, ConnectionLoss, SessionExpiredError):
                continue  # Step 4
            return record

    def _ensure_znode(self) -> None:
        with contextlib.suppress(NodeExistsError):
            self.client.create(self._path, b"", makepath=True)

    def _read(self) -> tuple[EpochRecord | None, int]:
        data, stat = self._conn.retry("reading the epoch", self.client.get, self._path)
        version: int = stat.version
        return (EpochRecord.from_json(data, self._path) if data else None), version
