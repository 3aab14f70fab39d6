"""Live vLLM measurement: a server under an llmsched policy loaded by vLLM's own client (``server``), its runs read
back (``records``, ``logs``), fitted (``fit``), replayed in the simulator and compared (``sim``, ``replay``), and the
paired live experiment (``workloads``, ``blocks``, ``design``, ``experiment``, ``verdict``, ``frontend``). Nothing
here imports vLLM but ``server``'s client and launcher.
"""
