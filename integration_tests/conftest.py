"""Session fixtures: one real Kafka + ZooKeeper (see framework.local.provision) and Spark."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from framework.config import Settings
from framework.kafka.cache import ProcessCache
from framework.local.provision import provision
from framework.runners.spark.smoke import create_topics


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def stack() -> Iterator[Settings]:
    """Settings of a running stack, stopped at the end of the session."""
    with provision() as settings:
        yield settings
        # Cached clients (admin, committers, consumers) would retry the stopped broker
        # until the session's process exits.
        ProcessCache.clear_all()


@pytest.fixture(scope="session")
def bootstrap(stack: Settings) -> str:
    return stack.kafka_bootstrap


@pytest.fixture(scope="session")
def spark(stack: Settings) -> Iterator[Any]:
    from framework.runners.spark import spark_session

    session = spark_session(stack, "flamepipe-tests")
    yield session
    session.stop()


@pytest.fixture
def new_topics(bootstrap: str) -> Callable[..., list[str]]:
    """Create uniquely named topics: ``new_topics("in", "out", partitions=2)``."""

    def make(*names: str, partitions: int = 1) -> list[str]:
        run = uuid.uuid4().hex[:8]
        topics = [f"{name}-{run}" for name in names]
        create_topics(bootstrap, topics, partitions)
        return topics

    return make
