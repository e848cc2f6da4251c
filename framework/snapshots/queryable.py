"""Queryable state: a key's committed value in a grouping or a rolling aggregate, and the
global time it is as of.

Nothing uncommitted or speculative is answered. The reader keeps a copy of each queried
operator's changelog, read with read_committed (`ChangelogCopies`): the records a stage
task commits in one transaction with its acks.

* **A grouping** (`group`): the value of a key is what its state keeps of the items below
  the global min time ``M``: its last ``window - 1`` items, oldest first (the start of the
  key's next window; a running count's whole history). Protocol of a query:

  1. ``M``: the min time of the reader's view, waited for until it reaches the committed
     snapshot slot (groupings prune their state below that slot only, so below ``M``
     nothing the answer needs is gone).
  2. Mark the changelog's high watermarks; wait until every partition's last stable
     offset passes its mark: the records of every item below ``M`` are then committed
     and readable (the argument of `framework.snapshots.copies`).
  3. Catch the copy up and answer `Grouping.kept_below` (``M``).

* **A rolling aggregate** (`reduce`, `fold`, `dedup`, the table of `join_table`): the
  value of a key is its carried value as of its partition's min time ``m``: the aggregate
  folds items in global-time order as min time passes them and commits ``m`` with the
  values in each batch, so the value holds every item of the key below ``m`` and none at
  or after it. Protocol: catch the copy up; answer the value and ``m``.

Windowed aggregates are refused: an open window is not a value yet; their results are
the output.

    >>> StateValue("pairs", "w", True, ["w", "3"], 42, 420, 0, 1).as_json()["as_of_ms"]
    420
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from framework.core.graph import Graph, Kind
from framework.core.ops import key_hash, op_id_of
from framework.core.rolling import RollingAggregator
from framework.deadline import Deadline
from framework.errors import ConfigError, DeadlineExceeded
from framework.kafka.admin import partitions_if_exists
from framework.kafka.mintime import MinTimeView
from framework.snapshots.copies import ChangelogCopies
from framework.wire.topics import Topics

_POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class StateValue:
    """One answer: ``value`` of ``key`` in operator ``node`` (``found`` False: none), as of
    global time slot ``as_of_slot`` (``as_of_ms`` its start), from hash unit ``partition``
    of ``epoch``."""

    node: str
    key: object
    found: bool
    value: object
    as_of_slot: int
    as_of_ms: int
    partition: int
    epoch: int

    def as_json(self) -> dict[str, Any]:
        """The answer as JSON-ready data (values JSON cannot hold are shown by ``repr``)."""
        return {
            "node": self.node,
            "key": _plain(self.key),
            "found": self.found,
            "value": _plain(self.value),
            "as_of_slot": self.as_of_slot,
            "as_of_ms": self.as_of_ms,
            "partition": self.partition,
            "epoch": self.epoch,
        }


def _plain(value: object) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def queryable_nodes(graph: Graph) -> dict[str, str]:
    """Operator id -> what kind of state it has (``grouping`` or ``rolling``)."""
    found = {node.id: "grouping" for node in graph.by_kind(Kind.GROUP)}
    for node in graph.by_kind(Kind.AGGREGATE):
        if node.aggregation is not None and node.aggregation.rolling:
            found[node.id] = "rolling"
    return found


@dataclass
class StateReader:
    """Answers `get` for the groupings and rolling aggregates of ``graph`` in ``epoch``
    (see the module docstring); thread-safe; `close` it.

    ``view`` is a started min-time view of the pipeline (groupings need it);
    ``committed`` gives the committed snapshot slot (0 without snapshots).
    """

    bootstrap: str
    graph: Graph
    epoch: int
    view: MinTimeView
    _: KW_ONLY
    committed: Callable[[], int] = field(default=lambda: 0)
    timeout_s: float = 10.0
    topics: Topics = field(init=False)
    kinds: dict[str, str] = field(init=False)
    _copies: dict[str, tuple[ChangelogCopies, int]] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.topics = Topics(self.graph.name, self.epoch)
        self.kinds = queryable_nodes(self.graph)

    def get(self, node: str, key: object) -> StateValue:
        """The committed value of ``key`` in operator ``node``.

        `ConfigError` for an operator without queryable state (naming those with);
        `DeadlineExceeded` if the state cannot be read within ``timeout_s`` (the pipeline
        is not running or is far behind).
        """
        kind = self.kinds.get(node)
        if kind is None:
            known = ", ".join(f"{n} ({k})" for n, k in self.kinds.items()) or "none"
            raise ConfigError(
                f"{self.graph.name!r} has no queryable state at operator {node!r}: groupings "
                f"and rolling aggregates have it; here: {known}"
            )
        with self._lock:
            copies, partitions = self._copies_of(node)
            deadline = Deadline(self.timeout_s, f"the state of {node!r}")
            part = key_hash(key) % partitions
            if kind == "grouping":
                return self._grouping(node, key, copies, part, deadline)
            return self._rolling(node, key, copies, part)

    def _grouping(
        self, node: str, key: object, copies: ChangelogCopies, part: int, deadline: Deadline
    ) -> StateValue:
        # Step 1
        floor = self.committed()
        if not self.view.wait_for(None, floor, deadline.remaining()):
            raise DeadlineExceeded(f"min time of {self.graph.name!r} did not reach slot {floor}")
        slot = self.view.min_time()
        # Step 2
        marks = copies.mark()
        while not copies.settled(marks):
            if deadline.expired:
                raise DeadlineExceeded(
                    f"{self.topics.state(node)}: a transaction stays open past the read "
                    f"(is the pipeline running?)"
                )
            time.sleep(_POLL_S)
        # Step 3
        copies.catch_up()
        copy = copies.copies[(self.topics.state(node), part)]
        kept = copy.grouping.kept_below(key, slot)
        value = kept or None
        return StateValue(
            node, key, bool(kept), value, slot, slot * self.graph.delta_ms, part, self.epoch
        )

    def _rolling(self, node: str, key: object, copies: ChangelogCopies, part: int) -> StateValue:
        copies.catch_up()
        state = copies.copies[(self.topics.state(node), part)].state
        assert isinstance(state, RollingAggregator)
        found, value = state.value_of(key)
        slot = state.min_time
        return StateValue(
            node, key, found, value, slot, slot * self.graph.delta_ms, part, self.epoch
        )

    def _copies_of(self, node: str) -> tuple[ChangelogCopies, int]:
        if node in self._copies:
            return self._copies[node]
        topic = self.topics.state(node)
        partitions = partitions_if_exists(self.bootstrap, topic)
        if not partitions:
            raise ConfigError(
                f"{topic} does not exist: {self.graph.name!r} has not run in epoch {self.epoch}"
            )
        spec = self.graph.node(node)
        op_id = op_id_of(self.graph.name, node)
        if spec.kind is Kind.GROUP:
            copies = ChangelogCopies(self.bootstrap, {topic: (partitions, op_id, spec.window)})
        else:
            assert spec.aggregation is not None
            aggregation, delta_ms = spec.aggregation, self.graph.delta_ms
            fresh = lambda: RollingAggregator(op_id, aggregation, delta_ms)  # noqa: E731
            copies = ChangelogCopies(self.bootstrap, {}, {topic: (partitions, fresh)})
        self._copies[node] = (copies, partitions)
        return copies, partitions

    def close(self) -> None:
        """Close the changelog readers (not the view)."""
        with self._lock:
            for copies, _ in self._copies.values():
                copies.close()
            self._copies.clear()
