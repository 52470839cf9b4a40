"""``python -m evaluator.reference``: serve a reference agent (see :mod:`.cli`)."""

import sys

from evaluator.reference.cli import main

if __name__ == "__main__":
    sys.exit(main())
