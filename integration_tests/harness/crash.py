"""Crash harness: a pipeline run under SIGKILLs and stack restarts, its output checked exactly.

Everything runs as real processes on a `LocalStack` of the harness's own (free ports, its
own state directory), never the session stack of the tests:

* the Spark driver (``flamepipe run SPEC --services external``), the acker (``flamepipe
  acker``) and the barrier (``flamepipe barrier``), parallelism 2 on ``local[2]``;
* a producer thread appending generated lines at a steady rate to the source topic
  (created first, LogAppendTime);
* a chaos loop: every ``kill_every_s`` seconds, once every component is ready again, it
  kills one component with SIGKILL (its whole process session: the driver's Spark JVM and
  Python workers too) and restarts it at once; components are taken in shuffled rounds so
  each is hit. Every ``stack_every``-th event (the first at event ``stack_first``) restarts
  the broker AND ZooKeeper instead (``down()`` without purge, then ``up()``). A component
  that exits by itself is restarted too and recorded as an exit with its cause (measured:
  the driver mostly exits when Kafka goes away; the acker and the barrier mostly ride it
  out, losing and winning back their ZooKeeper leadership).

Recovery of an event, two numbers from the committed output (bundle headers):
``first output``: from the kill to the first bundle produced after it, as a read_committed
reader sees it; ``caught up``: to the first bundle whose GT_last passes the kill time (all
input appended before the kill is released).

At the end: production ends, the harness waits until the output is complete (a bundle's
GT_last passes the last input record and the item count reaches the oracle's), then
compares the read_committed output with the oracle (`word_pairs_oracle`; the in-process
harness for ``two_groupings``) as multisets, and reads it again with `BundleConsumer`
(bundle sequence rules).

By hand::

    .venv/bin/python -m integration_tests.harness.crash --records 200000 --kill-every 5 \\
        --pipeline word_pairs
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from connectors import BundleConsumer, KafkaSink
from framework.config import Settings
from framework.core.graph import Graph
from framework.core.time import GlobalTime
from framework.demos.oracle import pair_key, word_pairs_oracle
from framework.demos.text import generate_lines
from framework.errors import ProtocolViolation, StackError
from framework.kafka.admin import partition_count
from framework.kafka.clients import read_to_end
from framework.local.provision import free_port
from framework.local.stack import LocalStack
from framework.runners.assembly import source_fronts
from framework.wire.bundles import read_bundle_header
from integration_tests.harness.services import ROOT, service_env
from integration_tests.pipelines import PIPELINES, build

__all__ = [
    "COMPONENTS",
    "STACK",
    "HarnessConfig",
    "HarnessReport",
    "log_tails",
    "main",
    "run_harness",
]

COMPONENTS = ("driver", "acker", "barrier")
STACK = "stack"
"""The chaos target that restarts the broker and ZooKeeper."""

_SPECS = {name: f"integration_tests.pipelines:{name}_job" for name in PIPELINES}
# A Python exception line, not one of the JVM's or the wrappers' that only carry it.
_PYTHON_EXCEPTION = re.compile(r"^(?!pyspark\.|py4j\.|org\.|java\.)[\w.]*(Error|Exception): ")
_SETTLE_S = 30.0  # after GT_last passed the input: how long missing items may still come


@dataclass(frozen=True, slots=True)
class HarnessConfig:
    """One harness run: how much input, how fast, how much chaos.

    ``kills``: the number of chaos events (None: until the input is written; if given,
    the chaos goes on after production until that many happened). Every run restarts the
    stack at least once: if no event did before the last one, the last one does.
    """

    records: int = 20_000
    rate: float = 200.0
    kill_every_s: float = 5.0
    kills: int | None = None
    stack_first: int = 2
    stack_every: int = 8
    pipeline: str = "word_pairs"
    words_per_line: int = 4
    vocabulary: int = 200
    seed: int = 1
    complete_timeout_s: float = 600.0
    ready_timeout_s: float = 240.0


@dataclass(slots=True)
class ChaosEvent:
    """One kill (or stack restart) and how long the output took to recover from it."""

    target: str
    at_ms: int
    first_output_s: float | None = None
    caught_up_s: float | None = None


@dataclass(frozen=True, slots=True)
class Exit:
    """A component that exited by itself, with the last line it logged."""

    component: str
    code: int
    at_s: float
    last_line: str


@dataclass(slots=True)
class HarnessReport:
    """What a run measured; `ok` when the output is exactly the oracle's."""

    pipeline: str
    records: int
    expected_items: int
    output_items: int
    events: list[ChaosEvent]
    exits: list[Exit]
    duplicates: int
    lost: int
    identical: bool
    bundles_ok: bool
    bundle_error: str | None
    complete: bool
    epoch: int
    producer_replaced: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    work_dir: Path | None = None

    @property
    def ok(self) -> bool:
        """Exactly once: nothing twice, nothing lost, bundles verified."""
        return self.identical and self.duplicates == 0 and self.lost == 0 and self.bundles_ok

    def kills(self) -> Counter[str]:
        """Chaos events per target."""
        return Counter(event.target for event in self.events)

    def summary(self) -> str:
        """The human report."""
        kills = self.kills()
        exits = Counter(e.component for e in self.exits)
        lines = [
            f"crash harness: pipeline {self.pipeline}, {self.records} records, "
            f"{self.expected_items} expected items, {self.output_items} output items",
            "kills: " + ", ".join(f"{t} {kills[t]}" for t in (*COMPONENTS, STACK)),
            "exits by themselves (restarted): "
            + (", ".join(f"{c} {n}" for c, n in sorted(exits.items())) or "none"),
        ]
        for target in (*COMPONENTS, STACK):
            events = [e for e in self.events if e.target == target]
            if events:
                first = _stats([e.first_output_s for e in events])
                caught_up = _stats([e.caught_up_s for e in events])
                lines.append(f"recovery {target:<8} first output {first}; caught up {caught_up}")
        bundles = "verified" if self.bundles_ok else f"NOT verified: {self.bundle_error}"
        complete = "yes" if self.complete else "NO (timed out)"
        lines += [
            f"duplicates {self.duplicates}, lost {self.lost}, "
            f"identical {'yes' if self.identical else 'NO'}, bundles {bundles}",
            f"output complete {complete}, final epoch {self.epoch}, "
            f"input producer replaced {self.producer_replaced} times",
            "seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in self.seconds.items()),
        ]
        for e in self.exits:
            lines.append(f"  exit: {e.component} code {e.code} at {e.at_s:.0f} s: {e.last_line}")
        if self.work_dir is not None:
            lines.append(f"logs: {self.work_dir / 'logs'}")
        return "\n".join(lines)

    def tails(self, lines: int = 40) -> str:
        """The end of every log of the run (for a failing test's message)."""
        if self.work_dir is None:
            return "(no logs)"
        return log_tails(self.work_dir, lines)


def log_tails(work_dir: Path, lines: int = 40) -> str:
    """The end of every log under ``work_dir/logs``, without librdkafka's noise."""
    parts = []
    for log in sorted((work_dir / "logs").glob("*.log")):
        kept = [ln for ln in log.read_text(errors="replace").splitlines() if not ln.startswith("%")]
        parts.append(f"--- {log} ---\n" + "\n".join(kept[-lines:]))
    return "\n".join(parts)


def _stats(values: list[float | None]) -> str:
    """``p50 X s, max Y s`` of the known values (and how many never recovered)."""
    known = sorted(v for v in values if v is not None)
    missing = len(values) - len(known)
    text = f"p50 {statistics.median(known):.1f} s, max {known[-1]:.1f} s" if known else "n/a"
    return text + (f" ({missing} n/a)" if missing else "")


class _Clock:
    """Seconds since the run started, for log lines."""

    def __init__(self, log: Path) -> None:
        self.start = time.monotonic()
        self._log = log.open("a")

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.start:7.1f}s] {text}"
        print(line, file=sys.stderr, flush=True)
        self._log.write(line + "\n")
        self._log.flush()

    def close(self) -> None:
        self._log.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid`` (the components run in sessions of their own)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command: state, ppid, pgrp, session.
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(stat.parent.name))
    return pids


class Component:
    """One component process (``python -m framework.cli ...``) with its log.

    Every start appends a banner to the same log; readiness is judged on what the current
    process wrote after it.
    """

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log: Path, ready: Callable[[], bool]
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log = log
        self._ready_check = ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.started_wall = 0.0
        self._offset = 0

    def start(self) -> None:
        """Start a new process in a session of its own."""
        self.starts += 1
        with self.log.open("ab") as out:
            stamp = time.strftime("%H:%M:%S")
            out.write(f"\n=== crash harness: start #{self.starts} at {stamp} ===\n".encode())
            self._offset = out.tell()
        self.started_wall = time.time()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def exited(self) -> int | None:
        """The exit code if the process ended, else None."""
        return None if self.proc is None else self.proc.poll()

    def output(self) -> str:
        """What the current process logged so far."""
        with self.log.open("rb") as log:
            log.seek(self._offset)
            return log.read().decode(errors="replace")

    def ready(self) -> bool:
        """Running and past its start-up (see the readiness checks of `_Run`)."""
        return self.exited() is None and self._ready_check()

    def kill(self) -> None:
        """SIGKILL to the whole session, then wait for it."""
        self._signal_session(signal.SIGKILL)
        self._reap(30)

    def stop(self) -> None:
        """Ask it to stop (SIGINT: the CLI's Ctrl-C path), then SIGKILL what is left."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        self.kill()

    def _signal_session(self, signum: int) -> None:
        if self.proc is None:
            return
        for pid in _session_pids(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _reap(self, timeout_s: float) -> None:
        assert self.proc is not None
        self.proc.wait(timeout_s)
        deadline = time.monotonic() + timeout_s
        while _session_pids(self.proc.pid) and time.monotonic() < deadline:
            self._signal_session(signal.SIGKILL)
            time.sleep(0.1)

    def last_line(self) -> str:
        """Why the current process ended: its ``flamepipe: error`` line, else its last line;
        with the last Python exception it logged (a Spark task's cause) if there is one."""
        lines = [ln for ln in self.output().splitlines() if ln.strip() and not ln.startswith("%")]
        errors = [ln for ln in lines if ln.startswith("flamepipe: error")]
        found = errors or lines
        line = found[-1][:300] if found else "(nothing logged)"
        causes = [ln for ln in lines if _PYTHON_EXCEPTION.match(ln)]
        if causes and causes[-1] not in line:
            line += f" [cause: {causes[-1][:200]}]"
        return line

    def tail(self, lines: int = 40) -> str:
        """The end of the log without librdkafka's connection noise."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        kept = [ln for ln in text.splitlines() if not ln.startswith("%")]
        return "\n".join(kept[-lines:])


class InputProducer(threading.Thread):
    """Appends ``lines`` round-robin over the partitions at ``rate`` lines per second.

    Idempotent and ``acks=all``: a broker restart neither loses nor repeats a line, it
    only delays it. Measured once (librdkafka 2.16, a third broker restart): the client
    stopped delivering for good. So a client that delivers nothing for ``stall_s`` while
    lines are pending is replaced and the pending lines are sent again; a line it had in
    flight may then be stored twice. The oracle is computed from the input as Kafka
    stored it, so that changes the input, never the verdict.
    """

    def __init__(
        self, bootstrap: str, topic: str, lines: list[str], rate: float, stall_s: float = 60.0
    ) -> None:
        super().__init__(name="crash-harness-producer", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.lines = lines
        self.rate = rate
        self.stall_s = stall_s
        self.partitions = 2
        self.delivered = 0
        self.replaced = 0
        self.failed: list[str] = []
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self._halt = threading.Event()
        self._pending: set[int] = set()  # indexes handed to the client, not yet delivered
        self._last_delivery = time.monotonic()
        self._generation = 0

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by the harness, not lost in a thread
            self.error = exc
        finally:
            self.finished.set()

    def stop(self) -> None:
        """Stop producing (whatever was handed to the client is still delivered)."""
        self._halt.set()

    def _client(self) -> Producer:
        self._generation += 1
        self._last_delivery = time.monotonic()
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 600_000,
            }
        )

    def _produce(self) -> None:
        producer = self._client()
        start = time.monotonic()
        for i in range(len(self.lines)):
            if self._halt.is_set():
                break
            delay = start + i / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            producer = self._unstalled(producer)
            self._send(producer, i)
        while producer.flush(1.0) > 0 or self._pending:
            producer = self._unstalled(producer)

    def _unstalled(self, producer: Producer) -> Producer:
        """``producer``, or a new client with the pending lines if it stalled."""
        if not self._pending or time.monotonic() - self._last_delivery < self.stall_s:
            return producer
        self.replaced += 1
        print(
            f"crash harness: the input producer delivered nothing for {self.stall_s:g} s "
            f"with {len(self._pending)} lines pending: replacing it",
            file=sys.stderr,
            flush=True,
        )
        fresh = self._client()  # first: the purged lines' reports are then of an old client
        producer.purge()
        producer.poll(0)
        for index in sorted(self._pending):
            self._send(fresh, index)
        return fresh

    def _send(self, producer: Producer, index: int) -> None:
        done = functools.partial(self._done, self._generation, index)
        line, partition = self.lines[index], index % self.partitions
        self._pending.add(index)
        while True:
            try:
                producer.produce(self.topic, line.encode(), partition=partition, on_delivery=done)
                break
            except BufferError:  # the local queue is full while the broker is away
                producer.poll(0.1)
        producer.poll(0)

    def _done(self, generation: int, index: int, err: Any, _msg: Message) -> None:
        if err is None:
            self.delivered += 1
            self._pending.discard(index)
            self._last_delivery = time.monotonic()
        elif generation == self._generation:
            self._pending.discard(index)
            self.failed.append(str(err))
        # else: purged from a replaced client; the line was sent again


class OutputTail(threading.Thread):
    """Reads the output topic with read_committed as it grows: items and bundle headers.

    For each bundle it keeps when it was produced (the record's CreateTime), when this
    reader saw it, and its GT_last.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="crash-harness-tail", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.items = 0
        self.bundles: list[tuple[int, int, GlobalTime]] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"crash-harness-tail-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
                "log_level": 0,
            }
        )
        try:
            partitions = partition_count(self.bootstrap, self.topic)
            consumer.assign([TopicPartition(self.topic, p, 0) for p in range(partitions)])
            while not self._halt.is_set():
                for msg in consumer.consume(1000, timeout=0.2):
                    if msg.error() is None:
                        self._take(msg)
        finally:
            consumer.close()

    def _take(self, msg: Message) -> None:
        header = read_bundle_header(msg.headers())
        with self._lock:
            if header is None:
                self.items += 1
            else:
                self.bundles.append((msg.timestamp()[1], _now_ms(), header.gt_last))

    def stop(self) -> None:
        """Stop reading."""
        self._halt.set()

    def max_gt_last(self) -> GlobalTime | None:
        """The highest GT_last committed so far."""
        with self._lock:
            return max((gt for _, _, gt in self.bundles), default=None)

    def recovery(self, event: ChaosEvent, delta_ms: int) -> None:
        """Fill in ``event``'s recovery times from the bundles seen so far."""
        kill_slot = event.at_ms // delta_ms
        with self._lock:
            bundles = list(self.bundles)
        for created, seen, gt_last in bundles:
            if event.first_output_s is None and created >= event.at_ms:
                event.first_output_s = (seen - event.at_ms) / 1000
            if event.caught_up_s is None and gt_last.slot >= kill_slot and seen >= event.at_ms:
                event.caught_up_s = (seen - event.at_ms) / 1000


def _stack_settings(state_dir: Path) -> Settings:
    """Settings of a stack of the harness's own: free ports, ``state_dir``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FLAMEPIPE_BOOTSTRAP_SERVERS", "FLAMEPIPE_ZOOKEEPER_CONNECT")
    }
    return Settings.load(
        env=env,
        state_dir=state_dir,
        kafka_port=free_port(),
        controller_port=free_port(),
        zookeeper_port=free_port(),
    )


class _Run:
    """The state of one harness run (see the module docstring for the protocol)."""

    def __init__(self, config: HarnessConfig, work_dir: Path) -> None:
        if config.pipeline not in _SPECS:
            raise ValueError(f"pipeline {config.pipeline!r}: use one of {', '.join(_SPECS)}")
        self.config = config
        self.work = work_dir
        (work_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.clock = _Clock(work_dir / "logs" / "harness.log")
        self.rng = random.Random(config.seed)
        self.app = f"crash{uuid.uuid4().hex[:6]}"
        self.source, self.sink = f"{self.app}-lines", f"{self.app}-out"
        self.settings = _stack_settings(work_dir / "stack")
        self.stack = LocalStack(self.settings, quiet=True)
        self.state_dir = work_dir / "state"
        self.graph: Graph = build(config.pipeline, self.app, self.source, self.sink).graph()
        self.components: dict[str, Component] = {}
        self.events: list[ChaosEvent] = []
        self.exits: list[Exit] = []
        self._turns: list[str] = []
        self.producer: InputProducer | None = None
        self.tail: OutputTail | None = None

    # --- set-up -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the stack, prepare the topics, start the components and the tail."""
        self.clock.say(f"stack up in {self.settings.state_dir}")
        self.stack.up()
        bootstrap = self.settings.kafka_bootstrap
        self.clock.say(f"kafka {bootstrap}, zookeeper {self.settings.zookeeper}, app {self.app}")
        source_fronts(bootstrap, self.graph)  # creates the source topic with LogAppendTime
        sink = self.graph.node(self._sink_node()).endpoint
        assert isinstance(sink, KafkaSink)
        sink.prepare(bootstrap)  # the tail reads it from the start
        env = service_env(
            self.settings,
            {"FP_TEST_APP": self.app, "FP_TEST_SOURCE": self.source, "FP_TEST_SINK": self.sink},
            FLAMEPIPE_STATE_DIR=str(self.state_dir),
            FLAMEPIPE_PARALLELISM="2",
            FLAMEPIPE_SPARK_MASTER="local[2]",
        )
        spec = _SPECS[self.config.pipeline]
        cli = [sys.executable, "-m", "framework.cli"]
        logs = self.work / "logs"
        self.components = {
            "acker": Component(
                "acker", [*cli, "acker", spec], env, logs / "acker.log", self._said_ready("acker")
            ),
            "barrier": Component(
                "barrier",
                [*cli, "barrier", spec],
                env,
                logs / "barrier.log",
                self._said_ready("barrier"),
            ),
            "driver": Component(
                "driver",
                [*cli, "run", spec, "--services", "external"],
                env,
                logs / "driver.log",
                self._driver_ready,
            ),
        }
        for component in self.components.values():
            component.start()
        self.tail = OutputTail(bootstrap, self.sink)
        self.tail.start()

    def _sink_node(self) -> str:
        from framework.kafka.endpoints import sink_nodes

        (node,) = sink_nodes(self.graph)
        return node

    def _said_ready(self, name: str) -> Callable[[], bool]:
        """A service is ready once its current process printed ``ready (epoch N)``."""
        return lambda: "ready (epoch" in self.components[name].output()

    def _driver_ready(self) -> bool:
        """The driver is ready once Spark committed a micro-batch after its start, or (no
        input to process) once it printed its first progress line: its queries started."""
        driver = self.components["driver"]
        root = self.state_dir / "apps" / self.app
        if any(p.stat().st_mtime >= driver.started_wall for p in root.glob("e*/*/commits/[0-9]*")):
            return True
        return f"flamepipe {self.app}:" in driver.output()

    # --- the run ------------------------------------------------------------------------

    def produce(self) -> None:
        """Start the producer thread."""
        texts = generate_lines(
            self.config.records,
            self.config.words_per_line,
            self.config.vocabulary,
            self.config.seed,
        )
        lines = [f"{i} {text}" for i, text in enumerate(texts)]
        self.producer = InputProducer(
            self.settings.kafka_bootstrap, self.source, lines, self.config.rate
        )
        self.producer.start()
        self.clock.say(f"producing {len(lines)} lines at {self.config.rate:g}/s")

    def chaos(self) -> None:
        """Kill and restart until the input is written (or ``kills`` events happened)."""
        assert self.producer is not None
        wanted = self.config.kills
        next_at = time.monotonic() + self.config.kill_every_s
        while True:
            done_producing = self.producer.finished.is_set()
            if wanted is None and done_producing and self._stack_restarted():
                break
            if wanted is not None and len(self.events) >= wanted:
                break
            self.supervise()
            if time.monotonic() >= next_at and self._all_ready():
                self._strike(self._next_target())
                next_at = time.monotonic() + self.config.kill_every_s
            time.sleep(0.2)
        self.clock.say(f"chaos over after {len(self.events)} events")

    def _all_ready(self) -> bool:
        ready = all(c.ready() for c in self.components.values())
        if not ready:
            waited = time.time() - max(c.started_wall for c in self.components.values())
            if waited > self.config.ready_timeout_s:
                raise AssertionError(
                    f"components not ready {waited:.0f} s after the last start:\n" + self.tails()
                )
        return ready

    def _stack_restarted(self) -> bool:
        return any(event.target == STACK for event in self.events)

    def _next_target(self) -> str:
        assert self.producer is not None
        index = len(self.events)
        first, every = self.config.stack_first, self.config.stack_every
        due = index >= first and (index - first) % every == 0
        # At least one stack restart per run: the last event, if none came before it.
        last = self.producer.finished.is_set() or index + 1 == self.config.kills
        if due or (last and not self._stack_restarted()):
            return STACK
        if not self._turns:
            # Shuffled rounds: random order, yet every component is hit.
            self._turns = list(COMPONENTS)
            self.rng.shuffle(self._turns)
        return self._turns.pop()

    def _strike(self, target: str) -> None:
        event = ChaosEvent(target, _now_ms())
        self.events.append(event)
        if target == STACK:
            self.clock.say("restarting the broker and ZooKeeper (down without purge, up)")
            self.stack.down()
            self._stack_up()
            self.clock.say("stack up again")
            self.supervise()
            return
        component = self.components[target]
        pid = component.proc.pid if component.proc else None
        component.kill()
        component.start()
        self.clock.say(f"killed {target} (pid {pid}) with SIGKILL, restarted it")

    def _stack_up(self) -> None:
        try:
            self.stack.up()
        except StackError as exc:
            # Which process ended and how (143: SIGTERM) tells a stale handle from a crash.
            zk = getattr(self.stack.zookeeper, "_child", None)
            kafka = getattr(self.stack.kafka, "_child", None)
            self.clock.say(
                f"stack up failed: zookeeper pid {zk and zk.pid} rc {zk and zk.returncode}, "
                f"kafka pid {kafka and kafka.pid} rc {kafka and kafka.returncode}: {exc}"
            )
            raise

    def supervise(self) -> None:
        """Restart every component that exited by itself, recording the exit."""
        for component in self.components.values():
            code = component.exited()
            if code is None:
                continue
            exit_ = Exit(
                component.name,
                code,
                time.monotonic() - self.clock.start,
                component.last_line(),
            )
            self.exits.append(exit_)
            self.clock.say(f"{component.name} exited by itself ({code}): {exit_.last_line}")
            component.kill()  # what may be left of its session
            component.start()

    def finish_producing(self) -> list[Message]:
        """Wait for the producer; the input as Kafka stored it."""
        assert self.producer is not None
        while not self.producer.finished.wait(1.0):
            self.supervise()
        if self.producer.error is not None:
            raise AssertionError(f"the producer failed: {self.producer.error!r}")
        self.clock.say(
            f"input written: {self.producer.delivered} delivered, "
            f"{len(self.producer.failed)} failed {self.producer.failed[:3]}"
        )
        return read_to_end(self.settings.kafka_bootstrap, self.source, timeout_s=120)

    def await_output(self, stored: list[Message], expected_items: int) -> bool:
        """Until the output is complete (see the module docstring); False on time-out."""
        assert self.tail is not None
        last = max(
            GlobalTime.of_record(
                m.timestamp()[1], self.source, m.partition() or 0, m.offset() or 0,
                self.graph.delta_ms,
            )
            for m in stored
        )  # fmt: skip
        deadline = time.monotonic() + self.config.complete_timeout_s
        passed_at: float | None = None
        last_note = 0.0
        while time.monotonic() < deadline:
            self.supervise()
            top = self.tail.max_gt_last()
            if passed_at is None and top is not None and top >= last:
                passed_at = time.monotonic()
            if passed_at is not None and (
                self.tail.items >= expected_items or time.monotonic() - passed_at > _SETTLE_S
            ):
                self.clock.say(f"output complete: {self.tail.items} items")
                return True
            if time.monotonic() - last_note > 15:
                last_note = time.monotonic()
                self.clock.say(f"waiting for the output: {self.tail.items}/{expected_items} items")
            time.sleep(0.5)
        self.clock.say(f"output NOT complete: {self.tail.items}/{expected_items} items")
        return False

    def stop_components(self) -> None:
        """Stop every component and the tail."""
        for component in self.components.values():
            component.stop()
        if self.tail is not None:
            self.tail.stop()
            self.tail.join(10)

    def close(self) -> None:
        """Stop whatever still runs: producer, tail, components, the stack."""
        if self.producer is not None:
            self.producer.stop()
        try:
            self.stop_components()
        finally:
            self.stack.down()
            self.clock.close()

    # --- verdict ------------------------------------------------------------------------

    def expected(self, stored: list[Message]) -> Counter[str]:
        """The oracle's output for the stored input, as canonical JSON items."""
        bootstrap = self.settings.kafka_bootstrap
        if self.config.pipeline == "word_pairs":
            return word_pairs_oracle(bootstrap, self.source, self.graph.delta_ms)
        return _in_process_output(self.config.pipeline, self.app, self.source, stored)

    def output(self) -> Counter[str]:
        """The output items as a plain read_committed reader sees them."""
        return Counter(
            pair_key(json.loads(m.value() or b"null"))
            for m in read_to_end(self.settings.kafka_bootstrap, self.sink, timeout_s=120)
            if read_bundle_header(m.headers()) is None
        )

    def verified(self) -> tuple[Counter[str], str | None]:
        """The output through `BundleConsumer`, and the broken bundle rule if any."""
        items: Counter[str] = Counter()
        group = f"crash-harness-verify-{uuid.uuid4().hex}"
        try:
            with BundleConsumer(self.settings.kafka_bootstrap, self.sink, group) as consumer:
                for bundle in consumer.bundles(idle_s=10):
                    items.update(pair_key(item.value) for item in bundle.items)
        except ProtocolViolation as exc:
            return items, str(exc)
        return items, None

    def final_epoch(self) -> int:
        """The epoch the app ended in (> 0: a recovery started new epochs)."""
        from framework.runners.assembly import current_epoch

        return current_epoch(self.settings, self.app)

    def tails(self, lines: int = 40) -> str:
        """The end of every component's log."""
        return "\n".join(
            f"--- {c.name} ({c.log}) ---\n{c.tail(lines)}" for c in self.components.values()
        )


def _in_process_output(pipeline: str, app: str, source: str, stored: list[Message]) -> Counter[str]:
    """The in-process harness's output for the stored records (their exact coordinates)."""
    from framework.runners.inprocess.endpoints import SourceRecord
    from framework.testing import InProcessRunner, ListSink, ListSource

    ordered = sorted(stored, key=lambda m: (m.partition() or 0, m.offset() or 0))
    partitions = 1 + max((m.partition() or 0) for m in ordered)
    list_source = ListSource.timed([], partitions=partitions, topic=source)
    # Exact partitions and offsets as Kafka stored them, so global times are identical.
    list_source.records = tuple(
        SourceRecord(
            m.partition() or 0, m.offset() or 0, m.timestamp()[1], (m.value() or b"").decode()
        )
        for m in ordered
    )
    sink = ListSink()
    graph_pipeline = _with_endpoints(pipeline, app, list_source, sink)
    values = graph_pipeline.run(InProcessRunner()).values()
    return Counter(map(pair_key, values))


def _with_endpoints(pipeline: str, app: str, source: Any, sink: Any) -> Any:
    from framework.demos.wordcount import two_groupings

    if pipeline != "two_groupings":
        raise ValueError(f"no in-process oracle for {pipeline!r}")
    return two_groupings(app, source, sink)


def run_harness(config: HarnessConfig, work_dir: Path) -> HarnessReport:
    """One harness run in ``work_dir`` (logs under ``work_dir/logs``); see the module docstring."""
    run = _Run(config, work_dir)
    seconds: dict[str, float] = {}
    began = time.monotonic()
    try:
        run.start()
        run.produce()
        run.chaos()
        stored = run.finish_producing()
        seconds["producing"] = time.monotonic() - began
        expected = run.expected(stored)
        expected_items = sum(expected.values())
        drain = time.monotonic()
        complete = run.await_output(stored, expected_items)
        seconds["draining"] = time.monotonic() - drain
        assert run.tail is not None
        for event in run.events:
            run.tail.recovery(event, run.graph.delta_ms)
        run.stop_components()
        output = run.output()
        verified, bundle_error = run.verified()
        epoch = run.final_epoch()
    except BaseException:
        run.clock.say("harness failed; logs:\n" + run.tails())
        raise
    finally:
        run.close()
    seconds["total"] = time.monotonic() - began
    return HarnessReport(
        pipeline=config.pipeline,
        records=len(stored),
        expected_items=expected_items,
        output_items=sum(output.values()),
        events=run.events,
        exits=run.exits,
        duplicates=sum((output - expected).values()),
        lost=sum((expected - output).values()),
        identical=output == expected,
        bundles_ok=bundle_error is None and verified == output,
        bundle_error=bundle_error,
        complete=complete,
        epoch=epoch,
        producer_replaced=run.producer.replaced if run.producer else 0,
        seconds=seconds,
        work_dir=work_dir,
    )


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m integration_tests.harness.crash", description=__doc__.split("\n")[0]
    )
    defaults = HarnessConfig()
    parser.add_argument("--records", type=int, default=defaults.records)
    parser.add_argument("--rate", type=float, default=defaults.rate, help="lines per second")
    parser.add_argument("--kill-every", type=float, default=defaults.kill_every_s, metavar="S")
    parser.add_argument("--kills", type=int, help="chaos events (default: while producing)")
    parser.add_argument("--stack-every", type=int, default=defaults.stack_every)
    parser.add_argument("--pipeline", choices=sorted(_SPECS), default=defaults.pipeline)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--timeout", type=float, default=defaults.complete_timeout_s)
    parser.add_argument("--work-dir", type=Path, help="logs and state (default: a temp dir)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the harness once and print the report; 0 if the output is exactly once."""
    args = _arguments(argv)
    config = HarnessConfig(
        records=args.records,
        rate=args.rate,
        kill_every_s=args.kill_every,
        kills=args.kills,
        stack_every=args.stack_every,
        pipeline=args.pipeline,
        seed=args.seed,
        complete_timeout_s=args.timeout,
    )
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="flamepipe-crash-"))
    report = run_harness(config, work_dir)
    print(report.summary())
    if report.ok and args.work_dir is None:
        shutil.rmtree(work_dir / "stack", ignore_errors=True)  # keep the logs, not the data
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
