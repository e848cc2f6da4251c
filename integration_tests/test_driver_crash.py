"""Killing the driver (kill -9) mid-run loses nothing and duplicates nothing.

The driver process holds the Spark driver, the acker and the barrier. After each kill a
new driver resumes from the same checkpoints: Spark re-runs unfinished micro-batches, whose
tasks find their commit markers; the acker rebuilds from the acks topic; the barrier
recovers GT_last from the output topic. The output, read with read_committed, must equal
the oracle exactly.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from framework.config import Settings
from framework.demos.oracle import window_counts_oracle
from framework.demos.text import generate_lines, word_counts
from framework.testing import InProcessRunner, ListSink, ListSource
from framework.wire.topics import Topics
from integration_tests.harness.driver_main import WINDOW_MS, stateful_names
from integration_tests.harness.runs import (
    assert_running_counts,
    new_app,
    produce_lines,
    read_output,
)

ROOT = Path(__file__).resolve().parents[1]


def _driver(
    stack: Settings,
    state: Path,
    app: str,
    source: str,
    sink: str,
    *extra: str,
    shared: Path | None = None,
) -> subprocess.Popen[str]:
    """A driver process; with ``shared``, its checkpoints and snapshots live there (storage
    that drivers on several hosts see), not in ``state``. Stages are split unless the
    driver fuses them itself (``stateful``)."""
    cmd = [sys.executable, "-m", "integration_tests.harness.driver_main"]
    cmd += [stack.kafka_bootstrap, stack.zookeeper, str(state), app, source, sink, *extra]
    env = dict(os.environ)
    env["FLAMEPIPE_FUSE_STAGES"] = "false"
    if shared is not None:
        env["FLAMEPIPE_CHECKPOINT_URI"] = (shared / "checkpoints").as_uri()
        env["FLAMEPIPE_SNAPSHOT_DIR"] = str(shared / "snapshots")
    # stderr (Spark, flamepipe) goes to the driver.log that a failure prints; every
    # restart appends to it.
    with (state / "driver.log").open("ab") as log:
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
            start_new_session=True,
        )  # fmt: skip


def _await_running(proc: subprocess.Popen[str], timeout_s: float = 120) -> None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, "the driver did not start in time"
    assert proc.stdout.readline().strip() == "running", "the driver died on start"


def _kill(proc: subprocess.Popen[str]) -> None:
    # The whole session: the Python driver, its Spark JVM and Python workers.
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _ack_records(bootstrap: str, topic: str) -> int:
    """The records on ``topic`` now. A fresh client may not know the topic's partitions
    yet on a loaded broker (``_UNKNOWN_PARTITION``): asked again, a few times."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        for attempt in range(5):
            try:
                return sum(
                    high - low
                    for p in range(2)
                    for low, high in [consumer.get_watermark_offsets(_tp(topic, p), timeout=10)]
                )
            except KafkaException:
                if attempt == 4:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")
    finally:
        consumer.close()


def _tp(topic: str, partition: int) -> object:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition)


@contextlib.contextmanager
def _killed_twice(
    stack: Settings, state: Path, app: str, source: str, sink: str, *, kind: str,
    bursts: Callable[[int], dict[str, list[str]]], apps: list[str],
) -> Iterator[None]:  # fmt: skip
    """A ``kind`` driver fed three bursts of ``bursts(n)`` lines (source topic -> lines),
    killed with kill -9 after each of the first two once every one of ``apps`` made
    progress on it, and restarted; the last one runs until the block ends."""
    bootstrap = stack.kafka_bootstrap
    driver = _driver(stack, state, app, source, sink, kind)
    kills = 0
    try:
        _await_running(driver)
        for burst in range(3):
            for topic, lines in bursts(burst).items():
                produce_lines(bootstrap, topic, lines, partitions=2)
            starts = {a: _ack_records(bootstrap, Topics(a).acks) for a in apps}
            deadline = time.monotonic() + 120
            while any(_ack_records(bootstrap, Topics(a).acks) == n for a, n in starts.items()):
                assert time.monotonic() < deadline, "no progress before the kill"
                time.sleep(0.05)
            if burst < 2:
                _kill(driver)
                kills += 1
                driver = _driver(stack, state, app, source, sink, kind)
                _await_running(driver)
        yield
    finally:
        _kill(driver)
    assert kills == 2


@contextlib.contextmanager
def _driver_log_on_failure(log: Path, apps: list[str]) -> Iterator[None]:
    """A failure inside says what the driver log says of each of ``apps``: its last
    progress line, and every error, traceback and restart line, so a stall or a loss on a
    loaded machine can be told apart from the one assertion's diff (cut short)."""
    try:
        yield
    except AssertionError as exc:
        text = log.read_text(errors="replace") if log.exists() else ""
        lines = text.splitlines()
        last = {
            a: next((ln for ln in reversed(lines) if f"flamepipe {a}:" in ln), "-") for a in apps
        }
        marks = ("ERROR", "Traceback", "flamepipe restart", "Error:")
        errors = [ln for ln in lines if any(m in ln for m in marks)][-40:]
        digest = "\n".join([*(f"{a}: {ln[:700]}" for a, ln in last.items()), *errors])
        raise AssertionError(f"{str(exc)[:2000]}\ndriver log:\n{digest}") from exc


def _output_until(bootstrap: str, sink: str, count: int) -> list[list[object]]:
    """The output once it has ``count`` items (or after 240 s), read again 3 s later so a
    duplicate would show."""
    deadline = time.monotonic() + 240
    items = read_output(bootstrap, sink)
    while time.monotonic() < deadline and len(items) < count:
        time.sleep(1)
        items = read_output(bootstrap, sink)
    time.sleep(3)
    return read_output(bootstrap, sink)


def _wait_for_output(
    bootstrap: str, sink: str, lines: list[str], until: int, log: Path
) -> list[object]:
    total = sum(word_counts(lines).values())
    deadline = time.monotonic() + 240
    items: list[object] = []
    while time.monotonic() < deadline:
        items = read_output(bootstrap, sink)
        if len(items) >= total:
            return items
        time.sleep(2)
    text = log.read_text(errors="replace") if log.exists() else f"(no log at {log})"
    tail = "\n".join(line for line in text.splitlines() if "WARN" not in line)[-3000:]
    raise AssertionError(
        f"only {len(items)} of {total} items released (input until {until}); driver log:\n{tail}"
    )


def test_driver_killed_mid_run_stateful_pipelines_are_exactly_once(
    stack: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six pipelines in one driver, killed -9 twice mid-run, each from its own input in
    bursts (so state spans the kills): the running word count (a whole-history grouping:
    every word's count at each occurrence); a combinable windowed count (state, holds and
    ticks);
    a table join (each order priced as of the order, exactly as the in-process harness
    prices what Kafka stored); event-time windows over producer-stamped readings, some
    ingested too late (every window once, every late reading one dead letter, as the
    harness computes them); and the windowed and running counts again with stages fused
    (docs/decisions/fused-stages.md). On micro-batches: six pipelines' continuous tasks
    starting at once (each with its producer, consumers and heartbeats) overload this
    two-core machine's broker; the windowed count, the join and the event-time windows
    are killed twice on continuous stages in `test_continuous.py`."""
    from framework.kafka.clients import read_to_end

    monkeypatch.setenv("FLAMEPIPE_EXECUTION", "micro-batch")
    from framework.wire.dead_letters import read_dead_letter

    run = uuid.uuid4().hex[:6]
    app, source, sink = f"scrash{run}", f"scrash{run}-in", f"scrash{run}-out"
    names = stateful_names(app, source, sink)
    (w_app, w_in, w_out), (j_app, j_in, j_out), (e_app, e_in, e_out), (c_app, c_in, c_out) = (
        names[k] for k in ("windowed", "joined", "eventtime", "counted")
    )
    (wf_app, wf_in, wf_out), (cf_app, cf_in, cf_out) = (
        names[k] for k in ("windowed-fused", "counted-fused")
    )
    bootstrap = stack.kafka_bootstrap
    words = generate_lines(3000, words_per_line=6, vocabulary=80, seed=4)
    counted_lines = generate_lines(3000, words_per_line=6, vocabulary=80, seed=3)
    orders, joined_and_timed = _bursts_of_orders_and_readings(j_in, e_in)

    def burst(n: int) -> dict[str, list[str]]:
        return {
            w_in: words[n::3],
            **joined_and_timed(n),
            c_in: counted_lines[n::3],
            wf_in: words[n::3],
            cf_in: counted_lines[n::3],
        }

    apps = [w_app, j_app, e_app, c_app, wf_app, cf_app]
    log = tmp_path / "driver.log"
    with _driver_log_on_failure(log, apps):
        with _killed_twice(
            stack, tmp_path, app, source, sink, kind="stateful", bursts=burst, apps=apps
        ):
            windows = window_counts_oracle(bootstrap, w_in, WINDOW_MS)
            counted = _output_until(bootstrap, w_out, len(windows))
            priced = _output_until(
                bootstrap, j_out, sum(1 for o in orders if o.startswith("order"))
            )
            harness = _event_time_harness(bootstrap, e_app, e_in)
            sums = _output_until(bootstrap, e_out, len(harness.values()))
            dead = [read_dead_letter(m) for m in read_to_end(bootstrap, Topics(e_app).dlq)]
            total = sum(word_counts(counted_lines).values())
            running = {out: _output_until(bootstrap, out, total) for out in (c_out, cf_out)}
            fused_windows = window_counts_oracle(bootstrap, wf_in, WINDOW_MS)
            fused_counted = _output_until(bootstrap, wf_out, len(fused_windows))
        # The running count: every word's count at each of its occurrences, once.
        for items in running.values():
            assert_running_counts(items, counted_lines)
        # The windowed count, fused: every window once.
        released = Counter({(str(w), int(str(s))): int(str(n)) for w, s, n in fused_counted})
        assert len(fused_counted) == len(released), "a fused window was released twice"
        assert released == fused_windows
        # Windowed counts: every window once.
        released = Counter({(str(w), int(str(s))): int(str(n)) for w, s, n in counted})
        assert len(counted) == len(released), "a window was released twice"
        assert released == windows
        _assert_priced(bootstrap, j_app, j_in, priced)
        _assert_event_time(harness, sums, dead)


def _bursts_of_orders_and_readings(
    j_in: str, e_in: str
) -> tuple[list[str], Callable[[int], dict[str, list[str]]]]:
    """The orders, and the bursts of the join's and the event-time windows' input: a
    third of the orders, 600 readings now and 200 ingested 5 s late."""
    from framework.demos.orders import order_lines
    from framework.demos.readings import reading_lines

    orders = order_lines(3000, items=30, seed=9)

    def burst(n: int) -> dict[str, list[str]]:
        now = time.time_ns() // 1_000_000
        readings = reading_lines(600, now, seed=n)
        readings += reading_lines(200, now, late_ms=5_000, seed=10 + n)
        return {j_in: orders[n::3], e_in: readings}

    return orders, burst


def _event_time_harness(bootstrap: str, e_app: str, e_in: str) -> Any:
    """The in-process harness's run of the event-time windows over what Kafka stored."""
    from framework.demos.readings import windowed_readings

    return windowed_readings(e_app, _stored(bootstrap, e_in), ListSink()).run(InProcessRunner())


def _assert_priced(bootstrap: str, j_app: str, j_in: str, priced: list[Any]) -> None:
    """The table join: each order priced as the in-process harness prices what Kafka
    stored."""
    from framework.demos.orders import priced_orders

    expected = priced_orders(j_app, _stored(bootstrap, j_in), ListSink()).run(InProcessRunner())
    _assert_same("priced orders", Counter(map(str, priced)), Counter(map(str, expected.values())))


def _assert_event_time(harness: Any, sums: list[Any], dead: list[Any]) -> None:
    """Event-time windows and late letters. Trusted here: the test reads its own
    pipeline's dead letters (pickled frame items)."""
    import pickle

    _assert_same("event-time sums", Counter(map(str, sums)), Counter(map(str, harness.values())))
    letters = Counter(str(pickle.loads(d.value or b"").value) for d in dead)
    assert letters == Counter(str(d.payload) for d in harness.dead_letters)
    assert sum(letters.values()) >= 600 and all(d.reason.startswith("late:") for d in dead)


def _assert_same(what: str, got: Counter[str], expected: Counter[str]) -> None:
    """``got == expected``, or an error that says how many are missing or extra, with a
    few of each (a short message the driver log's digest can follow)."""
    if got != expected:
        missing, extra = expected - got, got - expected
        raise AssertionError(
            f"{what}: {got.total()} released, {expected.total()} expected; "
            f"{missing.total()} missing, e.g. {list(missing)[:3]}; "
            f"{extra.total()} extra, e.g. {list(extra)[:3]}"
        )


def _stored(bootstrap: str, source: str) -> ListSource:
    """A `ListSource` of what Kafka stored, produced round-robin over two partitions."""
    from framework.kafka.clients import read_to_end

    stored = sorted(read_to_end(bootstrap, source), key=lambda m: (m.offset(), m.partition()))
    stamped = [(m.timestamp()[1], (m.value() or b"").decode()) for m in stored]
    return ListSource.timed(stamped, partitions=2, topic=source)


def _checkpoint_state(shared: Path) -> tuple[set[str], set[str]]:
    """The run ids and the micro-batch offset files of every query checkpointed there."""
    root = shared / "checkpoints"
    ids = {p.read_text().strip() for p in root.rglob("flamepipe-run-id")}
    offsets = {str(p.relative_to(root)) for p in root.rglob("offsets/*") if p.name.isdigit()}
    return ids, offsets


def test_a_driver_restarted_on_another_host_resumes_from_shared_checkpoints(
    stack: Settings, tmp_path: Path
) -> None:
    """Checkpoints under ``checkpoint_uri`` and snapshots under ``snapshot_dir`` on shared
    storage: the driver killed on "host A" (a state directory of its own) restarts on
    "host B" (another, empty one) and resumes the same queries; nothing is lost or doubled."""
    app, source, sink = new_app("moved", "counts")
    bootstrap = stack.kafka_bootstrap
    host_a, host_b, shared = tmp_path / "host-a", tmp_path / "host-b", tmp_path / "shared"
    for directory in (host_a, host_b, shared):
        directory.mkdir()
    lines = generate_lines(2000, words_per_line=6, vocabulary=80, seed=5)
    driver = _driver(stack, host_a, app, source, sink, shared=shared)
    try:
        _await_running(driver)
        until = produce_lines(bootstrap, source, lines, partitions=2)
        start = _ack_records(bootstrap, Topics(app).acks)
        deadline = time.monotonic() + 120
        while _ack_records(bootstrap, Topics(app).acks) == start:
            assert time.monotonic() < deadline, "no progress before the kill"
            time.sleep(0.05)
        _kill(driver)
        ids_before, offsets_before = _checkpoint_state(shared)
        driver = _driver(stack, host_b, app, source, sink, shared=shared)
        _await_running(driver)
        items = _wait_for_output(bootstrap, sink, lines, until, host_b / "driver.log")
    finally:
        _kill(driver)
    ids_after, offsets_after = _checkpoint_state(shared)
    assert ids_before and ids_after == ids_before, "host B started new checkpoints"
    if Settings.load().execution == "micro-batch":  # continuous stages keep no offset files
        assert offsets_before < offsets_after, "host B did not continue the shared checkpoints"
    assert not list(host_b.rglob("offsets")), "host B checkpointed to its own disk"
    assert_running_counts(items, lines)
