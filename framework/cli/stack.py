"""Commands for the local stack and the bundled demos: up, status, down, demo, smoke."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from framework.config import Settings
from framework.kafka.cache import ProcessCache
from framework.local.stack import LocalStack
from framework.logs import configure
from framework.runners.keys import install_keys


def positive(text: str) -> int:
    """An argparse type: a whole number > 0 (checked before anything starts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be > 0")
    return value


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings: defaults < ``--config`` / FLAMEPIPE_CONFIG < FLAMEPIPE_* < flags; logging
    configured by them (`framework.logs`: the console, ``<state_dir>/logs``)."""
    settings = Settings.load(
        args.config,
        kafka_port=args.kafka_port,
        controller_port=args.controller_port,
        zookeeper_port=args.zookeeper_port,
        registry_port=getattr(args, "registry_port", None),
        state_dir=args.state_dir,
        spark_workers=getattr(args, "spark_workers", None),
        spark_worker_cores=getattr(args, "spark_worker_cores", None),
        execution=getattr(args, "execution", None),
        verbose=True if getattr(args, "verbose", False) else None,
    )
    configure_logging(settings)
    return settings


def configure_logging(settings: Settings) -> None:
    """`framework.logs.configure` by ``settings``."""
    configure(
        settings.state_dir,
        level=settings.log_level,
        verbose=settings.verbose,
        json_lines=settings.log_json,
    )


@contextlib.contextmanager
def stack_for(args: argparse.Namespace) -> Iterator[Settings]:
    """The settings with their stack running; an embedded stack started here stops after,
    one that was running already (another command's, another test's) is left alone."""
    settings = settings_of(args)
    # Keys and Kafka client properties first: a bad key file fails before anything starts.
    install_keys(settings)
    stack = LocalStack(settings) if settings.embedded else None
    if stack is not None:
        stack.up()
        if settings.spark_workers > 0 and settings.spark_master == "local[*]":
            # The local cluster was asked for: run the pipeline on it.
            settings = settings.with_(spark_master=stack.master_url)
    try:
        yield settings
    finally:
        # Readiness is no proof of ownership: a busy broker answers late, and a command
        # that took a shared stack for its own would stop it under everyone else.
        if stack is not None and stack.started and not args.keep_stack:
            # Clients first: a cached client outliving its broker reconnects (and logs)
            # until the process exits.
            ProcessCache.clear_all()
            stack.down()


def _cmd_up(args: argparse.Namespace) -> int:
    stack = LocalStack(settings_of(args))
    endpoints = stack.up()
    print(f"bootstrap.servers={endpoints.bootstrap_servers}")
    print(f"zookeeper.connect={endpoints.zookeeper_connect}")
    if stack.settings.spark_workers > 0:
        print(f"spark.master={stack.master_url}")
    if stack.registry is not None:
        print(f"schema.registry.url={stack.registry.url}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    statuses = LocalStack(settings_of(args), quiet=True).status()
    for status in statuses:
        print(status.line())
    return 0 if all(s.ready for s in statuses) else 1


def _cmd_down(args: argparse.Namespace) -> int:
    LocalStack(settings_of(args)).down(purge=args.purge)
    return 0


def _cmd_smoke(args: argparse.Namespace) -> int:
    from framework.runners.spark.smoke import run_smoke

    with stack_for(args) as settings:
        result = run_smoke(settings, lines=args.lines)
    ok = len(result.received) == result.sent
    print(
        f"smoke: sent {result.sent}, received {len(result.received)} (read_committed), "
        f"Spark {result.seconds:.1f} s: {'OK' if ok else 'MISSING RECORDS'}"
    )
    for key, value, headers in sorted(result.received, key=lambda r: int(r[0]))[:3]:
        print(f"  {key}: {value} headers={headers}")
    return 0 if ok else 1


# The demo's grouping runs on as many hash units as its source has partitions. On 2 cores
# at 200 lines/s, latency p50 157-171 ms over four runs against 215-216 ms with the default
# parallelism of 4 (docs/latency.md, "The demo's parallelism").
DEMO_PARALLELISM = 2


def _cmd_demo(args: argparse.Namespace) -> int:
    from framework.demos.wordcount_demo import run_demo

    with stack_for(args) as stack:
        settings = stack.with_(parallelism=args.parallelism)
        result = run_demo(settings, lines=args.lines, rate=args.rate)
    print(result.summary())
    return 0 if result.exact else 1


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """The stack and demo subcommands."""
    sub.add_parser("up", parents=[common], help="start the local stack (reuses a running one)")
    sub.add_parser("status", parents=[common], help="show the local stack's servers")
    down = sub.add_parser("down", parents=[common], help="stop the local stack")
    down.add_argument("--purge", action="store_true", help="also delete its data")
    demo = sub.add_parser("demo", parents=[common], help="word count, verified, on the stack")
    demo.add_argument("--lines", type=positive, default=4_000, help="lines of generated text")
    demo.add_argument(
        "--rate",
        type=positive,
        default=200,
        help="lines produced per second (8 words each; 2 cores saturate near 2 000)",
    )
    demo.add_argument(
        "--parallelism",
        type=positive,
        default=DEMO_PARALLELISM,
        help=f"hash units of the demo's grouping (default {DEMO_PARALLELISM}, its source's "
        "partitions: each one more is a task and a partition in every source transaction)",
    )
    demo.add_argument("--keep-stack", action="store_true", help="leave the stack running")
    smoke = sub.add_parser("smoke", parents=[common], help="Kafka -> Spark -> Kafka smoke job")
    smoke.add_argument("--lines", type=positive, default=1000, help="records to push through")
    smoke.add_argument("--keep-stack", action="store_true", help="leave the stack running")


COMMANDS = {
    "up": _cmd_up,
    "status": _cmd_status,
    "down": _cmd_down,
    "demo": _cmd_demo,
    "smoke": _cmd_smoke,
}
