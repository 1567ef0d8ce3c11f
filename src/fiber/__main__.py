"""``python -m fiber``: the ``fiber`` command (:mod:`fiber.cli`)."""

import sys

from .cli import main

sys.exit(main())
