"""An aggregate stage task, without Kafka: windows by min time, holds, changelog, combining."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import pytest

from connectors import KafkaSink, KafkaSource
from framework import Count, Pipeline, Sliding, Tumbling
from framework.core.graph import Graph, Kind
from framework.core.windows import WindowAggregator, WindowResult
from framework.errors import PipelineError, UserFunctionError
from framework.plan.stage_spec import StageSpec
from framework.plan.stage_state import apply_changelog
from framework.plan.stages import plan_stages
from framework.plan.task import StageProgram
from framework.snapshots.units import aggregate_records
from framework.testing import ListSink, ListSource
from framework.wire.auth import signed
from framework.wire.changelog import MIN_TIME_KEY
from framework.wire.frames import FRAME_HEADERS, read_items, tick_frame
from framework.wire.records import InRecord, OutRecord
from framework.wire.topics import Topics
from unit_tests.plan.test_task import as_input, lines, xor_table

P = 2
DELTA = 10


def add(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    return (a[0], a[1] + b[1])


def counting(window: Any = None, combinable: bool = True) -> Graph:
    p = Pipeline("wa")
    (
        p.source(ListSource([], topic="lines"))
        .flat_map(lambda line: [(w, 1) for w in line.split()])
        .key_by(lambda pair: pair[0])
        .aggregate(window or Tumbling(100), reduce=add, combinable=combinable)
        .map(lambda r: (r.key, r.start_ms, r.value[1]))
        .sink(ListSink())
    )
    return p.graph()


def programs(graph: Graph) -> tuple[StageProgram, StageProgram]:
    first, second = plan_stages(graph, {n.id: "lines" for n in graph.by_kind(Kind.SOURCE)})
    topics = {e.topic: 1 for stage in (first, second) for e in stage.exits.values()}
    topics[second.topic] = P
    return (
        StageProgram(StageSpec(graph, first, topics, 2, KafkaSource("lines"))),
        StageProgram(StageSpec(graph, second, topics, 2, None)),
    )


def texts(n: int) -> list[bytes]:
    words = ["a", "b", "c", "d", "e"]
    return [" ".join(words[(i * j) % 5] for j in range(1, 4)).encode() for i in range(n)]


def results(records: Iterable[OutRecord], topic: str) -> list[Any]:
    return [
        payload
        for r in records
        if r.topic == topic
        for _, _, payload in read_items(r.headers, r.value, "t")
    ]


def tick(topic: str, partition: int) -> InRecord:
    value = tick_frame()
    return InRecord(
        topic, partition, 10_000, 0, None, value, signed(topic, None, value, FRAME_HEADERS)
    )


def run_aggregate(
    second: StageProgram, shuffled: list[OutRecord], min_time: int, states: dict[int, Any]
) -> list[OutRecord]:
    """One batch per shuffle partition (a tick where there is no data), at ``min_time``."""
    out: list[OutRecord] = []
    topic = second.spec.stage.topic
    for partition in range(P):
        mine = [r for r in shuffled if r.partition == partition]
        batch = as_input(mine, topic) or [tick(topic, partition)]
        batch = [r._replace(partition=partition) for r in batch]
        state = states.setdefault(partition, second.new_state())
        out += second.run(batch, state, 2, 1, min_time=min_time).records
    return out


def oracle(line_texts: list[bytes], size_ms: int) -> Counter[tuple[str, int]]:
    counts: Counter[tuple[str, int]] = Counter()
    for i, text in enumerate(line_texts):
        stamp = 1_000 + 10 * i  # lines() stamps
        for word in text.decode().split():
            counts[(word, stamp // size_ms * size_ms)] += 1
    return counts


@pytest.mark.parametrize("combinable", [True, False])
def test_windows_come_out_by_min_time_and_equal_the_oracle(combinable: bool) -> None:
    graph = counting(combinable=combinable)
    first, second = programs(graph)
    topics = Topics("wa")
    source_texts = texts(30)  # stamps 1000..1290: windows 1000, 1100, 1200
    one = first.run(lines(*source_texts), None, sender=1, node_time=1)
    shuffled = [r for r in one.records if r.topic == second.spec.stage.topic]
    states: dict[int, Any] = {}
    early = run_aggregate(second, shuffled, min_time=110, states=states)  # 1100 ms: first window
    pre = topics.pre("sink-output")
    assert {(w, s) for w, s, _ in results(early, pre)} == {
        (w, s) for (w, s) in oracle(source_texts, 100) if s == 1000
    }
    late = run_aggregate(second, [], min_time=200, states=states)  # a tick completes the rest
    got = Counter({(w, s): n for w, s, n in results(early + late, pre)})
    assert got == oracle(source_texts, 100)
    items = sum(len(read_items(r.headers, r.value, "t")) for r in shuffled)
    words = sum(len(t.split()) for t in source_texts)
    if combinable:
        assert items <= 3 * 5  # one partial per window and word
    else:
        assert items == words
    assert all(s.next_due() is None for s in states.values())
    # Every item sent into the aggregate was received; every hold came back; the results
    # in flight to the barrier are not acked (their commit is their receipt).
    table: dict[tuple[str, int], int] = defaultdict(int)
    for records in (one.records, early, late):
        for cell, value in xor_table(records, topics.acks).items():
            table[cell] ^= value
    assert table and all(value == 0 for value in table.values())


def test_window_results_into_a_kafka_sink_are_its_records_and_a_bad_one_fails_the_task() -> None:
    """Results into a Kafka sink are made in bulk (`KafkaSink.encode_items`): each is the
    record `encode_item` makes of it, with the result's meta; a result the sink cannot
    encode is no input record's dead letter, it fails the task."""

    def graph(key: Any) -> Graph:
        p = Pipeline("wa")
        (
            p.source(ListSource([], topic="lines"))
            .flat_map(lambda line: [(w, 1) for w in line.split()])
            .key_by(lambda pair: pair[0])
            .aggregate(Tumbling(100), reduce=add, combinable=True)
            .map(lambda r: [r.key, r.start_ms, r.value[1]])
            .sink(KafkaSink("out", key=key))
        )
        return p.graph()

    sink = KafkaSink("out", key=lambda row: row[0])
    first, second = programs(graph(sink.key))
    one = first.run(lines(*texts(30)), None, sender=1, node_time=1)
    shuffled = [r for r in one.records if r.topic == second.spec.stage.topic]
    out = run_aggregate(second, shuffled, min_time=200, states={})
    items = [
        (meta, payload)
        for r in out
        if r.topic == Topics("wa").pre("sink-out")
        for meta, _, payload in read_items(r.headers, r.value, "t")
    ]
    assert {(json.loads(p[1])[0], json.loads(p[1])[1]) for _, p in items} == set(
        oracle(texts(30), 100)
    )
    for meta, payload in items:
        assert payload == sink.encode_item(meta, json.loads(payload[1]))
    first, second = programs(graph(lambda row: row[5]))  # no such field: the key fails
    one = first.run(lines(*texts(30)), None, sender=1, node_time=1)
    shuffled = [r for r in one.records if r.topic == second.spec.stage.topic]
    with pytest.raises(UserFunctionError, match=r"after .*key function failed"):
        run_aggregate(second, shuffled, min_time=200, states={})


def rebuild(program: StageProgram, changelog: list[OutRecord]) -> WindowAggregator:
    """A fresh aggregator state from one partition's changelog records."""
    rebuilt = program.new_state()
    assert isinstance(rebuilt, WindowAggregator)
    apply_changelog(rebuilt, [(r.key, r.value) for r in changelog])
    rebuilt.take_changed()
    assert rebuilt.take_holds() == ([], [])  # holds were acked with the state
    return rebuilt


def test_the_changelog_rebuilds_state_without_emitting_a_window_twice() -> None:
    graph = counting(Sliding(200, 100), combinable=False)
    first, second = programs(graph)
    topics = Topics("wa")
    one = first.run(lines(*texts(30)), None, sender=1, node_time=1)
    shuffled = [r for r in one.records if r.topic == second.spec.stage.topic]
    states: dict[int, Any] = {}
    out = run_aggregate(second, shuffled, min_time=120, states=states)
    changelog = topics.state(second.spec.stage.id)
    for partition, live in states.items():
        assert isinstance(live, WindowAggregator)
        rebuilt = rebuild(
            second, [r for r in out if r.topic == changelog and r.partition == partition]
        )
        assert rebuilt.hold_counts == live.hold_counts and rebuilt.min_time == live.min_time == 120
        assert rebuilt.next_due() == live.next_due()
        keys = {k for k in "abcde" if live.bucket_state(k)}
        assert keys and all(rebuilt.bucket_state(k) == live.bucket_state(k) for k in keys)
        # The window ending at 1200 ms was emitted; the rebuilt state emits only later ones.
        assert [r.value.end_ms for r in rebuilt.on_min_time(200)] == [
            r.value.end_ms for r in live.on_min_time(200)
        ]
        assert all(isinstance(r.value, WindowResult) for r in rebuilt.on_min_time(300))


def test_bad_combinable_declarations_are_refused() -> None:
    with pytest.raises(PipelineError, match="combinable=True needs reduce"):
        counting(Count(3))
    p = Pipeline("g")
    with pytest.raises(PipelineError, match="retracts items with tombstones"):
        (
            p.source(ListSource([]))
            .key_by(lambda v: v)
            .group(2)
            .key_by(lambda w: w[-1])
            .aggregate(Tumbling(100), reduce=lambda a, b: a, combinable=True)
            .sink(ListSink())
        )
        p.graph().validate()


def test_count_windows_emit_full_runs_and_rebuild_from_the_changelog() -> None:
    graph = counting(Count(3), combinable=False)
    first, second = programs(graph)
    topics = Topics("wa")
    source_texts = texts(30)
    one = first.run(lines(*source_texts), None, sender=1, node_time=1)
    shuffled = [r for r in one.records if r.topic == second.spec.stage.topic]
    states: dict[int, Any] = {}
    # At 118 some keys keep a partial run below min time: free of holds, still buffered.
    early = run_aggregate(second, shuffled, min_time=118, states=states)
    changelog = topics.state(second.spec.stage.id)
    for partition, live in states.items():
        assert isinstance(live, WindowAggregator)
        mine = [r for r in early if r.topic == changelog and r.partition == partition]
        rebuilt = rebuild(second, mine)
        assert rebuilt.hold_counts == live.hold_counts and rebuilt.next_due() == live.next_due()
        # Compaction may leave the min time after the buckets: the same state results.
        reordered = second.new_state()
        assert isinstance(reordered, WindowAggregator)
        apply_changelog(reordered, sorted(((r.key, r.value) for r in mine), key=_min_last))
        assert reordered.hold_counts == live.hold_counts
        assert reordered.next_due() == live.next_due()
    assert results(early, topics.pre("sink-output")), "min time 118 completes some runs"
    late = run_aggregate(second, [], min_time=400, states=states)
    pre = topics.pre("sink-output")
    got = Counter(w for w, _, n in results(early + late, pre) if n == 3)
    words = Counter(w for t in source_texts for w in t.decode().split())
    assert got == Counter({w: n // 3 for w, n in words.items() if n >= 3})
    assert all(s.held == frozenset() for s in states.values())  # leftovers need no hold


def _min_last(record: tuple[bytes | None, bytes | None]) -> bool:
    return record[0] == MIN_TIME_KEY


def test_a_restored_window_below_the_floor_is_counted_as_replayed_not_emitted() -> None:
    """After a restore from a snapshot at slot 150, a window whose last item lies below it
    was released by the epoch before: the task counts it and sends nothing, not even a
    hold's release; a window ending later comes out."""
    _, second = programs(counting(combinable=False))
    topics = Topics("wa")
    state = second.new_state()
    assert isinstance(state, WindowAggregator)
    metas = [((120, 1, 0), (), 0, False)], [((160, 1, 1), (), 0, False)]
    apply_changelog(state, aggregate_records([("a", (metas[0], [("a", 1)], []))], 100, 150))
    state.put_bucket("b", (metas[1], [("b", 1)], []))  # as pushed in the new epoch
    out = second.run([tick(second.spec.stage.topic, 0)], state, 2, 1, min_time=200)
    assert out.replayed == 1
    assert results(out.records, topics.pre("sink-output")) == [("b", 1600, 1)]
    # Slot 160: b's result sent and its hold released; slot 120 held nothing in this epoch.
    assert set(xor_table(out.records, topics.acks)) == {("map", 160)}
