"""``map_async``: calls in flight together up to the limit, outputs in input order, retries,
timeouts, failures as dead letters, and the graph rule that keeps it away from groupings."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from connectors import KafkaSink, KafkaSource
from framework import Pipeline
from framework.core.calls import AsyncCall, MapAsyncOp
from framework.core.graph import Kind
from framework.core.meta import Meta, Record
from framework.core.time import GlobalTime
from framework.errors import PipelineError, UserFunctionError
from framework.plan.stage_spec import StageSpec
from framework.plan.stages import plan_stages
from framework.plan.task import StageProgram
from framework.testing import InProcessRunner, ListSink, ListSource
from framework.wire.frames import read_items
from framework.wire.records import InRecord
from framework.wire.topics import Topics


def records(*values: Any) -> list[Record]:
    return [Record(Meta(GlobalTime(i, 1, i)), v) for i, v in enumerate(values)]


class Service:
    """A fake remote service: latency per call, failures on chosen payloads."""

    def __init__(self, fail_first: int = 0, always_fail: frozenset[Any] = frozenset()) -> None:
        self.in_flight = self.most_in_flight = 0
        self.calls: Counter[Any] = Counter()
        self.fail_first = fail_first
        self.always_fail = always_fail

    async def __call__(self, payload: Any) -> Any:
        self.calls[payload] += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            # Later payloads answer sooner: the answers arrive out of order.
            await asyncio.sleep(0.002 * (20 - payload % 20) if isinstance(payload, int) else 0)
            if payload in self.always_fail or self.calls[payload] <= self.fail_first:
                raise ConnectionError(f"503 for {payload}")
            return payload * 10
        finally:
            self.in_flight -= 1


def op(fn: Any, **call: Any) -> MapAsyncOp:
    return MapAsyncOp("map_async price", 7, fn, AsyncCall(**{"backoff_s": 0.0, **call}))


def test_calls_run_together_up_to_the_limit_and_outputs_keep_input_order() -> None:
    service = Service()
    outcomes = op(service, concurrency=5).apply_batch(records(*range(40)))
    assert [o[0].value for o in outcomes if isinstance(o, list)] == [i * 10 for i in range(40)]
    assert service.most_in_flight == 5
    # Each output is its input's child 0, like map's.
    first = outcomes[0]
    assert isinstance(first, list) and first[0].meta == records(0)[0].meta.child(7, 0)


def test_a_failing_call_is_retried_and_a_hopeless_one_fails_with_every_attempts_error() -> None:
    service = Service(fail_first=1, always_fail=frozenset({3}))
    mapper = op(service, retries=2)
    outcomes = mapper.apply_batch(records(1, 2, 3))
    assert [o[0].value for o in outcomes[:2] if isinstance(o, list)] == [10, 20]
    failed = outcomes[2]
    assert isinstance(failed, UserFunctionError)
    assert str(failed).count("ConnectionError('503 for 3')") == 3 and "3 attempt(s)" in str(failed)
    assert service.calls == Counter({1: 2, 2: 2, 3: 3})
    assert mapper.calls == 7 and mapper.failures == 1


def test_a_call_over_its_timeout_is_cut_and_counts_as_a_failed_attempt() -> None:
    async def slow(payload: Any) -> Any:
        await asyncio.sleep(5 if payload == "slow" else 0)
        return payload

    outcomes = op(slow, timeout_s=0.05, retries=1).apply_batch(records("quick", "slow"))
    assert outcomes[0] == [Record(records("quick")[0].meta.child(7, 0), "quick")]
    assert isinstance(outcomes[1], UserFunctionError)
    assert str(outcomes[1]).count("timed out after 0.05 s") == 2


def test_the_loop_outlives_a_batch_so_a_kept_client_stays_usable() -> None:
    loops = set()

    async def where(payload: Any) -> Any:
        loops.add(id(asyncio.get_running_loop()))
        return payload

    mapper = op(where)
    mapper.apply_batch(records(1, 2))
    mapper.apply_batch(records(3))
    assert len(loops) == 1


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"retries": -1}, "retries"),
        ({"backoff_s": 61}, "backoff_s"),
    ],
)
def test_bad_options_fail_when_the_pipeline_is_built(options: dict[str, Any], says: str) -> None:
    with pytest.raises(PipelineError, match=says):
        Pipeline("p").source(ListSource([])).map_async(Service(), **options)


def test_map_async_after_a_grouping_is_refused_with_the_fix() -> None:
    p = Pipeline("p")
    p.source(ListSource([])).key_by(str).group(2).map_async(Service()).sink(ListSink())
    with pytest.raises(PipelineError, match="call the service before the grouping"):
        p.graph()


def test_the_in_process_runner_sends_a_hopeless_item_to_the_dead_letters() -> None:
    p = Pipeline("p")
    out = ListSink()
    service = Service(fail_first=1, always_fail=frozenset({4}))
    call = p.source(ListSource([1, 2, 3, 4, 5])).map_async(service, retries=1, backoff_s=0)
    call.sink(out)
    result = p.run(InProcessRunner())
    assert sorted(result.values()) == [10, 20, 30, 50]
    (dead,) = result.dead_letters
    assert dead.payload == 4 and "2 attempt(s)" in dead.reason


def test_a_stage_task_calls_its_batch_together_and_dead_letters_what_failed() -> None:
    service = Service(always_fail=frozenset({33}))
    p = Pipeline("svc")
    p.source(ListSource([], topic="nums")).map(int).map_async(
        service, concurrency=8, retries=0
    ).map(lambda n: n + 1).sink(KafkaSink("out"))
    graph = p.graph()
    (stage,) = plan_stages(graph, {n.id: "nums" for n in graph.by_kind(Kind.SOURCE)})
    topics = {e.topic: 1 for e in stage.exits.values()}
    program = StageProgram(StageSpec(graph, stage, topics, 2, KafkaSource("nums"), False))
    inputs = [InRecord("nums", 0, i, 1_000 + i, None, str(i).encode()) for i in range(40)]
    result = program.run(inputs, None, sender=1, node_time=1)
    (sink,) = (n.id for n in graph.by_kind(Kind.SINK))
    pre = Topics("svc").pre(sink)
    out = [
        payload
        for r in result.records
        if r.topic == pre
        for _, _, payload in read_items(r.headers, r.value, "test")
    ]
    assert [int(value) for _, value, *_ in out] == [i * 10 + 1 for i in range(40) if i != 33]
    assert service.most_in_flight == 8
    (dead,) = [r for r in result.records if r.topic == Topics("svc").dlq]
    assert dead.value == b"33" and "503 for 33" in dict(dead.headers)["fp.dlq.reason"].decode()
