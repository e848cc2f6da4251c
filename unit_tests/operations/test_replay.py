"""Replay arguments: offsets parse or fail with the format; the CLI needs a start point."""

from __future__ import annotations

import pytest

from framework.cli import _parser
from framework.errors import ConfigError
from framework.operations.replay import parse_offsets


def test_offsets_parse_per_topic_and_partition() -> None:
    assert parse_offsets("in:0=10, in:1=20,other.topic:3=0") == {
        "in": {0: 10, 1: 20},
        "other.topic": {3: 0},
    }


def test_a_topic_name_with_a_colon_keeps_it() -> None:
    assert parse_offsets("a:b:2=5") == {"a:b": {2: 5}}


@pytest.mark.parametrize("text", ["", "in=3", "in:x=3", "in:0=-1", ":0=1", "in:0"])
def test_malformed_offsets_say_the_format(text: str) -> None:
    with pytest.raises(ConfigError, match=r"topic:partition=offset"):
        parse_offsets(text)


def test_replay_needs_exactly_one_start_point() -> None:
    parser = _parser()
    args = parser.parse_args(["replay", "jobs:p", "--from-time", "1700000000000"])
    assert args.from_time == 1_700_000_000_000 and not args.from_start
    with pytest.raises(SystemExit):
        parser.parse_args(["replay", "jobs:p"])
    with pytest.raises(SystemExit):
        parser.parse_args(["replay", "jobs:p", "--from-start", "--offsets", "in:0=1"])
