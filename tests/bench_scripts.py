"""Load a script of ``bench/`` as a module, for tests of its functions (the scripts are not a package)."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_script(name: str) -> ModuleType:
    """``bench/NAME.py`` imported as a module named ``name`` (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def write_capacities(folder: Path, scenario: str, caps: dict[str, tuple[float, ...]]) -> Path:
    """``folder/results.csv`` as ``llmsched-evaluate --capacity --per-seed`` writes it, for ``bench/headline.py``:
    one row per policy and seed (seed ``k``: the ``k``-th of the policy's capacities; req/s twice the load)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "results.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "scenario", "seed", "capacity_load", "capacity_rps"])
        for policy, values in caps.items():
            for seed, cap in enumerate(values):
                w.writerow([policy, scenario, seed, cap, 2 * cap])
    return path
