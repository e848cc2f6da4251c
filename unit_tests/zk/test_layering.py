"""The pure core never imports the fault-tolerance adapters (state backends, ZooKeeper)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "framework" / "core"
FORBIDDEN = ("framework.state", "framework.zk", "kazoo", "rocksdict")


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_core_does_not_import_the_adapters() -> None:
    bad = [
        f"{path.name}: {name}"
        for path in sorted(CORE.glob("*.py"))
        for name in _imports(path)
        if name.startswith(FORBIDDEN)
    ]
    assert bad == []
