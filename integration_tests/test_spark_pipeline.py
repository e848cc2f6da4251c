"""Pipelines on Spark against the real stack (issue: pipelines on Spark)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from framework.config import Settings
from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.oracle import pair_key, window_counts_oracle, word_pairs_oracle
from framework.demos.text import generate_lines, word_counts
from framework.demos.wordcount import rolling_counts, windowed_counts, word_pairs, wordcount
from integration_tests.harness.runs import open_transaction, produce_lines, read_output, running
from integration_tests.harness.services import ROOT, service_env


def _app(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def test_word_count_equals_the_counts_of_the_input(stack: Settings, spark: Any) -> None:
    settings = stack.with_(parallelism=2)
    app = _app("wc")
    source, sink = f"{app}-lines", f"{app}-counts"
    lines = generate_lines(400, words_per_line=6, vocabulary=60)
    with running(settings, spark, wordcount(app, source, sink)) as run:
        until = produce_lines(settings.kafka_bootstrap, source, lines, partitions=2)
        run.wait_released(until, timeout_s=120)
        items = read_output(settings.kafka_bootstrap, sink)
    oracle = word_counts(lines)
    # Exactly once: every word shows each running count 1..n once, nothing else.
    seen: dict[str, list[int]] = {}
    for word, n in items:
        seen.setdefault(word, []).append(n)
    assert {w: sorted(ns) for w, ns in seen.items()} == {
        w: list(range(1, n + 1)) for w, n in oracle.items()
    }
    assert Counter({w: max(ns) for w, ns in seen.items()}) == oracle


def test_late_partition_is_repaired_with_tombstones(stack: Settings, spark: Any) -> None:
    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("skew")
    source, sink = f"{app}-lines", f"{app}-pairs"
    texts = generate_lines(240, words_per_line=5, vocabulary=20, seed=11)
    early = [f"e{i} {t}" for i, t in enumerate(texts[:120])]
    late = [f"l{i} {t}" for i, t in enumerate(texts[120:])]
    with running(settings, spark, word_pairs(app, source, sink)) as run:
        # Partition 0 gets the early lines in a transaction held open: they are stamped
        # (global time) now, but become readable only after partition 1's later lines.
        holder = open_transaction(bootstrap, f"{app}-hold", source, early)
        # Later slots for the late lines, so their global times are surely higher.
        time.sleep(5 * DEFAULT_DELTA_MS / 1000)
        produce_lines(bootstrap, source, late, partitions=1, first=1)
        late_words = sum(len(line.split()) - 1 for line in late)
        _wait(lambda: run.stats["group"].items_in >= late_words, run)
        assert run.stats["group"].tombstones == 0
        holder.commit_transaction(30)
        until = time.time_ns() // 1_000_000
        run.wait_released(until, timeout_s=120)
        items = read_output(bootstrap, sink)
        # Counts trail what committed by up to a second (continuous stages read them from
        # the committed positions).
        deadline = time.monotonic() + 10
        while (tombstones := run.stats["group"].tombstones) == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
    released = Counter(pair_key(item) for item in items)
    assert tombstones > 0, "the late partition should have forced repairs"
    assert released == word_pairs_oracle(bootstrap, source, DEFAULT_DELTA_MS)


def test_poison_record_and_raising_function_go_to_the_dead_letter_topic(
    stack: Settings, spark: Any
) -> None:
    from confluent_kafka import Producer

    from framework.wire.dead_letters import read_dead_letter
    from framework.wire.topics import Topics

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("dlq")
    source, sink = f"{app}-lines", f"{app}-counts"
    good = generate_lines(60, words_per_line=4, vocabulary=15, seed=5)
    with running(settings, spark, wordcount(app, source, sink)) as run:
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(source, value=b"\xff\xfe not utf-8", partition=0)
        producer.produce(source, value=b"a poison line", partition=1)
        producer.flush(10)
        until = produce_lines(bootstrap, source, good, partitions=2)
        run.wait_released(until, timeout_s=120)
        items = read_output(bootstrap, sink)
        dead = read_raw(bootstrap, Topics(app).dlq)
        # Continuous stages' counts are what their tasks committed, read once a second.
        _wait(lambda: run.stats[f"source-{source}"].dead_letters >= 2, run, 10)
        stats = run.stats[f"source-{source}"]
    assert Counter({w: max(n for x, n in items if x == w) for w, _ in items}) == word_counts(good)
    assert stats.dead_letters == 2
    letters = sorted((read_dead_letter(m) for m in dead), key=lambda d: d.partition)
    assert [d.value for d in letters] == [b"\xff\xfe not utf-8", b"a poison line"]
    assert "undecodable" in letters[0].reason and letters[0].topic == source
    assert "poisoned line" in letters[1].reason and "ValueError" in letters[1].traceback
    assert all(d.stage == f"source-{source}" and d.offset == 0 for d in letters)


def _wait(condition: Any, run: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        run.check()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def read_raw(bootstrap: str, topic: str) -> list[Any]:
    from framework.kafka.clients import read_to_end

    return read_to_end(bootstrap, topic)


def test_two_groupings_in_sequence_equal_the_in_process_harness(
    stack: Settings, spark: Any
) -> None:
    from connectors import KafkaSink, KafkaSource
    from framework.demos.wordcount import two_groupings
    from framework.kafka.clients import read_to_end
    from framework.testing import InProcessRunner, ListSink, ListSource

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("two")
    source, sink = f"{app}-lines", f"{app}-out"
    lines = [f"{i} {t}" for i, t in enumerate(generate_lines(150, 5, 25, seed=2))]
    spark_pipeline = two_groupings(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    with running(settings, spark, spark_pipeline) as run:
        # Round-robin from one producer: partition i % 2, offsets in order, as ListSource does.
        until = produce_lines(bootstrap, source, lines, partitions=2)
        run.wait_released(until, timeout_s=120)
        items = read_output(bootstrap, sink)
        stages = sorted(run.stats)
    assert stages == sorted([f"source-{source}", "group", "group-2"])
    stored = sorted(read_to_end(bootstrap, source), key=lambda m: (m.offset(), m.partition()))
    stamped = [(m.timestamp()[1], (m.value() or b"").decode()) for m in stored]
    harness = two_groupings(app, ListSource.timed(stamped, partitions=2, topic=source), ListSink())
    expected = harness.run(InProcessRunner()).values()
    assert Counter(map(pair_key, items)) == Counter(map(pair_key, expected))
    assert len(items) == sum(len(line.split()) - 1 for line in lines)


def test_repairs_absorbed_by_an_aggregate_reach_a_per_slot_barrier_as_the_harness_computes(
    stack: Settings, spark: Any
) -> None:
    """A grouping repaired by a late partition, then a window aggregate: the tombstones end
    at the aggregate, so the sink's barrier buffers per slot (no matching) and its output
    equals the in-process harness's on what Kafka stored."""
    from connectors import KafkaSink, KafkaSource
    from framework.demos.wordcount import pairs_per_letter
    from framework.kafka.clients import read_to_end
    from framework.testing import InProcessRunner, ListSink, ListSource

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("absorb")
    source, sink = f"{app}-lines", f"{app}-letters"
    texts = generate_lines(200, words_per_line=5, vocabulary=20, seed=17)
    early = [f"e{i} {t}" for i, t in enumerate(texts[:100])]
    late = [f"l{i} {t}" for i, t in enumerate(texts[100:])]
    pipeline = pairs_per_letter(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    with running(settings, spark, pipeline) as run:
        assert [barrier.retracts for barrier in run.barriers()] == [False]
        holder = open_transaction(bootstrap, f"{app}-hold", source, early)
        time.sleep(5 * DEFAULT_DELTA_MS / 1000)
        produce_lines(bootstrap, source, late, partitions=1, first=1)
        late_words = sum(len(line.split()) - 1 for line in late)
        _wait(lambda: run.stats["group"].items_in >= late_words, run)
        holder.commit_transaction(30)
        run.wait_released(time.time_ns() // 1_000_000 + 1000, timeout_s=120)
        items = read_output(bootstrap, sink)
        deadline = time.monotonic() + 10
        while (tombstones := run.stats["group"].tombstones) == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
    assert tombstones > 0, "the late partition should have forced repairs"
    stored = sorted(read_to_end(bootstrap, source), key=lambda m: (m.offset(), m.partition()))
    stamped = [(m.timestamp()[1], (m.value() or b"").decode()) for m in stored]
    harness = pairs_per_letter(
        app, ListSource.timed(stamped, partitions=2, topic=source), ListSink()
    )
    expected = harness.run(InProcessRunner()).values()
    as_text = lambda rows: Counter(json.dumps(row) for row in rows)  # noqa: E731
    assert as_text(items) == as_text(expected)
    assert sum(len(row[2]) for row in items) == sum(len(text.split()) for text in texts)


def test_windowed_count_equals_the_oracle_and_crosses_the_shuffle_pre_reduced(
    stack: Settings, spark: Any
) -> None:
    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("win")
    source, sink = f"{app}-lines", f"{app}-counts"
    window_ms = 200
    lines = generate_lines(600, words_per_line=6, vocabulary=40, seed=5)
    with running(settings, spark, windowed_counts(app, source, sink, window_ms=window_ms)) as run:
        # Three bursts a window apart: several windows, each closed by min time alone
        # once input stops (the last ones by the driver's ticks).
        for burst in range(3):
            until = produce_lines(bootstrap, source, lines[burst::3], partitions=2)
            time.sleep(window_ms / 1000)
        run.wait_released(until + window_ms, timeout_s=120)
        items = read_output(bootstrap, sink)
        aggregate = run.stats["aggregate"]
        ticks = run.ticks.sent if run.ticks is not None else 0
    released = Counter({(word, start): n for word, start, n in items})
    assert len(items) == len(released), "a window was released twice"
    oracle = window_counts_oracle(bootstrap, source, window_ms)
    assert released == oracle
    assert len({start for _, start in oracle}) >= 3
    words = sum(len(line.split()) for line in lines)
    assert 0 < aggregate.items_in < words / 2, "partials, not words, cross the shuffle"
    if settings.execution == "micro-batch":  # continuous tasks find windows due themselves
        assert ticks > 0


def test_rolling_counts_on_spark_hold_one_value_per_word_and_equal_the_oracle(
    stack: Settings, spark: Any
) -> None:
    """The running count as a rolling fold: an update per occurrence, each count once."""
    settings = stack.with_(parallelism=2)
    app = _app("roll")
    source, sink = f"{app}-lines", f"{app}-counts"
    lines = generate_lines(400, words_per_line=6, vocabulary=60, seed=3)
    with running(settings, spark, rolling_counts(app, source, sink)) as run:
        until = produce_lines(settings.kafka_bootstrap, source, lines, partitions=2)
        run.wait_released(until, timeout_s=120)
        items = read_output(settings.kafka_bootstrap, sink)
    seen: dict[str, list[int]] = {}
    for word, n in items:
        seen.setdefault(word, []).append(n)
    assert {w: sorted(ns) for w, ns in seen.items()} == {
        w: list(range(1, n + 1)) for w, n in word_counts(lines).items()
    }


def test_rolling_counts_per_pane_on_spark_update_each_word_once_per_pane(
    stack: Settings, spark: Any
) -> None:
    """With ``every_ms`` and a combinable reduce: per word and pane with the word, its
    count after the pane, pre-reduced before the shuffle."""
    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("pane")
    source, sink = f"{app}-lines", f"{app}-counts"
    pane_ms = 200
    lines = generate_lines(600, words_per_line=6, vocabulary=40, seed=5)
    with running(settings, spark, rolling_counts(app, source, sink, every_ms=pane_ms)) as run:
        for burst in range(3):
            until = produce_lines(bootstrap, source, lines[burst::3], partitions=2)
            time.sleep(pane_ms / 1000)
        run.wait_released(until + pane_ms, timeout_s=120)
        items = read_output(bootstrap, sink)
        aggregate = run.stats["aggregate"]
    per_pane = window_counts_oracle(bootstrap, source, pane_ms)
    expected: dict[str, list[int]] = {}
    totals: Counter[str] = Counter()
    for (word, _start), n in sorted(per_pane.items(), key=lambda item: item[0][1]):
        totals[word] += n
        expected.setdefault(word, []).append(totals[word])
    got: dict[str, list[int]] = {}
    for word, n in items:
        got.setdefault(word, []).append(n)
    assert got == expected  # in pane order per word: the sink releases in global time
    words = sum(len(line.split()) for line in lines)
    assert 0 < aggregate.items_in < words / 2, "partials, not words, cross the shuffle"


def test_dedup_on_spark_passes_each_words_first_occurrence_as_the_harness_does(
    stack: Settings, spark: Any
) -> None:
    from connectors import KafkaSink, KafkaSource
    from framework import Pipeline
    from framework.demos.wordcount import tagged_words
    from framework.kafka.clients import read_to_end
    from framework.testing import InProcessRunner, ListSink, ListSource

    def first_lines(app: str, source: Any, sink: Any) -> Pipeline:
        p = Pipeline(app)
        p.source(source).flat_map(tagged_words).key_by(_first).dedup().sink(sink)
        return p

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("dedup")
    source, sink = f"{app}-lines", f"{app}-out"
    lines = [f"{i} {t}" for i, t in enumerate(generate_lines(300, 5, 80, seed=4))]
    with running(
        settings, spark, first_lines(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    ) as run:
        until = produce_lines(bootstrap, source, lines, partitions=2)
        run.wait_released(until, timeout_s=120)
        items = read_output(bootstrap, sink)
    stored = sorted(read_to_end(bootstrap, source), key=lambda m: (m.offset(), m.partition()))
    stamped = [(m.timestamp()[1], (m.value() or b"").decode()) for m in stored]
    harness = first_lines(app, ListSource.timed(stamped, partitions=2, topic=source), ListSink())
    expected = harness.run(InProcessRunner()).values()
    assert sorted(map(tuple, items)) == sorted(map(tuple, expected))  # type: ignore[arg-type]
    assert len(items) == len({w for line in lines for w in line.split()[1:]}), "each word once"


def _harness_of(bootstrap: str, source: str) -> Any:
    """A `ListSource` holding exactly what Kafka stored (produced round-robin over 2)."""
    from framework.kafka.clients import read_to_end
    from framework.testing import ListSource

    stored = sorted(read_to_end(bootstrap, source), key=lambda m: (m.offset(), m.partition()))
    stamped = [(m.timestamp()[1], (m.value() or b"").decode()) for m in stored]
    return ListSource.timed(stamped, partitions=2, topic=source)


def test_joins_on_spark_equal_the_in_process_harness_on_what_kafka_stored(
    stack: Settings, spark: Any
) -> None:
    """A temporal table join and a windowed join over one input: the same output as the
    harness, whatever order Spark's tasks read the two sides in."""
    from connectors import KafkaSink, KafkaSource
    from framework.demos.orders import order_lines, paired_in_windows, priced_orders
    from framework.testing import InProcessRunner, ListSink

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("join")
    source = f"{app}-in"
    builds = {"table": priced_orders, "window": paired_in_windows}
    lines = order_lines(600, items=12, seed=6)
    outputs = {}
    for kind, build in builds.items():
        pipeline = build(
            f"{app}{kind}", KafkaSource(source, partitions=2), KafkaSink(f"{app}-{kind}")
        )
        with running(settings, spark, pipeline) as run:
            if kind == "table":
                for burst in range(3):  # windows and table versions span batches
                    until = produce_lines(bootstrap, source, lines[burst::3], partitions=2)
                    time.sleep(0.2)
            run.wait_released(until + 200, timeout_s=120)
            outputs[kind] = read_output(bootstrap, f"{app}-{kind}")
    for kind, build in builds.items():
        harness = build(f"{app}{kind}", _harness_of(bootstrap, source), ListSink())
        expected = harness.run(InProcessRunner()).values()
        assert sorted(map(tuple, outputs[kind])) == sorted(map(tuple, expected)), kind  # type: ignore[arg-type]
    orders = sum(1 for line in lines if line.startswith("order"))
    assert len(outputs["table"]) == orders, "a left join passes every order once"
    assert any(price is None for _, _, price in outputs["table"])
    assert outputs["window"], "some windows hold an order and a price"


def test_session_windows_on_spark_equal_the_harness_on_what_kafka_stored(
    stack: Settings, spark: Any
) -> None:
    from connectors import KafkaSink, KafkaSource
    from framework import Pipeline, Session
    from framework.demos.wordcount import add_counts, window_count, word_ones
    from framework.testing import InProcessRunner, ListSink

    def sessions(app: str, source: Any, sink: Any) -> Pipeline:
        p = Pipeline(app)
        words = p.source(source).flat_map(word_ones).key_by(_first)
        words.aggregate(Session(300), reduce=add_counts).map(window_count).sink(sink)
        return p

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("sess")
    source, sink = f"{app}-lines", f"{app}-out"
    lines = generate_lines(240, words_per_line=4, vocabulary=30, seed=12)
    with running(
        settings, spark, sessions(app, KafkaSource(source, partitions=2), KafkaSink(sink))
    ) as run:
        for burst in range(4):  # a pause longer than the gap between bursts ends sessions
            until = produce_lines(bootstrap, source, lines[burst::4], partitions=2)
            time.sleep(0.2 if burst == 1 else 0.6)
        run.wait_released(until + 300, timeout_s=120)
        items = read_output(bootstrap, sink)
    expected = sessions(app, _harness_of(bootstrap, source), ListSink()).run(InProcessRunner())
    assert sorted(map(tuple, items)) == sorted(map(tuple, expected.values()))  # type: ignore[arg-type]
    assert sum(n for _, _, n in items) == 240 * 4, "every word in exactly one session"


@pytest.mark.parametrize("updates_ms", [0, 10_000])
def test_event_time_windows_on_spark_equal_the_harness_and_late_readings_are_dead_letters(
    stack: Settings, spark: Any, updates_ms: int
) -> None:
    """Readings 3 s late: dead letters; or, with ``updates_ms``, updates of their windows."""
    import pickle

    from connectors import KafkaSink, KafkaSource
    from framework.demos.readings import reading_lines, windowed_readings
    from framework.testing import InProcessRunner, ListSink
    from framework.wire.dead_letters import read_dead_letter
    from framework.wire.topics import Topics

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("evt")
    source, sink = f"{app}-in", f"{app}-out"
    pipeline = windowed_readings(
        app, KafkaSource(source, partitions=2), KafkaSink(sink), updates_ms=updates_ms
    )
    with running(settings, spark, pipeline) as run:
        now = time.time_ns() // 1_000_000
        produce_lines(bootstrap, source, reading_lines(200, now), partitions=2)
        time.sleep(1.0)
        now = time.time_ns() // 1_000_000
        late = reading_lines(40, now, late_ms=3_000, seed=2)  # windows final seconds ago
        until = produce_lines(bootstrap, source, late + reading_lines(60, now, seed=3), 2)
        run.wait_released(until + 600, timeout_s=120)
        items = read_output(bootstrap, sink)
        dead = [read_dead_letter(m) for m in read_raw(bootstrap, Topics(app).dlq)]
    harness = windowed_readings(
        app, _harness_of(bootstrap, source), ListSink(), updates_ms=updates_ms
    )
    expected = harness.run(InProcessRunner())
    assert sorted(map(tuple, items)) == sorted(map(tuple, expected.values()))  # type: ignore[arg-type]
    # Trusted here: the test reads its own pipeline's dead letters (pickled frame items).
    got_dead = sorted(pickle.loads(d.value or b"").value for d in dead)
    assert got_dead == sorted(d.payload for d in expected.dead_letters)
    assert all(d.reason.startswith("late:") for d in dead)
    assert len(got_dead) >= 40 if not updates_ms else not got_dead
    final: dict[tuple[str, int], int] = {}
    for sensor, start, n in items:  # an update releases a window again: the last counts
        final[(sensor, start)] = max(n, final.get((sensor, start), 0))
    assert sum(final.values()) + sum(v for _, _, v in got_dead) == sum(
        int(line.split()[2]) for line in read_lines(bootstrap, source)
    ), "every reading counted once: in a window or as a dead letter"


def read_lines(bootstrap: str, topic: str) -> list[str]:
    return [(m.value() or b"").decode() for m in read_raw(bootstrap, topic)]


def test_a_source_with_context_gives_functions_every_records_key_headers_and_place(
    stack: Settings, spark: Any
) -> None:
    from confluent_kafka import Producer

    from connectors import KafkaSink, KafkaSource
    from framework import Pipeline
    from framework.kafka.admin import ensure_topics, input_topic_spec
    from framework.kafka.clients import read_to_end

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("ctx")
    source, sink = f"{app}-in", f"{app}-out"
    ensure_topics(bootstrap, [input_topic_spec(source, 2)])
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        key = None if i % 5 == 0 else f"k{i}".encode()
        headers = [("n", str(i).encode()), ("empty", b"")] if i % 2 else []
        producer.produce(source, value=f"v{i}".encode(), key=key, partition=i % 2, headers=headers)
    producer.flush(30)
    p = Pipeline(app)
    p.source(KafkaSource(source, partitions=2, context=True)).map(_described).sink(KafkaSink(sink))
    with running(settings, spark, p) as run:
        run.wait_released(time.time_ns() // 1_000_000, timeout_s=120)
        items = read_output(bootstrap, sink)
    expected = [
        [
            (m.value() or b"").decode(),
            None if m.key() is None else m.key().decode(),
            [[name, value.decode()] for name, value in m.headers() or []],
            m.timestamp()[1],
            "LogAppendTime",
            m.topic(),
            m.partition(),
            m.offset(),
        ]
        for m in read_to_end(bootstrap, source)
    ]
    assert sorted(items) == sorted(expected) and len(items) == 40


def _described(message: Any) -> list[Any]:
    key = None if message.key is None else message.key.decode()
    headers = [[name, value.decode()] for name, value in message.headers]
    return [message.value, key, headers, *message[3:]]


def test_count_windows_on_spark_release_every_full_run_once(stack: Settings, spark: Any) -> None:
    from connectors import KafkaSink, KafkaSource
    from framework import Count, Pipeline
    from framework.demos.wordcount import add_counts, window_count, word_ones

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("cnt")
    source, sink = f"{app}-lines", f"{app}-runs"
    p = Pipeline(app)
    (
        p.source(KafkaSource(source, partitions=2))
        .flat_map(word_ones)
        .key_by(_first)
        .aggregate(Count(3), reduce=add_counts)
        .map(window_count)
        .sink(KafkaSink(sink))
    )
    lines = generate_lines(300, words_per_line=5, vocabulary=30, seed=9)
    with running(settings, spark, p) as run:
        until = produce_lines(bootstrap, source, lines, partitions=2)
        run.wait_released(until, timeout_s=120)
        items = read_output(bootstrap, sink)
    runs = Counter(word for word, _, n in items if n == 3)
    assert len(runs) and sum(runs.values()) == len(items), "every run holds three words"
    assert runs == Counter({w: n // 3 for w, n in word_counts(lines).items() if n >= 3})


def _first(pair: tuple[str, int]) -> str:
    return pair[0]


def test_a_spark_stateful_query_runs_beside_a_pipeline_in_the_same_session(
    stack: Settings, spark: Any, tmp_path: Any
) -> None:
    """flamepipe's session settings leave other Spark queries working: a windowed
    aggregation on the RocksDB state store (which needs Hadoop's LocalFileSystem) runs and
    counts right while a pipeline runs in the same session."""
    from pyspark.sql import functions as sf

    settings = stack.with_(parallelism=2)
    app = _app("nb")
    source, sink = f"{app}-lines", f"{app}-counts"
    lines = generate_lines(200, words_per_line=5, vocabulary=30, seed=5)
    with running(settings, spark, wordcount(app, source, sink)) as run:
        until = produce_lines(settings.kafka_bootstrap, source, lines, partitions=2)
        words = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
            .select(
                sf.explode(sf.split(sf.col("value").cast("string"), " ")).alias("word"), "timestamp"
            )
        )
        counts = words.groupBy(sf.window("timestamp", "1 second"), "word").count()
        query = (
            counts.writeStream.outputMode("complete")
            .format("memory")
            .queryName(f"neighbour_{app}")
            .option("checkpointLocation", str(tmp_path / "neighbour"))
            .start()
        )
        try:
            query.processAllAvailable()
            rows = spark.sql(f"SELECT word, count FROM neighbour_{app}").collect()
        finally:
            query.stop()
        run.wait_released(until, timeout_s=120)
        items = read_output(settings.kafka_bootstrap, sink)
    totals: Counter[str] = Counter()
    for row in rows:
        totals[row["word"]] += row["count"]
    assert totals == word_counts(lines)
    highest: dict[str, int] = {}
    for word, n in items:
        highest[word] = max(highest.get(word, 0), n)
    assert Counter(highest) == word_counts(lines)


def test_a_plain_consumer_sees_only_keyed_user_records_on_a_compacted_output(
    stack: Settings, spark: Any
) -> None:
    """The output topic holds the user's records and nothing else (bundle headers are on
    its bundle topic): a compacted output takes them (a keyless header record would be
    refused), a consumer that knows nothing of flamepipe reads every record with the key
    the sink set, and `BundleConsumer` still verifies every bundle."""
    from confluent_kafka import Consumer, TopicPartition

    from connectors import BundleConsumer, KafkaSink, KafkaSource
    from framework import Pipeline
    from framework.demos.wordcount import COUNT_WINDOW, running_count, strict_split
    from framework.kafka.admin import TopicSpec, compacted_spec, ensure_topics

    settings = stack.with_(parallelism=2)
    bootstrap = settings.kafka_bootstrap
    app = _app("plain")
    source, sink = f"{app}-lines", f"{app}-counts"
    ensure_topics(bootstrap, [compacted_spec(sink, 2), TopicSpec(f"{sink}.bundles", 2)])
    p = Pipeline(app)
    (
        p.source(KafkaSource(source, partitions=2))
        .flat_map(strict_split)
        .key_by(lambda word: word)
        .group(window=COUNT_WINDOW)
        .map(running_count)
        .sink(KafkaSink(sink, key=lambda pair: pair[0], partitions=2))
    )
    lines = generate_lines(300, words_per_line=5, vocabulary=40, seed=9)
    with running(settings, spark, p) as run:
        until = produce_lines(bootstrap, source, lines, partitions=2)
        run.wait_released(until, timeout_s=120)
    plain = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"plain-{app}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    records = []
    try:
        plain.assign([TopicPartition(sink, p, 0) for p in range(2)])
        ended: set[int] = set()
        deadline = time.monotonic() + 60
        while len(ended) < 2 and time.monotonic() < deadline:
            for msg in plain.consume(500, 0.2):
                if msg.error() is not None:
                    ended.add(msg.partition())
                else:
                    records.append((msg.key(), msg.value()))
    finally:
        plain.close()
    oracle = word_counts(lines)
    assert len(records) == sum(oracle.values())  # one record per occurrence, nothing else
    last: dict[bytes, int] = {}
    for key, value in records:
        word, n = json.loads(value)
        assert key == word.encode()  # keyed as the sink's key function says
        last[key] = max(last.get(key, 0), n)
    assert {k.decode(): n for k, n in last.items()} == dict(oracle)
    with BundleConsumer(bootstrap, sink, f"verify-{app}") as consumer:
        verified = [item.value for b in consumer.bundles(to_end=True) for item in b.items]
    assert sorted(map(tuple, verified)) == sorted(tuple(json.loads(v)) for _, v in records)


_STOP_MID_BATCH = """
import sys, time
from framework.config import Settings
from framework.demos.text import generate_lines
from framework.demos.wordcount import word_pairs
from framework.runners.spark.runner import SparkRunner
from integration_tests.harness.runs import produce_lines

settings = Settings.load(parallelism=2, max_batch_records=2_000)  # stages stay busy
app = sys.argv[1]
run = SparkRunner(settings).start(word_pairs(app, app + "-lines", app + "-pairs").graph())
try:
    lines = [f"{i} {t}" for i, t in enumerate(generate_lines(20_000, seed=4))]
    produce_lines(settings.kafka_bootstrap, app + "-lines", lines, partitions=2)
    while min(s.batches for s in run.stats.values()) < 2:  # every stage is mid-flow
        time.sleep(0.1)
finally:
    run.stop()
time.sleep(2)  # the stream threads end after stop returns
print("stopped", file=sys.stderr)
"""


def test_stopping_mid_batch_prints_no_jvm_stack_trace(stack: Settings, tmp_path: Any) -> None:
    """A failed batch function's message once overflowed Spark's stream thread (a regex
    over the whole Java trace): 1 024 frames of java.util.regex on stderr at a stop. The
    driver runs in a process of its own: its JVM's stderr is what a person sees."""
    env = service_env(stack, {}, FLAMEPIPE_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run(
        [sys.executable, "-c", _STOP_MID_BATCH, _app("stop")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stopped" in proc.stderr
    assert "StackOverflowError" not in proc.stderr
    assert "Exception in thread" not in proc.stderr
