"""Generic loading and validation of a frozen settings dataclass.

Values come, lowest precedence first, from the dataclass defaults, a TOML file, the
environment (``FLAMEPIPE_<FIELD>`` in upper case) and explicit overrides. Every value is
coerced to its field's declared type; anything that does not fit raises `ConfigError`
naming the source, the field and what to write instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from framework.errors import ConfigError

ENV_PREFIX = "FLAMEPIPE_"
T = TypeVar("T")


def load_dataclass(
    cls: type[T],
    path: str | Path | None,
    env: Mapping[str, str],
    overrides: Mapping[str, Any],
) -> T:
    """Build ``cls`` from defaults < file < env < overrides, coercing and checking types."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for name in MOVED:
        if env.get(ENV_PREFIX + name.upper()) and name not in names:
            _check_known(name, names, f"environment {ENV_PREFIX}{name.upper()}")
    if path is not None:
        values.update(_from_file(Path(path), names, hints))
    for name in names:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = _coerce(raw, hints[name], f"environment {ENV_PREFIX}{name.upper()}")
    for name, value in overrides.items():
        _check_known(name, names, "argument")
        if value is not None:
            values[name] = _coerce(value, hints[name], f"argument {name}")
    return cls(**values)


def _from_file(path: Path, names: list[str], hints: dict[str, Any]) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"settings file {path} does not exist: fix the path") from None
    except IsADirectoryError:
        raise ConfigError(f"settings file {path} is a directory: name a .toml file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"settings file {path} is not UTF-8 text: name a .toml file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read settings file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"settings file {path} is not valid TOML: {exc}") from None
    section = data.get("flamepipe", data)
    if not isinstance(section, dict):
        raise ConfigError(
            f"settings file {path}: 'flamepipe' must be a table ([flamepipe] with key = value "
            f"lines), not {type(section).__name__}"
        )
    out: dict[str, Any] = {}
    for key, value in section.items():
        _check_known(key, names, f"settings file {path}")
        out[key] = _coerce(value, hints[key], f"{path}: {key}")
    return out


MOVED = {
    "delta_ms": "a pipeline's slot width is the pipeline's own: Pipeline(name, delta_ms=...)",
}
"""Settings that are no longer settings, and where they went."""


def _check_known(key: str, names: list[str], where: str) -> None:
    if key in names:
        return
    if key in MOVED:
        raise ConfigError(f"{where}: {key!r} is not a setting: {MOVED[key]}")
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known settings: {', '.join(names)}"
    raise ConfigError(f"{where}: unknown setting {key!r}; {hint}")


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Coerce a file or environment value to the field type ``hint``."""
    args = typing.get_args(hint)
    if type(None) in args:  # Optional[X]: empty or "none" means unset
        if value is None or (isinstance(value, str) and value.lower() in ("", "none")):
            return None
        hint = next(a for a in args if a is not type(None))
    try:
        return _coerce_plain(value, hint)
    except (TypeError, ValueError):
        name = getattr(hint, "__name__", str(hint))
        raise ConfigError(f"{where}: expected {name}, got {value!r}") from None


def _coerce_plain(value: Any, hint: Any) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(value)
    if hint is int:
        if isinstance(value, bool):
            raise TypeError(value)
        return int(value)
    if hint is float:
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise TypeError(value)
        return value
    if hint is Path:
        return Path(str(value)).expanduser()
    if typing.get_origin(hint) is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        return tuple(str(i).strip() for i in items if str(i).strip())
    return value
