"""Every unit test runs with a pipeline keyring installed, as every flamepipe process does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from framework.wire import auth

TEST_KEYRING = auth.Keyring((b"unit-tests-key-0123456789abcdef!",))


@pytest.fixture(autouse=True)
def _keyring() -> Iterator[auth.Keyring]:
    previous = auth.installed()
    auth.install(TEST_KEYRING)
    yield TEST_KEYRING
    if previous is not None:
        auth.install(previous)
