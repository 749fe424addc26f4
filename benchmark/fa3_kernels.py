"""`python benchmark/fa3_kernels.py ...`: runs benchmark/pairs/fa3_kernels.py (its options: --help)."""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the checkout, where `benchmark` imports
    from benchmark.pairs.fa3_kernels import main

    sys.exit(main())
