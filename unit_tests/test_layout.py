"""Tests mirror the package: a protocol module (one whose code carries ``# Step N``
comments) has a unit test file of its own, ``unit_tests/<package path>/test_<module>.py``.

``SHARED`` names the few whose unit tests share a file with their siblings; ``INTEGRATION_ONLY``
lists the protocol modules still tested only through the integration tier (their main test
there beside each). It may only shrink: a module that gets its unit
test file leaves it, and a new protocol module without one fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_STEP = re.compile(r"#\s*Step\s+\d")

INTEGRATION_ONLY: dict[str, str] = {}


SHARED: dict[str, str] = {
    "framework/snapshots/backends/files.py": "unit_tests/snapshots/backends/test_backends.py",
    "framework/runners/observe/server.py": "unit_tests/runners/observe/test_observe.py",
}
"""Protocol modules unit-tested in a file shared with their siblings (one contract, every
implementation run through it)."""


def _mirror(module: Path) -> Path:
    """``framework/a/b.py`` -> ``unit_tests/a/test_b.py``; ``connectors/_c.py`` ->
    ``unit_tests/connectors/test_c.py``."""
    rel = module.relative_to(ROOT)
    parts = rel.parts[1:] if rel.parts[0] == "framework" else rel.parts
    return ROOT / "unit_tests" / Path(*parts[:-1]) / f"test_{parts[-1].lstrip('_')}"


def _protocol_modules() -> list[Path]:
    found = []
    for package in ("framework", "connectors"):
        for module in sorted((ROOT / package).rglob("*.py")):
            if module.name != "__init__.py" and _STEP.search(module.read_text()):
                found.append(module)
    return found


def test_every_protocol_module_has_a_unit_test_file_or_is_listed() -> None:
    missing = [
        str(m.relative_to(ROOT))
        for m in _protocol_modules()
        if not _mirror(m).exists()
        and str(m.relative_to(ROOT)) not in INTEGRATION_ONLY
        and str(m.relative_to(ROOT)) not in SHARED
    ]
    assert not missing, f"protocol modules without unit_tests/.../test_<module>.py: {missing}"


def test_the_integration_only_list_names_what_is_still_so() -> None:
    protocol = {str(m.relative_to(ROOT)) for m in _protocol_modules()}
    for module, where in INTEGRATION_ONLY.items():
        assert module in protocol, f"{module} is no protocol module (or gone): drop it"
        assert not _mirror(ROOT / module).exists(), f"{module} has its unit tests: drop it"
        assert (ROOT / where).exists(), f"{module}: {where} does not exist"
    for module, where in SHARED.items():
        dotted = module.removesuffix(".py").replace("/", ".")
        assert dotted.rpartition(".")[0] in (ROOT / where).read_text(), f"{where}: {module}"
