"""``python -m evaluator.green``: serve an AgentBeats green agent (see evaluator/green/cli.py)."""

import sys

from evaluator.green.cli import main

if __name__ == "__main__":
    sys.exit(main())
