"""Dead letters keep the original bytes and say why and where, in readable headers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framework.errors import DecodeError
from framework.wire.dead_letters import DLQ_HEADERS, HeaderValue, dead_letter, read_dead_letter

i64 = st.integers(-(1 << 63), (1 << 63) - 1)

# -- dead letters -------------------------------------------------------------------------


@dataclass
class FakeMessage:
    k: bytes | None
    v: bytes | None
    h: Mapping[str, HeaderValue] | list[tuple[str, HeaderValue]] | None

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def headers(self) -> Mapping[str, HeaderValue] | list[tuple[str, HeaderValue]] | None:
        return self.h


def test_dead_letter_keeps_original_bytes_and_names_its_origin() -> None:
    value = b"\xff\x00not utf-8"
    key, out, headers = dead_letter(b"k", value, "bad", "s1", "in", 3, 42, "Trace\nError: x")
    assert key == b"k"
    assert out is value
    assert [name for name, _ in headers] == list(DLQ_HEADERS)
    assert dict(headers) == {
        "fp.dlq.reason": b"bad",
        "fp.dlq.stage": b"s1",
        "fp.dlq.topic": b"in",
        "fp.dlq.partition": b"3",
        "fp.dlq.offset": b"42",
        "fp.dlq.traceback": b"Trace\nError: x",
    }


letters = st.tuples(
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=20),
    st.text(max_size=30),
    st.text(max_size=10),
    st.integers(0, 1000),
    i64,
    st.text(max_size=50),
)


@given(letters)
def test_dead_letter_round_trip(
    letter: tuple[bytes | None, bytes | None, str, str, int, int, str],
) -> None:
    key, value, reason, stage, partition, offset, trace = letter
    k, v, headers = dead_letter(key, value, reason, stage, "topic.a", partition, offset, trace)
    read = read_dead_letter(FakeMessage(k, v, list(headers)))
    assert (read.key, read.value, read.reason, read.stage) == (key, value, reason, stage)
    assert (read.topic, read.partition, read.offset) == ("topic.a", partition, offset)
    assert read.traceback == trace


def test_long_reason_and_traceback_are_clipped_keeping_the_error() -> None:
    trace = "frame\n" * 5000 + "ValueError: the cause"
    _, _, headers = dead_letter(None, b"v", "r" * 5000, "s", "t", 0, 0, trace)
    texts = {name: raw.decode() for name, raw in headers}
    assert len(texts["fp.dlq.reason"]) == 1000
    assert len(texts["fp.dlq.traceback"]) == 8000
    assert texts["fp.dlq.traceback"].endswith("ValueError: the cause")
    assert texts["fp.dlq.traceback"].startswith("...\n")


def test_read_dead_letter_rejects_other_records() -> None:
    with pytest.raises(DecodeError, match=r"fp\.dlq\.reason"):
        read_dead_letter(FakeMessage(None, b"v", None))
    _, _, headers = dead_letter(None, b"v", "r", "s", "t", 0, 0, "")
    bad_offset = [(n, b"x" if n == "fp.dlq.offset" else v) for n, v in headers]
    with pytest.raises(DecodeError, match=r"fp\.dlq\.offset"):
        read_dead_letter(FakeMessage(None, b"v", list(bad_offset)))
    bad_text = [(n, b"\xff" if n == "fp.dlq.reason" else v) for n, v in headers]
    with pytest.raises(DecodeError, match="UTF-8"):
        read_dead_letter(FakeMessage(None, b"v", list(bad_text)))


def test_read_dead_letter_takes_header_mappings_and_text() -> None:
    _, _, headers = dead_letter(b"k", b"v", "why", "s", "t", 1, 2, "tb")
    as_text = {name: value.decode() for name, value in headers}
    letter = read_dead_letter(FakeMessage(b"k", b"v", as_text))
    assert (letter.reason, letter.partition, letter.offset) == ("why", 1, 2)
