"""Where flamepipe's own log lines go when the application does not say.

Library modules log through ``logging.getLogger(__name__)`` and never print. An
application that configures logging (any handler on the root logger) decides everything;
otherwise the command line and `Pipeline.run()` show flamepipe's INFO lines on stderr as
``flamepipe: <message>``, the way a command-line tool speaks.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["show_on_console"]

_NAMESPACES = ("framework", "connectors")


def show_on_console(level: int = logging.INFO) -> None:
    """Send flamepipe's log lines at ``level`` and above to stderr, unless the application
    configured logging itself (or this ran already)."""
    if logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("flamepipe: %(message)s"))
    for name in _NAMESPACES:
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate = False
