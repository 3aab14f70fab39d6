"""Test-session set-up: the tests replay the public traces shipped in the package, so a ``LLMSCHED_TRACE_DIR``
set in the caller's shell (which replaces them) is dropped here, for this process and the scripts it starts."""

from __future__ import annotations

import os

os.environ.pop("LLMSCHED_TRACE_DIR", None)
