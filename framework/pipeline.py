"""The user-facing pipeline builder. Pure: it only describes a graph; runners execute it.

    p = Pipeline("wordcount")
    (p.source(ListSource(["a b", "b"]))
      .flat_map(str.split)
      .key_by(lambda word: word)
      .aggregate(Tumbling(1000), fold=lambda n, _: n + 1, initial=0)
      .sink(ListSink()))
    p.run(InProcessRunner())

The same pipeline object runs unchanged on any `Runner`: the in-process harness of
`framework.testing`, or Spark (`framework.runners.spark.SparkRunner`, the default of `run()`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from framework.core.calls import AsyncCall
from framework.core.graph import Graph, Kind, Node, Port, Sink, Source
from framework.core.joins import LEFT, RIGHT, SideKey, TableLookup, Tag, WindowPairs, check_how
from framework.core.names import OperatorIds
from framework.core.rolling import First
from framework.core.time import DEFAULT_DELTA_MS
from framework.core.windows import (
    Aggregation,
    Count,
    KeyValue,
    Session,
    Sliding,
    Tumbling,
    WindowSpec,
)
from framework.errors import PipelineError

if TYPE_CHECKING:
    import pyarrow as pa

    from framework.runners.spark.default import PipelineRun

__all__ = [
    "Count",
    "KeyValue",
    "KeyedStream",
    "Loop",
    "Pipeline",
    "Runner",
    "Session",
    "Sink",
    "Sliding",
    "Source",
    "Stream",
    "Tumbling",
]


R_co = TypeVar("R_co", covariant=True)


class Runner(Protocol[R_co]):
    """Something that executes a validated pipeline graph and says how it went (``R_co``:
    `InProcessRunner`'s `RunResult`, `SparkRunner`'s `PipelineRun`)."""

    def run(self, graph: Graph) -> R_co:
        """Run ``graph``; what it returns is the runner's business."""
        ...


def _label(fn: Callable[..., Any] | None, name: str) -> str:
    return name or getattr(fn, "__name__", "")


class _Part(str):
    """The name of an operator a composite (a join) adds for an unnamed call: its label,
    and what its id is derived from, without pinning it (two unnamed joins coexist)."""

    __slots__ = ()


def _part(name: str, part: str) -> str:
    """``<name>-<part>``, pinned when the composite was named."""
    return f"{name}-{part}" if name else _Part(f"join-{part}")


def _derived(fn: object) -> str:
    """What an unnamed operator's id is derived from: its function's name (a callable
    object's class name)."""
    return str(getattr(fn, "__name__", "") or type(fn).__name__)


class Pipeline:
    """A named pipeline under construction; ``name`` seeds every op id (keep it stable).

    Every operator gets a stable id (`framework.core.names`): ``name=`` pins it, otherwise
    it comes from the operator's kind and function.
    """

    def __init__(self, name: str, *, delta_ms: int = DEFAULT_DELTA_MS) -> None:
        if not name:
            raise PipelineError("a pipeline needs a non-empty name (it seeds the op ids)")
        self.name = name
        self.delta_ms = delta_ms
        self._ids = OperatorIds()
        self._nodes: list[Node] = []

    def source(self, source: Source, *, name: str = "") -> Stream:
        """A stream of the records of ``source``."""
        if not isinstance(source, Source):
            raise PipelineError(f"source() needs a Source descriptor, got {source!r}")
        port = self._add(
            Kind.SOURCE,
            (),
            name=name,
            derived=source.name,
            label=name or source.name,
            endpoint=source,
        )
        return Stream(self, port)

    def graph(self) -> Graph:
        """The validated graph of everything added so far."""
        return Graph(self.name, tuple(self._nodes), self.delta_ms).validate()

    @overload
    def run(self, runner: None = None) -> PipelineRun: ...

    @overload
    def run(self, runner: Runner[R_co]) -> R_co: ...

    def run(self, runner: Runner[Any] | None = None) -> Any:
        """Run the pipeline on ``runner``; what it returns comes from the runner.

        Without one: on Spark with `Settings.load()`, the embedded local stack started (or
        reused) first, until Ctrl-C.
        """
        graph = self.graph()
        if runner is None:
            from framework.runners.spark.default import default_runner

            return default_runner().run(graph)
        return runner.run(graph)

    def _add(
        self,
        kind: Kind,
        inputs: Iterable[Port],
        *,
        name: str,
        derived: str = "",
        label: str | None = None,
        **fields: Any,
    ) -> Port:
        """Add a node whose id ``name`` pins, or is derived from ``derived``; its label
        (for messages) is ``label``, by default ``name``."""
        if isinstance(name, _Part):
            name, derived, label = "", str(name), str(name)
        node_id = self._ids.claim(kind.value, name, derived)
        label = name if label is None else label
        self._nodes.append(Node(node_id, kind, tuple(inputs), label=label, **fields))
        return Port(node_id)

    def __repr__(self) -> str:
        return f"Pipeline({self.name!r}, nodes={len(self._nodes)})"


class _Handle:
    """An output port of a pipeline node."""

    __slots__ = ("pipeline", "port")

    def __init__(self, pipeline: Pipeline, port: Port) -> None:
        self.pipeline = pipeline
        self.port = port

    def _ports(self, others: Iterable[_Handle]) -> list[Port]:
        ports = [self.port]
        for other in others:
            if other.pipeline is not self.pipeline:
                raise PipelineError("cannot merge streams of different pipelines")
            ports.append(other.port)
        return ports

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pipeline.name!r}, {self.port.node!r})"


class Stream(_Handle):
    """A stream of payloads."""

    __slots__ = ()

    def _then(
        self, kind: Kind, fn: Callable[[Any], Any], name: str, *, batch: bool = False
    ) -> Port:
        derived = f"batches:{_derived(fn)}" if batch else _derived(fn)
        return self.pipeline._add(
            kind,
            [self.port],
            name=name,
            derived=derived,
            label=_label(fn, name),
            fn=fn,
            batch=batch,
        )

    def map(self, fn: Callable[[Any], Any], *, name: str = "") -> Stream:
        """One output per payload: ``fn(payload)``.

        Cost: one Python call per payload. After a source, on columns (setting
        ``columnar``), no record or meta object per payload besides; `map_batches` is
        one call per batch."""
        return Stream(self.pipeline, self._then(Kind.MAP, fn, name))

    def map_async(
        self,
        fn: Callable[[Any], Awaitable[Any]],
        *,
        concurrency: int = 16,
        timeout_s: float = 10.0,
        retries: int = 2,
        backoff_s: float = 0.1,
        name: str = "",
    ) -> Stream:
        """One output per payload: ``await fn(payload)``, an external service's answer.

        Guarantee: each payload's output is in the committed output exactly once, in the
        order of the payloads; the service may be called more than once for a payload
        (a retried attempt, a task run again, a replay), and one call's answer is kept.
        Up to ``concurrency`` calls of a task's batch are in flight at once; a call
        that raises or takes over ``timeout_s`` is retried ``retries`` times after
        ``backoff_s``, 2x, 4x...; a payload whose every attempt failed goes to the
        dead-letter topic with each attempt's error. It cannot follow a ``group``
        (its repairs would call the service again). See `framework.core.calls`.

        >>> import asyncio
        >>> from framework.testing import InProcessRunner, ListSink, ListSource
        >>> async def price(item):
        ...     await asyncio.sleep(0.01)  # an HTTP call, say
        ...     return (item, len(item) * 10)
        >>> p = Pipeline("prices")
        >>> out = ListSink()
        >>> _ = p.source(ListSource(["tea", "cake"])).map_async(price).sink(out)
        >>> p.run(InProcessRunner()).values()
        [('tea', 30), ('cake', 40)]
        """
        call = AsyncCall(concurrency, timeout_s, retries, backoff_s)
        port = self.pipeline._add(
            Kind.MAP_ASYNC,
            [self.port],
            name=name,
            derived=_derived(fn),
            label=_label(fn, name),
            fn=fn,
            call=call,
        )
        return Stream(self.pipeline, port)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], *, name: str = "") -> Stream:
        """Zero or more outputs per payload, in the order ``fn`` yields them.

        Cost: one Python call per payload and an object per output; see `map` and
        `flat_map_batches`."""
        return Stream(self.pipeline, self._then(Kind.FLAT_MAP, fn, name))

    def filter(self, fn: Callable[[Any], object], *, name: str = "") -> Stream:
        """The payloads for which ``fn`` is true.

        Cost: one Python call per payload; see `map` and `filter_batches`."""
        return Stream(self.pipeline, self._then(Kind.FILTER, fn, name))

    def map_batches(self, fn: Callable[[pa.Array], Any], *, name: str = "") -> Stream:
        """``map`` over a column: ``fn`` takes many payloads as one `pyarrow.Array` and
        returns as many outputs (an Arrow or NumPy array, a list), in order.

        Guarantee: the output is ``map``'s with the same function applied per payload,
        item for item, meta for meta: exactly once, deterministic across parallelism and
        replay. ``fn`` must treat each payload on its own (the runner splits batches as it
        likes); a payload it fails on goes to the dead-letter topic, the others on. Cost:
        one call per batch, payloads as Arrow columns; on a chain of batch operators after
        a source, no Python object per payload (`framework.core.batches`).

        >>> import pyarrow.compute as pc
        >>> from framework.testing import InProcessRunner, ListSink, ListSource
        >>> p = Pipeline("shout")
        >>> out = ListSink()
        >>> _ = p.source(ListSource(["tea", "cake"])).map_batches(pc.utf8_upper).sink(out)
        >>> p.run(InProcessRunner()).values()
        ['TEA', 'CAKE']
        """
        return Stream(self.pipeline, self._then(Kind.MAP, fn, name, batch=True))

    def flat_map_batches(self, fn: Callable[[pa.Array], Any], *, name: str = "") -> Stream:
        """``flat_map`` over a column: ``fn`` takes many payloads as one `pyarrow.Array`
        and returns one list of outputs per payload (a ``ListArray``, a list of lists).

        Guarantee and cost as `map_batches`; the outputs of a payload keep their order.

        >>> import pyarrow.compute as pc
        >>> from framework.testing import InProcessRunner, ListSink, ListSource
        >>> p = Pipeline("words")
        >>> out = ListSink()
        >>> lines = p.source(ListSource(["to be", "or"]))
        >>> _ = lines.flat_map_batches(pc.utf8_split_whitespace).sink(out)
        >>> p.run(InProcessRunner()).values()
        ['to', 'be', 'or']
        """
        return Stream(self.pipeline, self._then(Kind.FLAT_MAP, fn, name, batch=True))

    def filter_batches(self, fn: Callable[[pa.Array], Any], *, name: str = "") -> Stream:
        """``filter`` over a column: ``fn`` takes many payloads as one `pyarrow.Array` and
        returns one boolean per payload (a null is false).

        Guarantee and cost as `map_batches`.

        >>> import pyarrow.compute as pc
        >>> from framework.testing import InProcessRunner, ListSink, ListSource
        >>> p = Pipeline("long")
        >>> out = ListSink()
        >>> words = p.source(ListSource(["a", "tea", "be"]))
        >>> _ = words.filter_batches(lambda w: pc.greater(pc.utf8_length(w), 1)).sink(out)
        >>> p.run(InProcessRunner()).values()
        ['tea', 'be']
        """
        return Stream(self.pipeline, self._then(Kind.FILTER, fn, name, batch=True))

    def key_by_batches(self, fn: Callable[[pa.Array], Any], *, name: str = "") -> KeyedStream:
        """``key_by`` over a column: ``fn`` takes many payloads as one `pyarrow.Array` and
        returns one key per payload (an Arrow array, a list; a null is None).

        Guarantee and cost as `map_batches`; each distinct key of a batch is hashed once.

        >>> import pyarrow.compute as pc
        >>> from framework.testing import InProcessRunner, ListSink, ListSource
        >>> p = Pipeline("firsts")
        >>> out = ListSink()
        >>> words = p.source(ListSource(["tea", "toast", "cake"]))
        >>> keyed = words.key_by_batches(lambda w: pc.utf8_slice_codeunits(w, 0, 1))
        >>> _ = keyed.reduce(lambda a, b: a + "+" + b).map(lambda kv: kv.value).sink(out)
        >>> p.run(InProcessRunner()).values()
        ['tea', 'tea+toast', 'cake']
        """
        return KeyedStream(self.pipeline, self._then(Kind.KEY_BY, fn, name, batch=True))

    def key_by(self, fn: Callable[[Any], Any], *, name: str = "") -> KeyedStream:
        """Key each payload by ``fn(payload)`` (None, bool, int, float, str, bytes, tuples).

        Cost: one Python call per payload and a stable hash per distinct key of a batch
        (remembered); `key_by_batches` is one call per batch."""
        return KeyedStream(self.pipeline, self._then(Kind.KEY_BY, fn, name))

    def merge(self, *others: Stream, name: str = "") -> Stream:
        """The union of this stream and ``others``."""
        if not others:
            raise PipelineError("merge() needs at least one other stream")
        ports = self._ports(others)
        return Stream(self.pipeline, self.pipeline._add(Kind.MERGE, ports, name=name))

    def broadcast(self, copies: int = 2, *, name: str = "") -> tuple[Stream, ...]:
        """``copies`` streams, each carrying every payload."""
        node = self.pipeline._add(Kind.BROADCAST, [self.port], name=name, ports=copies)
        return tuple(Stream(self.pipeline, Port(node.node, i)) for i in range(copies))

    def loop(self, max_rounds: int, *, name: str = "") -> Loop:
        """Start a loop over this stream (docs/decisions/cyclic-dataflows.md): the `Loop`'s
        ``stream`` carries this stream's payloads and whatever `Loop.close` sends back.

        Exactly once across the loop: an item that goes round keeps its global time, and
        the acker holds min time below it until it has left the loop or ended, so what
        leaves is released once, in global-time order, like any output. An item sent
        round more than ``max_rounds`` times goes to the dead letters with the reason
        instead of going round. Inside a loop: stateless operations, ``key_by`` and
        ``group``; not aggregates (they wait for min time, which a circling item holds
        back): aggregate what leaves the loop. On Spark the loop's entry starts a stage
        that reads a topic of its own, which the stream before the loop and the feedback
        both write: every round is one more hop through Kafka.

        >>> from framework.testing import ListSink, ListSource, run_local
        >>> p = Pipeline("collatz")
        >>> loop = p.source(ListSource([6, 7])).map(lambda n: (n, n, 0)).loop(max_rounds=20)
        >>> def collatz(s):  # (start, value, steps): one step of the Collatz map
        ...     start, value, steps = s
        ...     return start, value // 2 if value % 2 == 0 else 3 * value + 1, steps + 1
        >>> step = loop.stream.map(collatz)
        >>> again, done = step.broadcast(2)
        >>> loop.close(again.filter(lambda s: s[1] != 1))
        >>> _ = done.filter(lambda s: s[1] == 1).map(lambda s: (s[0], s[2])).sink(ListSink())
        >>> run_local(p).values()
        [(6, 8), (7, 16)]
        """
        if max_rounds < 1:
            raise PipelineError(f"loop() needs max_rounds >= 1, got {max_rounds}")
        port = self.pipeline._add(Kind.LOOP, [self.port], name=name)
        return Loop(self.pipeline, port, max_rounds, name)

    def join_window(
        self,
        other: Stream,
        window: Tumbling,
        *,
        key: Callable[[Any], Any],
        other_key: Callable[[Any], Any] | None = None,
        how: str = "inner",
        name: str = "",
    ) -> Stream:
        """Per key and tumbling ``window``, every payload of this stream paired with every
        payload of ``other`` in the same window, as `Joined(key, left, right)` (``how=
        "left"``: a left payload without a right one once, with None). ``key`` keys this
        stream (and ``other`` unless ``other_key``). Final once min time passes the
        window's end, in global-time order, the same under replay; a side that never
        arrives does not stall it.

        >>> from framework.testing import ListSink, ListSource, run_local
        >>> p = Pipeline("pairs")
        >>> clicks = p.source(ListSource(["a:x", "b:y"], topic="clicks"))
        >>> views = p.source(ListSource(["a:1", "a:2"], topic="views"))
        >>> first = lambda s: s.split(":")[0]
        >>> joined = clicks.join_window(views, Tumbling(1000), key=first, how="left")
        >>> _ = joined.sink(ListSink())
        >>> [(j.key, j.left, j.right) for j in run_local(p).values()]
        [('a', 'a:x', 'a:1'), ('a', 'a:x', 'a:2'), ('b', 'b:y', None)]
        """
        check_how(how)
        if not isinstance(window, Tumbling):
            raise PipelineError(f"join_window() needs a Tumbling window, got {window!r}")
        merged = self._sides(other, key, other_key, name)
        windows = merged.aggregate(window, name=_part(name, "window"))
        return windows.flat_map(WindowPairs(how), name=_part(name, "pairs"))  # type: ignore[arg-type]

    def join_table(
        self,
        table: Stream,
        *,
        key: Callable[[Any], Any],
        table_key: Callable[[Any], Any] | None = None,
        how: str = "inner",
        ttl_ms: int | None = None,
        name: str = "",
    ) -> Stream:
        """Each payload joined with ``table``'s latest payload of its key as of the
        payload's own global time (a temporal join), as `Joined(key, payload, row)`.

        ``table`` is a stream of rows (for example a compacted topic's records), keyed by
        ``table_key`` (``key`` if None); a None row deletes the key, as does ``(key,
        None)``: a compacted topic's tombstone read by ``KafkaSource(key=...,
        tombstones=True)``. ``how="left"``
        passes a payload without a row with None; ``"inner"`` drops it (counted). The
        output depends on the input alone, not on which side Spark read first. State: one
        row per key (``ttl_ms``: forgotten after that long without either side's items).

        >>> from framework.testing import ListSink, ListSource, run_local
        >>> p = Pipeline("enrich")
        >>> prices = p.source(ListSource.timed([(0, ("a", 1)), (20, ("a", 2))], topic="p"))
        >>> orders = p.source(ListSource.timed([(10, "a"), (30, "a"), (30, "b")], topic="o"))
        >>> joined = orders.join_table(prices, key=str, table_key=lambda row: row[0])
        >>> _ = joined.sink(ListSink())
        >>> [(j.left, j.right) for j in run_local(p).values()]
        [('a', ('a', 1)), ('a', ('a', 2))]
        """
        check_how(how)
        merged = self._sides(table, key, table_key, name)
        lookup = TableLookup(how)  # type: ignore[arg-type]
        aggregation = Aggregation(Count(1), rolling=True, ttl_ms=ttl_ms, step=lookup)
        return merged._rolling(aggregation, _part(name, "lookup"))

    def _sides(
        self,
        other: Stream,
        key: Callable[[Any], Any],
        other_key: Callable[[Any], Any] | None,
        name: str,
    ) -> KeyedStream:
        """Both streams tagged with their side, keyed by the payload inside, merged."""
        if not isinstance(other, Stream) or other.pipeline is not self.pipeline:
            raise PipelineError("a join needs another stream of the same pipeline")
        left = self.map(Tag(LEFT), name=_part(name, "left")).key_by(SideKey(key))
        right = other.map(Tag(RIGHT), name=_part(name, "right"))
        merged = name or _Part("join")
        return left.merge(right.key_by(SideKey(other_key or key)), name=merged)

    def sink(self, sink: Sink, *, name: str = "") -> Pipeline:
        """Send the stream through a barrier to ``sink``; returns the pipeline."""
        if not isinstance(sink, Sink):
            raise PipelineError(f"sink() needs a Sink descriptor, got {sink!r}")
        self.pipeline._add(
            Kind.SINK,
            [self.port],
            name=name,
            derived=sink.name,
            label=name or sink.name,
            endpoint=sink,
        )
        return self.pipeline


class Loop:
    """A loop under construction (`Stream.loop`): ``stream`` is its entry, and `close`
    sends a stream derived from it round again."""

    __slots__ = ("_closed", "max_rounds", "name", "pipeline", "port")

    def __init__(self, pipeline: Pipeline, port: Port, max_rounds: int, name: str) -> None:
        self.pipeline = pipeline
        self.port = port
        self.max_rounds = max_rounds
        self.name = name
        self._closed = False

    @property
    def stream(self) -> Stream:
        """The loop's entry: the stream the loop started on, and what goes round."""
        return Stream(self.pipeline, self.port)

    def close(self, again: Stream) -> None:
        """Send ``again``'s payloads round the loop once more: each becomes an item of
        ``stream`` again (the same global time, one more round)."""
        if again.pipeline is not self.pipeline:
            raise PipelineError("close() needs a stream of the loop's own pipeline")
        if self._closed:
            raise PipelineError(f"loop {self.port.node!r} is closed already")
        pipeline, loop_id = self.pipeline, self.port.node
        feedback = pipeline._add(
            Kind.FEEDBACK,
            [again.port],
            name=f"{self.name}-feedback" if self.name else "",
            derived=loop_id,
            label=self.name or loop_id,
            max_rounds=self.max_rounds,
        )
        nodes = pipeline._nodes
        at = next(i for i, node in enumerate(nodes) if node.id == loop_id)
        nodes[at] = replace(nodes[at], inputs=(*nodes[at].inputs, feedback))
        self._closed = True

    def __repr__(self) -> str:
        return f"Loop({self.pipeline.name!r}, {self.port.node!r})"


class KeyedStream(_Handle):
    """A stream of payloads tagged with keys: feed it to `group`, `aggregate`, `reduce` or
    `fold`."""

    __slots__ = ()

    def group(self, window: int, *, name: str = "") -> Stream:
        """Per key, for each payload the tuple of the last ``window`` payloads ending at it.

        Speculative: a late payload repairs the windows it changes (tombstones cancel the
        old ones before the sink's barrier), so the output equals in-order processing.
        """
        port = self.pipeline._add(Kind.GROUP, [self.port], name=name, window=window)
        return Stream(self.pipeline, port)

    def aggregate(
        self,
        window: WindowSpec,
        reduce: Callable[[Any, Any], Any] | None = None,
        *,
        fold: Callable[[Any, Any], Any] | None = None,
        initial: Any = None,
        combinable: bool = False,
        event_time: Callable[[Any], int] | None = None,
        lateness_ms: int = 0,
        updates_ms: int = 0,
        name: str = "",
    ) -> Stream:
        """Per key and window, one final `framework.core.windows.WindowResult`.

        The result's value folds the window's payloads in global-time order: ``reduce``
        pairwise, or ``fold`` from ``initial``, or the tuple of payloads if neither.
        ``combinable=True`` declares ``reduce`` associative and commutative: the Spark
        runner then pre-reduces each task's payloads per key and window pane before the
        shuffle, so one item per key crosses it instead of one per payload.

        ``event_time`` (payload -> ms since the epoch): Tumbling or Sliding windows over
        that timestamp instead of ingestion time, each final once min time is
        ``lateness_ms`` past its end. An item ingested after that, but less than
        ``updates_ms`` after, releases its window again with the updated value (an upsert
        by key and window start); later still, it goes to the dead-letter topic with
        reason ``late``, as does one whose extractor raises or returns no int
        (`framework.core.eventtime` states what is exact).

        >>> from framework.testing import ListSink, ListSource, run_local
        >>> p = Pipeline("sensors")  # (event ms, reading), ingested 0, 10, ... ms
        >>> readings = p.source(ListSource([(5, 1), (130, 2), (40, 3), (7, 4)], step_ms=10))
        >>> per_100ms = readings.key_by(lambda r: "s").aggregate(
        ...     Tumbling(100), fold=lambda n, r: n + r[1], initial=0,
        ...     event_time=lambda r: r[0], lateness_ms=20)
        >>> _ = per_100ms.sink(ListSink())
        >>> sorted((w.start_ms, w.value) for w in run_local(p).values())
        [(0, 8), (100, 2)]
        """
        if not isinstance(window, Tumbling | Sliding | Count | Session):
            raise PipelineError(
                f"aggregate() needs Tumbling, Sliding, Count or Session, got {window!r}"
            )
        aggregation = Aggregation(
            window,
            reduce,
            fold,
            initial,
            combinable,
            event_time=event_time,
            lateness_ms=lateness_ms,
            updates_ms=updates_ms,
        )
        port = self.pipeline._add(Kind.AGGREGATE, [self.port], name=name, aggregation=aggregation)
        return Stream(self.pipeline, port)

    def reduce(
        self,
        fn: Callable[[Any, Any], Any],
        *,
        every_ms: int | None = None,
        combinable: bool = False,
        ttl_ms: int | None = None,
        name: str = "",
    ) -> Stream:
        """A rolling aggregation: per key, its value so far, as `KeyValue(key, value)`.

        The value is ``fn`` folded pairwise over the key's payloads in global-time order
        (the first payload is the first value). Guarantee: exact and deterministic under
        replay; state is one value per key (plus the items min time has not yet passed),
        never the key's history. Emits, once min time passes an item, the key's value
        after it: one update per item; with ``every_ms``, one update per key and pane of
        ``every_ms`` of global time that had items (the value after the pane's last one),
        which ``combinable=True`` (``fn`` associative and commutative) lets the Spark
        runner pre-reduce before the shuffle. ``ttl_ms``: a key's value is forgotten once
        min time is ``ttl_ms`` past its last item (the next item starts afresh).

        >>> from framework.testing import ListSink, ListSource, run_local
        >>> p = Pipeline("highest")
        >>> odd_even = p.source(ListSource([3, 1, 4, 1, 5])).key_by(lambda n: n % 2)
        >>> _ = odd_even.reduce(max).sink(ListSink())
        >>> run_local(p).values()
        [KeyValue(key=1, value=3), KeyValue(key=1, value=3), KeyValue(key=0, value=4), \
KeyValue(key=1, value=3), KeyValue(key=1, value=5)]
        """
        aggregation = Aggregation(self._pane(every_ms), fn, None, None, combinable, True, ttl_ms)
        return self._rolling(aggregation, name)

    def fold(
        self,
        initial: Any,
        fn: Callable[[Any, Any], Any],
        *,
        every_ms: int | None = None,
        ttl_ms: int | None = None,
        name: str = "",
    ) -> Stream:
        """A rolling aggregation from ``initial``: per key, ``fn(value so far, payload)``.

        As `reduce`, with a start value (so the value may have another type than the
        payloads), and no pre-reduction: a fold is not known to be associative.

        >>> from framework.testing import ListSink, ListSource, run_local
        >>> p = Pipeline("counts")
        >>> words = p.source(ListSource("a rose is a rose".split())).key_by(str)
        >>> _ = words.fold(0, lambda n, _: n + 1).sink(ListSink())
        >>> [(kv.key, kv.value) for kv in run_local(p).values()]
        [('a', 1), ('rose', 1), ('is', 1), ('a', 2), ('rose', 2)]
        """
        aggregation = Aggregation(self._pane(every_ms), None, fn, initial, False, True, ttl_ms)
        return self._rolling(aggregation, name)

    def dedup(self, *, ttl_ms: int | None = None, name: str = "") -> Stream:
        """Per key, its first payload only (in global-time order), the others dropped by
        design; with ``ttl_ms``, again once min time is ``ttl_ms`` past the key's last
        payload. Exact and deterministic under replay: a payload is passed or dropped once
        min time passes it, whatever the arrival order. State: one flag per key.

        >>> from framework.testing import ListSink, ListSource, run_local
        >>> p = Pipeline("first")
        >>> clicks = p.source(ListSource(["a1", "b1", "a2", "c1", "b2"])).key_by(lambda c: c[0])
        >>> _ = clicks.dedup().sink(ListSink())
        >>> run_local(p).values()
        ['a1', 'b1', 'c1']
        """
        aggregation = Aggregation(Count(1), rolling=True, ttl_ms=ttl_ms, step=First())
        return self._rolling(aggregation, name)

    def converge(self, join: Callable[[Any, Any], Any], *, name: str = "") -> Stream:
        """Per key, the join of its payloads so far as of each payload's global time, as
        a `KeyValue` emitted whenever it grew: the keyed state a loop can hold
        (`framework.core.converge`). ``join`` must be commutative, associative and
        idempotent (``min``, set union, ``max``). Emits at once; what it emits depends on
        the arrival order, what the emissions say as of any time does not: aggregate them
        per key with the same join (``reduce(join, every_ms=...)``) to release the same
        result in every run. Not after a grouping (a join cannot take a payload back).

        >>> from framework.testing import ListSink, ListSource, run_local
        >>> p = Pipeline("lowest")
        >>> numbers = p.source(ListSource([5, 3, 8, 4, 6])).key_by(lambda n: n % 2)
        >>> _ = numbers.converge(min).sink(ListSink())
        >>> [(kv.key, kv.value) for kv in run_local(p).values()]
        [(1, 5), (1, 3), (0, 8), (0, 4)]
        """
        port = self.pipeline._add(
            Kind.CONVERGE,
            [self.port],
            name=name,
            derived=_derived(join),
            label=_label(join, name),
            fn=join,
        )
        return Stream(self.pipeline, port)

    @staticmethod
    def _pane(every_ms: int | None) -> WindowSpec:
        if every_ms is None:
            return Count(1)
        if every_ms <= 0:
            raise PipelineError(f"every_ms must be a positive number of ms, got {every_ms}")
        return Tumbling(every_ms)

    def _rolling(self, aggregation: Aggregation, name: str) -> Stream:
        port = self.pipeline._add(Kind.AGGREGATE, [self.port], name=name, aggregation=aggregation)
        return Stream(self.pipeline, port)

    def merge(self, *others: KeyedStream, name: str = "") -> KeyedStream:
        """The union of keyed streams (e.g. to group two inputs by one key: a join)."""
        if not others:
            raise PipelineError("merge() needs at least one other stream")
        ports = self._ports(others)
        return KeyedStream(self.pipeline, self.pipeline._add(Kind.MERGE, ports, name=name))
