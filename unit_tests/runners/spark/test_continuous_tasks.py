"""Stages sharing a long-running task: how their loops take turns (`take_turns`)."""

from __future__ import annotations

import pytest

from framework.runners.spark.continuous_tasks import take_turns


class _EndedError(Exception):
    pass


class _Loop:
    """A loop whose steps find work as scripted, recording the waits it was allowed."""

    def __init__(self, name: str, work: list[bool], calls: list[tuple[str, float | None]]):
        self.name, self.work, self.calls = name, list(work), calls

    def step(self, most_wait_s: float | None) -> bool:
        if not self.work:
            raise _EndedError(self.name)
        self.calls.append((self.name, most_wait_s))
        return self.work.pop(0)


def test_a_lone_loop_waits_as_long_as_it_likes() -> None:
    calls: list[tuple[str, float | None]] = []
    loop = _Loop("a", [False, True, False], calls)
    with pytest.raises(_EndedError):
        take_turns([loop.step], 0.005)
    assert calls == [("a", None)] * 3


def test_shared_loops_alternate_and_wait_only_their_share_when_idle() -> None:
    calls: list[tuple[str, float | None]] = []
    a = _Loop("a", [False, True, False, False], calls)
    b = _Loop("b", [False, False, False, False], calls)
    with pytest.raises(_EndedError, match="a"):
        take_turns([a.step, b.step], 0.004)
    # Round 1 starts busy (no wait); round 2 idle (a share each); a found work in round 2,
    # so round 3 waits for nothing; round 3 found none, so round 4 waits again.
    assert calls == [
        ("a", 0.0), ("b", 0.0),
        ("a", 0.002), ("b", 0.002),
        ("a", 0.0), ("b", 0.0),
        ("a", 0.002), ("b", 0.002),
    ]  # fmt: skip


def test_a_failing_loop_ends_the_turns_at_once() -> None:
    calls: list[tuple[str, float | None]] = []
    a = _Loop("a", [True], calls)
    b = _Loop("b", [], calls)
    with pytest.raises(_EndedError, match="b"):
        take_turns([a.step, b.step], 0.004)
    assert calls == [("a", 0.0)]
