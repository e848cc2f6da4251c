"""A stage task, without Kafka: decoding, routing, acks that balance, dead letters, state."""

from __future__ import annotations

import gc
import os
import pickle
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from connectors import KafkaSink, KafkaSource
from framework import Pipeline
from framework.core.graph import Graph, Kind
from framework.core.messages import Ack
from framework.core.meta import Meta
from framework.core.ops import Keyed, key_bytes
from framework.core.time import GlobalTime
from framework.errors import ProtocolViolation, UserFunctionError
from framework.plan.stage_spec import StageSpec
from framework.plan.stage_state import apply_changelog
from framework.plan.stages import plan_stages
from framework.plan.task import StageProgram
from framework.testing import ListSink, ListSource
from framework.wire import auth
from framework.wire.auth import signed
from framework.wire.avro import decode_ack_batch, decode_meta
from framework.wire.bundles import META_HEADER
from framework.wire.frames import FRAME_HEADERS, FrameBuilder, FrameItem, read_items
from framework.wire.records import InRecord, OutRecord
from framework.wire.serde import Json, Pickle
from framework.wire.topics import Topics

P = 3


def wordcount(fail_on: str | None = None) -> Graph:
    def split(line: str) -> list[str]:
        if fail_on is not None and fail_on in line:
            raise ValueError(f"cannot split {line!r}")
        return line.split()

    p = Pipeline("wc")
    (
        p.source(ListSource([], topic="lines"))
        .flat_map(split)
        .key_by(lambda w: w)
        .group(2)
        .map(lambda window: (window[-1], len(window)))
        .sink(ListSink())
    )
    return p.graph()


def programs(graph: Graph, fail_fast: bool = False) -> tuple[StageProgram, StageProgram]:
    sources = {n.id: "lines" for n in graph.by_kind(Kind.SOURCE)}
    first, second = plan_stages(graph, sources)
    topics = {e.topic: 1 for stage in (first, second) for e in stage.exits.values()}
    topics[second.topic] = P  # the shuffle topic

    source = KafkaSource("lines")
    return (
        StageProgram(StageSpec(graph, first, topics, 2, source, fail_fast)),
        StageProgram(StageSpec(graph, second, topics, 2, None, fail_fast)),
    )


def lines(*texts: bytes) -> list[InRecord]:
    return [InRecord("lines", 0, i, 1_000 + 10 * i, None, t) for i, t in enumerate(texts)]


def as_input(records: Iterable[OutRecord], topic: str) -> list[InRecord]:
    out = [r for r in records if r.topic == topic]
    return [
        InRecord(
            r.topic,
            r.partition or 0,
            i,
            0,
            r.key,
            r.value,
            signed(r.topic, r.key, r.value, r.headers),
        )
        for i, r in enumerate(out)
    ]


def items_of(record: OutRecord) -> list[FrameItem]:
    return read_items(record.headers, record.value, "test")


def one_per_frame(records: Iterable[OutRecord], topic: str) -> list[InRecord]:
    """Every item of ``topic`` in a frame of its own, so tests can reorder items."""
    out: list[InRecord] = []
    for record in records:
        if record.topic == topic:
            for meta, ack, payload in items_of(record):
                builder = FrameBuilder(keyed=isinstance(payload, Keyed))
                builder.add(meta, ack, payload)
                (value,) = builder.frames()
                headers = signed(topic, None, value, FRAME_HEADERS)
                out.append(InRecord(topic, 0, len(out), 0, None, value, headers))
    return out


def xor_table(records: Iterable[OutRecord], acks_topic: str) -> dict[tuple[str, int], int]:
    table: dict[tuple[str, int], int] = defaultdict(int)
    for record in records:
        if record.topic == acks_topic:
            assert record.value is not None
            for message in decode_ack_batch(record.value):
                if isinstance(message, Ack):
                    table[(message.segment, message.slot)] ^= message.value
    return table


def test_source_stage_computes_global_time_and_partitions_by_key() -> None:
    graph = wordcount()
    first, _ = programs(graph)
    result = first.run(lines(b"a b", b"b"), None, sender=1, node_time=1)
    shuffle = [r for r in result.records if r.topic == Topics("wc").shuffle("group")]
    assert (result.records_in, result.items_in, result.items_out) == (2, 2, 3)
    assert len(shuffle) == len({r.partition for r in shuffle})  # one frame per partition
    keys = []
    for record in shuffle:
        assert record.key is None and record.headers == FRAME_HEADERS
        for meta, ack, keyed in items_of(record):
            assert isinstance(keyed, Keyed) and record.partition == keyed.hash % P
            assert meta.gt.slot in (100, 101) and ack != 0
            keys.append(keyed.key)
    assert sorted(keys) == ["a", "b", "b"]


def test_a_run_leaves_no_reference_cycle_for_a_collector_that_never_runs() -> None:
    """Tasks run with the cyclic collector off, and a long-running task never turns it
    back on: whatever a run leaves in a cycle (its outputs with it) would stay for good.
    Both stages, and a run whose user function raises."""
    first, second = programs(wordcount(fail_on="poison"), fail_fast=True)
    topics = Topics("wc")
    grouping = second.new_state()
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for n in range(3):
            one = first.run(lines(b"a b a", b"b c", b"a"), None, sender=1, node_time=n)
            second.run(as_input(one.records, topics.shuffle("group")), grouping, 2, n)
        with pytest.raises(UserFunctionError):
            first.run(lines(b"a poison"), None, sender=1, node_time=9)
        del one
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()


def test_acks_of_both_stages_balance_to_zero_and_sink_items_are_not_acked() -> None:
    """The barrier acks no receipt: the commit that writes an item for a sink is its
    receipt, so the stages' acks balance without the items they wrote for the sink."""
    graph = wordcount()
    first, second = programs(graph)
    topics = Topics("wc")
    one = first.run(lines(b"a b a", b"b c", b"a"), None, sender=1, node_time=1)
    grouping = second.new_state()
    two = second.run(as_input(one.records, topics.shuffle("group")), grouping, 2, 1)
    pre = [
        item for r in two.records if r.topic == topics.pre("sink-output") for item in items_of(r)
    ]
    assert len(pre) == 6 == two.items_out  # one window per word occurrence
    assert two.items_in == 6 == one.items_out
    table = xor_table([*one.records, *two.records], topics.acks)
    assert table and all(value == 0 for value in table.values())


def test_every_shard_gets_the_node_time_that_closes_the_batch() -> None:
    first, _ = programs(wordcount())
    result = first.run(lines(b"a b c d e f"), None, sender=9, node_time=4)
    batches = [r for r in result.records if r.topic == Topics("wc").acks]
    assert sorted(r.partition for r in batches) == [0, 1]
    for record in batches:
        assert record.value is not None
        closing = decode_ack_batch(record.value)[-1]
        assert (closing.node, closing.time) == (9, 4)  # type: ignore[union-attr]


def test_late_item_repairs_with_tombstones_and_changelog_rebuilds_state() -> None:
    graph = wordcount()
    first, second = programs(graph)
    topics = Topics("wc")
    one = first.run(lines(b"a", b"a", b"a"), None, sender=1, node_time=1)
    shuffled = one_per_frame(one.records, topics.shuffle("group"))
    grouping = second.new_state()
    assert grouping is not None
    in_order = second.run(shuffled[::-1][:2][::-1], grouping, 2, 1)  # items 1 and 2 first
    late = second.run(shuffled[:1], grouping, 2, 2)  # item 0 arrives late
    assert in_order.tombstones == 0 and late.tombstones >= 1
    rebuilt = second.new_state()
    assert rebuilt is not None
    changes = [
        (r.key, r.value)
        for r in [*in_order.records, *late.records]
        if r.topic == topics.state("group")
    ]
    apply_changelog(rebuilt, changes)
    assert rebuilt.bucket_state("a") == grouping.bucket_state("a")


def test_bad_records_become_dead_letters_and_the_batch_goes_on() -> None:
    first, _ = programs(wordcount(fail_on="boom"))
    result = first.run(lines(b"\xff\xfe", b"boom x", b"ok"), None, sender=1, node_time=1)
    dead = [r for r in result.records if r.topic == Topics("wc").dlq]
    assert result.dead_letters == 2 and len(dead) == 2
    assert [r.value for r in dead] == [b"\xff\xfe", b"boom x"]  # original bytes kept
    reasons = [dict(r.headers)["fp.dlq.reason"].decode() for r in dead]
    assert "undecodable" in reasons[0] and "cannot split" in reasons[1]
    assert "ValueError" in dict(dead[1].headers)["fp.dlq.traceback"].decode()
    assert result.items_out == 1


def test_fail_fast_raises_with_the_fix() -> None:
    first, _ = programs(wordcount(fail_on="boom"), fail_fast=True)
    with pytest.raises(UserFunctionError, match="fail_fast is on"):
        first.run(lines(b"boom"), None, sender=1, node_time=1)


def frame_record(builder: FrameBuilder, topic: str = "wc.group") -> InRecord:
    (value,) = builder.frames()
    return InRecord(topic, 0, 7, 0, None, value, signed(topic, None, value, FRAME_HEADERS))


def keyed_item(word: str, offset: int) -> tuple[Meta, Keyed]:
    from framework.core.ops import key_hash

    return Meta(GlobalTime(100, 1, offset)), Keyed(word, key_hash(word), [word, str(offset)])


def test_a_failing_item_of_a_frame_becomes_a_dead_letter_of_its_own() -> None:
    def pair(window: tuple[list[str], ...]) -> list[str]:
        if window[-1][1] == "1":
            raise ValueError("cannot pair item 1")
        return window[-1]

    p = Pipeline("wc")
    p.source(ListSource([], topic="lines")).key_by(lambda w: w).group(2).map(pair).sink(ListSink())
    graph = p.graph()
    _, second = plan_stages(graph, {"source-lines": "lines"})
    spec = StageSpec(graph, second, {"wc.sink-output.pre": 1}, shards=1)
    program = StageProgram(spec)
    builder = FrameBuilder(keyed=True)
    for offset, word in enumerate(["x", "y", "z"]):
        meta, keyed = keyed_item(word, offset)
        builder.add(meta, 5 + offset, keyed)
    result = program.run([frame_record(builder)], program.new_state(), 1, 1)
    (dead,) = [r for r in result.records if r.topic == Topics("wc").dlq]
    headers = dict(dead.headers)
    assert (dead.key, Pickle().loads(dead.value or b"").value) == (key_bytes("y"), ["y", "1"])
    assert b"item 1 of a frame" in headers["fp.dlq.reason"]
    assert headers["fp.dlq.offset"] == b"7"  # the frame's coordinates
    assert (result.records_in, result.items_in, result.items_out) == (1, 3, 2)


def test_a_malformed_or_unknown_frame_fails_the_task() -> None:
    graph = wordcount()
    _, second = programs(graph)
    good = FrameBuilder(keyed=True)
    meta, keyed = keyed_item("a", 1)
    good.add(meta, 3, keyed)
    record = frame_record(good)

    def resigned(bad: InRecord) -> InRecord:  # written by the pipeline, yet malformed
        plain = tuple(h for h in bad.headers if h[0] != auth.MAC_HEADER)
        return bad._replace(headers=auth.signed(bad.topic, bad.key, bad.value, plain))

    for bad, match in (
        (record._replace(headers=(("fp.frame", b"2"),)), "frame version b'2' is unknown"),
        (record._replace(value=b"garbage"), "malformed frame"),
        (record._replace(headers=()), "no fp.frame header"),
    ):
        with pytest.raises(ProtocolViolation, match=match):
            second.run([resigned(bad)], second.new_state(), 2, 1)


class _RunsACommand:
    """A pickle that would run a shell command when loaded."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("touch /tmp/flamepipe-pwned-by-a-frame",))


def test_a_frame_without_a_valid_mac_is_never_decoded_and_becomes_a_dead_letter() -> None:
    graph = wordcount()
    _, second = programs(graph)
    marker = Path("/tmp/flamepipe-pwned-by-a-frame")
    marker.unlink(missing_ok=True)
    evil = pickle.dumps((True, [_RunsACommand()]), protocol=5)
    builder = FrameBuilder(keyed=True)
    meta, keyed = keyed_item("a", 1)
    builder.add(meta, 3, keyed)
    good = frame_record(builder)
    forged_mac = auth.Keyring((b"an-attackers-key-0123456789abcdef",)).sign(
        good.topic, None, evil, FRAME_HEADERS
    )
    for bad in (
        good._replace(value=evil, headers=FRAME_HEADERS),  # no MAC at all
        good._replace(value=evil, headers=(*FRAME_HEADERS, (auth.MAC_HEADER, forged_mac))),
        good._replace(value=evil),  # the MAC of another value
    ):
        result = second.run([bad], second.new_state(), 2, 1)
        (dead,) = [r for r in result.records if r.topic == Topics("wc").dlq]
        assert b"unauthenticated" in dict(dead.headers)["fp.dlq.reason"]
        assert (result.items_in, result.items_out) == (0, 0)
    assert not marker.exists(), "a forged frame ran a command"


def test_items_for_a_kafka_sink_leave_encoded_and_unencodable_ones_are_dead_letters() -> None:
    def parse(line: str) -> object:
        return object() if line == "bad" else {"word": line, "n": len(line)}

    p = Pipeline("enc")
    sink = KafkaSink("out", value=Json(), key=lambda payload: payload["word"])
    p.source(ListSource([], topic="lines")).map(parse).sink(sink)
    graph = p.graph()
    (stage,) = plan_stages(graph, {n.id: "lines" for n in graph.by_kind(Kind.SOURCE)})
    topics = {e.topic: 1 for e in stage.exits.values()}
    program = StageProgram(StageSpec(graph, stage, topics, 2, KafkaSource("lines"), False))
    result = program.run(lines(b"ab", b"bad", b"c"), None, sender=1, node_time=1)
    (sink_node,) = (n.id for n in graph.by_kind(Kind.SINK))
    pre = [
        i for r in result.records if r.topic == Topics("enc").pre(sink_node) for i in items_of(r)
    ]
    assert [payload[:2] for _, _, payload in pre] == [
        (b"ab", b'{"n":2,"word":"ab"}'),
        (b"c", b'{"n":1,"word":"c"}'),
    ]
    # Each leaves as the barrier writes it: with its meta header and signed for the sink.
    for meta, _, (key, value, meta_bytes, mac) in pre:
        assert decode_meta(meta_bytes) == meta
        headers = ((META_HEADER, meta_bytes), (auth.MAC_HEADER, mac))
        assert auth.current().verify("out", key, value, headers)
        assert not auth.current().verify("out2", key, value, headers)
    (dead,) = [r for r in result.records if r.topic == Topics("enc").dlq]
    assert (
        dead.value == b"bad"
        and "Json cannot encode object" in dict(dead.headers)["fp.dlq.reason"].decode()
    )


def test_a_batch_behind_its_key_repairs_each_whole_history_window_once() -> None:
    # After a driver restart one upstream task's items can reach a grouping a batch
    # before another's that precede them: with a whole-history window, repairing per item
    # emitted k * s tombstones and corrections (8.6 million for a 3000-line word count).
    from framework.core.ops import key_hash

    p = Pipeline("wc")
    p.source(ListSource([], topic="lines")).key_by(lambda w: w).group(1 << 30).map(len).sink(
        ListSink()
    )
    graph = p.graph()
    _, second = plan_stages(graph, {"source-lines": "lines"})
    program = StageProgram(StageSpec(graph, second, {"wc.sink-output.pre": 1}, shards=1))
    state = program.new_state()

    def batch(slot: int, n: int) -> list[InRecord]:
        builder = FrameBuilder(keyed=True)
        for offset in range(n):
            builder.add(Meta(GlobalTime(slot, 1, offset)), 1 + offset, Keyed("x", key_hash("x"), 1))
        return [frame_record(builder)]

    later = program.run(batch(200, 30), state, 1, 1)
    earlier = program.run(batch(100, 20), state, 1, 2)
    assert (later.items_out, later.tombstones) == (30, 0)
    assert (earlier.items_in, earlier.tombstones, earlier.items_out) == (20, 30, 20 + 2 * 30)
    released = [
        (meta.tombstone, payload)
        for r in earlier.records
        if r.topic == "wc.sink-output.pre"
        for meta, _, payload in items_of(r)
    ]
    assert sorted(payload for tomb, payload in released if not tomb) == list(range(1, 51))


def test_a_sink_with_two_barriers_gets_each_item_on_its_output_partitions_barrier() -> None:
    from framework.core.ops import key_hash
    from framework.wire.bundles import output_partition

    sink = KafkaSink("counts", key=lambda word: word, partitions=4, barriers=2)
    p = Pipeline("wc")
    p.source(ListSource([], topic="lines")).key_by(lambda w: w).group(1).map(
        lambda window: window[-1]
    ).sink(sink)
    graph = p.graph()
    _, second = plan_stages(graph, {"source-lines": "lines"})
    program = StageProgram(
        StageSpec(graph, second, {"wc.sink-counts.pre": 2, "counts": 4}, shards=1)
    )
    builder = FrameBuilder(keyed=True)
    words = [f"w{i}" for i in range(40)]
    for offset, word in enumerate(words):
        builder.add(Meta(GlobalTime(7, 1, offset)), 1 + offset, Keyed(word, key_hash(word), word))
    result = program.run([frame_record(builder)], program.new_state(), 1, 1)
    seen: dict[int, set[int]] = defaultdict(set)  # pre-barrier partition -> output partitions
    for record in result.records:
        if record.topic == "wc.sink-counts.pre":
            for meta, _, (key, _value, _meta, _mac) in items_of(record):
                seen[record.partition or 0].add(output_partition(key, meta, 4))
    assert seen == {0: {0, 2}, 1: {1, 3}}


def test_a_sink_with_barriers_needs_the_partition_count_of_its_topic() -> None:
    p = Pipeline("wc")
    p.source(ListSource([], topic="lines")).map(str.upper).sink(KafkaSink("out", barriers=2))
    graph = p.graph()
    (only,) = plan_stages(graph, {"source-lines": "lines"})
    with pytest.raises(Exception, match="no partition count for out"):
        StageProgram(StageSpec(graph, only, {"wc.sink-out.pre": 2}, shards=1))
