"""Acker checkpoints: round trip; anything else is a DecodeError, never another exception."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framework.core.acker.sharded import ShardState
from framework.errors import DecodeError
from framework.wire.checkpoints import decode_checkpoint, encode_checkpoint

STATE = ShardState({"s": {3: 7}}, {1: 4}, {9: 2}, {None: 3, "s": 3})


def test_round_trip() -> None:
    assert decode_checkpoint(encode_checkpoint(42, STATE)) == (42, STATE)


@pytest.mark.parametrize(
    "value",
    [
        pickle.dumps((2, 42, STATE)),  # a format this flamepipe does not read
        pickle.dumps((1, "42", STATE)),  # an offset that is not an int
        pickle.dumps((1, 42, {"xor": {}})),  # a state that is not a ShardState
        pickle.dumps("text"),
    ],
)
def test_foreign_values_are_decode_errors(value: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_checkpoint(value)


@given(st.binary(max_size=64))
def test_garbage_is_a_decode_error(value: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_checkpoint(value)
