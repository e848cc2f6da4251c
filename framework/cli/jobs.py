"""Commands that run a user's pipeline or its services: run, acker, barrier, replay, rescale.

A pipeline is named ``package.module:attribute`` (`framework.cli.spec`). ``run`` starts the
Spark queries and, by default, the acker and barriers in the same process; with
``--services external`` those run as ``flamepipe acker`` / ``flamepipe barrier`` processes
(docker-compose, or acker instances splitting the shards with ``--partitions``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from framework.cli.serve import EpochWatch, election_for, serve
from framework.cli.spec import load_pipeline
from framework.cli.stack import settings_of, stack_for
from framework.config import Settings
from framework.core.graph import Graph
from framework.errors import ConfigError
from framework.runners.keys import install_keys
from framework.runners.observe.figures import Figures, service_figures

if TYPE_CHECKING:
    from framework.runners.assembly import ServiceSet

_PROGRESS_S = 10.0


def _graph(args: argparse.Namespace) -> Graph:
    return load_pipeline(args.pipeline).graph()


def _cmd_run(args: argparse.Namespace) -> int:
    from framework.runners.spark.runner import SparkRunner

    graph = _graph(args)
    with stack_for(args) as settings:
        runner = SparkRunner(settings, services=args.services, progress_s=_PROGRESS_S, console=True)
        runner.run(graph)
    return 0


def _cmd_acker(args: argparse.Namespace) -> int:
    from framework.runners.assembly import acker_services

    graph = _graph(args)
    settings = settings_of(args)
    install_keys(settings)  # before the first record or znode is read
    partitions = _partitions(args.partitions, settings)

    # Instances owning the same shards are one role: one leads, the others stand by.
    role = "acker" if partitions is None else "acker-" + "-".join(map(str, sorted(partitions)))

    def build(epoch: int) -> ServiceSet:
        return acker_services(settings, graph, epoch, partitions)

    def describe(services: ServiceSet) -> str:
        acker, coordinator = services.acker, services.coordinator
        assert acker is not None
        line = (
            f"acker of {graph.name!r}, shards {list(acker.partitions)}: "
            f"{acker.batches} ack batches, {acker.published} reports"
        )
        if coordinator is not None:
            snapshots, slot = coordinator.stats.snapshots, coordinator.committed_slot
            line += f", snapshots {snapshots} (slot {slot})"
        return line

    return _serve_role(settings, graph, role, build, describe)


def _cmd_barrier(args: argparse.Namespace) -> int:
    from framework.kafka.endpoints import sink_nodes
    from framework.runners.assembly import barrier_services, check_instance

    graph = _graph(args)
    settings = settings_of(args)
    install_keys(settings)  # before the first record or znode is read
    sinks = [_sink_node(graph, name) for name in args.sink] or sink_nodes(graph)
    # Processes serving the same sinks (and instance) are one role: one leads, the others
    # stand by.
    role = "barrier" if not args.sink else "barrier-" + "-".join(sorted(sinks))
    if args.instance is not None:
        role += f"-i{args.instance}"
    exactly_once, instance = not args.at_least_once, args.instance
    check_instance(graph, sinks, instance)  # before waiting to lead: fail fast

    def build(epoch: int) -> ServiceSet:
        return barrier_services(
            settings, graph, epoch, sinks, exactly_once=exactly_once, instance=instance
        )

    def describe(services: ServiceSet) -> str:
        parts = [
            f"{b.sink_node}[{b.instance}]->{b.sink.topic}: {b.stats.bundles} bundles, "
            f"{b.stats.items_out} items, GT_last {b.gt_last}, "
            f"replays dropped {b.replays_dropped}, {b.stats.timings()}"
            for b in services.barriers
        ]
        return f"barrier of {graph.name!r}: " + "; ".join(parts)

    return _serve_role(settings, graph, role, build, describe)


def _serve_role(
    settings: Settings,
    graph: Graph,
    role: str,
    build: Callable[[int], ServiceSet],
    describe: Callable[[ServiceSet], str],
) -> int:
    """Serve ``role``'s services (`framework.cli.serve`), their figures on the page and
    metrics of this process while they run."""
    current: list[ServiceSet] = []

    def tracked(epoch: int) -> ServiceSet:
        current[:] = [build(epoch)]
        return current[0]

    def figures() -> Figures:
        return service_figures(graph.name, current[0] if current else None, graph.delta_ms)

    with watching(settings, figures):
        return serve(
            tracked,
            describe,
            EpochWatch(settings, graph.name),
            election_for(settings, graph.name, role),
        )


@contextlib.contextmanager
def watching(settings: Settings, figures: Callable[[], Figures]) -> Iterator[None]:
    """The process's live page and metrics (``ui``) while the block runs."""
    if not settings.ui:
        yield
        return
    from framework.runners.observe.server import WatchServer

    server = WatchServer(figures, host=settings.ui_host, port=settings.ui_port)
    server.start()
    try:
        yield
    finally:
        server.stop()


def _cmd_acls(args: argparse.Namespace) -> int:
    from framework.kafka.acls import acl_commands, grant, pipeline_acls
    from framework.kafka.endpoints import kafka_sources, sink_nodes

    graph = _graph(args)
    settings = settings_of(args)
    install_keys(settings)
    sources = [s.topic for s in kafka_sources(graph).values()]
    sinks = [graph.node(n).endpoint.topic for n in sink_nodes(graph)]  # type: ignore[union-attr]
    bindings = pipeline_acls(graph.name, args.principal, sources, sinks)
    if args.apply:
        grant(settings.kafka_bootstrap, bindings)
        print(f"{len(bindings)} ACLs created for {args.principal}", file=sys.stderr)
    else:
        print("\n".join(acl_commands(bindings, settings.kafka_bootstrap)))
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from framework.operations.replay import parse_offsets, resolve_start, start_replay

    graph = _graph(args)
    given = parse_offsets(args.offsets) if args.offsets else None  # before any stack starts
    with stack_for(args) as settings:
        offsets = resolve_start(
            settings.kafka_bootstrap, graph, offsets=given, at_ms=args.from_time
        )
        from framework.runners.snapshots import restorer

        record = start_replay(settings, graph, offsets, restore=restorer(settings, graph))
        print(
            f"{graph.name}: epoch {record.epoch} replays from {record.offsets}"
            + (f" (snapshot at slot {record.snapshot})" if record.snapshot is not None else ""),
            file=sys.stderr,
            flush=True,
        )
        if not args.no_run:
            from framework.runners.spark.runner import SparkRunner

            SparkRunner(settings, services=args.services, progress_s=_PROGRESS_S).run(graph)
    return 0


def _cmd_rescale(args: argparse.Namespace) -> int:
    from framework.operations.rescale import refuse_unkeyed, start_rescale

    graph = _graph(args)
    if args.parallelism < 1:
        raise ConfigError(f"--parallelism {args.parallelism}: give a count of hash units >= 1")
    refuse_unkeyed(graph)  # before a stack starts
    with stack_for(args) as found:
        settings = found.with_(parallelism=args.parallelism)
        record = start_rescale(settings, graph, from_start=args.from_start)
        print(
            f"{graph.name}: epoch {record.epoch} runs with parallelism {args.parallelism}, "
            f"from {record.offsets}"
            + (f" (snapshot at slot {record.snapshot})" if record.snapshot is not None else "")
            + f"; run it with FLAMEPIPE_PARALLELISM={args.parallelism} from now on",
            file=sys.stderr,
            flush=True,
        )
        if not args.no_run:
            from framework.runners.spark.runner import SparkRunner

            SparkRunner(settings, services=args.services, progress_s=_PROGRESS_S).run(graph)
    return 0


def _cmd_gc(args: argparse.Namespace) -> int:
    from framework.kafka.admin import delete_records
    from framework.kafka.endpoints import sink_nodes
    from framework.operations.hygiene import acker_needs, barrier_needs, old_epoch_topics
    from framework.runners.assembly import current_epoch
    from framework.wire.topics import Topics

    graph = _graph(args)
    settings = settings_of(args)
    install_keys(settings)  # positions and checkpoints are verified before they are used
    bootstrap = settings.kafka_bootstrap
    epoch = current_epoch(settings, graph.name)
    old = old_epoch_topics(bootstrap, graph, epoch)
    topics = Topics(graph.name, epoch)
    needs = {
        **acker_needs(bootstrap, topics, settings.acker_shards),
        **barrier_needs(bootstrap, topics, graph.name, sink_nodes(graph)),
    }
    for name in old:
        print(f"{'would delete' if args.dry_run else 'delete'} topic {name}")
    for (topic, partition), offset in sorted(needs.items()):
        print(f"{'would trim' if args.dry_run else 'trim'} {topic}[{partition}] below {offset}")
    if not args.dry_run:
        from framework.kafka.admin import delete_topics

        delete_topics(bootstrap, old)
        delete_records(bootstrap, needs)
    print(
        f"{graph.name} (epoch {epoch}): {len(old)} old-epoch topics, {len(needs)} partitions "
        f"trimmed{' (dry run: nothing changed)' if args.dry_run else ''}",
        file=sys.stderr,
    )
    return 0


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
    from framework.kafka.endpoints import sink_nodes

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
        "--instance",
        type=int,
        help="only this barrier instance of the sinks (KafkaSink barriers=N: 0..N-1)",
    )
    barrier.add_argument(
        "--at-least-once", action="store_true", help="no transactions (for comparison)"
    )
    acls = sub.add_parser(
        "acls", parents=[spec], help="the Kafka ACLs the pipeline's principal needs"
    )
    acls.add_argument("--principal", required=True, help="e.g. User:pipeline")
    acls.add_argument("--apply", action="store_true", help="create them (needs ALTER)")
    gc = sub.add_parser(
        "gc",
        parents=[spec],
        help="delete earlier epochs' internal topics, trim acks and pre-barrier topics",
    )
    gc.add_argument("--dry-run", action="store_true", help="only say what would go")
    replay = sub.add_parser(
        "replay", parents=[spec], help="start the next epoch from chosen offsets, then run"
    )
    where = replay.add_mutually_exclusive_group(required=True)
    where.add_argument("--from-start", action="store_true", help="from every first offset")
    where.add_argument("--from-time", type=int, metavar="MS", help="from this append time")
    where.add_argument("--offsets", help="topic:partition=offset,... (others from the start)")
    replay.add_argument("--no-run", action="store_true", help="only start the epoch")
    replay.add_argument("--services", choices=("embedded", "external"), default="embedded")
    replay.add_argument("--keep-stack", action="store_true", help="leave the local stack running")
    rescale = sub.add_parser(
        "rescale",
        parents=[spec],
        help="start the next epoch with another parallelism, keyed state moved, then run",
    )
    rescale.add_argument("--parallelism", type=int, required=True, help="the new hash units")
    rescale.add_argument(
        "--from-start", action="store_true", help="empty state, sources from their first offsets"
    )
    rescale.add_argument("--no-run", action="store_true", help="only start the epoch")
    rescale.add_argument("--services", choices=("embedded", "external"), default="embedded")
    rescale.add_argument("--keep-stack", action="store_true", help="leave the local stack running")


COMMANDS = {
    "run": _cmd_run,
    "acker": _cmd_acker,
    "barrier": _cmd_barrier,
    "replay": _cmd_replay,
    "rescale": _cmd_rescale,
    "acls": _cmd_acls,
    "gc": _cmd_gc,
}
