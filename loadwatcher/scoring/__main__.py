"""``python -m loadwatcher.scoring score|predict ...`` (the same subcommands as the main CLI)."""

import sys

from loadwatcher.scoring.cli import main

sys.exit(main())
