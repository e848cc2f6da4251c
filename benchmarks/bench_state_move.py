"""What moving a stateful partition costs: rebuilding its state from the changelog.

A grouping's partition that Spark runs in another Python worker than before (an executor
lost, a worker restarted, a rescheduled task) is rebuilt there from the start of its
compacted changelog (`framework.runners.spark.tasks`, step 3). This measures that: a real
`Grouping` (running count of Zipf words: every word's whole history, the heaviest state)
is written to a changelog topic on the embedded broker the way stage tasks write it, in
transactions of a batch each; then a fresh `ChangelogReader` catches up and
`apply_changelog` rebuilds the state, timed, for several state sizes.

Run: ``.venv/bin/python benchmarks/bench_state_move.py [lines per step] [steps]``.
"""

from __future__ import annotations

import sys
import time
import uuid

from framework.core.grouping import Grouping
from framework.core.meta import Meta, Record
from framework.core.ops import Keyed, key_hash
from framework.core.time import GlobalTime
from framework.demos.text import generate_lines
from framework.kafka.admin import compacted_spec, ensure_topics
from framework.kafka.changelog import ChangelogReader
from framework.kafka.clients import new_producer
from framework.local.provision import provision
from framework.plan.stage_state import apply_changelog, changelog_records


def _fill(grouping: Grouping, lines: list[str], first_slot: int) -> int:
    slot = first_slot
    for line in lines:
        for offset, word in enumerate(line.split()):
            meta = Meta(GlobalTime(slot, 1, offset))
            grouping.push(Record(meta, Keyed(word, key_hash(word), word)))
        slot += 1
    return slot


def main() -> None:
    per_step = int(sys.argv[1]) if len(sys.argv) > 1 else 5_000
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    with provision() as stack:
        bootstrap = stack.kafka_bootstrap
        topic = f"bench-move-{uuid.uuid4().hex[:6]}.state"
        ensure_topics(bootstrap, [compacted_spec(topic, 1)])
        producer = new_producer(bootstrap, {"linger.ms": 20})
        grouping, slot = Grouping(op_id=1, window=1 << 30), 0
        print("lines  keys  changelog MB  rebuild ms  ms/MB  (running count, one partition)")
        for step in range(1, steps + 1):
            lines = generate_lines(per_step, seed=step)
            # Stage tasks write a batch's changed buckets; here one batch per 500 lines.
            for start in range(0, len(lines), 500):
                slot = _fill(grouping, lines[start : start + 500], slot)
                for key, value in changelog_records(grouping):
                    producer.produce(topic, key=key, value=value)
                producer.poll(0)
            producer.flush(30)
            reader = ChangelogReader(bootstrap, topic, 0)
            started = time.perf_counter()
            records = reader.catch_up()
            rebuilt = Grouping(op_id=1, window=1 << 30)
            apply_changelog(rebuilt, records)
            elapsed_ms = (time.perf_counter() - started) * 1000
            size = sum(len(k) + len(v or b"") for k, v in records) / 1e6
            assert rebuilt.size() == grouping.size(), "the rebuilt state differs"
            print(
                f"{step * per_step:>6} {rebuilt.keys():>5} {size:>12.1f} {elapsed_ms:>11,.0f}"
                f" {elapsed_ms / size:>6,.0f}"
            )


if __name__ == "__main__":
    main()
