import sys

from loadwatcher.cli import main

sys.exit(main())
