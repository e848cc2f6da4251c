"""The ``flamepipe`` command line: the local stack, the demo, pipelines and their services.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from framework.cli import jobs, savepoint_commands, stack, state_commands
from framework.cli.signals import interrupt_on_signals
from framework.config.settings import EXECUTIONS
from framework.errors import FlamepipeError
from framework.logs import show_on_console


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flamepipe", description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="TOML settings file (or FLAMEPIPE_CONFIG)")
    common.add_argument("--kafka-port", type=int, help="broker port (FLAMEPIPE_KAFKA_PORT)")
    common.add_argument("--controller-port", type=int, help="KRaft controller port")
    common.add_argument("--zookeeper-port", type=int, help="ZooKeeper port")
    common.add_argument(
        "--registry-port",
        type=int,
        help="also run a schema registry (Confluent API) on this port (FLAMEPIPE_REGISTRY_PORT)",
    )
    common.add_argument("--state-dir", help="logs, pid files and data of the local stack")
    common.add_argument(
        "--spark-workers",
        type=int,
        help="also run a local Spark standalone master and N workers (FLAMEPIPE_SPARK_WORKERS)",
    )
    common.add_argument(
        "--spark-worker-cores",
        type=int,
        help="task slots each local Spark worker offers (FLAMEPIPE_SPARK_WORKER_CORES; 1)",
    )
    common.add_argument(
        "--execution",
        choices=EXECUTIONS,
        help="how stages run: Spark micro-batches or long-running continuous tasks "
        "(FLAMEPIPE_EXECUTION)",
    )
    common.add_argument(
        "--verbose",
        action="store_true",
        help="also show the Kafka, ZooKeeper and Spark log lines (else in <state_dir>/logs)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    stack.add_parsers(sub, common)
    jobs.add_parsers(sub, common)
    savepoint_commands.add_parsers(sub, common)
    state_commands.add_parsers(sub, common)
    sub.add_parser("consume", add_help=False, help="print (--verify: check) an output topic")
    sub.add_parser(
        "keygen",
        help="print a new pipeline key (base64) for FLAMEPIPE_SECRET or a secret_file",
    )
    return parser


def _keygen(_args: argparse.Namespace) -> int:
    from framework.config.secrets import new_key

    print(new_key())
    return 0


_COMMANDS = {
    **stack.COMMANDS,
    **jobs.COMMANDS,
    **savepoint_commands.COMMANDS,
    **state_commands.COMMANDS,
    "keygen": _keygen,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flamepipe`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    show_on_console()
    interrupt_on_signals()
    if argv[:1] == ["consume"]:
        from framework.cli.consume import consume_main

        code: int = consume_main(argv[1:])
        return code
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except FlamepipeError as exc:
        print(f"flamepipe: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
