"""Where the Spark driver listens and what it tells executors, by master."""

from __future__ import annotations

import pytest

from framework.config import Settings
from framework.errors import ConfigError
from framework.runners.spark.session import driver_addresses, routable_address


@pytest.mark.parametrize(
    "master", ["local[*]", "local[2]", "spark://127.0.0.1:7077", "spark://localhost:7077"]
)
def test_local_masters_keep_the_loopback_address(master: str) -> None:
    assert driver_addresses(Settings(spark_master=master)) == ("127.0.0.1", "127.0.0.1")


def test_a_remote_master_gets_a_routable_address_on_all_interfaces() -> None:
    host, bind = driver_addresses(Settings(spark_master="spark://spark-master:7077"))
    assert (host, bind) == (routable_address(), "0.0.0.0")


def test_the_settings_decide_when_given() -> None:
    settings = Settings.load(
        env={
            "FLAMEPIPE_SPARK_MASTER": "spark://spark-master:7077",
            "FLAMEPIPE_SPARK_DRIVER_HOST": "pipeline",
            "FLAMEPIPE_SPARK_DRIVER_BIND_ADDRESS": "10.0.0.5",
        }
    )
    assert driver_addresses(settings) == ("pipeline", "10.0.0.5")


def test_bad_cluster_settings_fail_fast() -> None:
    with pytest.raises(ConfigError, match="spark_workers=-1"):
        Settings(spark_workers=-1)
    with pytest.raises(ConfigError, match="spark_worker_cores=0 must be >= 1"):
        Settings.load(env={"FLAMEPIPE_SPARK_WORKER_CORES": "0"})
    with pytest.raises(ConfigError, match="spark_master_port=0"):
        Settings(spark_master_port=0)
