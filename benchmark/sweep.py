"""`python benchmark/sweep.py ...`: runs benchmark/client/sweep.py (its options: --help)."""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the checkout, where `benchmark` imports
    from benchmark.client.sweep import main

    sys.exit(main())
