"""Shipping a pipeline's own code to Spark's executors, whatever the master.

A pipeline's functions travel to the executors pickled (cloudpickle) inside each stage's
task. A function defined in ``__main__`` (a script, a notebook) travels by value; one
defined in a module travels by reference, so the executor's Python worker imports that
module. On ``local[*]`` the workers share the driver's path; on a cluster they run in
their own directories and find only what is installed, so the user's modules must be
shipped with the run.

Decision (docs/decisions/shipping-user-code.md): ship the top-level packages (or single
modules) of exactly the modules the pickled tasks name, as one zip through
``SparkContext.addPyFile``. Not cloudpickle's by-value registration alone: it carries a
module's own functions but not the modules they import when they run (a helper in a
sibling module), and it copies the code into every task of every micro-batch; the zip
goes once per run and holds whole packages.

Protocol of `ship`:

1. Pickle what the tasks will carry (the stage specs) as Spark does; a user function that
   cannot be pickled fails here, on the driver, naming its node and the reason.
2. Collect the modules of every function and class the pickle refers to by name.
3. Keep the user's: not ``__main__`` (by value already), not the standard library, not an
   installed distribution (site-packages), not flamepipe itself (installed beside pyspark
   on every worker, like pyspark). Map each to its top-level package directory or file.
   Add the user's modules those import, until none is new: a function the tasks name by
   reference runs on the executor in its own module, whose imports must resolve there.
4. Zip them (Python sources only, stable order, fixed dates) into the app's code
   directory under a name that is the digest of its bytes, and add the zip to the Spark
   context unless this context holds it already: executors put it on their path before
   running a task. A Spark context refuses a second file of the same name from another
   path, and a driver that starts a new epoch (a replay, a stall recovery) ships again
   into the same context: the same code is the same file, added once.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import sys
import sysconfig
import weakref
import zipfile
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from framework.core.graph import Graph
from framework.errors import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)

_OWN = ("framework", "connectors", "schemas", "pyspark", "py4j")
_SKIP_DIRS = {"__pycache__", ".git", ".venv", "venv", "node_modules", ".mypy_cache"}
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the zip's dates: its digest depends on the code alone

# Spark context -> the zips added to it (a context outlives the epochs of one driver).
_added: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def _pickler_class() -> Any:
    from pyspark import cloudpickle

    base: Any = cloudpickle.CloudPickler

    class _Recorder(base):  # type: ignore[misc]
        """A cloudpickle pickler that notes the module of every function and class."""

        def __init__(self, file: Any) -> None:
            super().__init__(file)
            self.modules: set[str] = set()

        def reducer_override(self, obj: object) -> Any:
            if isinstance(obj, type) or callable(obj):
                module = getattr(obj, "__module__", None)
                if isinstance(module, str):
                    self.modules.add(module)
            return super().reducer_override(obj)

    return _Recorder


def referenced_modules(graph: Graph) -> set[str]:
    """Step 1-2: the modules ``graph`` names when pickled as Spark pickles a task.

    `PipelineError` naming the node whose function cannot be pickled.
    """
    recorder = _pickler_class()(io.BytesIO())
    try:
        recorder.dump(graph)
    except Exception as exc:
        raise PipelineError(f"{_culprit(graph)}cannot be sent to Spark's executors: {exc}") from exc
    modules: set[str] = recorder.modules
    return modules


def _culprit(graph: Graph) -> str:
    """Which node's function does not pickle (tried one by one), as a message prefix."""
    from pyspark import cloudpickle

    dumps: Any = cloudpickle.dumps
    for node in graph.nodes:
        for name in ("fn", "endpoint", "aggregation"):
            value = getattr(node, name)
            if value is None:
                continue
            try:
                dumps(value)
            except Exception:
                what = getattr(value, "__qualname__", None) or type(value).__name__
                return f"{node.describe()}: {name} {what!r} "
    return "the pipeline "


def _system_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    found |= {p for p in sys.path if "site-packages" in p or "dist-packages" in p}
    return [Path(p).resolve() for p in found]


def _is_under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def user_roots(modules: Iterable[str]) -> dict[str, Path]:
    """Step 3: top-level name -> the package directory or module file to ship."""
    system = _system_dirs()
    roots: dict[str, Path] = {}
    for name in sorted(modules):
        top = name.split(".")[0]
        if top == "__main__" or top in _OWN or top in sys.stdlib_module_names or top in roots:
            continue
        module: ModuleType | None = sys.modules.get(top)
        file = getattr(module, "__file__", None)
        if module is None or file is None:
            continue  # a built-in or a namespace package: nothing to ship
        path = Path(file).resolve()
        if _is_under(path, system):
            continue  # installed: the executors have it as the driver does
        roots[top] = path.parent if path.name == "__init__.py" else path
    return roots


class Shipment:
    """What `ship` sent: the zip and the top-level modules in it."""

    def __init__(self, zip_path: Path | None, roots: dict[str, Path]) -> None:
        self.zip_path = zip_path
        self.roots = roots

    def __repr__(self) -> str:
        return f"Shipment({self.zip_path}, {sorted(self.roots)})"


def _zip_bytes(roots: dict[str, Path]) -> bytes:
    """The zip of ``roots``: the same sources give the same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, root in sorted(roots.items()):
            files = [(root, root.name)] if root.is_file() else _sources(root)
            for file, arcname in files:
                info = zipfile.ZipInfo(arcname, _ZIP_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, file.read_bytes())
            _log.debug("shipping %s from %s", name, root)
    return buffer.getvalue()


def _sources(root: Path) -> list[tuple[Path, str]]:
    """A package's Python files with their names in the zip, in a stable order."""
    found = []
    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(root.parent)
        if not _SKIP_DIRS.intersection(rel.parts):
            found.append((file, str(rel)))
    return found


def _write_once(target: Path, data: bytes) -> None:
    """``data`` at ``target`` unless it is there already (its name is its digest)."""
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, target)


def _imported_by(tops: Iterable[str]) -> set[str]:
    """The modules that the loaded modules of packages ``tops`` hold (imported modules,
    and the modules of imported functions and classes)."""
    tops = set(tops)
    found: set[str] = set()
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in tops or module is None:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, ModuleType):
                found.add(value.__name__)
                continue
            try:
                owner = getattr(value, "__module__", None)
            except Exception:  # an object whose attribute lookup raises: not a reference
                continue
            if isinstance(owner, str):
                found.add(owner)
    return found


def with_imports(roots: dict[str, Path]) -> dict[str, Path]:
    """Step 3's closure: ``roots`` and every user module they import, transitively."""
    roots = dict(roots)
    while True:
        more = {k: v for k, v in user_roots(_imported_by(roots)).items() if k not in roots}
        if not more:
            return roots
        roots.update(more)


def ship(spark: SparkSession, graph: Graph, code_dir: Path) -> Shipment:
    """Steps 1-4: send the user's modules that ``graph`` needs to ``spark``'s executors;
    the zip goes to ``code_dir``."""
    roots = with_imports(user_roots(referenced_modules(graph)))
    if not roots:
        return Shipment(None, roots)
    data = _zip_bytes(roots)
    target = code_dir / f"{graph.name}-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    _write_once(target, data)
    context = spark.sparkContext
    added = _added.setdefault(context, set())
    names = ", ".join(sorted(roots))
    if str(target) in added:
        _log.info("shipped %s to the executors already (%s)", names, target)
        return Shipment(target, roots)
    context.addPyFile(str(target))
    added.add(str(target))
    _log.info("shipped %s to the executors (%s)", names, target)
    return Shipment(target, roots)
