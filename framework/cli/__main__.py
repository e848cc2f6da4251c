"""``python -m framework.cli``: the ``flamepipe`` command."""

import sys

from framework.cli import main

sys.exit(main())
