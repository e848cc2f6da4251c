"""The processes a crash-harness run starts, kills and watches: components, input, output."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from framework.config import Settings
from framework.core.time import GlobalTime
from framework.kafka.admin import partition_count
from framework.kafka.clients import take
from framework.local.provision import free_port
from framework.wire.bundles import bundles_topic, read_bundle_header
from integration_tests.harness.report import ChaosEvent
from integration_tests.harness.services import ROOT

__all__ = [
    "SETTLE_S",
    "Clock",
    "Component",
    "InputProducer",
    "OutputTail",
    "executor_kill",
    "executor_pids",
    "now_ms",
    "stack_settings",
]

_PYTHON_EXCEPTION = re.compile(r"^(?!pyspark\.|py4j\.|org\.|java\.)[\w.]*(Error|Exception): ")
SETTLE_S = 30.0  # after GT_last passed the input: how long missing items may still come


class Clock:
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


def now_ms() -> int:
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
        """Ask it to stop (SIGTERM, which the CLI turns into its Ctrl-C path), then SIGKILL
        what is left. Not SIGINT: a harness started in the background (``nohup ... &``, as
        CI does) passes SIGINT on ignored, and each service waited out the 30 s."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
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


class OutputTail(threading.Thread):
    """Reads the output topic and its bundle topic with read_committed as they grow: items
    and bundle headers.

    For each bundle it keeps when it was produced (the record's CreateTime), when this
    reader saw it, and its GT_last.

    Once (2026-11-30) this reader's consumer, assigned its partitions, read nothing more
    after a broker and ZooKeeper restart while the output grew to completion (a fresh
    read_committed reader read all of it; librdkafka's assign()ed consumers are known to
    stall after leader changes). So when nothing came for `IDLE_S` while a partition's
    committed end lies past what was read, and that end is new, the reader starts a new
    consumer at its positions and says so (`say`): ``stalls`` counts the restarts that
    brought records, which a plain restart would not have needed.
    """

    IDLE_S = 10.0

    def __init__(self, bootstrap: str, topic: str, say: Callable[[str], None] = print) -> None:
        super().__init__(name="crash-harness-tail", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.items = 0
        self.stalls = 0
        self.bundles: list[tuple[int, int, GlobalTime]] = []
        self._say = say
        self._next: dict[tuple[str, int], int] = {}  # next offset to read per partition
        self._checked: dict[tuple[str, int], int] = {}  # committed ends already looked at
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def run(self) -> None:
        partitions = partition_count(self.bootstrap, self.topic)
        for topic in (self.topic, bundles_topic(self.topic)):
            for p in range(partitions):
                self._next[(topic, p)] = 0
        consumer = self._consumer()
        try:
            idle_since = time.monotonic()
            restarted = False
            while not self._halt.is_set():
                # `take`: consume(1000, 0.2) waits out the 0.2 s unless 1 000 messages come,
                # which added up to 0.2 s to every recovery time measured here.
                taken = [m for m in take(consumer, 1000, 0.2) if m.error() is None]
                for msg in taken:
                    self._take(msg)
                    self._next[(str(msg.topic()), msg.partition() or 0)] = (msg.offset() or 0) + 1
                if taken:
                    if restarted:
                        self.stalls += 1
                        self._say(f"tail: the new consumer read {len(taken)} records: a stall")
                    idle_since, restarted = time.monotonic(), False
                elif time.monotonic() - idle_since >= self.IDLE_S:
                    idle_since = time.monotonic()  # the next look in IDLE_S
                    if self._behind(consumer):
                        consumer.close()
                        consumer, restarted = self._consumer(), True
        finally:
            consumer.close()

    def _consumer(self) -> Consumer:
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
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in self._next.items()])
        return consumer

    def _behind(self, consumer: Consumer) -> bool:
        """Whether a partition's committed end is past what was read and not looked at
        before (an end that only markers or aborted records fill stays put)."""
        behind = []
        for (topic, p), taken_to in self._next.items():
            tp = TopicPartition(topic, p)
            try:
                _, end = consumer.get_watermark_offsets(tp, 5, cached=False)
                # The position steps over a transaction's commit marker, which takes an
                # offset of its own after the last record and is never delivered.
                (at,) = consumer.position([tp])
            except KafkaException:
                return False  # the broker is away: nothing to tell yet
            next_offset = max(taken_to, at.offset)
            if end > next_offset and self._checked.get((topic, p)) != end:
                self._checked[(topic, p)] = end
                behind.append(f"{topic}[{p}] at {next_offset} of {end}")
        if behind:
            where = ", ".join(behind)
            self._say(f"tail: nothing read for {self.IDLE_S:.0f} s, {where}: a new consumer")
        return bool(behind)

    def _take(self, msg: Message) -> None:
        with self._lock:
            if msg.topic() == self.topic:
                self.items += 1
            else:
                header = read_bundle_header(msg.value())
                self.bundles.append((msg.timestamp()[1], now_ms(), header.gt_last))

    def stop(self) -> None:
        """Stop reading."""
        self._halt.set()

    def produced_since(self, at_ms: int) -> bool:
        """Whether a bundle produced at or after ``at_ms`` was read."""
        with self._lock:
            return any(created >= at_ms for created, _, _ in self.bundles)

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


def executor_pids(state_dir: Path) -> list[int]:
    """Executor JVMs the workers of the stack in ``state_dir`` launched (their working
    directory lies under it)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmdline and state_dir.resolve() in cwd.parents:
            found.append(int(proc.name))
    return sorted(found)


def executor_kill(pid: int) -> None:
    """SIGKILL to one executor JVM (its Python workers die with their pipes)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def stack_settings(state_dir: Path) -> Settings:
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
