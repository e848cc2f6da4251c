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
harness for the others) as multisets, and reads it again with `BundleConsumer`
(bundle sequence rules).

By hand::

    .venv/bin/python -m integration_tests.harness.crash --records 200000 --kill-every 5 \\
        --pipeline word_pairs
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Message

from connectors import BundleConsumer, KafkaSink
from framework.core.graph import Graph
from framework.core.time import GlobalTime
from framework.demos.components import components_oracle
from framework.demos.oracle import pair_key, stored_edges, word_pairs_oracle
from framework.demos.text import generate_lines
from framework.errors import ProtocolViolation, StackError
from framework.kafka.clients import read_to_end
from framework.kafka.lifts import read_lifts
from framework.local.provision import free_port
from framework.local.stack import LocalStack
from framework.runners.assembly import source_fronts
from framework.runners.keys import install_keys
from framework.wire.lifts import Lift, LiftIndex
from integration_tests.harness.processes import (
    SETTLE_S,
    Clock,
    Component,
    InputProducer,
    OutputTail,
    executor_kill,
    executor_pids,
    now_ms,
    stack_settings,
)
from integration_tests.harness.report import (
    BROKER,
    EXECUTOR,
    STACK,
    TARGETS,
    ZOOKEEPER,
    ChaosEvent,
    Exit,
    HarnessConfig,
    HarnessReport,
)
from integration_tests.harness.services import service_env
from integration_tests.pipelines import COMPONENTS_PANE_MS, PIPELINES, build

__all__ = ["main", "run_harness"]

_SPECS = {name: f"integration_tests.pipelines:{name}_job" for name in PIPELINES}
_STANDBY = "-standby"


def edge_lines(count: int, vertices: int, seed: int) -> list[str]:
    """``count`` random edges over ``vertices`` vertices as JSON pairs: below one edge
    per vertex, components stay small (no giant one to flood on every merge)."""
    rng = random.Random(seed)
    return [json.dumps([rng.randrange(vertices), rng.randrange(vertices)]) for _ in range(count)]


def _leads(output: str) -> bool:
    """Whether a service's log says it leads: ready since its last step back to standby."""
    return output.rfind("ready (epoch") > output.rfind("standing by again")


class _Run:
    """The state of one harness run (see the module docstring for the protocol)."""

    def __init__(self, config: HarnessConfig, work_dir: Path) -> None:
        if config.pipeline not in _SPECS:
            raise ValueError(f"pipeline {config.pipeline!r}: use one of {', '.join(_SPECS)}")
        self.config = config
        self.work = work_dir
        (work_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.clock = Clock(work_dir / "logs" / "harness.log")
        self.rng = random.Random(config.seed)
        self.app = f"crash{uuid.uuid4().hex[:6]}"
        self.source, self.sink = f"{self.app}-lines", f"{self.app}-out"
        self.settings = stack_settings(work_dir / "stack")
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
        if self.config.cluster:
            # Ports chosen only now: one picked before Kafka started may be a client's.
            # Continuous stages hold a task slot per long-running task: 12 on 2 workers.
            cores = 6 if self.config.execution == "continuous" else 1
            self.settings = self.settings.with_(
                spark_master_port=free_port(), spark_workers=2, spark_worker_cores=cores
            )
            self.stack = LocalStack(self.settings, quiet=True)
            self.stack.up()
            self.clock.say(
                f"spark standalone master {self.stack.master_url}, 2 workers of {cores} slots"
            )
        local = "local[4]" if self.config.execution == "continuous" else "local[2]"
        master = self.stack.master_url if self.config.cluster else local
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
            FLAMEPIPE_SPARK_MASTER=master,
            FLAMEPIPE_STALL_TIMEOUT_MS=str(self.config.stall_timeout_ms),
            FLAMEPIPE_EXECUTION=self.config.execution,
        )
        # This process reads the pipeline's epoch in ZooKeeper too (`final_epoch`): the
        # components' key, from their state directory unless the environment names one.
        install_keys(self.settings.with_(state_dir=self.state_dir))
        spec = _SPECS[self.config.pipeline]
        cli = [sys.executable, "-m", "framework.cli"]
        logs = self.work / "logs"
        roles = [(r, r) for r in ("acker", "barrier")]
        if self.config.standbys:
            roles += [(f"{r}{_STANDBY}", r) for r in ("acker", "barrier")]
        self.components = {
            name: Component(name, [*cli, role, spec], env, logs / f"{name}.log", self._led(name))
            for name, role in roles
        }
        self.components |= {
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
        self.tail = OutputTail(bootstrap, self.sink, self.clock.say)
        self.tail.start()

    def _sink_node(self) -> str:
        from framework.kafka.endpoints import sink_nodes

        (node,) = sink_nodes(self.graph)
        return node

    def _led(self, name: str) -> Callable[[], bool]:
        """A service is ready once its current process printed ``ready (epoch N)``; with
        standbys, once one of its role leads that way and this one leads or stands by."""
        role = name.removesuffix(_STANDBY)

        def ready() -> bool:
            if not self.config.standbys:
                return _leads(self.components[name].output())
            output = self.components[name].output()
            waits = "standby: waiting to lead" in output
            return (waits or _leads(output)) and self._leader(role) is not None

        return ready

    def _leader(self, role: str) -> Component | None:
        """The process of ``role`` (either of the pair with standbys) that leads now."""
        pair = [self.components[n] for n in (role, f"{role}{_STANDBY}") if n in self.components]
        return next((c for c in pair if c.exited() is None and _leads(c.output())), None)

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
        if self.config.pipeline == "components":
            lines = edge_lines(self.config.records, self.config.vocabulary, self.config.seed)
        else:
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
            if wanted is None and done_producing and self._stack_done():
                break
            if wanted is not None and len(self.events) >= wanted:
                break
            self.supervise()
            if time.monotonic() >= next_at and self._all_ready() and self._output_resumed():
                self._strike(self._next_target())
                next_at = time.monotonic() + self.config.kill_every_s
            time.sleep(0.2)
        self.clock.say(f"chaos over after {len(self.events)} events")

    def _output_resumed(self) -> bool:
        """With ``one_at_a_time``: whether a bundle was committed since the last event, so
        each event's recovery is its own (always, once the input is written)."""
        assert self.producer is not None and self.tail is not None
        if not self.config.one_at_a_time or not self.events or self.producer.finished.is_set():
            return True
        last = self.events[-1]
        if self.tail.produced_since(last.at_ms):
            return True
        waited = (now_ms() - last.at_ms) / 1000
        if waited > self.config.ready_timeout_s:
            raise AssertionError(
                f"no output committed {waited:.0f} s after the {last.target} event:\n"
                + self.tails()
            )
        return False

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

    def _stack_done(self) -> bool:
        """Whether the stack restarts this run asks for happened (none when disabled)."""
        return self.config.stack_every <= 0 or self._stack_restarted()

    def _next_target(self) -> str:
        assert self.producer is not None
        if self.config.stack_every <= 0:
            if not self._turns:
                self._turns = list(self.config.targets)
                self.rng.shuffle(self._turns)
            return self._turns.pop()
        index = len(self.events)
        first, every = self.config.stack_first, self.config.stack_every
        due = index >= first and (index - first) % every == 0
        # At least one stack restart per run: the last event, if none came before it.
        last = self.producer.finished.is_set() or index + 1 == self.config.kills
        if due or (last and not self._stack_restarted()):
            return STACK
        if not self._turns:
            # Shuffled rounds: random order, yet every component is hit.
            self._turns = list(self.config.targets)
            self.rng.shuffle(self._turns)
        return self._turns.pop()

    def _strike(self, target: str) -> None:
        assert self.producer is not None
        event = ChaosEvent(target, now_ms(), input_left=not self.producer.finished.is_set())
        self.events.append(event)
        if target == STACK:
            self.clock.say("restarting the broker and ZooKeeper (down without purge, up)")
            self.stack.down()
            self._stack_up()
            event.down_s = (now_ms() - event.at_ms) / 1000
            self.clock.say("stack up again")
            self.supervise()
            return
        if target in (BROKER, ZOOKEEPER):
            self._kill_server(event)
            return
        if target == EXECUTOR:
            pids = executor_pids(self.settings.state_dir)
            if not pids:
                raise AssertionError("no executor JVM of the cluster to kill")
            victim = self.rng.choice(pids)
            executor_kill(victim)
            self.clock.say(f"killed executor (pid {victim}) with SIGKILL")
            return
        component = self._leader(target) or self.components[target]
        pid = component.proc.pid if component.proc else None
        component.kill()
        component.start()
        self.clock.say(f"killed {component.name} (pid {pid}) with SIGKILL, restarted it")

    def _kill_server(self, event: ChaosEvent) -> None:
        """kill -9 of the broker or ZooKeeper, down ``restart_after_s``, then started again
        on the same port and data directory."""
        target = event.target
        daemon = self.stack.kafka if target == BROKER else self.stack.zookeeper
        pid = daemon.pid()
        daemon.kill()
        deadline = time.monotonic() + 30
        while daemon.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.clock.say(f"killed {target} (pid {pid}) with SIGKILL")
        time.sleep(self.config.restart_after_s)
        self.stack = LocalStack(self.settings, quiet=True)
        self._stack_up()
        event.down_s = (now_ms() - event.at_ms) / 1000
        self.clock.say(f"{target} up again")
        self.supervise()

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
                self.tail.items >= expected_items or time.monotonic() - passed_at > SETTLE_S
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
        # Records that arrived after their partition was heartbeated past them were
        # moved up (`framework.wire.lifts`): global time is what Kafka stores, lifts too.
        lifts = read_lifts(bootstrap, self.app).get(self.source, ())
        if lifts:
            self.clock.say(f"{len(lifts)} lifted ranges of late input records")
        if self.config.pipeline == "word_pairs":
            return word_pairs_oracle(bootstrap, self.source, self.graph.delta_ms, lifts)
        if self.config.pipeline == "components":
            edges = stored_edges(bootstrap, self.source, self.graph.delta_ms, lifts)
            labels = components_oracle(edges, COMPONENTS_PANE_MS)
            return Counter(pair_key(list(label)) for label in labels)
        return _in_process_output(
            self.config.pipeline,
            self.app,
            self.source,
            stored,
            lifts=lifts,
            delta_ms=self.graph.delta_ms,
        )

    def output(self) -> Counter[str]:
        """The output items as a plain read_committed reader sees them."""
        return Counter(
            pair_key(json.loads(m.value() or b"null"))
            for m in read_to_end(self.settings.kafka_bootstrap, self.sink, timeout_s=120)
        )

    def verified(self) -> tuple[Counter[str], str | None]:
        """The output through `BundleConsumer`, and the broken bundle rule if any."""
        items: Counter[str] = Counter()
        group = f"crash-harness-verify-{uuid.uuid4().hex}"
        try:
            with BundleConsumer(self.settings.kafka_bootstrap, self.sink, group) as consumer:
                for bundle in consumer.bundles(to_end=True):
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


def _in_process_output(
    pipeline: str,
    app: str,
    source: str,
    stored: list[Message],
    *,
    lifts: tuple[Lift, ...] = (),
    delta_ms: int = 10,
) -> Counter[str]:
    """The in-process harness's output for the stored records (their exact coordinates,
    a lifted record's timestamp moved to its lift's slot)."""
    index = LiftIndex(lifts)

    def stamp(m: Message) -> int:
        ts = m.timestamp()[1]
        for lift in index.of(m.partition() or 0):
            if lift.first <= (m.offset() or 0) <= lift.last:
                ts = max(ts, lift.slot * delta_ms)
        return ts

    from framework.runners.inprocess.endpoints import SourceRecord
    from framework.testing import InProcessRunner, ListSink, ListSource

    ordered = sorted(stored, key=lambda m: (m.partition() or 0, m.offset() or 0))
    partitions = 1 + max((m.partition() or 0) for m in ordered)
    list_source = ListSource.timed([], partitions=partitions, topic=source)
    # Exact partitions and offsets as Kafka stored them, so global times are identical.
    list_source.records = tuple(
        SourceRecord(m.partition() or 0, m.offset() or 0, stamp(m), (m.value() or b"").decode())
        for m in ordered
    )
    sink = ListSink()
    graph_pipeline = _with_endpoints(pipeline, app, list_source, sink)
    values = graph_pipeline.run(InProcessRunner()).values()
    return Counter(map(pair_key, values))


def _with_endpoints(pipeline: str, app: str, source: Any, sink: Any) -> Any:
    from framework.demos.wordcount import two_groupings
    from integration_tests.pipelines import windows_and_pairs

    builders = {"two_groupings": two_groupings, "windows_and_pairs": windows_and_pairs}
    if pipeline not in builders:
        raise ValueError(f"no in-process oracle for {pipeline!r}")
    return builders[pipeline](app, source, sink)


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
    parser.add_argument(
        "--vocabulary", type=int, default=defaults.vocabulary, help="words (components: vertices)"
    )
    parser.add_argument("--timeout", type=float, default=defaults.complete_timeout_s)
    parser.add_argument("--work-dir", type=Path, help="logs and state (default: a temp dir)")
    parser.add_argument(
        "--targets",
        default=",".join(defaults.targets),
        help=f"comma-separated, of {', '.join(t for t in TARGETS if t != STACK)}",
    )
    parser.add_argument("--cluster", action="store_true", help="a Spark standalone cluster")
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="the next event only once output was committed after the last one",
    )
    parser.add_argument("--stall-timeout-ms", type=int, default=defaults.stall_timeout_ms)
    parser.add_argument(
        "--execution", choices=("micro-batch", "continuous"), default=defaults.execution
    )
    parser.add_argument(
        "--standbys", action="store_true", help="a standby acker and barrier beside the leaders"
    )
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
        vocabulary=args.vocabulary,
        complete_timeout_s=args.timeout,
        targets=tuple(args.targets.split(",")),
        one_at_a_time=args.one_at_a_time,
        cluster=args.cluster,
        stall_timeout_ms=args.stall_timeout_ms,
        execution=args.execution,
        standbys=args.standbys,
    )
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="flamepipe-crash-"))
    report = run_harness(config, work_dir)
    print(report.summary())
    if report.ok and args.work_dir is None:
        shutil.rmtree(work_dir / "stack", ignore_errors=True)  # keep the logs, not the data
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
