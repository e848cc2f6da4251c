"""Adapter: running flamepipe pipelines on Apache Spark (PySpark)."""

from framework.runners.spark.runner import PipelineRun, SparkRunner
from framework.runners.spark.session import spark_session

__all__ = ["PipelineRun", "SparkRunner", "spark_session"]
