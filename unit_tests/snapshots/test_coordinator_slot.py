"""A snapshot's slot lies on a pane boundary of every combinable aggregate."""

from __future__ import annotations

from framework import Pipeline, Sliding, Tumbling
from framework.snapshots.coordinator import aligned, combining_pane
from framework.testing import ListSink, ListSource


def _ones(line: str) -> list[tuple[str, int]]:
    return [(word, 1) for word in line.split()]


def _add(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    return (a[0], a[1] + b[1])


def _graph(*windows: object, combinable: bool = True) -> object:
    p = Pipeline("panes")
    lines = p.source(ListSource([], topic="lines"))
    branches = lines.broadcast(len(windows)) if len(windows) > 1 else (lines,)
    for n, (branch, window) in enumerate(zip(branches, windows, strict=True)):
        words = branch.flat_map(_ones).key_by(lambda w: w[0])
        words.aggregate(window, reduce=_add, combinable=combinable).sink(ListSink(f"out{n}"))
    return p.graph()


def test_the_pane_is_the_least_common_multiple_of_the_combinable_panes() -> None:
    assert combining_pane(_graph(Tumbling(1000))) == 100  # 10 ms slots
    # Sliding 300 ms every 200 ms: panes of gcd(30, 20) = 10 slots; with 1 s: lcm 100.
    assert combining_pane(_graph(Sliding(300, 200), Tumbling(1000))) == 100
    assert combining_pane(_graph(Tumbling(300), Tumbling(700))) == 210
    assert combining_pane(_graph(Tumbling(1000), combinable=False)) == 1


def test_a_slot_is_lowered_to_the_pane_boundary() -> None:
    """A partial of the pane [179575897700, 179575897800) whose largest item lies past a
    cut at ...787 would leave with its earlier items, and the replay from ...787 would
    not read those again."""
    assert aligned(179575897787, 100) == 179575897700
    assert aligned(179575897700, 100) == 179575897700
    assert aligned(42, 1) == 42
