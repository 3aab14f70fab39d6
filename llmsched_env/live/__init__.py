"""Live vLLM measurement: a server under an llmsched policy (``server``), its runs read back (``records``, ``logs``),
fitted (``fit``), replayed and compared (``sim``, ``replay``), and the paired live experiment (``workloads``,
``blocks``, ``design``, ``experiment``, ``verdict``, ``frontend``).
"""
