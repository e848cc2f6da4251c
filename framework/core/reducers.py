"""Built-in reducers: ``Sum``, ``Min``, ``Max``, ``Tally`` (a count) and ``Mean`` of a
number or of one field of a row.

A built-in reducer is an ordinary pairwise ``reduce`` (`aggregate`, `KeyedStream.reduce`),
so every path that folds payloads one at a time gives what it always did. ``Tally`` and
``Mean`` reduce payloads and partial results alike into a `Subtotal` (a count and a
total), and a window result or rolling update shows its count or its mean
(`Reducer.finish`): a partial reduced before the shuffle is a subtotal, not a payload.

What a built-in adds is a name a columnar stage task understands: map-side combining then
reduces a whole batch per key and pane with NumPy (`combine_runs`) instead of a Python call
per item, and gives exactly the per-item fold's result. Measured on the windowed word
count's source stage in process (`benchmarks/profile_stage_task.py --windowed`): the
per-item pre-reduction was 46 % of the task's time on columns.

What runs vectorized: ``Tally`` of any payloads; for the others, integer values (a plain
``int`` payload, or an ``int`` field of a tuple, list, dict or Arrow struct) whose sum
cannot leave 64 bits. Anything else (floats,
whose sum depends on the order; big or mixed values; keys Arrow cannot hold) is reduced
item by item, with the same result.

>>> from framework import Mean, Pipeline, Sum, Tally, Tumbling
>>> from framework.testing import ListSink, ListSource, run_local
>>> p = Pipeline("counts")
>>> words = p.source(ListSource(["a b a", "b a"])).flat_map(
...     lambda line: [(w, 1) for w in line.split()])
>>> counted = words.key_by(lambda pair: pair[0]).aggregate(
...     Tumbling(1000), reduce=Sum(1), combinable=True)
>>> _ = counted.map(lambda w: w.value).sink(ListSink())
>>> sorted(run_local(p).values())
[('a', 3), ('b', 2)]
>>> p = Pipeline("means")
>>> pairs = p.source(ListSource([("a", 1), ("b", 4), ("a", 2)])).key_by(lambda kv: kv[0])
>>> means = pairs.aggregate(Tumbling(1000), reduce=Mean(1), combinable=True)
>>> _ = means.map(lambda w: (w.key, w.value)).sink(ListSink())
>>> sorted(run_local(p).values())
[('a', 1.5), ('b', 4.0)]
>>> p = Pipeline("tallies")
>>> words = p.source(ListSource("a rose is a rose".split())).key_by(str)
>>> _ = words.reduce(Tally()).map(lambda kv: (kv.key, kv.value)).sink(ListSink())
>>> run_local(p).values()
[('a', 1), ('rose', 1), ('is', 1), ('a', 2), ('rose', 2)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from framework.core.values import UserValue
from framework.errors import PipelineError

Ints = npt.NDArray[np.int64]
Field = int | str | None
_I64 = 1 << 63


@dataclass(frozen=True, slots=True)
class Reducer:
    """A pairwise reduce over payloads, or over their ``field`` (a tuple or list index,
    a dict key or an Arrow struct's field name). With a field, the result is the first
    payload with that field reduced: the other fields (a key, say) are the first's, so
    the reducer is commutative when they are equal for one key."""

    field: Field = None

    def _pick(self, a: UserValue, b: UserValue) -> UserValue:
        raise NotImplementedError

    def __call__(self, a: UserValue, b: UserValue) -> UserValue:
        field = self.field
        if field is None:
            return self._pick(a, b)
        return _with(a, field, self._pick(a[field], b[field]))

    def start(self, value: UserValue) -> UserValue:
        """The partial of one payload before the shuffle: the payload itself (a `Subtotal`
        for `Tally` and `Mean`, as their vectorized combining makes it)."""
        return value

    def finish(self, value: UserValue) -> UserValue:
        """The value a window result or a rolling update shows for a reduced ``value``."""
        return value


@dataclass(frozen=True, slots=True)
class Sum(Reducer):
    """``a + b``: exact for integers; a float sum depends on the order of its terms, so
    declare it ``combinable`` only if that does not matter to you."""

    def _pick(self, a: UserValue, b: UserValue) -> UserValue:
        return a + b


@dataclass(frozen=True, slots=True)
class Min(Reducer):
    """The smaller; the first of equal ones."""

    def _pick(self, a: UserValue, b: UserValue) -> UserValue:
        return b if b < a else a


@dataclass(frozen=True, slots=True)
class Max(Reducer):
    """The larger; the first of equal ones."""

    def _pick(self, a: UserValue, b: UserValue) -> UserValue:
        return b if b > a else a


@dataclass(frozen=True, slots=True)
class Subtotal:
    """What `Tally` and `Mean` reduce to: ``count`` payloads whose numbers add up to
    ``total``. It crosses the shuffle as a partial and lives in a rolling key's state."""

    count: int
    total: UserValue = 0


@dataclass(frozen=True, slots=True)
class _Tallying(Reducer):
    """Reduces payloads and subtotals alike: a payload counts as the subtotal of itself."""

    def lift(self, value: UserValue) -> Subtotal:
        """The subtotal of one payload."""
        raise NotImplementedError

    def start(self, value: UserValue) -> Subtotal:
        return value if type(value) is Subtotal else self.lift(value)

    def __call__(self, a: UserValue, b: UserValue) -> Subtotal:
        a, b = self.start(a), self.start(b)
        return Subtotal(a.count + b.count, a.total + b.total)


@dataclass(frozen=True, slots=True)
class Tally(_Tallying):
    """How many payloads: an ``int``. It takes no field (every payload counts)."""

    def __post_init__(self) -> None:
        if self.field is not None:
            raise PipelineError("Tally() counts payloads and takes no field")

    def lift(self, value: UserValue) -> Subtotal:
        return Subtotal(1)

    def finish(self, value: UserValue) -> UserValue:
        return self.start(value).count


@dataclass(frozen=True, slots=True)
class Mean(_Tallying):
    """The arithmetic mean of the numbers (or of their ``field``): a ``float``, the exact
    total divided once by the count. The total of floats depends on the order of its
    terms, as `Sum`'s does."""

    def lift(self, value: UserValue) -> Subtotal:
        return Subtotal(1, value if self.field is None else value[self.field])

    def finish(self, value: UserValue) -> UserValue:
        subtotal = self.start(value)
        return subtotal.total / subtotal.count


_UFUNCS: dict[type[Reducer], np.ufunc] = {Sum: np.add, Min: np.minimum, Max: np.maximum}
"""The built-in reducers' NumPy twins (exact types: a subclass may reduce otherwise)."""


def _with(row: UserValue, field: int | str, value: UserValue) -> UserValue:
    """``row`` with ``field`` set to ``value`` (a new row of the same kind)."""
    if isinstance(row, dict):
        return {**row, field: value}
    if isinstance(row, tuple | list):
        out = list(row)
        out[field] = value  # type: ignore[index]
        return tuple(out) if isinstance(row, tuple) else out
    raise TypeError(f"cannot set field {field!r} of a {type(row).__name__}")


def combine_runs(
    reducer: Reducer, panes: Ints, keys: list[UserValue], values: list[UserValue] | pa.Array
) -> list[tuple[int, int, int, UserValue]] | None:
    """Map-side combining of items in meta order: per run of a pane and per key in the
    order first seen, ``(pane, first item, last item, reduced value)``; None when the
    values or keys do not fit the vectorized path (the caller reduces item by item)."""
    count = len(panes)
    kind = type(reducer)
    if not count or (kind not in _UFUNCS and kind not in (Tally, Mean)):
        return None
    numbers = _operands(reducer, values)
    codes = _codes(keys)
    if numbers is None or codes is None:
        return None
    # The sum might leave 64 bits, where Python's ints do not (the largest magnitude from
    # max and min: NumPy's abs of -2**63 is -2**63).
    if kind in (Sum, Mean) and max(int(numbers.max()), -int(numbers.min())) >= _I64 // count:
        return None
    # Panes never decrease: number their runs, then one group per (run, key).
    runs = np.concatenate(([0], np.cumsum(panes[1:] != panes[:-1])))
    groups = runs * (int(codes.max()) + 1) + codes
    _, firsts, inverse = np.unique(groups, return_index=True, return_inverse=True)
    by_group = np.argsort(inverse, kind="stable")  # each group's items, in item order
    starts = np.concatenate(([0], np.flatnonzero(np.diff(inverse[by_group])) + 1))
    ends = np.concatenate((starts[1:], [count]))
    lasts = by_group[ends - 1]
    order = np.argsort(firsts, kind="stable")  # runs in order, keys first-seen in each
    firsts, lasts = firsts[order], lasts[order]
    if kind is Tally or kind is Mean:
        sizes = (ends - starts)[order].tolist()
        totals = np.add.reduceat(numbers[by_group], starts)[order].tolist()
        rows: list[UserValue] = list(map(Subtotal, sizes, totals))
    else:
        reduced = _UFUNCS[kind].reduceat(numbers[by_group], starts)[order]
        rows = _rows(values, firsts, reducer.field, reduced.tolist())
    return list(zip(panes[firsts].tolist(), firsts.tolist(), lasts.tolist(), rows, strict=True))


def _operands(reducer: Reducer, values: list[UserValue] | pa.Array) -> Ints | None:
    """The integers a vectorized reducer adds up or compares (a `Tally` counts zeros)."""
    if type(reducer) is not Tally:
        return _numbers(values, reducer.field)
    if not isinstance(values, pa.Array) and Subtotal in set(map(type, values)):
        return None  # partials reduced already: the per-item path adds their counts
    return np.zeros(len(values), np.int64)


def _numbers(values: list[UserValue] | pa.Array, field: Field) -> Ints | None:
    """The integers to reduce, or None if they are not all 64-bit integers."""
    if isinstance(values, pa.Array):
        column = values
        if field is not None:
            if not isinstance(field, str) or not pa.types.is_struct(values.type):
                return None
            column = pc.struct_field(values, field)
        kind = column.type
        if not pa.types.is_integer(kind) or kind == pa.uint64() or column.null_count:
            return None
        return column.to_numpy().astype(np.int64, copy=False)  # type: ignore[no-any-return]
    try:
        picked = values if field is None else [v[field] for v in values]
    except (TypeError, KeyError, IndexError):
        return None
    if set(map(type, picked)) != {int}:  # not bools, floats or NumPy's integers
        return None
    try:
        return np.array(picked, dtype=np.int64)
    except OverflowError:
        return None


def _codes(keys: list[UserValue]) -> Ints | None:
    """Per key, a small int equal for equal keys; None unless every key is of one type
    whose equality Arrow shares with Python (``str``, ``bytes``, ``int``: not floats, with
    NaN and -0.0; and not mixed, which Arrow would coerce: ``"a"`` and ``b"a"`` differ)."""
    kinds = set(map(type, keys))  # C loops: ~3x an all() over a generator
    if len(kinds) != 1 or kinds.pop() not in (str, bytes, int):
        return None
    try:
        encoded = pc.dictionary_encode(pa.array(keys))
    except (pa.ArrowInvalid, OverflowError):  # an int beyond 64 bits
        return None
    return encoded.indices.to_numpy().astype(np.int64)  # type: ignore[no-any-return]


def _rows(
    values: list[UserValue] | pa.Array, firsts: Ints, field: Field, reduced: list[UserValue]
) -> list[UserValue]:
    """Each group's payload: the reduced number, or its first item with the field set."""
    if field is None:
        return reduced
    if isinstance(values, pa.Array):
        heads = values.take(pa.array(firsts)).to_pylist()
    else:
        heads = [values[i] for i in firsts.tolist()]
    return [_with(head, field, value) for head, value in zip(heads, reduced, strict=True)]
