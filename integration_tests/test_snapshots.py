"""Snapshots from changelogs (framework/snapshots) beside word pairs running on Spark.

A `SnapshotCoordinator` snapshots the window-2 grouping every 200 ms while input arrives
in rounds. The kept snapshots must hold exactly the state the input below their slot
leaves (the last occurrence of every word, as Kafka stored the input), name as replay
offsets exactly the first records at or after their slot, restore into a new epoch's
changelog as the same state, and only the last two may be kept.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from framework.config import Settings
from framework.coordination.committed_snapshot import SnapshotRegistry
from framework.core.graph import Graph, Kind
from framework.core.grouping import Grouping
from framework.core.ops import key_hash, op_id_of
from framework.core.time import GlobalTime
from framework.demos.wordcount import word_pairs
from framework.kafka.clients import read_to_end
from framework.plan.stage_state import apply_changelog
from framework.snapshots.backends.files import FileBackend
from framework.snapshots.coordinator import SnapshotCoordinator
from framework.snapshots.restore import restore_epoch
from framework.snapshots.units import decode_unit, unit_label
from framework.wire.topics import Topics
from framework.wire.znodes import SnapshotRecord
from integration_tests.harness.runs import new_app, numbered_lines, produce_lines, running

Stored = list[tuple[int, int, GlobalTime, str]]  # partition, offset, global time, line


def _stored(bootstrap: str, topic: str, delta_ms: int) -> Stored:
    out = []
    for msg in read_to_end(bootstrap, topic):
        partition, offset = msg.partition() or 0, msg.offset() or 0
        gt = GlobalTime.of_record(msg.timestamp()[1], topic, partition, offset, delta_ms)
        out.append((partition, offset, gt, (msg.value() or b"").decode()))
    return out


def _expected_state(stored: Stored, slot: int) -> Counter[Any]:
    """(word, gt, payload) of each word's last occurrence below ``slot`` (window 2 keeps 1)."""
    last: dict[str, tuple[GlobalTime, int, list[str]]] = {}
    for _, _, gt, line in stored:
        if gt.slot >= slot:
            continue
        line_id, *words = line.split()
        for child, word in enumerate(words):
            seen = (gt, child, [word, line_id])
            if word not in last or seen[:2] > last[word][:2]:
                last[word] = seen
    return Counter((w, tuple(gt), json.dumps(p)) for w, (gt, _, p) in last.items())


def _saved_state(app: str, backend: FileBackend, record: SnapshotRecord, node: str) -> Counter[Any]:
    found: Counter[Any] = Counter()
    units = record.units[node]
    for partition, unit in enumerate(units):
        state = decode_unit(
            backend.get(unit, record.slot), unit_label(app, unit, record.slot), unit
        )
        for key, items, early in state["buckets"]:
            assert early == []
            assert key_hash(key) % len(units) == partition, f"{key!r} in the wrong unit"
            for meta, payload in items:
                found[(key, tuple(meta[0]), json.dumps(payload))] += 1
    return found


def _expected_offsets(stored: Stored, slot: int, partitions: int) -> dict[int, int]:
    ends = {
        p: 1 + max((o for q, o, _, _ in stored if q == p), default=-1) for p in range(partitions)
    }
    return {
        p: min((o for q, o, gt, _ in stored if q == p and gt.slot >= slot), default=ends[p])
        for p in range(partitions)
    }


def _restored_matches(
    bootstrap: str, graph: Graph, backend: FileBackend, record: SnapshotRecord, node: str
) -> None:
    """The new epoch's changelog, applied as a task would, gives the snapshot's state."""
    op_id = op_id_of(graph.name, node)
    topic = Topics(graph.name, 1).state(node)
    values: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for msg in read_to_end(bootstrap, topic):
        values.setdefault(msg.partition() or 0, []).append((msg.key(), msg.value()))
    for partition, unit in enumerate(record.units[node]):
        grouping = Grouping(op_id, 2)
        apply_changelog(grouping, values.get(partition, []))
        state = decode_unit(
            backend.get(unit, record.slot), unit_label(graph.name, unit, record.slot), unit
        )
        expected = Grouping.restore(op_id, state).snapshot()
        assert _plain(grouping.snapshot()) == _plain(expected), unit


def _plain(state: dict[str, Any]) -> dict[Any, Any]:
    return {
        key: [(tuple(m[0]), tuple(m[1]), m[2], m[3], json.dumps(v)) for m, v in items]
        for key, items, _ in state["buckets"]
    }


def _wait(what: str, until: Any, timeout_s: float, coordinator: SnapshotCoordinator) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        coordinator.check()
        assert time.monotonic() < deadline, f"{what}: {coordinator.stats}"
        time.sleep(0.05)


def test_snapshots_hold_the_state_below_their_slot(
    stack: Settings, spark: Any, tmp_path: Path
) -> None:
    # The run's own coordinator (started beside its acker) snapshots every 200 ms into
    # files under tmp_path; the runner prunes only below its committed snapshots.
    settings = stack.with_(
        parallelism=2,
        snapshot_interval_ms=200,
        state_backend="file",
        snapshot_dir=tmp_path / "snaps",
    )
    bootstrap = settings.kafka_bootstrap
    app, source, sink = new_app("snap", "pairs")
    lines = numbered_lines(360, seed=7, words_per_line=5, vocabulary=40)
    pipeline = word_pairs(app, source, sink)
    graph = pipeline.graph()
    node = next(graph.by_kind(Kind.GROUP)).id
    files_dir = tmp_path / "snaps" / "files" / app
    backend = FileBackend(files_dir)
    registry = SnapshotRegistry(stack.zookeeper, app)
    try:
        with running(settings, spark, pipeline) as run:
            coordinator = run.services.coordinator
            assert coordinator is not None
            until = produce_lines(bootstrap, source, lines[:150], partitions=2)
            covered = GlobalTime.of_record(until, "", 0, 0, graph.delta_ms).slot + 1
            _wait(
                "a snapshot covering the first round",
                lambda: (
                    (coordinator.committed_slot or 0) >= covered
                    and coordinator.stats.snapshots >= 3
                ),
                60,
                coordinator,
            )
            # More input while snapshots go on: the last one cuts through it.
            for chunk in (lines[150:210], lines[210:270]):
                produce_lines(bootstrap, source, chunk, partitions=2)
                time.sleep(0.4)
            # A last round, released before the run stops (snapshots go on meanwhile).
            until = produce_lines(bootstrap, source, lines[270:], partitions=2)
            run.wait_released(until, timeout_s=60)
        stats = coordinator.stats
        stored = _stored(bootstrap, source, graph.delta_ms)
        kept = registry.slots()
        records = [registry.at_or_below(slot) for slot in kept]
        # (d) Garbage collection: two records kept, the backend holds only their slots.
        assert stats.snapshots >= 3 and len(kept) == 2, (stats, kept)
        files = sorted(p.name for p in files_dir.rglob("*.snap"))
        assert files == sorted(f"{slot:020d}.snap" for slot in kept for _ in range(2))
        for record in records:
            assert record is not None and record.epoch == 0
            assert record.units == {node: (f"{node}/0", f"{node}/1")}
            # (a) The saved units hold the state the input below the slot leaves.
            expected = _expected_state(stored, record.slot)
            assert expected, "the snapshot should cover some input"
            assert _saved_state(graph.name, backend, record, node) == expected
            # (b) Sources replay from the first record at or after the slot.
            assert dict(record.offsets[source]) == _expected_offsets(stored, record.slot, 2)
        # (c) Restoring into epoch 1 seeds changelogs that apply back to the same state;
        # restoring an older snapshot over it deletes what the older one lacks.
        for record in reversed(records):
            assert record is not None
            restored = restore_epoch(bootstrap, graph, record, backend, new_epoch=1)
            assert restored.units == 2
            assert restored.records == sum(_saved_state(graph.name, backend, record, node).values())
            _restored_matches(bootstrap, graph, backend, record, node)
    finally:
        registry.close()
        backend.close()
