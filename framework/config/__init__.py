"""Typed settings: defaults, then a TOML file, then ``FLAMEPIPE_*`` environment variables."""

from framework.config.settings import Settings

__all__ = ["Settings"]
