"""Engine-independent stage planning: a graph cut into stages, and what one task runs."""

from framework.plan.stages import Exit, ExitKind, Stage, plan_stages

__all__ = ["Exit", "ExitKind", "Stage", "plan_stages"]
