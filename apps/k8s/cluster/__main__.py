"""Command line of the embedded cluster: ``python -m apps.k8s.cluster up|down|status|connectivity``.

The Django management commands ``k8s_cluster`` and ``k8s_connectivity`` call the same functions.
"""

from __future__ import annotations

import sys

from apps.k8s.cluster.cli import main

if __name__ == "__main__":
    sys.exit(main())
