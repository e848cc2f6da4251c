"""The allowed imports: layers point inward, and this table is the one place that says so.

Read bottom-up: a layer may import the layers it lists (and itself), nothing else of
flamepipe; third-party packages are allowed only where ``THIRD_PARTY`` says. Lazy imports
inside functions count the same as imports at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BASE = (
    "framework.errors",
    "framework.failpoints",
    "framework.deadline",
    "framework.logs",
    "framework.net",
    "framework.service",
    "framework.retries",
)
CORE = (*BASE, "framework.core")
WIRE = (*CORE, "framework.wire", "schemas")
KAFKA = (*WIRE, "framework.kafka")
ROLES = (*KAFKA, "framework.plan", "framework.coordination")
# The runners and the operations beside them (each may import the other).
RUNNING = (
    *ROLES,
    "framework.acker",
    "framework.barrier",
    "framework.snapshots",
    "framework.runners",
    "framework.operations",
    "framework.config",
)

# layer prefix -> the prefixes it may import (longest prefix decides a module's layer)
ALLOWED: dict[str, tuple[str, ...]] = {
    "framework.errors": (),
    "framework.failpoints": ("framework.errors",),
    "framework.deadline": ("framework.errors",),
    "framework.service": ("framework.errors", "framework.deadline"),
    "framework.retries": ("framework.errors", "framework.deadline"),
    "framework.logs": (),
    "framework.net": (),
    "framework.config": (*BASE, "framework.config"),
    "framework.core": CORE,
    "framework.wire": WIRE,
    "framework.kafka": KAFKA,
    "framework.coordination": (*WIRE, "framework.coordination"),
    "framework.plan": (*WIRE, "framework.plan"),
    "framework.acker": (*ROLES, "framework.acker"),
    "framework.barrier": (*ROLES, "framework.barrier"),
    "framework.snapshots": (*ROLES, "framework.snapshots", "framework.config"),
    "framework.local": (*BASE, "framework.config", "framework.local"),
    "framework.runners": (*RUNNING, "framework.local", "framework.pipeline"),
    # Beside the runners: what prepares the epochs they start.
    "framework.operations": RUNNING,
    # The user-facing facades: what a pipeline author imports.
    "framework.pipeline": (*CORE, "framework.runners.spark.default"),
    "framework.testing": ("framework.runners.inprocess",),
    "framework.spark": ("framework.runners.spark",),
    "framework.state": ("framework.operations.queryable_state", "framework.snapshots.queryable"),
    "framework": ("framework.core", "framework.errors", "framework.pipeline"),
    "connectors": (*KAFKA, "framework", "framework.config", "connectors"),
    # The command line and the demo sit on top of everything.
    "framework.demos": ("framework", "connectors"),
    "framework.cli": ("framework", "connectors"),
}

# Third-party packages by layer: the pure core and the byte formats import neither Spark,
# Kafka nor ZooKeeper; only the Kafka layer (and what sits above it) makes Kafka clients.
THIRD_PARTY = (
    "pyspark",
    "confluent_kafka",
    "kazoo",
    "rocksdict",
    "testcontainers",
    "py4j",
    "prometheus_client",
    "rich",
)
THIRD_PARTY_ALLOWED: dict[str, tuple[str, ...]] = {
    "framework.kafka": ("confluent_kafka",),
    "framework.coordination": ("kazoo",),
    "framework.acker": ("confluent_kafka",),
    "framework.barrier": ("confluent_kafka",),
    "framework.snapshots": ("confluent_kafka", "rocksdict"),
    "framework.runners": ("confluent_kafka", "kazoo", "pyspark", "py4j"),
    "framework.operations": ("confluent_kafka", "kazoo"),
    # Watching a run: metrics and the console sit beside the runners, not in the data path.
    "framework.runners.observe": ("prometheus_client", "rich"),
    "framework.local": ("testcontainers", "confluent_kafka"),
    "framework.demos": ("confluent_kafka", "pyspark"),
    "framework.cli": ("confluent_kafka", "kazoo", "pyspark", "rich"),
    "connectors": ("confluent_kafka",),
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str, table: dict[str, tuple[str, ...]]) -> str | None:
    best = None
    for prefix in table:
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best)
        ):
            best = prefix
    return best


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _imports(path: Path, module: str) -> list[str]:
    names: list[str] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                names.append(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                # ``from framework import failpoints`` imports framework.failpoints only
                subs = [f"{node.module}.{a.name}" for a in node.names]
                modules = [name for name in subs if _is_module(name)]
                names += modules if len(modules) == len(subs) else [node.module, *modules]
    return names


def _sources() -> list[tuple[Path, str]]:
    paths = sorted((ROOT / "framework").rglob("*.py")) + sorted((ROOT / "connectors").rglob("*.py"))
    return [(p, _module(p)) for p in paths]


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module or package of flamepipe (not a name inside one)."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_every_module_has_a_layer() -> None:
    assert [m for _, m in _sources() if _layer(m, ALLOWED) is None] == []


def test_imports_point_inward() -> None:
    bad = []
    for path, module in _sources():
        layer = _layer(module, ALLOWED)
        assert layer is not None
        for name in _imports(path, module):
            if not name.startswith(("framework", "connectors", "schemas")) or not _is_module(name):
                continue
            own = () if layer == "framework" else (layer,)
            if not _under(name, (*ALLOWED[layer], *own)):
                bad.append(f"{module} -> {name}")
    assert bad == [], "\n".join(bad)


def test_third_party_clients_only_where_allowed() -> None:
    bad = []
    for path, module in _sources():
        layer = _layer(module, THIRD_PARTY_ALLOWED) or ""
        allowed = THIRD_PARTY_ALLOWED.get(layer, ())
        for name in _imports(path, module):
            top = name.split(".")[0]
            if top in THIRD_PARTY and top not in allowed:
                bad.append(f"{module} -> {name}")
    assert bad == [], "\n".join(bad)


def test_the_table_sees_the_tree() -> None:
    """The check above can fail: a known inward import is seen, an outward one is caught."""
    imports = dict(_sources())
    assert any(m == "framework.barrier.service" for m in imports.values())
    assert not _under("framework.runners.assembly", ALLOWED["framework.core"])
    assert _under("framework.core.time", ALLOWED["framework.wire"])


def _module_level_imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The flamepipe modules ``module`` imports when it is imported (not the imports inside
    functions or under ``if TYPE_CHECKING``), each resolved to the longest known module."""

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            target = resolve(name)
            if target is not None and target != module:
                found.add(target)
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle() -> None:
    """No module imports, at import time, one that imports it back (through any others)."""
    sources = dict(_sources())
    known = set(sources.values())
    graph = {module: _module_level_imports(path, module, known) for path, module in sources.items()}
    assert _circles(graph) == []
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
