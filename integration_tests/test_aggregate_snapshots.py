"""Snapshots of aggregates against the real stack: a savepoint taken while input flows
restarts a running count and counts per window exactly.

Lines arrive in bursts while the pipeline runs; a savepoint is taken between two bursts
and the pipeline stops soon after, having released some of what follows the savepoint.
The rest of the input arrives while it is stopped. The next epoch starts from the
savepoint: each aggregate's changelog cut at its slot, restored below it as the epoch's
floor, sources replayed from its offsets. A running count that lost or doubled anything
at the cut, or a window restored without the items it had before the cut, gives counts
that differ from the input's; a result the barrier had released comes out twice.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

from framework.config import Settings
from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.oracle import window_counts_oracle
from framework.demos.text import generate_lines
from framework.operations.savepoints import start_from_savepoint, take_savepoint
from integration_tests.harness.counts import counts, released_windows, running_oracle
from integration_tests.harness.runs import produce_lines, read_output, running, snapshot_past


def test_aggregates_restart_exactly_from_a_savepoint_taken_mid_stream(
    stack: Settings, spark: Any
) -> None:
    settings = stack.with_(parallelism=2, snapshot_interval_ms=200)
    bootstrap = settings.kafka_bootstrap
    app = f"aggsnap{uuid.uuid4().hex[:6]}"
    source, running_sink, windows = f"{app}-lines", f"{app}-running", f"{app}-windows"
    lines = generate_lines(400, words_per_line=5, vocabulary=30, seed=31)
    bursts = [lines[i : i + 25] for i in range(0, len(lines), 25)]
    pipeline = counts(app, source, running_sink, windows)
    graph = pipeline.graph()
    with running(settings, spark, pipeline) as run:
        for i, burst in enumerate(bursts[:6]):
            until = produce_lines(bootstrap, source, burst, partitions=2)
            if i == 3:
                third = until
            time.sleep(0.3)
        # Past the fourth burst (a cold start's first snapshots may precede the input).
        snapshot_past(settings, app, third)
        saved = take_savepoint(settings, graph, "mid", wait_s=60)
        for burst in bursts[6:9]:
            produce_lines(bootstrap, source, burst, partitions=2)
            time.sleep(0.3)
        # Some of what follows the savepoint is out before the stop: the replay overlaps it.
        run.wait_released(saved.slot * DEFAULT_DELTA_MS + 1, timeout_s=120)
    assert {op.id for op in saved.operators if op.units} == {"running", "windows"}
    until = produce_lines(bootstrap, source, [x for b in bursts[9:] for x in b], partitions=2)

    record, upgrade = start_from_savepoint(settings, graph, "mid")
    assert dict(upgrade.kept) == {"running": "running", "windows": "windows"}
    assert record.snapshot == saved.slot
    with running(settings, spark, pipeline) as run:
        assert run.epoch == record.epoch
        run.wait_released(until + 200, timeout_s=180)

    updates = Counter(tuple(item) for item in read_output(bootstrap, running_sink))
    assert updates == running_oracle(bootstrap, source)
    assert released_windows(read_output(bootstrap, windows)) == window_counts_oracle(
        bootstrap, source, 200
    )
