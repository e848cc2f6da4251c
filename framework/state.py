"""Reading a running pipeline's state by key: the public names.

Every answer is committed state as of the global time it names (docs/operations.md,
"Queryable state"): a grouping's kept items below the global min time, a rolling
aggregate's value as of its hash unit's min time. The implementation lives in
`framework.snapshots.queryable` and `framework.operations.queryable_state`.

Example::

    >>> from framework.state import open_state  # doctest: +SKIP
    >>> with open_state(settings, pipeline.graph()) as state:  # doctest: +SKIP
    ...     answer = state.get("counts", "word")
    >>> answer.found, answer.value, answer.as_of_ms  # doctest: +SKIP
"""

from framework.operations.queryable_state import open_state
from framework.snapshots.queryable import StateReader, StateValue

__all__ = ["StateReader", "StateValue", "open_state"]
