"""Savepoints: a committed snapshot copied out of the backend, kept until deleted.

A savepoint is a directory ``<savepoints>/<name>/`` holding the snapshot's unit bytes
(``units/<node>.<p>``, signed as the backend holds them: `framework.snapshots.units`) and
``savepoint.json``: the slot, the sources' replay offsets, the graph's operators (id, kind,
label, a grouping's window and units) and each unit file's SHA-256, behind a MAC of the
pipeline's keyring. Offsets move time, so a manifest that does not verify is refused
before anything in it is used, and a unit file is checked against its digest before it
is read.

A pipeline whose graph changed starts from a savepoint by operator id:
`framework.snapshots.upgrades`.

The copy is written under a temporary name and renamed into place: a savepoint either
exists whole or not at all.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.core.graph import KEYED_STATE, Graph, Kind
from framework.core.names import slug
from framework.errors import ConfigError, DecodeError, SnapshotMissing, Unauthenticated
from framework.snapshots.backends.base import StateBackend
from framework.snapshots.backends.files import fsync_dir, write_synced
from framework.snapshots.units import decode_unit, state_shape, unit_label
from framework.wire.auth import MAC_HEADER, current
from framework.wire.znodes import SnapshotRecord

SAVEPOINT_FORMAT = 1
"""Version of ``savepoint.json``; `load_savepoint` reads this version only."""

_MANIFEST = "savepoint.json"
_UNITS = "units"


@dataclass(frozen=True, slots=True)
class SavedOperator:
    """One operator of the saved graph: its id, kind and label; a grouping's window, an
    aggregate's shape (`aggregate_shape`), and hash units (0 for an operator without saved
    state)."""

    id: str
    kind: str
    label: str
    window: int | None = None
    units: int = 0
    shape: str | None = None


@dataclass(frozen=True)
class Savepoint:
    """A savepoint as `load_savepoint` verified it."""

    name: str
    app: str
    slot: int
    epoch: int
    created_ms: int
    offsets: Mapping[str, Mapping[int, int]]
    operators: tuple[SavedOperator, ...]
    directory: Path
    digests: Mapping[str, str] = field(repr=False)

    def operator(self, node: str) -> SavedOperator | None:
        """The saved operator with id ``node``, or None."""
        return next((op for op in self.operators if op.id == node), None)

    def unit_bytes(self, unit: str) -> bytes:
        """The saved bytes of ``unit`` (``"<node>/<p>"``), checked against the manifest."""
        digest = self.digests.get(unit)
        if digest is None:
            raise SnapshotMissing(f"savepoint {self.name!r} has no unit {unit!r}")
        data = (self.directory / _UNITS / _unit_file(unit)).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise Unauthenticated(
                f"savepoint {self.name!r}: unit {unit} does not match its digest (changed "
                "since it was saved), not decoded"
            )
        return data


def _unit_file(unit: str) -> str:
    node, _, p = unit.rpartition("/")
    return f"{node}.{p}"


def _check_name(name: str) -> str:
    if not name or slug(name) != name:
        raise ConfigError(
            f"savepoint name {name!r}: use letters, digits, '_' and '-' only (e.g. v1-2026-11-26)"
        )
    return name


def check_savable(graph: Graph, name: str) -> None:
    """`ConfigError` with the fix if ``name`` is not a savepoint name."""
    _check_name(name)


def _manifest_label(app: str, name: str) -> str:
    return f"{app}/savepoint/{name}"


def _operators(graph: Graph, record: SnapshotRecord) -> list[SavedOperator]:
    operators = []
    for node in graph.nodes:
        keyed = node.kind in KEYED_STATE
        units = len(record.units.get(node.id, ())) if keyed else 0
        window = node.window if node.kind == Kind.GROUP else None
        shape = state_shape(node, graph.delta_ms)
        operators.append(SavedOperator(node.id, node.kind.value, node.label, window, units, shape))
    return operators


def save_savepoint(
    root: Path, name: str, graph: Graph, record: SnapshotRecord, backend: StateBackend
) -> Savepoint:
    """Copy snapshot ``record`` of ``graph`` out of ``backend`` as savepoint ``name``.

    1. Refuse a bad name and a name in use (delete it first).
    2. Copy every unit's bytes, verified for its label, into ``<root>/.<name>.tmp``,
       each file synced.
    3. Write the signed manifest, synced.
    4. Rename the directory to ``<root>/<name>``: the savepoint exists whole or not at all.

    `SnapshotMissing` if the backend dropped a unit meanwhile (a newer snapshot was
    committed twice since ``record``): take the newer one.
    """
    # Step 1
    check_savable(graph, name)
    final = root / name
    if final.exists():
        raise ConfigError(
            f"savepoint {name!r} exists in {root}: delete it first or pick a new name"
        )
    # Step 2
    root.mkdir(parents=True, exist_ok=True)
    work = root / f".{name}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    (work / _UNITS).mkdir(parents=True)
    digests: dict[str, str] = {}
    try:
        for unit in sorted(u for units in record.units.values() for u in units):
            data = backend.get(unit, record.slot)
            label = unit_label(graph.name, unit, record.slot)
            decode_unit(data, label, f"snapshot {unit}@{record.slot}")  # refuse a bad one now
            write_synced(work / _UNITS / _unit_file(unit), data)
            digests[unit] = hashlib.sha256(data).hexdigest()
        # Step 3
        body = {
            "format": SAVEPOINT_FORMAT,
            "name": name,
            "app": graph.name,
            "slot": record.slot,
            "epoch": record.epoch,
            "created_ms": time.time_ns() // 1_000_000,
            "snapshot_created_ms": record.created_ms,
            "offsets": {t: {str(p): o for p, o in ps.items()} for t, ps in record.offsets.items()},
            "operators": [_op_json(op) for op in _operators(graph, record)],
            "units": digests,
        }
        payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        mac = current().sign(_manifest_label(graph.name, name), None, payload)
        manifest = {"mac": base64.b64encode(mac).decode("ascii"), "body": body}
        write_synced(work / _MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode())
        # Step 4
        os.rename(work, final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return load_savepoint(root, name)


def _op_json(op: SavedOperator) -> dict[str, Any]:
    return dataclasses.asdict(op)


def load_savepoint(root: Path, name: str) -> Savepoint:
    """Savepoint ``name`` under ``root``, its manifest verified.

    `ConfigError` if there is none (naming the ones there are); `Unauthenticated` if the
    manifest's MAC does not verify (nothing in it is used); `DecodeError` if it is not a
    savepoint of this format.
    """
    _check_name(name)
    path = root / name / _MANIFEST
    if not path.is_file():
        known = ", ".join(sp.name for sp in list_savepoints(root)) or "none"
        raise ConfigError(f"no savepoint {name!r} in {root} (there: {known})")
    where = str(path)
    try:
        manifest = json.loads(path.read_bytes())
        mac, body = base64.b64decode(str(manifest["mac"]), validate=True), manifest["body"]
        app = str(body["app"])
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise DecodeError(f"{where}: not a savepoint manifest ({exc!r})") from None
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    if not current().verify(_manifest_label(app, name), None, payload, [(MAC_HEADER, mac)]):
        raise Unauthenticated(
            f"{where}: its MAC does not verify (written with another key, changed, or "
            "renamed), not used"
        )
    if body.get("format") != SAVEPOINT_FORMAT or body.get("name") != name:
        raise DecodeError(
            f"{where}: savepoint format {body.get('format')!r}; this flamepipe reads "
            f"{SAVEPOINT_FORMAT}"
        )
    try:
        return Savepoint(
            name=name,
            app=app,
            slot=int(body["slot"]),
            epoch=int(body["epoch"]),
            created_ms=int(body["created_ms"]),
            offsets={
                t: {int(p): int(o) for p, o in ps.items()} for t, ps in body["offsets"].items()
            },
            operators=tuple(SavedOperator(**op) for op in body["operators"]),
            directory=root / name,
            digests={str(u): str(d) for u, d in body["units"].items()},
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise DecodeError(f"{where}: not a savepoint manifest ({exc!r})") from None


def list_savepoints(root: Path) -> list[Savepoint]:
    """The savepoints under ``root`` that verify, oldest first (others are skipped)."""
    found = []
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            if entry.name.startswith(".") or not (entry / _MANIFEST).is_file():
                continue
            try:
                found.append(load_savepoint(root, entry.name))
            except (DecodeError, ConfigError):
                continue
    return sorted(found, key=lambda sp: sp.created_ms)


def delete_savepoint(root: Path, name: str) -> None:
    """Delete savepoint ``name`` (`ConfigError` if there is none)."""
    _check_name(name)
    if not (root / name / _MANIFEST).is_file():
        raise ConfigError(f"no savepoint {name!r} in {root}")
    shutil.rmtree(root / name)
