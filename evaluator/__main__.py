"""``python -m evaluator evaluate ...`` (the engine's CLI without Django)."""

import sys

from evaluator.cli import main

sys.exit(main())
