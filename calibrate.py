"""Calibrate the simulator on the torch runtime and measure its fidelity: ``python calibrate.py --help``.

The command line is ``llmsched_env.commands.calibrate`` (also installed as ``llmsched-calibrate``); the work
itself is ``llmsched_env.runtime.profiling.profile_preset`` and
``llmsched_env.runtime.fidelity_report.run_fidelity``, importable from Python.
"""

import sys

from llmsched_env.commands.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
