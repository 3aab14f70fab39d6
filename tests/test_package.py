"""The package as a user installs it: a wheel built from this checkout holds the shipped policies, tables,
cost models, hyperparameters and traces, and (slow tier) built with its compiled engine and installed into a
fresh venv it runs compiled and serves the shipped generalist and a per-scenario agent from a folder outside the
checkout."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
POLICIES = sorted(p.name for p in (ROOT / "agents" / "policies").iterdir() if (p / "policy.json").is_file())


def build_wheel(tmp_path_factory: pytest.TempPathFactory, pure: bool) -> Path:
    """A wheel of this checkout, built from a copy of what it packages (the build writes no file here); ``pure``:
    with LLMSCHED_PURE=1, so without the compiled engine (seconds instead of about 3 minutes)."""
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.pyd", "_compiled.json")
    for name in ("llmsched_env", "agents", "baselines"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "LLMSCHED_PURE"}
    if pure:
        env["LLMSCHED_PURE"] = "1"
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    (found,) = out.glob("llmsched-*.whl")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory, pure=True)


def test_the_wheel_holds_every_shipped_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert wheel.name.endswith("-py3-none-any.whl")  # LLMSCHED_PURE=1: no compiled engine, any platform
    assert not any(n.endswith((".so", ".pyd", "_compiled.json")) for n in names)
    assert len(POLICIES) >= 17 and "generalist" in POLICIES
    for policy in POLICIES:
        assert {f"agents/policies/{policy}/policy.json", f"agents/policies/{policy}/policy.safetensors"} <= names
    assert {"baselines/tuned.json", "agents/hyperparams/maskable_ppo.yml"} <= names
    assert any(n.startswith("llmsched_env/costs/presets/") and n.endswith(".json") for n in names)
    assert sum(n.startswith("llmsched_env/workloads/data/") and n.endswith(".gz") for n in names) >= 3
    assert not any(n.startswith(("tests/", "docs/", "bench/", "policies/")) for n in names)


@pytest.mark.slow
def test_an_installed_wheel_serves_the_shipped_policies_outside_the_checkout(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The wheel `pip install .` builds, compiled engine and all (where this machine has a C compiler and mypy)."""
    if importlib.util.find_spec("mypyc") is None or (shutil.which("cc") is None and shutil.which("gcc") is None):
        pytest.skip("mypyc or a C compiler is missing: the wheel would be the pure one")
    wheel = build_wheel(tmp_path_factory, pure=False)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "llmsched_env/_compiled.json" in names
    assert any(n.startswith("llmsched_env/_native__mypyc") for n in names)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=True)  # the dependencies come from this Python
    bin_dir = env_dir / "bin"
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)]
    subprocess.run(pip, check=True, capture_output=True, text=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(bin_dir / "python"), "-c", "import llmsched_env; print(llmsched_env.__file__)"],
                           cwd=work, check=True, capture_output=True, text=True).stdout  # fmt: skip
    assert where.startswith(str(env_dir))  # the installed package, not this checkout
    check = subprocess.run([str(bin_dir / "llmsched-compile"), "--check"], cwd=work, capture_output=True, text=True)
    assert check.returncode == 0 and "compiled: in use" in check.stdout, check.stdout + check.stderr
    run = [str(bin_dir / "llmsched-evaluate"), "--policies", "fcfs,learned,agent=policies/mixed-slo",
           "--scenarios", "mixed-slo", "--num-requests", "60", "--seeds", "0", "--no-progress"]  # fmt: skip
    done = subprocess.run(run, cwd=work, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines() if line.split()[:1] in (["learned"], ["agent"])]
    assert rows == ["learned", "agent"]
    for script in ("llmsched-train", "llmsched-tune", "llmsched-calibrate"):
        helped = subprocess.run([str(bin_dir / script), "--help"], cwd=work, capture_output=True, text=True)
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: {script}"), helped.stderr
