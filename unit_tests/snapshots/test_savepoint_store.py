"""Savepoints: copied whole, verified before use, matched to a changed graph by operator id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework import Pipeline
from framework.core.graph import Graph
from framework.core.grouping import Grouping
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash, op_id_of
from framework.core.time import GlobalTime
from framework.core.windows import Tumbling
from framework.errors import ConfigError, SnapshotMissing, Unauthenticated
from framework.snapshots.backends.memory import MemoryBackend
from framework.snapshots.savepoint_store import (
    delete_savepoint,
    list_savepoints,
    load_savepoint,
    save_savepoint,
)
from framework.snapshots.units import (
    aggregate_shape,
    decode_unit,
    encode_aggregate_unit,
    encode_unit,
    unit_label,
)
from framework.snapshots.upgrades import SavepointBackend, plan_upgrade
from framework.testing import ListSink, ListSource
from framework.wire.znodes import SnapshotRecord

SLOT = 50


def words(line: str) -> list[str]:
    return line.split()


def _graph(window: int = 2, name: str = "", letters: bool = False, topic: str = "in") -> Graph:
    p = Pipeline("app")
    grouped = p.source(ListSource(["a"], topic=topic)).flat_map(words).key_by(str)
    out = grouped.group(window=window, name=name)
    if letters:
        out = out.key_by(str).group(window=3, name="letters")
    out.sink(ListSink())
    return p.graph()


def _saved(tmp_path: Path, graph: Graph | None = None) -> tuple[Path, SnapshotRecord]:
    graph = graph or _graph()
    backend = MemoryBackend()
    units = []
    for p in range(2):
        grouping = Grouping(op_id_of("app", "group"), 2)
        for i in range(3):
            key = f"k{p}{i}"
            grouping.push(Record(Meta(GlobalTime(i + 1, 1, i)), Keyed(key, key_hash(key), i)))
        unit = f"group/{p}"
        backend.put(
            unit, SLOT, encode_unit(grouping.snapshot(below=SLOT), unit_label("app", unit, SLOT))
        )
        units.append(unit)
    record = SnapshotRecord(SLOT, {"in": {0: 7, 1: 9}}, {"group": tuple(units)}, 1, 1_000)
    root = tmp_path / "savepoints"
    save_savepoint(root, "v1", graph, record, backend)
    return root, record


def test_a_savepoint_round_trips_and_is_listed_and_deleted(tmp_path: Path) -> None:
    root, record = _saved(tmp_path)
    sp = load_savepoint(root, "v1")
    assert (sp.app, sp.slot, sp.epoch) == ("app", SLOT, 1)
    assert {t: dict(ps) for t, ps in sp.offsets.items()} == {"in": {0: 7, 1: 9}}
    group = sp.operator("group")
    assert group is not None and (group.kind, group.window, group.units) == ("group", 2, 2)
    assert [s.name for s in list_savepoints(root)] == ["v1"]
    assert not list(root.glob(".*")), "no temporary directory is left"
    with pytest.raises(ConfigError, match="exists"):
        save_savepoint(root, "v1", _graph(), record, MemoryBackend())
    delete_savepoint(root, "v1")
    assert list_savepoints(root) == []
    with pytest.raises(ConfigError, match=r"no savepoint 'v1' .* \(there: none\)"):
        load_savepoint(root, "v1")


def test_a_changed_manifest_or_unit_file_is_refused_before_use(tmp_path: Path) -> None:
    root, _ = _saved(tmp_path)
    manifest = root / "v1" / "savepoint.json"
    original = manifest.read_bytes()
    body = json.loads(original)
    body["body"]["offsets"]["in"]["0"] = 0  # moving time back is what an attacker wants
    manifest.write_text(json.dumps(body))
    with pytest.raises(Unauthenticated, match="does not verify"):
        load_savepoint(root, "v1")
    manifest.write_bytes(original)
    sp = load_savepoint(root, "v1")
    unit = root / "v1" / "units" / "group.0"
    unit.write_bytes(unit.read_bytes()[:-1] + b"\x00")
    with pytest.raises(Unauthenticated, match="digest"):
        sp.unit_bytes("group/0")


def test_a_snapshot_collected_meanwhile_and_a_bad_name_are_refused(tmp_path: Path) -> None:
    record = SnapshotRecord(SLOT, {"in": {0: 1}}, {"group": ("group/0",)}, 1, 1)
    with pytest.raises(SnapshotMissing):
        save_savepoint(tmp_path, "gone", _graph(), record, MemoryBackend())
    assert list(tmp_path.iterdir()) == [], "a failed copy leaves nothing"
    with pytest.raises(ConfigError, match="letters, digits"):
        save_savepoint(tmp_path, "../x", _graph(), record, MemoryBackend())


def add(a: int, b: int) -> int:
    return a + b


def _rolling(window_ms: int | None = None, name: str = "r") -> Graph:
    p = Pipeline("app")
    keyed = p.source(ListSource(["a"], topic="in")).key_by(str)
    if window_ms is None:
        keyed.reduce(add, name=name).sink(ListSink())
    else:
        keyed.aggregate(Tumbling(window_ms), reduce=add, name=name).sink(ListSink())
    return p.graph()


def test_an_aggregates_state_is_saved_and_kept_by_its_shape(tmp_path: Path) -> None:
    graph = _rolling()
    backend = MemoryBackend()
    node = graph.node("r")
    assert node.aggregation is not None
    shape = aggregate_shape(node.aggregation, graph.delta_ms)
    bucket = ([], [], [], (3, SLOT - 1))
    data = encode_aggregate_unit([("k", bucket)], SLOT - 2, shape, unit_label("app", "r/0", SLOT))
    backend.put("r/0", SLOT, data)
    record = SnapshotRecord(SLOT, {"in": {0: 7}}, {"r": ("r/0",)}, 1, 1_000)
    sp = save_savepoint(tmp_path, "v1", graph, record, backend)
    assert sp.operator("r") is not None and sp.operator("r").shape == shape  # type: ignore[union-attr]
    sp = load_savepoint(tmp_path, "v1")
    assert dict(plan_upgrade(sp, graph).kept) == {"r": "r"}
    renamed = plan_upgrade(sp, _rolling(name="sum"), {"r": "sum"})
    state = decode_unit(
        SavepointBackend(sp, renamed).get("sum/0", SLOT), unit_label("app", "sum/0", SLOT), "t"
    )
    assert state == {"aggregate": shape, "min_time": SLOT - 2, "buckets": [("k", bucket)]}
    with pytest.raises(ConfigError, match=r"aggregate 'r' was .*rolling=True.* is Tumbling"):
        plan_upgrade(sp, _rolling(window_ms=1000))


def test_upgrade_keeps_matching_state_starts_new_groupings_empty_reports_removed(
    tmp_path: Path,
) -> None:
    root, _ = _saved(tmp_path)
    sp = load_savepoint(root, "v1")
    same = plan_upgrade(sp, _graph())
    assert dict(same.kept) == {"group": "group"} and same.new == () and same.removed == ()
    changed = plan_upgrade(sp, _graph(name="pairs", letters=True, topic="in2"), {"group": "pairs"})
    assert dict(changed.kept) == {"pairs": "group"}
    assert changed.new == ("letters",)
    assert changed.new_sources == ("in2",) and changed.removed_sources == ("in",)
    assert "source-in" in changed.removed
    assert "pairs (from group)" in changed.describe()
    unmapped = plan_upgrade(sp, _graph(name="pairs"))
    assert unmapped.kept == {} and unmapped.new == ("pairs",) and "group" in unmapped.removed


def test_incompatible_changes_are_refused_naming_the_operator(tmp_path: Path) -> None:
    root, _ = _saved(tmp_path)
    sp = load_savepoint(root, "v1")
    with pytest.raises(ConfigError, match=r"grouping 'group' had window 2 .* has 3 now"):
        plan_upgrade(sp, _graph(window=3))
    p = Pipeline("app")
    p.source(ListSource(["a"], topic="in")).map(str, name="group").sink(ListSink())
    with pytest.raises(ConfigError, match=r"'group' was a group .* a map now"):
        plan_upgrade(sp, p.graph())
    with pytest.raises(ConfigError, match="no such operator"):
        plan_upgrade(sp, _graph(), {"nope": "x"})
    other = Pipeline("other")
    other.source(ListSource(["a"])).sink(ListSink())
    with pytest.raises(ConfigError, match="starts the pipeline it was taken of"):
        plan_upgrade(sp, other.graph())


def test_a_renamed_operators_state_is_signed_for_its_new_unit(tmp_path: Path) -> None:
    root, _ = _saved(tmp_path)
    sp = load_savepoint(root, "v1")
    upgrade = plan_upgrade(sp, _graph(name="pairs"), {"group": "pairs"})
    backend = SavepointBackend(sp, upgrade)
    restored = backend.record(epoch=1)
    assert dict(restored.units) == {"pairs": ("pairs/0", "pairs/1")}
    data = backend.get("pairs/1", SLOT)
    state = decode_unit(data, unit_label("app", "pairs/1", SLOT), "t")
    assert [key for key, _, _ in state["buckets"]] == ["k10", "k11", "k12"]
    with pytest.raises(Unauthenticated):
        decode_unit(data, unit_label("app", "group/1", SLOT), "t")
    with pytest.raises(SnapshotMissing):
        backend.get("pairs/1", SLOT + 1)
