"""Queryable state commands: serve a running pipeline's state over HTTP, or read one key.

    flamepipe state serve jobs:p [--port 8642]   # GET /state, /state/<operator>?key=<JSON>
    flamepipe state get jobs:p pairs '"word"'    # one answer as JSON

Answers are committed values as of a global time at or below min time
(`framework.snapshots.queryable`); the pipeline runs elsewhere (``flamepipe run``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable

from framework.cli.spec import load_pipeline
from framework.cli.stack import settings_of
from framework.errors import ConfigError


def _cmd_state(args: argparse.Namespace) -> int:
    from framework.operations.queryable_state import StateServer, open_state, parse_key

    graph = load_pipeline(args.pipeline).graph()
    key = None
    if args.action == "get":
        if args.operator is None or args.key is None:
            raise ConfigError("flamepipe state get: give the operator and the key as JSON")
        try:
            key = parse_key(args.key)
        except ValueError as exc:
            raise ConfigError(
                f"key {args.key!r} is not JSON (a string is '\"word\"'): {exc}"
            ) from None
    settings = settings_of(args)
    with open_state(settings, graph, timeout_s=args.timeout) as reader:
        if args.action == "get":
            print(json.dumps(reader.get(args.operator, key).as_json()))
            return 0
        server = StateServer(reader, host=args.host, port=args.port)
        server.start()
        print(
            f"{graph.name}: state at {server.url}state (Ctrl-C stops)", file=sys.stderr, flush=True
        )
        try:
            threading.Event().wait()
        finally:
            server.stop()
    return 0


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """The state subcommand."""
    state = sub.add_parser(
        "state", parents=[common], help="read a running pipeline's state (serve, get)"
    )
    state.add_argument("action", choices=("serve", "get"))
    state.add_argument("pipeline", help="the pipeline as package.module:attribute")
    state.add_argument("operator", nargs="?", help="get: the operator id")
    state.add_argument("key", nargs="?", help="get: the key as JSON, e.g. '\"word\"'")
    state.add_argument("--host", default="127.0.0.1", help="serve: the address to bind")
    state.add_argument("--port", type=int, default=0, help="serve: the port (0: any free one)")
    state.add_argument(
        "--timeout", type=float, default=10.0, help="seconds an answer may wait for the state"
    )


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"state": _cmd_state}
