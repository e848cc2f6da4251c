"""Engine-independent distributed execution: stages, topics, per-task processing."""

from framework.runtime.stages import Exit, ExitKind, Stage, Topics, plan_stages

__all__ = ["Exit", "ExitKind", "Stage", "Topics", "plan_stages"]
