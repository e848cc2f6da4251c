"""Commands that run a user's pipeline or one of its services: run, acker, barrier.

A pipeline is named ``package.module:attribute`` (`framework.cli.spec`). ``run`` starts the
Spark queries and, by default, the acker and barriers in the same process; with
``--services external`` those run as ``flamepipe acker`` / ``flamepipe barrier`` processes
(docker-compose, or acker instances splitting the shards with ``--partitions``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from framework.cli.spec import load_pipeline
from framework.cli.stack import settings_of, stack_for
from framework.config import Settings
from framework.core.graph import Graph
from framework.errors import ConfigError

__all__ = ["COMMANDS", "add_parsers", "serve"]

_PROGRESS_S = 10.0


def _interrupt_on_sigterm() -> None:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def serve(services: Sequence[Any], describe: Callable[[], str]) -> int:
    """Start ``services``, print ``describe()`` every 10 s, stop them on Ctrl-C / SIGTERM."""
    _interrupt_on_sigterm()
    started: list[Any] = []
    try:
        for service in services:
            started.append(service.start())
        for service in started:
            service.wait_ready()
        print(f"ready: {describe()}", file=sys.stderr, flush=True)
        last = time.monotonic()
        while True:
            for service in started:
                service.check()
            time.sleep(0.2)
            if time.monotonic() - last >= _PROGRESS_S:
                last = time.monotonic()
                print(describe(), file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr, flush=True)
    finally:
        for service in reversed(started):
            service.stop_quietly()
    for service in started:
        service.check()
    return 0


def _graph(args: argparse.Namespace) -> Graph:
    return load_pipeline(args.pipeline).graph()


def _cmd_run(args: argparse.Namespace) -> int:
    from framework.spark import SparkRunner

    graph = _graph(args)
    with stack_for(args) as settings:
        runner = SparkRunner(settings, services=args.services, progress_s=_PROGRESS_S)
        runner.run(graph)
    return 0


def _cmd_acker(args: argparse.Namespace) -> int:
    from framework.services.plan import acker_for

    graph = _graph(args)
    settings = settings_of(args)
    acker = acker_for(settings, graph, _partitions(args.partitions, settings))

    def describe() -> str:
        return (
            f"acker of {graph.name!r}, shards {list(acker.partitions)}: "
            f"{acker.batches} ack batches, {acker.published} reports"
        )

    return serve([acker], describe)


def _cmd_barrier(args: argparse.Namespace) -> int:
    from framework.services.plan import barrier_for, sink_nodes, view_for

    graph = _graph(args)
    settings = settings_of(args)
    sinks = [_sink_node(graph, name) for name in args.sink] or sink_nodes(graph)
    view = view_for(settings, graph)
    barriers = [
        barrier_for(settings, graph, sink, view=view, exactly_once=not args.at_least_once)
        for sink in sinks
    ]

    def describe() -> str:
        parts = [
            f"{b.sink_node}->{b.sink.topic}: {b.stats.bundles} bundles, "
            f"{b.stats.items_out} items, GT_last {b.gt_last}"
            for b in barriers
        ]
        return f"barrier of {graph.name!r}: " + "; ".join(parts)

    return serve([view, *barriers], describe)


def _partitions(text: str | None, settings: Settings) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise ConfigError(
            f"--partitions {text!r}: give acks partitions as 0,1,... "
            f"(0..{settings.acker_shards - 1})"
        ) from exc


def _sink_node(graph: Graph, name: str) -> str:
    """A sink named by node id, label or output topic."""
    from framework.services.plan import sink_nodes

    for node_id in sink_nodes(graph):
        node = graph.node(node_id)
        if name in (node.id, node.label, getattr(node.endpoint, "topic", None)):
            return node_id
    known = ", ".join(f"{n} ({graph.node(n).label})" for n in sink_nodes(graph))
    raise ConfigError(f"{graph.name!r} has no sink {name!r}; its sinks: {known}")


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """The run, acker and barrier subcommands."""
    spec = argparse.ArgumentParser(add_help=False, parents=[common])
    spec.add_argument("pipeline", help="the pipeline as package.module:attribute")
    run = sub.add_parser("run", parents=[spec], help="run a pipeline on Spark until Ctrl-C")
    run.add_argument(
        "--services",
        choices=("embedded", "external"),
        default="embedded",
        help="run the acker and barriers here (default) or expect `flamepipe acker|barrier`",
    )
    run.add_argument("--keep-stack", action="store_true", help="leave the local stack running")
    acker = sub.add_parser("acker", parents=[spec], help="run a pipeline's acker service")
    acker.add_argument("--partitions", help="the acks partitions (shards) to own, e.g. 0,1")
    barrier = sub.add_parser("barrier", parents=[spec], help="run a pipeline's barriers")
    barrier.add_argument(
        "--sink", action="append", default=[], help="sink node, label or topic (default: all)"
    )
    barrier.add_argument(
        "--at-least-once", action="store_true", help="no transactions (for comparison)"
    )


COMMANDS = {"run": _cmd_run, "acker": _cmd_acker, "barrier": _cmd_barrier}
