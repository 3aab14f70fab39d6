"""``python train.py ...`` from a checkout: ``llmsched-train``; from Python: ``agents.training.train``."""

import sys

from agents.cli import main

if __name__ == "__main__":
    sys.exit(main())
