"""Finding a user's pipeline from the command line: ``package.module:attribute``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from framework.errors import ConfigError
from framework.pipeline import Pipeline


def load_pipeline(spec: str) -> Pipeline:
    """The `Pipeline` named by ``spec``: an attribute holding one, or a function making one.

    The current directory is importable, as with ``python -m``, so a pipeline defined in
    ``./jobs.py`` is ``jobs:pipeline``.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(
            f"pipeline {spec!r}: write it as package.module:attribute, e.g. jobs:wordcount"
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"pipeline {spec!r}: cannot import {module_name!r} ({exc}); run from the directory "
            "that holds it or install it"
        ) from exc
    except SyntaxError as exc:
        raise ConfigError(
            f"pipeline {spec!r}: {exc.filename}, line {exc.lineno}: {exc.msg}: fix the syntax"
        ) from None
    except Exception as exc:  # the user's module failed while it was imported
        raise ConfigError(
            f"pipeline {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    target = getattr(module, attribute, None)
    if target is None:
        raise ConfigError(f"pipeline {spec!r}: {module_name} has no attribute {attribute!r}")
    if callable(target) and not isinstance(target, Pipeline):
        target = target()
    if not isinstance(target, Pipeline):
        raise ConfigError(
            f"pipeline {spec!r} is a {type(target).__name__}, not a Pipeline (or a function "
            "returning one)"
        )
    return target
