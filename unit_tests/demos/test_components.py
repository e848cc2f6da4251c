"""Incremental connected components in a loop (`framework.demos.components`) against its
plain-Python oracle, in every delivery order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from framework.demos.components import components_oracle, connected_components, join
from framework.testing import InOrder, Late, ListSink, ListSource, Shuffled, run_local

PANE_MS = 100


def _run(
    edges: list[tuple[int, tuple[int, int]]], delivery: object, partitions: int
) -> list[object]:
    sink = ListSink("labels")
    source = ListSource.timed(edges, partitions=partitions, topic="edges")
    pipeline = connected_components("cc", source, sink, pane_ms=PANE_MS)
    return run_local(pipeline, delivery).values()  # type: ignore[arg-type]


def test_two_components_merge_and_every_vertex_learns_the_least_label_once() -> None:
    edges = [(10, (5, 6)), (20, (3, 4)), (150, (6, 7)), (250, (4, 7)), (260, (9, 8))]
    released = _run(edges, InOrder(), partitions=1)
    assert sorted(released) == sorted(components_oracle(edges, PANE_MS))  # type: ignore[type-var]
    assert {(5, 5), (6, 5), (7, 5), (3, 3), (4, 3), (5, 3), (6, 3), (7, 3)} <= set(released)
    assert len(released) == len(set(released)), "a (vertex, label) pair released twice"


edge_streams = st.lists(
    st.tuples(
        st.integers(0, 599),  # timestamp: six panes
        st.tuples(st.integers(0, 9), st.integers(0, 9)),
    ),
    min_size=1,
    max_size=25,
).map(lambda edges: sorted(edges, key=lambda e: e[0]))


@settings(max_examples=60, deadline=None)
@given(edges=edge_streams, seed=st.integers(0, 2**16), late=st.booleans())
def test_the_released_labels_equal_the_oracle_in_any_delivery_order(
    edges: list[tuple[int, tuple[int, int]]], seed: int, late: bool
) -> None:
    """Random edge streams over two partitions, random interleavings of ingest, processing
    and heartbeats (or a partition arriving late): each (vertex, label) the oracle has is
    released exactly once, and nothing else."""
    expected = components_oracle(edges, PANE_MS)
    released = _run(edges, Late(1, seed) if late else Shuffled(seed), partitions=2)
    assert len(released) == len(set(released)), "a (vertex, label) pair released twice"
    assert set(released) == expected


def test_the_join_is_a_semilattice() -> None:
    a, b, c = (1, (4, (2,))), (1, (3, ())), (1, (9, (5, 2)))
    assert join(a, b) == join(b, a) == (1, (3, (2,)))
    assert join(join(a, b), c) == join(a, join(b, c))
    assert join(a, a) == a
