"""The runner `Pipeline.run()` uses when given none: Spark on the configured stack."""

from __future__ import annotations

from framework.config import Settings
from framework.core.graph import Graph
from framework.kafka.endpoints import kafka_sources, sink_nodes
from framework.logs import configure

# What `Pipeline.run()` returns, re-exported for the facade, which imports no more of the
# runner than this module.
from framework.runners.spark.runner import PipelineRun as PipelineRun  # noqa: PLC0414
from framework.runners.spark.runner import SparkRunner


class DefaultRunner:
    """Checks the graph, starts (or reuses) the embedded stack, then runs on Spark."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def run(self, graph: Graph) -> PipelineRun:
        """Run ``graph`` until Ctrl-C, logging progress every 10 s (on stderr unless the
        application configured logging)."""
        settings = self.settings
        configure(
            settings.state_dir,
            level=settings.log_level,
            verbose=settings.verbose,
            json_lines=settings.log_json,
        )
        # Fail on a non-Kafka endpoint before paying for a broker and Spark.
        kafka_sources(graph)
        sink_nodes(graph)
        if settings.embedded:
            from framework.local.stack import LocalStack

            stack = LocalStack(settings)
            stack.up()
            if settings.spark_workers > 0 and settings.spark_master == "local[*]":
                settings = settings.with_(spark_master=stack.master_url)
        return SparkRunner(settings, progress_s=10.0).run(graph)


def default_runner() -> DefaultRunner:
    """A `DefaultRunner` with `Settings.load()` (TOML file and FLAMEPIPE_* variables)."""
    return DefaultRunner(Settings.load())
