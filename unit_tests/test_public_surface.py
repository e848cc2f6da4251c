"""The API is what the facades list in ``__all__``; every other module is internal.

A module of flamepipe with an ``__all__`` is one a user imports: one that the table in
docs/architecture.md's "The API" names (this test reads it there). Internal modules carry
none, so a reader tells the API from the rest by that alone, and each internal package
says so in its docstring. A new ``__all__`` outside the facades, or a facade name that
does not resolve, fails here.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_API_DOC = ROOT / "docs" / "architecture.md"


def _facades() -> tuple[str, ...]:
    """The modules the table of docs/architecture.md's "The API" names: the one list."""
    text = _API_DOC.read_text()
    section = text.split("## The API", 1)[1].split("\n## ", 1)[0]
    return tuple(re.findall(r"^\| `([\w.]+)` \|", section, flags=re.MULTILINE))


FACADES = _facades()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> list[Path]:
    return sorted(p for d in ("framework", "connectors") for p in (ROOT / d).rglob("*.py"))


def _has_all(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def test_the_api_table_names_the_facades() -> None:
    assert "framework" in FACADES and "connectors" in FACADES, FACADES


def test_only_the_facades_list_names_in_all() -> None:
    listing = {_module_name(p) for p in _modules() if _has_all(p)}
    assert listing == set(FACADES), (
        f"__all__ outside the facades: {sorted(listing - set(FACADES))}; "
        f"facades without one: {sorted(set(FACADES) - listing)}"
    )


@pytest.mark.parametrize("facade", FACADES)
def test_every_name_a_facade_lists_resolves(facade: str) -> None:
    module = importlib.import_module(facade)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{facade}.__all__ names what it does not have: {missing}"


def test_every_internal_package_says_so() -> None:
    facades = set(FACADES)
    unmarked = [
        _module_name(p)
        for p in _modules()
        if p.name == "__init__.py"
        and _module_name(p) not in facades
        and "Internal" not in (ast.get_docstring(ast.parse(p.read_text())) or "")
    ]
    assert not unmarked, f"internal packages whose docstring does not say so: {unmarked}"
