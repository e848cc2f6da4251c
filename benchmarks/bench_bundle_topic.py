"""What the bundle topic costs the barrier: a bundle's transaction with its headers on the
output topic (the earlier format) against headers on the output's bundle topic.

A bundle is one Kafka transaction: its items, then one header per output partition. The
earlier format wrote the headers as keyless, valueless records on the output topic itself;
`framework.wire.bundles` writes them to ``<topic>.bundles`` (same partition count), so the
transaction spans twice the partitions. This alternates the two shapes, bundle by bundle,
on the embedded broker in one run (same producer settings as the barrier's bundle writer:
idempotent, transactional, linger 5 ms) and reports the time from the first produce to the
end of the commit.

Run: ``.venv/bin/python benchmarks/bench_bundle_topic.py [bundles per shape] [items per
bundle] [partitions]``.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid

from confluent_kafka import Producer

from framework.core.messages import BundleHeader
from framework.core.time import GlobalTime
from framework.kafka.admin import TopicSpec, ensure_topics
from framework.kafka.clients import new_producer
from framework.local.provision import provision
from framework.wire.avro import encode_bundle_header


def _bundle(
    p: Producer, *, out: str, control: str | None, seq: int, items: int, parts: int
) -> float:
    started = time.perf_counter()
    p.begin_transaction()
    for i in range(items):
        p.produce(out, value=b'["word", 1]', partition=i % parts)
    for partition in range(parts):
        header = encode_bundle_header(BundleHeader(seq, GlobalTime.slot_end(seq), items // parts))
        if control is None:  # the earlier format: a header record on the output itself
            p.produce(out, value=None, headers=[("fp.bundle", header)], partition=partition)
        else:
            p.produce(control, value=header, partition=partition)
    p.commit_transaction(30)
    return time.perf_counter() - started


def main() -> None:
    bundles = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    items = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    parts = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    with provision() as stack:
        bootstrap = stack.kafka_bootstrap
        run = uuid.uuid4().hex[:6]
        old_out, new_out = f"bench-old-{run}", f"bench-new-{run}"
        control = f"{new_out}.bundles"
        ensure_topics(bootstrap, [TopicSpec(t, parts) for t in (old_out, new_out, control)])
        producer = new_producer(
            bootstrap, {"transactional.id": f"bench-bundles-{run}", "linger.ms": 5}
        )
        producer.init_transactions(30)
        times: dict[str, list[float]] = {"headers on the output": [], "bundle topic": []}
        shapes = [("headers on the output", old_out, None), ("bundle topic", new_out, control)]
        for seq in range(20 + bundles):  # 20 to warm up, alternating the shapes
            for name, out, bundles_at in shapes:
                took = _bundle(
                    producer, out=out, control=bundles_at, seq=seq, items=items, parts=parts
                )
                if seq >= 20:
                    times[name].append(took)
        print(f"{bundles} bundles per shape, {items} items each, {parts} output partitions")
        print("shape                    p50 ms   p99 ms   mean ms")
        for name, values in times.items():
            ordered = sorted(values)
            p50, p99 = ordered[len(ordered) // 2], ordered[int(0.99 * (len(ordered) - 1))]
            mean = statistics.fmean(values)
            print(f"{name:<24} {p50 * 1e3:7.2f}  {p99 * 1e3:7.2f}  {mean * 1e3:7.2f}")
        old = statistics.median(times["headers on the output"])
        new = statistics.median(times["bundle topic"])
        print(f"bundle topic / headers on the output (p50): {new / old:.2f}")


if __name__ == "__main__":
    main()
