"""Savepoint commands: take, list and delete savepoints; start a pipeline from one.

    flamepipe savepoint jobs:p --name v1           # the next snapshot of the running pipeline
    flamepipe savepoint jobs:p --name v1 --latest  # the committed one (pipeline stopped)
    flamepipe savepoint jobs:p --list
    flamepipe savepoint jobs:p --delete v1
    flamepipe upgrade jobs:p --savepoint v1 [--rename 2-group=pairs,...] [--no-run]

``upgrade`` starts the pipeline's next epoch from the savepoint (stop the running one
first), for the graph as the code now builds it: operators keep their state by id, new
groupings start empty, removed operators are reported, an incompatible change is refused
with the operator named (`framework.snapshots.savepoint_store`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from framework.cli.spec import load_pipeline
from framework.cli.stack import settings_of, stack_for
from framework.errors import ConfigError

_PROGRESS_S = 10.0


def parse_renames(text: str | None) -> dict[str, str]:
    """``"old=new,old2=new2"`` -> ``{"old": "new", ...}``; `ConfigError` if malformed."""
    renames: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        old, sep, new = part.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise ConfigError(f"--rename {text!r}: write saved_id=new_id[,...], e.g. 2-group=pairs")
        renames[old.strip()] = new.strip()
    return renames


def _directory(args: argparse.Namespace) -> Path | None:
    return Path(args.dir) if args.dir else None


def _cmd_savepoint(args: argparse.Namespace) -> int:
    from framework.operations.savepoints import savepoint_root, take_savepoint
    from framework.snapshots.savepoint_store import delete_savepoint, list_savepoints

    graph = load_pipeline(args.pipeline).graph()
    settings = settings_of(args)
    root = savepoint_root(settings, graph.name, _directory(args))
    if args.list:
        from framework.runners.keys import install_keys

        install_keys(settings)  # a manifest is listed only if it verifies
        for sp in list_savepoints(root):
            when = datetime.fromtimestamp(sp.created_ms / 1000, UTC).isoformat(timespec="seconds")
            print(f"{sp.name}\tslot {sp.slot}\tepoch {sp.epoch}\t{when}\t{sp.directory}")
        return 0
    if args.delete:
        delete_savepoint(root, args.delete)
        print(f"{graph.name}: savepoint {args.delete} deleted", file=sys.stderr)
        return 0
    if not args.name:
        raise ConfigError("flamepipe savepoint: give --name NAME (or --list, --delete NAME)")
    sp = take_savepoint(
        settings,
        graph,
        args.name,
        directory=_directory(args),
        wait_s=args.wait,
        latest=args.latest,
    )
    units = sum(op.units for op in sp.operators)
    print(
        f"{graph.name}: savepoint {sp.name} at slot {sp.slot} (epoch {sp.epoch}, {units} "
        f"units, offsets {dict(sp.offsets)}) in {sp.directory}",
        file=sys.stderr,
    )
    return 0


def _cmd_upgrade(args: argparse.Namespace) -> int:
    from framework.operations.savepoints import start_from_savepoint

    graph = load_pipeline(args.pipeline).graph()
    renames = parse_renames(args.rename)  # before any stack starts
    with stack_for(args) as settings:
        record, upgrade = start_from_savepoint(
            settings, graph, args.savepoint, directory=_directory(args), renames=renames
        )
        print(
            f"{graph.name}: epoch {record.epoch} starts from savepoint {args.savepoint} "
            f"(offsets {record.offsets}); {upgrade.describe()}",
            file=sys.stderr,
            flush=True,
        )
        if not args.no_run:
            from framework.runners.spark.runner import SparkRunner

            SparkRunner(settings, services=args.services, progress_s=_PROGRESS_S).run(graph)
    return 0


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """The savepoint and upgrade subcommands."""
    spec = argparse.ArgumentParser(add_help=False, parents=[common])
    spec.add_argument("pipeline", help="the pipeline as package.module:attribute")
    spec.add_argument(
        "--dir", help="savepoints directory (default <snapshot_dir>/savepoints/<app>)"
    )
    save = sub.add_parser(
        "savepoint", parents=[spec], help="take (list, delete) a named snapshot kept until deleted"
    )
    save.add_argument("--name", help="the savepoint's name: letters, digits, '_' and '-'")
    save.add_argument("--latest", action="store_true", help="save the committed snapshot now")
    save.add_argument(
        "--wait", type=float, default=30.0, help="seconds to wait for the next snapshot"
    )
    save.add_argument("--list", action="store_true", help="list the savepoints")
    save.add_argument("--delete", metavar="NAME", help="delete a savepoint")
    upgrade = sub.add_parser(
        "upgrade",
        parents=[spec],
        help="start the next epoch from a savepoint, for the pipeline as it is now, then run",
    )
    upgrade.add_argument("--savepoint", required=True, help="the savepoint's name")
    upgrade.add_argument("--rename", help="saved_id=new_id,... for operators whose id changed")
    upgrade.add_argument("--no-run", action="store_true", help="only start the epoch")
    upgrade.add_argument("--services", choices=("embedded", "external"), default="embedded")
    upgrade.add_argument("--keep-stack", action="store_true", help="leave the local stack running")


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "savepoint": _cmd_savepoint,
    "upgrade": _cmd_upgrade,
}
