"""The cluster tier: a user's ``jobs.py`` runs unchanged on a Spark standalone cluster.

A master and two workers start from pyspark's own jars on 127.0.0.1 (`LocalStack` with
``spark_workers=2``); executors run in JVMs of their own, in the workers' directories.
The user's code lives in a temporary directory that is NOT on the executors' path: a
``jobs.py`` that imports a sibling module ``wordtools.py``, written with the public API
only. ``flamepipe run jobs:<name>_job`` starts each pipeline as a process of its own from
that directory (the driver ships the user's modules, `framework.runners.spark.shipping`).
An independent read_committed reader must see exactly what the in-process harness makes of
the input as Kafka stored it: the same items, none twice, none missing; also after kill -9
of one executor JVM and of one whole worker (restarted) mid-run.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.config import Settings
from framework.coordination.epochs import read_epoch
from framework.core.time import DEFAULT_DELTA_MS
from framework.demos.text import generate_lines
from framework.kafka.admin import TopicSpec, ensure_topics, input_topic_spec
from framework.kafka.cache import ProcessCache
from framework.kafka.clients import read_to_end
from framework.local.provision import free_port
from framework.local.stack import LocalStack
from framework.runners.inprocess.endpoints import SourceRecord
from framework.testing import InProcessRunner, ListSink, ListSource
from framework.wire.dead_letters import read_dead_letter
from framework.wire.serde import Bytes
from integration_tests.harness.http_service import PriceService
from integration_tests.harness.processes import executor_kill, executor_pids
from integration_tests.harness.runs import lose_an_ack, produce_lines, read_output

WORDTOOLS = '''
"""Helpers of the user's jobs: a module of their own, next to jobs.py."""

import json


def ones(line):
    return [(word, 1) for word in line.split()[1:]]


def add(a, b):
    return (a[0], a[1] + b[1])


def window_row(result):
    return [result.key, result.start_ms, result.value[1]]


def ones_column(lines):  # a batch of lines -> per line, its (word, 1) rows, on Arrow
    import pyarrow as pa
    import pyarrow.compute as pc

    words = pc.list_slice(pc.utf8_split_whitespace(lines), 1)  # the line id dropped
    flat = pc.list_flatten(words)
    rows = pa.StructArray.from_arrays([flat, pa.array([1] * len(flat))], names=["w", "n"])
    offsets = pc.subtract(words.offsets, words.offsets[0])
    return pa.ListArray.from_arrays(offsets, rows)


def word_column(rows):
    import pyarrow.compute as pc

    return pc.struct_field(rows, "w")


def column_row(result):
    return [result.key, result.start_ms, result.value["n"]]


def lengths(line):  # per word, its first letter and its length
    return [[word[0], len(word)] for word in line.split()[1:]]


def mean_row(result):
    return [result.key, result.start_ms, result.value]


def tagged(line):
    line_id, *words = line.split()
    return [[word, line_id] for word in words]


def word(item):
    return item[0]


def running_count(window):
    return [window[-1][0], len(window)]


def pair(window):
    return [window[-1][0], [tag for _, tag in window]]


def plus_one(count, _):
    return count + 1


def count_row(update):
    return [update.key, update.value]


def located(message):
    return [message.value, message.partition, message.offset, message.timestamp_ms, message.key]


def priced_by(url):
    """A map_async function: the price service's answer for the row's line (httpx). Its
    client is made on the first call and kept: map_async's event loop outlives a batch."""
    clients = []

    async def priced(row):
        import httpx

        if not clients:
            clients.append(httpx.AsyncClient(timeout=5.0))
        line_id = row[0].split()[0]
        answer = await clients[0].get(url + "/price", params={"line": line_id})
        answer.raise_for_status()
        return [*row, answer.json()["price"]]

    return priced


def opening(line):
    line_id, first, *_ = line.split()
    return [first, line_id]


def joined_row(joined):
    right = None if joined.right is None else joined.right[1]
    return [joined.key, joined.left[1], right]


def first_letter(item):
    return item[0][0]


def letter_window(window):
    return [window[-1][0][0], [item[0] for item in window]]


def stamped(message):  # the line with an event time up to 1.2 s before its append
    line_id = int(message.value.split()[0])
    return [message.value, message.timestamp_ms - (line_id % 5) * 300]


def stamped_words(item):
    line, at = item
    line_id, *words = line.split()
    return [[word, line_id, at] for word in words]


def event_ms(item):
    return item[2]


def count(n, _):
    return n + 1


def event_row(result):
    return ["event", result.key, result.start_ms, result.value]


def session_row(result):
    return ["session", result.key, result.start_ms, result.end_ms, result.value]


def first_row(item):
    return ["first", item[0], item[1]]


def first_word(item):
    line_id, first, *_ = item[0].split()
    return [first, line_id]


def last_word(item):
    *_, last = item[0].split()
    return [last, item[0].split()[0]]


def join_row(joined):
    right = None if joined.right is None else joined.right[1]
    return ["join", joined.key, joined.left[1], right]


def edge_ends(line):  # an edge between the line's first two words, from each end
    _, a, b, *_ = line.split()
    return [[a, [a, [b]]], [b, [b, [a]]]]


def vertex(item):
    return item[0]


def lesser_label(x, y):  # (vertex, (label, neighbours)): the lesser label, all neighbours
    near = sorted(set(x[1][1]) | set(y[1][1]))
    return [x[0], [min(x[1][0], y[1][0]), near]]


def proposals(update):  # a grown state's label, proposed to each neighbour
    label, near = update.value[1]
    return [[other, [label, []]] for other in near]


def vertex_label(update):
    return [update.value[0], update.value[1][0]]


def settled(update):
    return update.value


def itself(item):
    return json.dumps(item)


def tag(kind):
    def tagged_row(row):
        return [kind, row]

    return tagged_row


LINE_V2 = {"type": "record", "name": "Line", "fields": [
    {"name": "n", "type": "long"},
    {"name": "text", "type": "string"},
    {"name": "lang", "type": "string", "default": "en"}]}
SIZE = {"type": "object", "required": ["n", "words", "lang"], "properties": {
    "n": {"type": "integer"}, "words": {"type": "integer"}, "lang": {"type": "string"}}}


def size_row(line):
    return {"n": line["n"], "words": len(line["text"].split()), "lang": line["lang"]}


def size_key(row):
    return f"line-{row['n']}"
'''

JOBS = '''
"""A data engineer's pipelines: the public API and a helper module, nothing else."""

import os

from connectors import ConfluentAvro, ConfluentJson, KafkaSink, KafkaSource
from framework import Mean, Pipeline, Session, Sum, Tumbling

import wordtools as t


def running(app, source, sink):
    """The running count (a whole-history grouping) and beside it a windowed count (an
    aggregate), named so that a savepoint restores both."""
    p = Pipeline(app)
    counted, windowed = p.source(source).broadcast(2)
    running_rows = counted.flat_map(t.tagged).key_by(t.word).group(
        window=1 << 30, name="running"
    ).map(t.running_count)
    window_rows = windowed.flat_map(t.ones).key_by(t.word).aggregate(
        Tumbling(1000), reduce=t.add, combinable=True, name="windows"
    ).map(t.window_row).map(t.tag("windowed"))
    running_rows.merge(window_rows).sink(sink)
    return p


def operators(app, source, sink):
    """Event-time windows (late items dead letters), sessions, dedup and a windowed join
    over one source, and each record's context priced by an HTTP service (map_async:
    calls in flight together, the odd ones failing and retried, a broken line's item a
    dead letter), merged into one sink."""
    p = Pipeline(app)
    records, located = p.source(source).broadcast(2)
    lines = records.map(t.stamped)
    timed, sessions, firsts, joins = lines.broadcast(4)
    words = timed.flat_map(t.stamped_words).key_by(t.word)
    by_event = words.aggregate(
        Tumbling(1000), fold=t.count, initial=0, event_time=t.event_ms, lateness_ms=500
    ).map(t.event_row)
    runs = sessions.flat_map(t.stamped_words).key_by(t.word).aggregate(
        Session(100), fold=t.count, initial=0
    ).map(t.session_row)
    first = firsts.flat_map(t.stamped_words).key_by(t.word).dedup().map(t.first_row)
    openings, endings = joins.broadcast(2)
    joined = openings.map(t.first_word).join_window(
        endings.map(t.last_word), Tumbling(500), key=t.word, how="left"
    ).map(t.join_row)
    service = t.priced_by(os.environ["FP_TEST_SERVICE"])
    priced = located.map(t.located).map_async(service, concurrency=8, backoff_s=0.002)
    by_event.merge(runs, first, joined, priced.map(t.tag("priced"))).sink(sink)
    return p


def words(app, source, sink):
    """The word-count variants above (the windowed one twice: per item and on columns)
    and connected components of the words (a loop: an edge between each line's first two
    words) over one source, merged into one sink: one driver and one set of executors for
    eight stateful pipelines."""
    p = Pipeline(app)
    a, b, c, d, e, f, g, h = p.source(source).broadcast(8)
    windowed_rows = (
        a.flat_map(t.ones)
        .key_by(t.word)
        .aggregate(Tumbling(1000), reduce=t.add, combinable=True)
        .map(t.window_row)
        .map(t.tag("windowed"))
    )
    running_rows = (
        b.flat_map(t.tagged).key_by(t.word).group(window=1 << 30).map(t.running_count)
    ).map(t.tag("running"))
    rolling_rows = (
        c.flat_map(t.tagged).key_by(t.word).fold(0, t.plus_one).map(t.count_row)
    ).map(t.tag("rolling"))
    lines, copy = d.broadcast(2)
    joined_rows = (
        lines.flat_map(t.tagged)
        .join_table(copy.map(t.opening), key=t.word, how="left")
        .map(t.joined_row)
        .map(t.tag("joined"))
    )
    grouped_rows = (
        e.flat_map(t.tagged)
        .key_by(t.word)
        .group(window=2)
        .map(t.pair)
        .key_by(t.first_letter)
        .group(window=3)
        .map(t.letter_window)
        .map(t.tag("two_groupings"))
    )
    columns_rows = (  # the windowed count again, on columns with the built-in Sum
        f.flat_map_batches(t.ones_column)
        .key_by_batches(t.word_column)
        .aggregate(Tumbling(1000), reduce=Sum("n"), combinable=True)
        .map(t.column_row)
        .map(t.tag("columns"))
    )
    mean_rows = (  # the built-in Mean: its subtotals cross the shuffle as partials
        g.flat_map(t.lengths)
        .key_by(t.word)
        .aggregate(Tumbling(1000), reduce=Mean(1), combinable=True)
        .map(t.mean_row)
        .map(t.tag("means"))
    )
    loop = h.flat_map(t.edge_ends).loop(100, name="propagate")  # connected components
    states = loop.stream.key_by(t.vertex).converge(t.lesser_label)
    again, out = states.broadcast(2)
    loop.close(again.flat_map(t.proposals))
    component_rows = (
        out.map(t.vertex_label)
        .key_by(t.vertex)
        .reduce(min, every_ms=500)
        .map(t.settled)
        .key_by(t.itself)
        .dedup()
        .map(t.tag("components"))
    )
    windowed_rows.merge(
        running_rows, rolling_rows, joined_rows, grouped_rows, columns_rows, mean_rows,
        component_rows,
    ).sink(sink)
    return p


def shouted(app, source, sink, shout):
    p = Pipeline(app)
    p.source(source).flat_map(t.tagged).key_by(t.word).group(window=1 << 30).map(
        t.running_count
    ).map(shout).sink(sink)
    return p


def _job(build, context=False):
    env = os.environ
    source = KafkaSource(env["FP_TEST_SOURCE"], partitions=2, context=context)
    return build(env["FP_TEST_APP"], source, KafkaSink(env["FP_TEST_SINK"]))


def words_job():
    """The words pipeline, and beside it in the same driver the registered formats."""
    p = _job(words)
    env = os.environ
    registered(p, env["FP_TEST_REGISTRY"], env["FP_TEST_RSOURCE"], env["FP_TEST_RSINK"])
    return p


def windowed(app, source, sink):
    """The windowed count alone."""
    p = Pipeline(app)
    p.source(source).flat_map(t.ones).key_by(t.word).aggregate(
        Tumbling(1000), reduce=t.add, combinable=True
    ).map(t.window_row).sink(sink)
    return p


def running_job():
    return _job(running)


def continuous_job():
    """The windowed count from one source partition, run as two long-running tasks (the
    source's and the aggregate's, with FLAMEPIPE_PARALLELISM=1): a task slot on each of
    the cluster's two executors."""
    env = os.environ
    source = KafkaSource(env["FP_TEST_SOURCE"], partitions=1)
    return windowed(env["FP_TEST_APP"], source, KafkaSink(env["FP_TEST_SINK"]))


def operators_job():
    return _job(operators, context=True)


def registered(p, url, source, sink):
    """Schema Registry formats: Avro lines in (two schema versions), JSON Schema rows out
    with Avro keys; the serdes run in the executors' Python workers."""
    value = ConfluentAvro(url, reader_schema=t.LINE_V2)
    lines = KafkaSource(source, partitions=2, value=value)
    sized = KafkaSink(sink, value=ConfluentJson(url, t.SIZE), key=t.size_key,
                      key_serde=ConfluentAvro(url, "string"), partitions=2, barriers=2)
    p.source(lines).map(t.size_row).sink(sized)
'''

SCRIPT = '''
"""A script run with `python run_it.py`: Pipeline.run(), no flamepipe command."""

import os

from connectors import KafkaSink, KafkaSource

import jobs


def shout(row):  # defined here, in __main__: it travels to the executors by value
    return [row[0].upper(), row[1]]


env = os.environ
source = KafkaSource(env["FP_TEST_SOURCE"], partitions=2)
jobs.shouted(env["FP_TEST_APP"], source, KafkaSink(env["FP_TEST_SINK"]), shout).run()
'''

NOTEBOOK_CELLS = (
    "import os\nfrom connectors import KafkaSink, KafkaSource\nimport jobs",
    # Defined in the kernel's __main__: it travels to the executors by value.
    "def shout(row):\n    return [row[0].upper(), row[1]]",
    "env = os.environ\nsource = KafkaSource(env['FP_TEST_SOURCE'], partitions=2)\n"
    "p = jobs.shouted(env['FP_TEST_APP'], source, KafkaSink(env['FP_TEST_SINK']), shout)",
    "p.run()",
)

NOTEBOOK_RUNNER = """
\"\"\"Runs notebook.ipynb in a Jupyter kernel (ipykernel), as a notebook user would.\"\"\"

import nbformat
from jupyter_client.channels import HBChannel
from nbclient import NotebookClient

# The kernel's heartbeat must answer within 1 s by default, or the client declares it
# dead while it runs: on 2 busy cores (a Spark driver, executors and a broker starting)
# it once did not. A heartbeat that misses 30 s is a dead kernel.
HBChannel.time_to_dead = 30.0
notebook = nbformat.read("notebook.ipynb", as_version=4)
NotebookClient(notebook, timeout=None, kernel_name="python3",
               resources={"metadata": {"path": "."}}).execute()
"""

# "words" merges the windowed count, the running count (a whole-history grouping), the
# rolling count, the table join and two groupings in a row: one driver start for five
# (each took about a minute alone, mostly starting a driver and its executors);
# "operators" merges the data-engineering operators with map_async calls.
PIPELINES = ("words", "operators")
CONTEXT = frozenset({"operators"})  # pipelines whose source gives records' context
LINES = 400
_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A stack of its own: Kafka, ZooKeeper, a Spark master and two workers of four task
    slots each."""
    base = Settings(
        kafka_port=free_port(),
        controller_port=free_port(),
        zookeeper_port=free_port(),
        state_dir=tmp_path_factory.mktemp("cluster"),
    )
    stack = LocalStack(base, quiet=True)
    try:
        stack.up()
        # Chosen only now: a port picked before Kafka started may be a client's by now.
        settings = base.with_(
            spark_master_port=free_port(),
            spark_workers=2,
            # Continuous stages hold a slot per task; micro-batches use what is offered.
            spark_worker_cores=4,
            registry_port=free_port(),
        )
        stack = LocalStack(settings, quiet=True)
        stack.up()
        yield settings.with_(spark_master=stack.master_url)
    finally:
        ProcessCache.clear_all()  # cached clients of this broker would retry it forever
        stack.down()


@pytest.fixture(scope="module")
def service() -> Iterator[PriceService]:
    """The price service the operators job calls, for its driver and for the oracle."""
    broken = frozenset(i for i in range(LINES) if i % 50 == 7)
    with (
        PriceService(latency_s=0.001, broken=broken) as running,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv("FP_TEST_SERVICE", running.url)
        yield running


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's code: NOT on the executors' path, nor on this process's."""
    root = tmp_path_factory.mktemp("user-code")
    (root / "jobs.py").write_text(textwrap.dedent(JOBS))
    (root / "wordtools.py").write_text(textwrap.dedent(WORDTOOLS))
    (root / "run_it.py").write_text(textwrap.dedent(SCRIPT))
    (root / "run_notebook.py").write_text(NOTEBOOK_RUNNER)
    import nbformat

    cells = [nbformat.v4.new_code_cell(source) for source in NOTEBOOK_CELLS]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(root / "notebook.ipynb"))
    return root


def _driver_env(settings: Settings, app: str, source: str, sink: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        FLAMEPIPE_KAFKA_PORT=str(settings.kafka_port),
        FLAMEPIPE_CONTROLLER_PORT=str(settings.controller_port),
        FLAMEPIPE_ZOOKEEPER_PORT=str(settings.zookeeper_port),
        FLAMEPIPE_STATE_DIR=str(settings.state_dir),
        FLAMEPIPE_SPARK_MASTER=settings.spark_master,
        FLAMEPIPE_PARALLELISM="2",
        FP_TEST_APP=app,
        FP_TEST_SOURCE=source,
        FP_TEST_SINK=sink,
        FP_TEST_SERVICE=os.environ.get("FP_TEST_SERVICE", ""),
    )
    return env


def _oracle(
    user_dir: Path, pipeline: str, app: str, stored: list[Any], *extra: Any
) -> Counter[str]:
    """The in-process harness's output for the input exactly as Kafka stored it."""
    sys.path.insert(0, str(user_dir))
    try:
        jobs = importlib.import_module("jobs")
        ordered = sorted(stored, key=lambda m: (m.partition() or 0, m.offset() or 0))
        source = ListSource.timed(
            [], partitions=2, topic=ordered[0].topic(), context=pipeline in CONTEXT
        )
        source.records = tuple(
            SourceRecord(
                m.partition() or 0, m.offset() or 0, m.timestamp()[1], (m.value() or b"").decode()
            )
            for m in ordered
        )
        built = getattr(jobs, pipeline)(app, source, ListSink(), *extra)
        values = built.run(InProcessRunner()).values()
    finally:
        sys.path.remove(str(user_dir))
        for name in ("jobs", "wordtools"):
            sys.modules.pop(name, None)
    return Counter(json.dumps(v, sort_keys=True) for v in values)


def _launch(
    args: list[str], cwd: Path, env: dict[str, str], log: Path, *, own_session: bool = False
) -> subprocess.Popen[bytes]:
    """This Python running ``args`` in the user's directory, its output in ``log``;
    ``own_session``: in a process group of its own, which `_stop` ends whole (a notebook's
    kernel is a child process that Ctrl-C of its client does not reach)."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=own_session,
        )


def _output(bootstrap: str, sink: str) -> Counter[str]:
    """The sink's items as read_committed shows them now, in canonical JSON."""
    return Counter(json.dumps(v, sort_keys=True) for v in read_output(bootstrap, sink))


def _stop(driver: subprocess.Popen[bytes]) -> None:
    if driver.poll() is not None:
        return
    if os.getpgid(driver.pid) == driver.pid:
        # A group of its own (a notebook client and its kernel): interrupt the kernel's
        # run like a user would (SIGINT), then end whatever is left.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            driver.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(10)
        return
    driver.send_signal(signal.SIGINT)  # flamepipe run stops cleanly on Ctrl-C
    try:
        driver.wait(60)
    except subprocess.TimeoutExpired:
        driver.kill()
        driver.wait(10)


def _whole_output(
    bootstrap: str, sink: str, expected: Counter[str], driver: subprocess.Popen[bytes]
) -> Counter[str]:
    """The output once it holds as many items as ``expected`` (or the driver ended), read
    3 s later: anything beyond the expected output would show by then."""
    _wait(
        lambda: (
            len(read_output(bootstrap, sink)) >= sum(expected.values()) or driver.poll() is not None
        ),
        "the whole output",
    )
    time.sleep(3)
    return _output(bootstrap, sink)


def _log_tail(*logs: Path) -> tuple[str, str]:
    """The logs' text, and its last 3 000 characters without librdkafka's lines."""
    text = "".join(log.read_text(errors="replace") for log in logs)
    return text, "\n".join(ln for ln in text.splitlines() if not ln.startswith("%"))[-3000:]


def _shipped(log: Path) -> str:
    """The driver log's tail (librdkafka lines left out), once it says the user's helper
    module was shipped to the executors."""
    text, tail = _log_tail(log)
    assert "shipped wordtools to the executors" in text, tail
    return tail


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_users_jobs_run_unchanged_on_the_cluster(
    cluster: Settings, user_dir: Path, service: PriceService, pipeline: str, tmp_path: Path
) -> None:
    _run_job(cluster, user_dir, service, pipeline, tmp_path)


@pytest.mark.parametrize(
    ("pipeline", "parallelism"), [("operators", 2), ("running", 2), ("running", 1)]
)
def test_every_operator_runs_in_continuous_stages(  # noqa: PLR0917 - fixtures and parameters
    stack: Settings,
    user_dir: Path,
    service: PriceService,
    pipeline: str,
    parallelism: int,
    tmp_path: Path,
) -> None:
    """The operators job (event-time windows, dead letters of late readings, sessions,
    dedup, a windowed join, map_async with failures, record context) and the running job
    (a grouping and an aggregate) with ``execution=continuous``: a local driver process
    with a task slot for each long-running task. The same output as the in-process
    harness's, so the running job's output at parallelism 1 and 2 is the same too."""
    extra = {
        "FLAMEPIPE_EXECUTION": "continuous",
        "FLAMEPIPE_SPARK_MASTER": "local[32]",
        "FLAMEPIPE_PARALLELISM": str(parallelism),
    }
    _run_job(stack, user_dir, service, pipeline, tmp_path, extra=extra)


def _run_job(
    settings: Settings,
    user_dir: Path,
    service: PriceService,
    pipeline: str,
    tmp_path: Path,
    *,
    extra: dict[str, str] | None = None,
) -> None:
    """``flamepipe run jobs:<pipeline>_job`` against ``settings``' stack until its output
    is complete; it must equal the in-process harness's."""
    run = uuid.uuid4().hex[:6]
    app, source, sink = f"cl-{pipeline.replace('_', '-')}-{run}", f"cl-in-{run}", f"cl-out-{run}"
    bootstrap = settings.kafka_bootstrap
    ensure_topics(bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
    lines = [f"{i} {line}" for i, line in enumerate(generate_lines(LINES, seed=11))]
    produce_lines(bootstrap, source, lines, 2)
    expected = _oracle(user_dir, pipeline, app, read_to_end(bootstrap, source))
    assert sum(expected.values()) > 0

    log = tmp_path / "driver.log"
    env = _driver_env(settings, app, source, sink)
    env.update(extra or {})
    registered = _Registered(settings, run) if pipeline == "words" else None
    env.update(registered.env() if registered else {})
    driver = _launch(["-m", "framework.cli", "run", f"jobs:{pipeline}_job"], user_dir, env, log)
    try:
        deadline = time.monotonic() + _TIMEOUT_S
        seen: Counter[str] = Counter()
        while time.monotonic() < deadline and driver.poll() is None:
            seen = _output(bootstrap, sink)
            if sum(seen.values()) >= sum(expected.values()) and (
                registered is None or registered.done()
            ):
                break
            time.sleep(2)
        time.sleep(3)  # anything beyond the expected output would show by now
        seen = _output(bootstrap, sink)
    finally:
        _stop(driver)
    tail = _shipped(log)
    if registered is not None:
        registered.check(tail)
    assert seen == expected, (
        f"{pipeline}: {sum(seen.values())} items read, {sum(expected.values())} expected; "
        f"missing {sum((expected - seen).values())}, extra {sum((seen - expected).values())}"
        f"\n{tail}"
    )
    if pipeline == "operators":  # the broken lines' priced items, each a dead letter
        letters = read_to_end(bootstrap, f"{app}.dlq")
        dead = [m.value() for m in letters if not read_dead_letter(m).reason.startswith("late")]
        assert sorted(int((v or b"").split()[0]) for v in dead) == sorted(service.broken)


class _Registered:
    """The registered formats' input and output beside the words job (one driver for
    both): Avro values of two schema versions in, JSON Schema values and Avro keys out.
    The registry serdes are pickled to the executors and make their own clients there.
    The sink has two partitions and two barrier instances: the executors route each item
    to its partition's instance."""

    def __init__(self, cluster: Settings, run: str) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        self.bootstrap = cluster.kafka_bootstrap
        self.source, self.sink = f"cl-rin-{run}", f"cl-rout-{run}"
        ensure_topics(self.bootstrap, [input_topic_spec(self.source, 2), TopicSpec(self.sink, 2)])
        self.url = f"http://127.0.0.1:{cluster.registry_port}/apis/ccompat/v7"
        self.client = SchemaRegistryClient({"url": self.url})
        v1 = {
            "type": "record",
            "name": "Line",
            "fields": [{"name": "n", "type": "long"}, {"name": "text", "type": "string"}],
        }
        v2 = {**v1, "fields": [*v1["fields"], {"name": "lang", "type": "string", "default": "en"}]}
        old = AvroSerializer(self.client, json.dumps(v1))
        new = AvroSerializer(self.client, json.dumps(v2))
        ctx = SerializationContext(self.source, MessageField.VALUE)
        producer = Producer({"bootstrap.servers": self.bootstrap})
        self.expected: dict[str, Any] = {}
        for n, text in enumerate(generate_lines(120, seed=5)):
            lang = "en" if n < 60 else "de"
            value = (
                old({"n": n, "text": text}, ctx)
                if n < 60
                else new({"n": n, "text": text, "lang": lang}, ctx)
            )
            producer.produce(self.source, value=value, partition=n % 2)
            self.expected[f"line-{n}"] = {"n": n, "words": len(text.split()), "lang": lang}
        producer.flush(30)

    def env(self) -> dict[str, str]:
        return {
            "FP_TEST_REGISTRY": self.url,
            "FP_TEST_RSOURCE": self.source,
            "FP_TEST_RSINK": self.sink,
        }

    def done(self) -> bool:
        return len(read_to_end(self.bootstrap, self.sink)) >= len(self.expected)

    def check(self, tail: str) -> None:
        from confluent_kafka.schema_registry.avro import AvroDeserializer
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        records = read_to_end(self.bootstrap, self.sink)
        keys = AvroDeserializer(self.client)
        values = JSONDeserializer(None, schema_registry_client=self.client)
        out_key = SerializationContext(self.sink, MessageField.KEY)
        out_value = SerializationContext(self.sink, MessageField.VALUE)
        got = {keys(m.key(), out_key): values(m.value(), out_value) for m in records}
        assert len(records) == len(self.expected) and got == self.expected, tail
        assert {m.partition() for m in records} == {0, 1}
        # Each partition: one sequence of bundles.
        assert _verified_items(self.bootstrap, self.sink) == len(self.expected)


def _verified_items(bootstrap: str, topic: str) -> int:
    """Items in the bundles a verifying consumer reads from every partition of ``topic``."""
    from connectors import BundleConsumer

    with BundleConsumer(bootstrap, topic, f"verify-{uuid.uuid4().hex}", Bytes()) as consumer:
        return sum(len(bundle.items) for bundle in consumer.bundles(to_end=True))


def _wait(condition: Any, what: str, timeout_s: float = _TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def _kill_executor_and_worker(cluster: Settings, between: Callable[[], object]) -> list[str]:
    """kill -9 of one executor JVM (its tasks run again elsewhere), ``between``, then of a
    whole worker (and with it its executors), restarted 5 s later; what was killed."""
    executors = executor_pids(cluster.state_dir)
    assert executors, "no executor JVM of the cluster found"
    os.kill(executors[0], signal.SIGKILL)
    between()
    time.sleep(5)
    worker = LocalStack(cluster, quiet=True)._workers(1)[0]
    pid = worker.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    time.sleep(5)
    LocalStack(cluster, quiet=True).up()
    return [f"executor {executors[0]}", f"worker {pid}"]


# On micro-batches the executor kill holds the output ~30 s (Spark re-runs the lost
# executor's tasks of the running batch) and the test takes 155 s; the broker-crash tier
# kills an executor on micro-batches too, so that variant runs with the slow tests.
@pytest.mark.parametrize(
    "execution", [pytest.param("micro-batch", marks=pytest.mark.slow), "continuous"]
)
def test_executor_and_worker_kills_then_an_upgrade_from_a_savepoint_lose_nothing(
    cluster: Settings, user_dir: Path, tmp_path: Path, execution: str
) -> None:
    """kill -9 of one executor JVM, then of one whole worker (restarted 5 s later), while
    the running count (grouping state rebuilt from changelogs on another executor) and a
    windowed count (an aggregate) run; then, as a user upgrades a job: ``flamepipe
    savepoint`` while input flows, more input, the driver stopped, more input, and
    ``flamepipe upgrade --savepoint``: the new epoch's executors restore the grouping and
    the aggregate from the savepoint's cut and replay from its offsets. Nothing is lost
    and nothing the first epoch released comes out again. In continuous execution the
    six long-running tasks hold six of the cluster's eight slots; the worker kill takes
    half of them until the worker is back."""
    run = uuid.uuid4().hex[:6]
    app, source, sink = f"cl-faults-{run}", f"cl-fin-{run}", f"cl-fout-{run}"
    bootstrap = cluster.kafka_bootstrap
    ensure_topics(bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
    lines = [f"{i} {line}" for i, line in enumerate(generate_lines(5 * LINES, seed=13))]
    chunks = [lines[i * LINES // 2 : (i + 1) * LINES // 2] for i in range(10)]
    produce_lines(bootstrap, source, chunks[0], 2)

    def output() -> int:
        return len(read_output(bootstrap, sink))

    env = _driver_env(cluster, app, source, sink)
    env.update(FLAMEPIPE_EXECUTION=execution)
    log = tmp_path / "driver.log"
    driver = _launch(["-m", "framework.cli", "run", "jobs:running_job"], user_dir, env, log)
    try:
        _wait(lambda: output() > 0 or driver.poll() is not None, "the first output")
        kills = _kill_executor_and_worker(
            cluster, lambda: produce_lines(bootstrap, source, chunks[1], 2)
        )
        produce_lines(bootstrap, source, chunks[2], 2)
        # A savepoint while input flows; more input, some of it released before the stop.
        saving = _launch(
            ["-m", "framework.cli", "savepoint", "jobs:running_job", "--name", "mid",
             "--wait", "120"],
            user_dir, env, tmp_path / "savepoint.log",
        )  # fmt: skip
        for chunk in chunks[3:6]:
            produce_lines(bootstrap, source, chunk, 2)
            time.sleep(1)
        assert saving.wait(180) == 0, (tmp_path / "savepoint.log").read_text()[-3000:]
        produce_lines(bootstrap, source, chunks[6], 2)
        before = output()
        _wait(lambda: output() > before or driver.poll() is not None, "output past the savepoint")
    finally:
        _stop(driver)
    assert driver.returncode is not None
    # The rest arrives while no driver runs; the next epoch starts from the savepoint.
    for chunk in chunks[7:]:
        produce_lines(bootstrap, source, chunk, 2)
    expected = _oracle(user_dir, "running", app, read_to_end(bootstrap, source))
    upgrade_log = tmp_path / "upgrade.log"
    upgrade = ["-m", "framework.cli", "upgrade", "jobs:running_job", "--savepoint", "mid"]
    driver = _launch(upgrade, user_dir, env, upgrade_log)
    try:
        seen = _whole_output(bootstrap, sink, expected, driver)
    finally:
        _stop(driver)
    text, tail = _log_tail(log, upgrade_log)
    assert "state kept: running, windows" in text, tail
    if execution == "continuous":
        assert "runs as 2 continuous tasks" in text, tail
    assert seen == expected, (
        f"after kills {kills} and an upgrade: {sum(seen.values())} items read, "
        f"{sum(expected.values())} expected; missing {sum((expected - seen).values())}, "
        f"extra {sum((seen - expected).values())}\n{tail}"
    )


@pytest.mark.parametrize("layout", ["per-stage", "shared"])
def test_continuous_stages_run_on_the_cluster_through_an_executor_kill(
    cluster: Settings, user_dir: Path, tmp_path: Path, layout: str
) -> None:
    """The windowed count with ``execution=continuous``: its long-running tasks hold task
    slots on the executors. kill -9 of an executor JVM mid-run (per stage: one of them;
    shared, every one): the worker starts a new one, Spark runs the lost tasks there, and
    the new tasks fence whatever is left of the old ones. Shared, one source partition
    and two hash units make two tasks: the source's and unit 0's loops take turns in the
    first, unit 1 has the second alone. The output equals the in-process harness's."""
    run = uuid.uuid4().hex[:6]
    app, source, sink = f"cl-cont-{run}", f"cl-cin-{run}", f"cl-cout-{run}"
    bootstrap = cluster.kafka_bootstrap
    ensure_topics(bootstrap, [input_topic_spec(source, 1), TopicSpec(sink, 1)])
    lines = [f"{i} {line}" for i, line in enumerate(generate_lines(2 * LINES, seed=17))]
    chunks = [lines[i * LINES // 2 : (i + 1) * LINES // 2] for i in range(4)]
    produce_lines(bootstrap, source, chunks[0], 1)

    def output() -> int:
        return len(read_output(bootstrap, sink))

    env = _driver_env(cluster, app, source, sink)
    shared = layout == "shared"
    env.update(
        FLAMEPIPE_EXECUTION="continuous",
        FLAMEPIPE_PARALLELISM="2" if shared else "1",
        FLAMEPIPE_CONTINUOUS_TASKS=layout,
    )
    log = tmp_path / "driver.log"
    driver = _launch(["-m", "framework.cli", "run", "jobs:continuous_job"], user_dir, env, log)
    try:
        _wait(lambda: output() > 0 or driver.poll() is not None, "the first output")
        killed = executor_pids(cluster.state_dir)[: None if shared else 1]
        assert killed, "no executor to kill"
        for pid in killed:
            executor_kill(pid)
        for chunk in chunks[1:]:
            produce_lines(bootstrap, source, chunk, 1)
            time.sleep(1)
        expected = _oracle(user_dir, "windowed", app, read_to_end(bootstrap, source))
        seen = _whole_output(bootstrap, sink, expected, driver)
    finally:
        _stop(driver)
    tail = _shipped(log)
    assert not set(killed) & set(executor_pids(cluster.state_dir))
    assert ("sharing them with the other stages" in log.read_text()) == shared, tail
    assert seen == expected, (
        f"continuous ({layout}), executors {killed} killed: {sum(seen.values())} items read, "
        f"{sum(expected.values())} expected; missing {sum((expected - seen).values())}, "
        f"extra {sum((seen - expected).values())}\n{tail}"
    )


def _shout(row: list[Any]) -> list[Any]:
    return [row[0].upper(), row[1]]


@pytest.mark.parametrize("how", ["script", "notebook"])
def test_a_script_or_notebook_calling_pipeline_run_runs_on_the_cluster(
    cluster: Settings, user_dir: Path, tmp_path: Path, how: str
) -> None:
    """``python run_it.py``, or the same cells in a Jupyter kernel (``Pipeline.run()``): a
    function of ``__main__`` travels by value, the modules it uses are shipped. The script
    runs with ``fuse_stages``: its source stage and its grouping are one query, whose
    shuffle crosses the executors' JVMs."""
    run = uuid.uuid4().hex[:6]
    app, source, sink = f"cl-script-{run}", f"cl-sin-{run}", f"cl-sout-{run}"
    bootstrap = cluster.kafka_bootstrap
    ensure_topics(bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
    lines = [f"{i} {line}" for i, line in enumerate(generate_lines(LINES, seed=17))]
    produce_lines(bootstrap, source, lines, 2)
    expected = _oracle(user_dir, "shouted", app, read_to_end(bootstrap, source), _shout)
    log = tmp_path / "script.log"
    argv = ["run_it.py"] if how == "script" else ["run_notebook.py"]
    env = _driver_env(cluster, app, source, sink)
    if how == "script":
        env["FLAMEPIPE_FUSE_STAGES"] = "true"
        env["FLAMEPIPE_EXECUTION"] = "micro-batch"  # fused stages run micro-batches only
    script = _launch(argv, user_dir, env, log, own_session=how == "notebook")
    try:
        seen = _whole_output(bootstrap, sink, expected, script)
    finally:
        _stop(script)
    _, tail = _log_tail(log)
    # The driver's own log file, not its console: a kernel's stderr goes to the notebook's
    # cell outputs, which reach the client's log only now and then.
    driver_log = (cluster.state_dir / "logs" / "flamepipe.log").read_text(errors="replace")
    assert any(
        "shipped wordtools to the executors" in line and f"/apps/{app}/" in line
        for line in driver_log.splitlines()
    ), tail
    fused = any(
        f"{app}: stages" in line and "run fused as one query" in line
        for line in driver_log.splitlines()
    )
    assert fused == (how == "script"), tail
    assert seen == expected, (
        f"{sum(seen.values())} items read, {sum(expected.values())} expected\n{tail}"
    )


def test_a_stall_recovery_in_the_running_driver_completes_on_the_cluster(
    cluster: Settings, user_dir: Path, tmp_path: Path
) -> None:
    """A lost ack stalls min time; the stall watch starts epoch 1 inside the running
    ``flamepipe run``, which starts its queries again in the same Spark context on the
    standalone master: its shipped code is added once (a second file of the same name,
    from another directory, was refused), and the output completes equal to the oracle."""
    run = uuid.uuid4().hex[:6]
    app, source, sink = f"cl-stall-{run}", f"cl-tin-{run}", f"cl-tout-{run}"
    bootstrap = cluster.kafka_bootstrap
    ensure_topics(bootstrap, [input_topic_spec(source, 2), TopicSpec(sink, 1)])
    lines = [f"{i} {line}" for i, line in enumerate(generate_lines(2 * LINES, seed=19))]
    produce_lines(bootstrap, source, lines[:LINES], 2)
    env = _driver_env(cluster, app, source, sink)
    env.update(FLAMEPIPE_STALL_TIMEOUT_MS="15000", FLAMEPIPE_SNAPSHOT_INTERVAL_MS="300")
    log = tmp_path / "driver.log"
    driver = _launch(["-m", "framework.cli", "run", "jobs:running_job"], user_dir, env, log)
    try:
        _wait(lambda: len(read_output(bootstrap, sink)) > 0 or driver.poll() is not None,
              "the first output")  # fmt: skip
        graph = _graph(user_dir, "running", app, source, sink)
        now_slot = time.time_ns() // 1_000_000 // DEFAULT_DELTA_MS
        lose_an_ack(bootstrap, app, graph.segments().of_node["running"], now_slot + 50,
                    cluster.acker_shards)  # fmt: skip
        for start in range(LINES, 2 * LINES, LINES // 4):
            produce_lines(bootstrap, source, lines[start : start + LINES // 4], 2)
            time.sleep(0.5)
        expected = _oracle(user_dir, "running", app, read_to_end(bootstrap, source))
        seen = _whole_output(bootstrap, sink, expected, driver)
    finally:
        _stop(driver)
    text, tail = _log_tail(log)
    assert "epoch 1 started (recovery: min time stalled" in text, tail
    assert "shipped wordtools to the executors already" in text, tail
    assert "already registered with a different path" not in text, tail
    record = read_epoch(cluster.zookeeper, app)
    # A snapshot inside a pane of the combinable windowed count lost the earlier items of
    # partials that straddled it (`framework.snapshots.coordinator.combining_pane`).
    assert record is not None, tail
    assert record.snapshot is None or record.snapshot % 100 == 0, record
    assert seen == expected, (
        f"{sum(seen.values())} items read, {sum(expected.values())} expected; missing "
        f"{sorted(expected - seen)[:8]}, extra {sorted(seen - expected)[:8]}\n{tail}"
    )


def _graph(user_dir: Path, pipeline: str, app: str, source: str, sink: str) -> Any:
    """The user's pipeline's graph as its driver builds it."""
    sys.path.insert(0, str(user_dir))
    try:
        jobs = importlib.import_module("jobs")
        from connectors import KafkaSink, KafkaSource

        return getattr(jobs, pipeline)(
            app, KafkaSource(source, partitions=2), KafkaSink(sink)
        ).graph()
    finally:
        sys.path.remove(str(user_dir))
        for name in ("jobs", "wordtools"):
            sys.modules.pop(name, None)


_EXECUTOR_PROBE = """
import sys, time
from pathlib import Path
from framework.config import Settings
from framework.spark import spark_session
from integration_tests.harness.processes import executor_pids
settings = Settings.load().with_(spark_master=sys.argv[1])
spark = spark_session(settings, "class-archive-probe")
spark.range(100).repartition(4).count()
pids = executor_pids(Path(sys.argv[2]))
maps = [open(f"/proc/{pid}/maps").read() for pid in pids]
spark.stop()
sys.stdout.write(" ".join("mapped" if sys.argv[3] in m else "unmapped" for m in maps))
"""


def test_the_clusters_executors_map_their_class_archive(cluster: Settings) -> None:
    from framework.runners.spark.class_archive import build_executor_archive

    archive = build_executor_archive(cluster)  # bootstrap built it already, or now
    assert archive is not None, "the executors' class archive could not be built (see the log)"
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _EXECUTOR_PROBE, cluster.spark_master, str(cluster.state_dir),
         str(archive)],
        capture_output=True, text=True, timeout=300, check=False, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # Every executor of the app (one per worker) maps it: -Xshare:auto would run without.
    assert done.stdout.split() == ["mapped", "mapped"]
