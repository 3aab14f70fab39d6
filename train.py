"""Train a Stable-Baselines3 agent on an llmsched scenario: ``python train.py --help``.

The command line is ``agents.cli`` (also installed as ``llmsched-train``); the training itself is
``agents.training.train(TrainConfig(...))`` and ``agents.sweep.run_sweep``, importable from Python.
"""

import sys

from agents.cli import main

if __name__ == "__main__":
    sys.exit(main())
