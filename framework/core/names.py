"""Operator ids: names that stay put when the rest of a pipeline changes.

An operator's id names everything that outlives a run: its shuffle topic and changelog
(``<app>.<id>``, ``<app>.<id>.state``), its snapshot units (``<id>/<p>``), the
transactional ids of its stages, and the op id in every item's trace. An id that moved
when an operator was added elsewhere would orphan all of that, so ids do not come from
positions:

* ``name="..."`` pins an id: the name itself, with every character outside
  ``[A-Za-z0-9_-]`` written as ``_``. Two operators of one pipeline may not share it.
* Otherwise the id is derived from what the operator is: its kind and its function's
  name (``map-parse``, ``flat_map-split``), its endpoint for sources and sinks
  (``source-<topic>``), the kind alone for a lambda or a function-less operator
  (``group``). The second operator that derives an id already taken gets ``-2``, the
  third ``-3``: adding one before it shifts those, so name the operators whose state
  must survive upgrades.

>>> ids = OperatorIds()
>>> ids.claim("map", "", "parse"), ids.claim("map", "", "parse"), ids.claim("group", "", "")
('map-parse', 'map-parse-2', 'group')
>>> ids.claim("group", "word pairs", "")
'word_pairs'
"""

from __future__ import annotations

import re

from framework.errors import PipelineError

MAX_ID = 64
"""Longest id: it lands in topic names (249 characters at most) with the app's name."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def slug(text: str) -> str:
    """``text`` as an id fragment: safe in topic names and unit names, at most `MAX_ID`."""
    return _UNSAFE.sub("_", text).strip("_-")[:MAX_ID].strip("_-")


class OperatorIds:
    """Hands out the ids of one pipeline's operators (see the module docstring)."""

    def __init__(self) -> None:
        self._taken: dict[str, str] = {}  # id -> how it was claimed, for the error message

    def claim(self, kind: str, name: str, derived: str) -> str:
        """The id of the next operator of ``kind``, named ``name`` ("" if not named),
        whose function or endpoint is called ``derived`` ("" if none)."""
        if name:
            pinned = slug(name)
            if not pinned:
                raise PipelineError(
                    f"operator name {name!r} has no letter, digit, '_' or '-': it cannot be an id"
                )
            if pinned in self._taken:
                raise PipelineError(
                    f"two operators get the id {pinned!r} ({self._taken[pinned]} and name="
                    f"{name!r}): give each operator a unique name="
                )
            return self._take(pinned, f"name={name!r}")
        fragment = "" if derived == "<lambda>" else slug(derived)
        base = f"{kind}-{fragment}"[:MAX_ID] if fragment else kind
        node_id, n = base, 1
        while node_id in self._taken:
            n += 1
            node_id = f"{base}-{n}"
        return self._take(node_id, f"a {kind} derived as {node_id!r}")

    def _take(self, node_id: str, how: str) -> str:
        self._taken[node_id] = how or node_id
        return node_id
