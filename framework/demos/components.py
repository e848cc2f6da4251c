"""Incremental connected components over a stream of edges, in a loop.

Every vertex's state is ``(label, neighbours)``: the least vertex it is known to be
connected to, and the vertices it has an edge to. An edge ``(u, v)`` gives ``u`` the state
``(u, (v,))`` and ``v`` the state ``(v, (u,))``; `converge` joins states (the lesser label,
the union of neighbours) as of each item's global time, and each time a vertex's state
grows its label goes round the loop to every neighbour as the state ``(label, ())``. A
vertex's state also leaves the loop with every growth; after it, per vertex and pane the
least label so far (``reduce(min, every_ms=pane_ms)``), then each ``(vertex, label)`` once
(``dedup``): the label a vertex had at the end of each pane it changed in, released once
min time passes the pane (docs/decisions/cyclic-dataflows.md).

`components_oracle` computes the same in plain Python, pane by pane with a union-find.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from framework.core.graph import Sink, Source
from framework.core.windows import KeyValue
from framework.pipeline import Pipeline

Vertex = int
State = tuple[Vertex, tuple[Vertex, ...]]  # (label, sorted neighbours)


def connected_components(
    name: str, source: Source, sink: Sink, *, pane_ms: int = 1000, max_rounds: int = 1000
) -> Pipeline:
    """Edges ``(u, v)`` from ``source``; ``(vertex, label)`` pairs to ``sink``, each once,
    as described in the module docstring."""
    p = Pipeline(name)
    loop = p.source(source).flat_map(endpoints).loop(max_rounds, name="propagate")
    states = loop.stream.key_by(vertex_of, name="by-vertex").converge(join, name="state")
    again, out = states.broadcast(2)
    loop.close(again.flat_map(proposals, name="proposals"))
    (
        out.map(label_of)
        .key_by(vertex_of, name="labels-by-vertex")
        .reduce(min, every_ms=pane_ms, name="least-label")
        .map(settled)
        .key_by(same, name="by-label")
        .dedup(name="once")
        .sink(sink)
    )
    return p


def endpoints(edge: tuple[Vertex, Vertex]) -> list[tuple[Vertex, State]]:
    """An edge's two vertices, each with the other as its neighbour."""
    u, v = edge
    return [(u, (u, (v,))), (v, (v, (u,)))]


def vertex_of(item: tuple[Vertex, Any]) -> Vertex:
    """The vertex an item is about."""
    return item[0]


def join(a: tuple[Vertex, State], b: tuple[Vertex, State]) -> tuple[Vertex, State]:
    """The lesser label and the union of neighbours: commutative, associative, idempotent."""
    (vertex, (label_a, near_a)), (_, (label_b, near_b)) = a, b
    near = near_a if near_a == near_b else tuple(sorted({*near_a, *near_b}))
    return vertex, (min(label_a, label_b), near)


def proposals(update: KeyValue) -> list[tuple[Vertex, State]]:
    """A grown state's label, proposed to each neighbour."""
    label, near = _state(update)[1]
    return [(other, (label, ())) for other in near]


def label_of(update: KeyValue) -> tuple[Vertex, Vertex]:
    """``(vertex, label)`` of a grown state."""
    vertex, (label, _) = _state(update)
    return vertex, label


def _state(update: KeyValue) -> tuple[Vertex, State]:
    state: tuple[Vertex, State] = update.value  # type: ignore[assignment]
    return state


def settled(update: KeyValue) -> tuple[Vertex, Vertex]:
    """``(vertex, label)`` of a pane's least label."""
    value: tuple[Vertex, Vertex] = update.value  # type: ignore[assignment]
    return value


def same(item: object) -> object:
    """The item itself, as a key."""
    return item


def components_oracle(
    edges: Iterable[tuple[int, tuple[Vertex, Vertex]]], pane_ms: int
) -> set[tuple[Vertex, Vertex]]:
    """``(vertex, label)`` for every vertex and every pane end (``pane_ms``) at which it
    had that label, from edges ``(timestamp_ms, (u, v))``: the pipeline's output, as a set."""
    parent: dict[Vertex, Vertex] = {}

    def find(x: Vertex) -> Vertex:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    out: set[tuple[Vertex, Vertex]] = set()
    by_pane: dict[int, list[tuple[Vertex, Vertex]]] = {}
    for stamp, edge in edges:
        by_pane.setdefault(stamp // pane_ms, []).append(edge)
    for pane in sorted(by_pane):
        for u, v in by_pane[pane]:
            for x in (u, v):
                parent.setdefault(x, x)
            a, b = find(u), find(v)
            if a != b:
                parent[max(a, b)] = min(a, b)  # the root is the least vertex
        out.update((x, find(x)) for x in parent)
    return out
