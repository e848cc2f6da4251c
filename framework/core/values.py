"""The one name for what the core carries but never looks into.

A pipeline's payloads, keys' values, accumulators and what a user's async function takes
and returns are the user's types: the core passes them to the user's functions, compares
them only through those functions (or as the reducer named by the user asks), and
encodes them through the serde the user chose. No type the core could name covers them,
so they are `UserValue`, an alias of `Any` that says so where it is used.
"""

from __future__ import annotations

from typing import Any, TypeAlias

UserValue: TypeAlias = Any
"""A user's payload, key value, accumulator or function result: typed by the user's code."""
