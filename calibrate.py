"""``python calibrate.py ...`` from a checkout: ``llmsched-calibrate`` (``llmsched_env.commands.calibrate``)."""

import sys

from llmsched_env.commands.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
