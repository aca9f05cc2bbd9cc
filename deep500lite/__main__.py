"""``python -m deep500lite`` runs the command line."""

import sys

from deep500lite.cli import main

sys.exit(main())
