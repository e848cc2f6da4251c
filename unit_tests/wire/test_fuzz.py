"""Every decoder of bytes flamepipe reads raises only its own typed errors, whatever the
input (hypothesis), so a bad record is a clear error or a dead letter, never a crash.

The pickle-based formats (frames, changelogs, acker checkpoints, unit snapshots) are not
fuzzed with arbitrary bytes: no pickle is decoded before its MAC verifies
(`framework.wire.auth`), and random bytes fed to `pickle.loads` may call anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework.errors import FlamepipeError, Unauthenticated
from framework.snapshots.units import decode_unit
from framework.wire.avro import decode_ack_batch, decode_bundle_header, decode_meta, decode_min_time
from framework.wire.bundles import read_bundle_header, read_meta
from framework.wire.changelog import read_item_key
from framework.wire.dead_letters import read_dead_letter
from framework.wire.positions import BarrierMark, BundleMark, parse_gt
from framework.wire.serde import Json, Utf8
from framework.wire.znodes import EpochRecord, SnapshotRecord

_BYTES: dict[str, Callable[[bytes], Any]] = {
    "ack batch": decode_ack_batch,
    "min time": decode_min_time,
    "bundle header": decode_bundle_header,
    "meta": decode_meta,
    "snapshot znode": lambda b: SnapshotRecord.from_json(b, "z"),
    "epoch znode": lambda b: EpochRecord.from_json(b, "z"),
    "json serde": Json().loads,
    "utf-8 serde": Utf8().loads,
    "bundle-topic record": read_bundle_header,
    "meta in headers": lambda b: read_meta([("fp.meta", b)]),
    "changelog item key": lambda b: read_item_key(b"\xfe" + b),
}
_TEXT: dict[str, Callable[[str], Any]] = {
    "global time": parse_gt,
    "barrier mark": lambda t: BarrierMark.decode(t, "m"),
    "bundle mark": lambda t: BundleMark.decode(t, "m"),
}

# Inputs that used to escape as untyped errors, and the shapes fuzzing finds slowly.
_NASTY = [
    b"[" * 1000,
    b"{" * 5000,
    b"(" * 5000,
    b'{"kind":"snapshot","version":1}',
    b"\xff" * 9,
    b"",
]


def _typed(decode: Callable[[Any], Any], data: Any) -> None:
    """Run ``decode``: returning or raising a flamepipe error passes, anything else fails."""
    with contextlib.suppress(FlamepipeError):
        decode(data)


@pytest.mark.parametrize("name", sorted(_BYTES))
def test_nasty_bytes_raise_typed_errors(name: str) -> None:
    for data in _NASTY:
        _typed(_BYTES[name], data)


@pytest.mark.parametrize("name", sorted(_BYTES))
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_raise_typed_errors(name: str, data: bytes) -> None:
    _typed(_BYTES[name], data)


@pytest.mark.parametrize("name", sorted(_TEXT))
@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=80) | st.from_regex(r"-?\d+[.:,/]-?\d+([.:,/]-?\d+)*"))
def test_arbitrary_text_raises_typed_errors(name: str, text: str) -> None:
    _typed(_TEXT[name], text)


class _Letter:
    def __init__(self, headers: list[tuple[str, bytes]]) -> None:
        self._headers = headers

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes | None:
        return b"v"

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers


@settings(max_examples=300, deadline=None)
@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from(["fp.dlq.reason", "fp.dlq.offset", "fp.dlq.partition", "x"]),
            st.binary(max_size=20),
        ),
        max_size=6,
    )
)
def test_arbitrary_dead_letter_headers_raise_typed_errors(headers: list[tuple[str, bytes]]) -> None:
    _typed(read_dead_letter, _Letter(headers))  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_an_unsigned_unit_snapshot_is_refused_unread(data: bytes) -> None:
    with pytest.raises(Unauthenticated):
        decode_unit(data, "app/g/0@5", "u/0@5")
