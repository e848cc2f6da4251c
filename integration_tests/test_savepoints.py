"""Savepoints and upgrades against the real stack: a running pipeline's savepoint starts a
changed version of it, whose matching grouping keeps its state, whose new grouping starts
empty, and whose removed sink is reported; an incompatible change is refused.

Word pairs (a window-2 grouping: each word's item pairs with the word's previous one) run
on the first half of the input; a savepoint is taken while it runs. The upgraded pipeline
names the grouping (``--rename group=pairs``), writes to a new topic and adds a grouping
by first letter. Every occurrence after the savepoint must pair with the line of the
word's previous occurrence, which for most words lies before the savepoint: only the
saved state holds it.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from framework.config import Settings
from framework.coordination.epochs import read_epoch
from framework.core.time import DEFAULT_DELTA_MS, GlobalTime
from framework.demos.oracle import pair_key
from framework.demos.wordcount import word_pairs
from framework.errors import ConfigError, Unauthenticated
from framework.kafka.clients import read_to_end
from framework.operations.savepoints import savepoint_root, start_from_savepoint, take_savepoint
from framework.snapshots.savepoint_store import Savepoint, list_savepoints, load_savepoint
from integration_tests.harness.runs import (
    numbered_lines,
    produce_lines,
    read_output,
    running,
    snapshot_past,
)
from integration_tests.harness.services import run_cli
from integration_tests.harness.upgrades import upgraded_pairs


def _pairs_from(bootstrap: str, topic: str, delta_ms: int, start: dict[int, int]) -> Counter[str]:
    """`word_pairs`' output for the occurrences at or after ``start`` (offset per partition),
    each paired with its word's previous occurrence wherever that was."""
    seen: dict[str, list[tuple[GlobalTime, int, str, bool]]] = {}
    for msg in read_to_end(bootstrap, topic):
        _, stamp = msg.timestamp()
        partition, offset = msg.partition() or 0, msg.offset() or 0
        gt = GlobalTime.of_record(stamp, topic, partition, offset, delta_ms)
        line_id, *words = (msg.value() or b"").decode().split()
        after = offset >= start.get(partition, 0)
        for child, word in enumerate(words):
            seen.setdefault(word, []).append((gt, child, line_id, after))
    expected: Counter[str] = Counter()
    for word, occurrences in seen.items():
        ordered = sorted(occurrences)
        for i, (_, _, line_id, after) in enumerate(ordered):
            if after:
                previous = [ordered[i - 1][2]] if i else []
                expected[pair_key([word, [*previous, line_id]])] += 1
    return expected


def _refused_before_anything_changes(
    settings: Settings, app: str, saved: Savepoint, topics: tuple[str, str, str]
) -> None:
    """A grouping's window changed, a tampered manifest: refused, the epoch unchanged."""
    source, pairs, letters = topics
    wider = upgraded_pairs(app, source, pairs, letters, window=3).graph()
    epoch = read_epoch(settings.zookeeper, app)
    with pytest.raises(ConfigError, match=r"grouping 'pairs' had window 2 .* has 3 now"):
        start_from_savepoint(settings, wider, "v1", renames={"group": "pairs"})
    manifest = saved.directory / "savepoint.json"
    original = manifest.read_bytes()
    body = json.loads(original)
    body["body"]["offsets"][source] = {"0": 0, "1": 0}
    manifest.write_text(json.dumps(body))
    with pytest.raises(Unauthenticated, match="does not verify"):
        load_savepoint(savepoint_root(settings, app), "v1")
    manifest.write_bytes(original)
    assert read_epoch(settings.zookeeper, app) == epoch


_UPGRADED = "integration_tests.harness.upgrades:upgraded_from_env"


def test_a_changed_pipeline_starts_from_a_savepoint(
    stack: Settings, spark: Any, tmp_path: Path
) -> None:
    settings = stack.with_(parallelism=2, snapshot_interval_ms=200)
    bootstrap = settings.kafka_bootstrap
    app = f"savepoint{uuid.uuid4().hex[:6]}"
    source, v1_out, pairs, letters = (f"{app}-{t}" for t in ("lines", "v1", "pairs", "letters"))
    lines = numbered_lines(300, seed=23, words_per_line=5, vocabulary=30)
    v1 = word_pairs(app, source, v1_out)
    assert [n.id for n in v1.graph().nodes if n.kind == "group"] == ["group"]
    with running(settings, spark, v1) as run:
        until = produce_lines(bootstrap, source, lines[:150], partitions=2)
        run.wait_released(until, timeout_s=180)
        # The next snapshot may still be below the input (its slot waits for the
        # barriers' acceptance): wait for one past it, then save the one after.
        snapshot_past(settings, app, until)
        saved = take_savepoint(settings, v1.graph(), "v1", wait_s=60)
    assert saved.slot * DEFAULT_DELTA_MS > until
    assert saved.app == app and saved.operator("group") is not None
    assert [sp.name for sp in list_savepoints(savepoint_root(settings, app))] == ["v1"]
    assert sum(saved.offsets[source].values()) > 0

    _refused_before_anything_changes(settings, app, saved, (source, pairs, letters))

    # The upgrade: the grouping kept under its new name, the letters grouping new.
    v2 = upgraded_pairs(app, source, pairs, letters)
    record, upgrade = start_from_savepoint(settings, v2.graph(), "v1", renames={"group": "pairs"})
    assert dict(upgrade.kept) == {"pairs": "group"}
    assert upgrade.new == ("letters",)
    assert f"sink-{v1_out}" in upgrade.removed
    assert {t: dict(ps) for t, ps in record.offsets.items()} == {
        source: dict(saved.offsets[source])
    }
    with running(settings, spark, v2) as run:
        assert run.epoch == record.epoch
        until = produce_lines(bootstrap, source, lines[150:], partitions=2)
        run.wait_released(until, timeout_s=180)
    output = Counter(pair_key(item) for item in read_output(bootstrap, pairs))
    expected = _pairs_from(bootstrap, source, DEFAULT_DELTA_MS, dict(saved.offsets[source]))
    assert output == expected
    # Carried state shows: pairs whose previous line lies before the savepoint.
    first_half = {str(i) for i in range(150)}
    carried = [k for k in output if json.loads(k)[1][0] in first_half]
    assert len(carried) >= 10
    # The new grouping started empty: each letter's first window holds one pair.
    windows = read_output(bootstrap, letters)
    assert len(windows) == sum(output.values())
    firsts = Counter(letter for letter, words in windows if len(words) == 1)
    assert set(firsts.values()) == {1}
    assert set(firsts) == {json.loads(k)[0][0] for k in output}
    # The command line: the upgraded pipeline's committed snapshot kept as v2, listed.
    names = {"FP_TEST_APP": app, "FP_TEST_SOURCE": source}
    names |= {"FP_TEST_PAIRS": pairs, "FP_TEST_LETTERS": letters}
    run_cli(settings, names, tmp_path, "savepoint", _UPGRADED, "--name", "v2", "--latest")
    listed = run_cli(settings, names, tmp_path, "savepoint", _UPGRADED, "--list")
    assert [line.split("\t")[0] for line in listed.splitlines()] == ["v1", "v2"]
    v2_saved = load_savepoint(savepoint_root(settings, app), "v2")
    assert v2_saved.operator("letters") is not None and v2_saved.epoch == record.epoch
