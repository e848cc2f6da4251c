"""Session fixtures: one real Kafka + ZooKeeper (see framework.local.provision) and Spark."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from framework.config import Settings
from framework.config.secrets import new_key
from framework.kafka.cache import ProcessCache
from framework.local.provision import provision
from framework.runners.keys import install_keys
from framework.runners.spark.smoke import create_topics
from framework.wire import auth


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session", autouse=True)
def pipeline_key() -> Iterator[auth.Keyring]:
    """One pipeline key for the session: this process and every flamepipe process a test
    starts (they inherit ``FLAMEPIPE_SECRET``) sign and verify with it."""
    previous = os.environ.get("FLAMEPIPE_SECRET")
    os.environ["FLAMEPIPE_SECRET"] = new_key()
    keyring = install_keys(Settings.load())
    yield keyring
    if previous is None:
        os.environ.pop("FLAMEPIPE_SECRET", None)
    else:
        os.environ["FLAMEPIPE_SECRET"] = previous


@pytest.fixture(autouse=True)
def _session_key(pipeline_key: auth.Keyring) -> None:
    """Each test starts with the session's keyring: a run of an earlier test may have
    installed another (settings made without ``FLAMEPIPE_SECRET``)."""
    auth.install(pipeline_key)


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
    """The session in-process tests share. Its continuous pipelines' tasks hold their
    slots while they run, so it has more slots than cores (unless the environment names a
    master): a test may run several pipelines at once."""
    from framework.spark import spark_session

    master = os.environ.get("FLAMEPIPE_SPARK_MASTER", "local[32]")
    session = spark_session(stack.with_(spark_master=master), "flamepipe-tests")
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
