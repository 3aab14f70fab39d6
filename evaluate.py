"""``python evaluate.py ...`` from a checkout: ``llmsched-evaluate``; importing ``baselines`` registers them by name."""

import sys

import baselines  # noqa: F401  (registers the baselines by name)
from llmsched_env.commands.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
