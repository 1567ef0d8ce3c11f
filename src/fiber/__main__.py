"""``python -m fiber``: the ``fiber`` command (`fiber.cli`)."""

import sys

from .cli import main

sys.exit(main())
