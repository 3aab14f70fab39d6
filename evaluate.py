"""``python evaluate.py ...`` from a checkout: the ``llmsched-evaluate`` command, with the same options.

The command lives in ``llmsched_env/commands/evaluate.py`` (``python evaluate.py --help`` lists the options)
and what it does in ``llmsched_env.evaluation``. Importing ``baselines`` here registers the schedulers and
routers even where llmsched is not installed (an install finds them through its entry point).
"""

import sys

import baselines  # noqa: F401  (registers the baselines by name)
from llmsched_env.commands.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
