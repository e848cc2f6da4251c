"""Every unit test runs with a pipeline keyring installed, as every flamepipe process does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from framework.wire import auth

# No per-example deadline: a property test asserts what holds, not how fast. On a loaded
# 2-core machine one CI run took 326 s for the unit tier instead of 44 s, and a property
# test of the checkpoint decoder failed on Hypothesis's 200 ms deadline, not an assertion.
settings.register_profile("flamepipe", deadline=None)
settings.load_profile("flamepipe")

TEST_KEYRING = auth.Keyring((b"unit-tests-key-0123456789abcdef!",))


@pytest.fixture(autouse=True)
def _keyring() -> Iterator[auth.Keyring]:
    previous = auth.installed()
    auth.install(TEST_KEYRING)
    yield TEST_KEYRING
    if previous is not None:
        auth.install(previous)
