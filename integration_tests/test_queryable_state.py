"""Queryable state against the real stack: values read over HTTP while the pipeline runs
equal the oracle at the global time each answer says it is as of.

One pipeline holds both kinds of state on the same words: a grouping (``pairs``, window
2: a word's state is its last occurrence) and a rolling count (``counts``). Input keeps
arriving (~100 lines/s) while answers are read; every answer for a handful of words is
checked against what the stored input says at the answer's ``as_of_slot``: an answer
that held uncommitted or speculative state, or was not as of the time it claims, would
differ.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from framework.config import Settings
from framework.core.time import DEFAULT_DELTA_MS, GlobalTime
from framework.demos.text import generate_lines
from framework.kafka.clients import read_to_end
from framework.operations.queryable_state import StateServer, open_state
from integration_tests.harness.runs import produce_lines, running
from integration_tests.harness.services import run_cli
from integration_tests.harness.state_jobs import pairs_and_counts

NEVER = "never-a-word"
_SPEC = "integration_tests.harness.state_jobs:from_env"


def _trickle(bootstrap: str, topic: str, lines: list[str]) -> None:
    """``lines`` over 2 partitions at ~100 lines/s: input keeps arriving while answers are read."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i, line in enumerate(lines):
        producer.produce(topic, value=line.encode(), partition=i % 2)
        if i % 5 == 4:
            producer.flush(10)
            time.sleep(0.05)
    producer.flush(30)


def _get(url: str, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url + path, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _ask(url: str, node: str, word: str) -> dict[str, Any]:
    status, body = _get(url, f"state/{node}?key={urllib.parse.quote(json.dumps(word))}")
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def _occurrences(bootstrap: str, topic: str, delta_ms: int) -> dict[str, list[tuple[Any, str]]]:
    """Per word, its occurrences in global-time order: (global time, line id)."""
    seen: dict[str, list[tuple[Any, int, str]]] = {}
    for msg in read_to_end(bootstrap, topic):
        _, stamp = msg.timestamp()
        gt = GlobalTime.of_record(stamp, topic, msg.partition() or 0, msg.offset() or 0, delta_ms)
        line_id, *words = (msg.value() or b"").decode().split()
        for child, word in enumerate(words):
            seen.setdefault(word, []).append((gt, child, line_id))
    return {w: [(gt, line) for gt, _, line in sorted(v)] for w, v in seen.items()}


def _expected(answer: dict[str, Any], occurrences: list[tuple[Any, str]]) -> Any:
    before = [line for gt, line in occurrences if gt.slot < answer["as_of_slot"]]
    if answer["node"] == "pairs":
        return [[answer["key"], line] for line in before[-1:]]
    return len(before) if before else None


def _caught_up(url: str, last_slots: dict[str, int]) -> list[dict[str, Any]]:
    """Both operators' answers for the words of ``last_slots``, once each is as of a slot
    past its word's (or after 60 s: the caller's assertion says so)."""
    deadline = time.monotonic() + 60
    while True:
        last = [_ask(url, node, w) for node in ("pairs", "counts") for w in last_slots]
        caught_up = all(a["as_of_slot"] > last_slots[a["key"]] for a in last)
        if caught_up or time.monotonic() > deadline:
            return last
        time.sleep(0.2)


def _check_routes(url: str) -> None:
    assert _get(url, "state") == (200, {"pairs": "grouping", "counts": "rolling"})
    status, body = _get(url, "state/map-pair?key=%22a%22")
    assert status == 404 and "groupings and rolling aggregates" in body["error"]
    assert _get(url, "state/pairs?key=word")[0] == 400


def test_state_read_while_running_equals_the_oracle_as_of_its_time(
    stack: Settings, spark: Any, tmp_path: Path
) -> None:
    settings = stack.with_(parallelism=2, snapshot_interval_ms=300)
    bootstrap = settings.kafka_bootstrap
    app = f"state{uuid.uuid4().hex[:6]}"
    source = f"{app}-lines"
    texts = generate_lines(300, words_per_line=5, vocabulary=30, seed=29)
    lines = [f"{i} {text}" for i, text in enumerate(texts)]
    common = [w for w, _ in Counter(w for t in texts for w in t.split()).most_common(5)]
    pipeline = pairs_and_counts(app, source, f"{app}-pairs", f"{app}-counts")
    names = {"FP_TEST_APP": app, "FP_TEST_SOURCE": source}
    answers: list[dict[str, Any]] = []
    with running(settings, spark, pipeline) as run:
        until = produce_lines(bootstrap, source, lines[:50], partitions=2)
        run.wait_released(until, timeout_s=180)
        with open_state(settings, pipeline.graph()) as reader:
            server = StateServer(reader)
            server.start()
            try:
                _check_routes(server.url)
                trickle = threading.Thread(target=_trickle, args=(bootstrap, source, lines[50:]))
                trickle.start()
                while trickle.is_alive():  # answers while items are in flight
                    for word in [*common, NEVER]:
                        answers.append(_ask(server.url, "pairs", word))
                        answers.append(_ask(server.url, "counts", word))
                trickle.join()
                until = time.time_ns() // 1_000_000
                run.wait_released(until, timeout_s=180)
                # Caught up: each answer is as of a time past its word's last occurrence
                # (not past the clock: a rolling aggregate's unit answers as of its last
                # batch, and none runs once its last item is folded).
                occurrences = _occurrences(bootstrap, source, DEFAULT_DELTA_MS)
                last = {w: occurrences[w][-1][0].slot for w in common}
                answers += _caught_up(server.url, last)
                word = common[0]
                args = ("state", "get", _SPEC, "counts", json.dumps(word))
                via_cli = json.loads(run_cli(settings, names, tmp_path, *args))
            finally:
                server.stop()
    for answer in answers:
        expected = _expected(answer, occurrences.get(answer["key"], []))
        assert answer["found"] == (expected not in (None, [])), answer
        assert answer["value"] == (expected if answer["found"] else None), (answer, expected)
    final = answers[-2 * len(common) :]
    assert all(a["as_of_slot"] > last[a["key"]] for a in final), "the state never caught up"
    counts = {a["key"]: a["value"] for a in final if a["node"] == "counts"}
    assert counts == {w: len(occurrences[w]) for w in common}
    # Read while input arrived: the answers' times moved, and some lagged the final counts.
    assert len({a["as_of_slot"] for a in answers if a["node"] == "pairs"}) >= 3
    assert len({a["as_of_slot"] for a in answers if a["node"] == "counts"}) >= 3
    assert any(a["value"] != counts[a["key"]] for a in answers[:-10] if a["node"] == "counts")
    assert via_cli["node"] == "counts" and via_cli["value"] == counts[word]
