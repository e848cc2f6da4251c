"""``flamepipe consume <topic>``: print the items of an output topic, verified or plain.

Exit status: 0 done, 1 a protocol violation (a duplicate, a gap, a bundle out of order),
2 bad arguments or another error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from connectors import BundleConsumer, Bytes, Json, Serde, Utf8
from connectors.bundles import OutputItem
from framework.cli.stack import configure_logging
from framework.config import Settings
from framework.config.kafka_properties import kafka_properties
from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.errors import FlamepipeError, ProtocolViolation
from framework.kafka import security
from framework.kafka.admin import partition_count
from framework.kafka.clients import assign, close_quietly, is_record, new_consumer, take, where
from framework.wire.bundles import read_meta
from framework.wire.positions import format_gt

_SERDES: dict[str, Serde] = {"json": Json(), "utf8": Utf8(), "bytes": Bytes()}


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="flamepipe consume", description="Print the items of a flamepipe output topic."
    )
    parser.add_argument("topic")
    parser.add_argument("--verify", action="store_true", help="check every bundle (else: plain)")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the settings)")
    parser.add_argument("--group", help="consumer group that keeps the position (default: none)")
    parser.add_argument("--serde", choices=sorted(_SERDES), default="json")
    parser.add_argument("--meta", action="store_true", help="prefix each item with its time")
    parser.add_argument("--idle", type=float, default=5.0, help="stop after S idle s (0: never)")
    parser.add_argument("--verbose", action="store_true", help="also show Kafka clients' lines")
    return parser.parse_args(argv)


def _line(item: OutputItem, meta: bool) -> str:
    value = item.value if isinstance(item.value, str) else json.dumps(item.value, default=repr)
    return f"{format_gt(item.meta.gt)}\t{value}" if meta else value


def _plain(bootstrap: str, args: argparse.Namespace, serde: Serde) -> int:
    """Items of every partition as read_committed shows them, unchecked (the output topic
    holds only items: bundle headers are on its bundle topic)."""
    consumer = new_consumer(bootstrap, args.group)
    count = 0
    try:
        partitions = partition_count(bootstrap, args.topic)
        assign(consumer, args.topic, dict.fromkeys(range(partitions)))
        last = time.monotonic()
        while not args.idle or time.monotonic() - last < args.idle:
            for msg in take(consumer, 1000, 0.1):  # each item as soon as it is read
                if not is_record(msg, args.topic):
                    continue
                raw = msg.value()
                value = serde.loads(raw) if raw is not None else None
                meta = read_meta(msg.headers()) or Meta(GlobalTime(-1, -1, -1))
                partition, offset = where(msg)
                print(_line(OutputItem(value, meta, msg.key(), partition, offset), args.meta))
                count += 1
                last = time.monotonic()
    finally:
        close_quietly(consumer)
    return count


def consume_main(argv: Sequence[str] | None = None) -> int:
    """``flamepipe consume <topic> [--verify] ...``: print items, one per line.

    Exit status: 0 done, 1 a protocol violation, 2 bad arguments or another error.
    """
    try:
        args = _arguments(argv)
    except SystemExit as exc:  # argparse has printed the usage or the help
        return exc.code if isinstance(exc.code, int) else 2
    serde = _SERDES[args.serde]
    try:
        settings = Settings.load(verbose=True if args.verbose else None)
        configure_logging(settings)
        # The Kafka client properties of a secured cluster (kafka_config_file).
        security.install(kafka_properties(settings))
        bootstrap: str = args.bootstrap or settings.kafka_bootstrap
        if not args.verify:
            count = _plain(bootstrap, args, serde)
            print(f"{count} item(s), not verified", file=sys.stderr)
            return 0
        group = args.group or f"flamepipe-consume-{time.time_ns()}"
        bundles = items = 0
        with BundleConsumer(bootstrap, args.topic, group, serde) as consumer:
            for bundle in consumer.bundles(args.idle or None):
                for item in bundle.items:
                    print(_line(item, args.meta))
                bundles += 1
                items += len(bundle.items)
        print(f"{bundles} bundle(s), {items} item(s) verified", file=sys.stderr)
        return 0
    except ProtocolViolation as exc:
        print(f"protocol violation: {exc}", file=sys.stderr)
        return 1
    except FlamepipeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
