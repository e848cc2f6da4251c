"""A loop's stages run by hand (`StageProgram`, no Spark): the feedback's exit writes the
loop's own topic, which the loop's stage reads; acks balance once the loop has settled;
an item past ``max_rounds`` is a dead letter with the reason."""

from __future__ import annotations

from collections import defaultdict

from connectors import Json, KafkaSource
from framework.core.graph import Graph, Kind
from framework.pipeline import Pipeline
from framework.plan.stage_spec import StageSpec
from framework.plan.stage_state import StageState
from framework.plan.stages import ExitKind, plan_stages
from framework.plan.task import StageProgram
from framework.testing import ListSink, ListSource
from framework.wire.dead_letters import read_dead_letter
from framework.wire.records import InRecord, OutRecord
from framework.wire.topics import Topics
from unit_tests.plan.test_task import as_input, items_of, xor_table

Step = tuple[int, int, int]


def _step(s: Step) -> Step:
    start, value, steps = s
    return start, value // 2 if value % 2 == 0 else 3 * value + 1, steps + 1


def _collatz(max_rounds: int) -> Graph:
    p = Pipeline("collatz")
    start = p.source(ListSource([], topic="nums")).map(lambda n: (n, n, 0))
    loop = start.loop(max_rounds=max_rounds, name="steps")
    again, done = loop.stream.map(_step).broadcast(2)
    loop.close(again.filter(lambda s: s[1] != 1))
    done.filter(lambda s: s[1] == 1).map(lambda s: (s[0], s[2])).sink(ListSink())
    return p.graph()


def _steps(n: int) -> int:
    steps = 0
    while n != 1:
        n, steps = (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
    return steps


def _run(graph: Graph, numbers: list[int], partitions: int = 2) -> list[OutRecord]:
    """Every record the stages write, each stage reading its topic until nothing new comes
    (a partition's records in one batch per pass, its state kept between passes)."""
    (source_id,) = (n.id for n in graph.by_kind(Kind.SOURCE))
    stages = plan_stages(graph, {source_id: "nums"})
    topics = {
        e.topic: 1 if e.kind is ExitKind.SINK else partitions
        for s in stages
        for e in s.exits.values()
    }
    decoder = KafkaSource("nums", value=Json())
    programs = {
        s.id: StageProgram(StageSpec(graph, s, topics, 2, decoder if s.is_source else None))
        for s in stages
    }
    inputs = [
        InRecord("nums", i % 2, i // 2, 1_000 + 10 * i, None, str(n).encode())
        for i, n in enumerate(numbers)
    ]
    written = list(programs[source_id].run(inputs, None, 1, 1).records)
    pending, states = written, dict[tuple[str, int], StageState | None]()
    passes = 0
    while pending:
        passes += 1
        assert passes < 1_000, "the loop never settled"
        new: list[OutRecord] = []
        for stage in stages:
            by_partition: dict[int, list[InRecord]] = defaultdict(list)
            for record in as_input(pending, stage.topic):
                by_partition[record.partition].append(record)
            for part, records in by_partition.items():
                program = programs[stage.id]
                state = states.setdefault((stage.id, part), program.new_state())
                new += program.run(records, state, 100 + part, passes, partition=part).records
        written += new
        pending = new
    return written


def test_the_feedback_writes_the_loops_topic_and_the_acks_balance_once_settled() -> None:
    graph = _collatz(max_rounds=200)
    numbers = [6, 7, 27, 97, 3]
    written = _run(graph, numbers)
    loop = next(graph.by_kind(Kind.LOOP))
    loop_topic = Topics("collatz").shuffle(loop.id)
    fed_back = [r for r in written if r.topic == loop_topic]
    assert len(fed_back) > len(numbers), "nothing went round the loop"
    (sink,) = (s for s in plan_stages(graph, {"source-nums": "nums"}) for e in s.exits.values()
               if e.kind is ExitKind.SINK)  # fmt: skip
    pre = next(e.topic for e in sink.exits.values() if e.kind is ExitKind.SINK)
    results = [item[2] for r in written if r.topic == pre for item in items_of(r)]
    assert sorted(results) == sorted((n, _steps(n)) for n in numbers)
    table = xor_table(written, Topics("collatz").acks)
    assert table and all(value == 0 for value in table.values()), "an item still open"
    assert not [r for r in written if r.topic == Topics("collatz").dlq]


def test_an_item_past_max_rounds_is_a_dead_letter_with_the_reason() -> None:
    graph = _collatz(max_rounds=10)  # 6 takes 8 steps, 27 takes 111
    written = _run(graph, [6, 27])
    pre = next(r.topic for r in written if r.topic.endswith(".pre"))
    results = [item[2] for r in written if r.topic == pre for item in items_of(r)]
    assert results == [(6, 8)]
    letters = [read_dead_letter(_as_message(r)) for r in written if r.topic.endswith(".dlq")]
    assert len(letters) == 1 and "did not settle within 10 round(s)" in letters[0].reason
    table = xor_table(written, Topics("collatz").acks)
    assert all(value == 0 for value in table.values()), "a dead letter left an item open"


class _Message:
    """A dead-letter record as `read_dead_letter` reads a consumed one."""

    def __init__(self, record: OutRecord) -> None:
        self._record = record

    def key(self) -> bytes | None:
        return self._record.key

    def value(self) -> bytes | None:
        return self._record.value

    def headers(self) -> list[tuple[str, bytes]]:
        return list(self._record.headers)


def _as_message(record: OutRecord) -> _Message:
    return _Message(record)
