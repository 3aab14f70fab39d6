"""The package as a user installs it. Fast: a wheel built from this checkout holds the shipped policies, tables,
cost models, hyperparameters and traces, and CI installs with README.md's set-up command. Slow: that command, run
in a fresh venv (nothing but what it installs) on a copy of this checkout, compiles the engine, and the wheel
``pip wheel .`` builds, compiled engine and all, installed into that venv runs compiled and serves the shipped
generalist, by name and by its folder, from a folder outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from llmsched_env.common import compiled

ROOT = Path(__file__).resolve().parents[1]
POLICIES = sorted(p.name for p in (ROOT / "agents" / "policies").iterdir() if (p / "policy.json").is_file())


def copy_sources(dest: Path) -> Path:
    """What a build of this checkout reads (the packages, pyproject.toml, setup.py, README.md), copied to ``dest``
    without build outputs: a build there writes nothing here, and an editable install there points there."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.pyd", "_compiled.json")
    for name in ("llmsched_env", "agents", "baselines"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    return dest


def build_wheel(
    src: Path, out: Path, env: dict[str, str], python: str = sys.executable, isolated: bool = False
) -> Path:
    """The wheel of the sources in ``src`` (``copy_sources``), built by ``python``'s pip into ``out`` with the
    environment ``env``: in pip's isolated build environment, as ``pip wheel .`` builds it, or, not ``isolated``,
    with ``python``'s own packages (no download)."""
    cmd = [python, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(out)]
    done = subprocess.run(cmd if isolated else [*cmd, "--no-build-isolation"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (found,) = out.glob("llmsched-*.whl")
    return found


def readme_setup_command() -> str:
    """The install README.md gives: the first ```bash block under its "## Set up" heading (one command line)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    section = lines[lines.index("## Set up") + 1 :]
    section = section[: next((i for i, line in enumerate(section) if line.startswith("## ")), len(section))]
    start = section.index("```bash") + 1
    (command,) = [line for line in section[start : section.index("```", start)] if line.strip()]
    return command


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built with LLMSCHED_PURE=1, so without the compiled engine (seconds instead of minutes)."""
    src = copy_sources(tmp_path_factory.mktemp("src"))
    return build_wheel(src, tmp_path_factory.mktemp("wheel"), {**os.environ, compiled.PURE_ENV: "1"})


def test_the_wheel_holds_every_shipped_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert wheel.name.endswith("-py3-none-any.whl")  # LLMSCHED_PURE=1: no compiled engine, any platform
    assert not any(n.endswith((".so", ".pyd", "_compiled.json")) for n in names)
    assert "generalist" in POLICIES and any(p.startswith("cluster-") for p in POLICIES)  # and the trained routers
    for policy in POLICIES:
        assert {f"agents/policies/{policy}/policy.json", f"agents/policies/{policy}/policy.safetensors"} <= names
    assert {"baselines/tuned.json", "agents/hyperparams/maskable_ppo.yml"} <= names
    assert any(n.startswith("llmsched_env/costs/presets/") and n.endswith(".json") for n in names)
    assert sum(n.startswith("llmsched_env/workloads/data/") and n.endswith(".gz") for n in names) >= 3
    assert not any(n.startswith(("tests/", "docs/", "bench/", "policies/")) for n in names)


def test_ci_installs_with_the_readme_set_up_command() -> None:
    """.ci/run installs as README.md says, and the slow test below runs the same line: neither drifts from it."""
    command = readme_setup_command()
    assert command.startswith("pip install ") and " -e " in command and "[dev]" in command, command
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()


def fresh_venv_env(env_dir: Path) -> dict[str, str]:
    """This process's environment as a shell that activated the venv ``env_dir`` sees it, without the settings
    that would change what is installed or imported (LLMSCHED_PURE, PYTHONPATH, PYTHONHOME)."""
    drop = {compiled.PURE_ENV, "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    return {**env, "VIRTUAL_ENV": str(env_dir), "PATH": os.pathsep.join([str(bin_dir), env.get("PATH", "")]),
            "OMP_NUM_THREADS": "1"}  # fmt: skip


@pytest.mark.slow
def test_the_readme_install_compiles_in_a_fresh_venv_and_the_wheel_serves_policies_outside_the_checkout(
    tmp_path: Path,
) -> None:
    """README.md's set-up command, exactly, in a venv without system site-packages on a copy of this checkout:
    the install compiles the engine (`llmsched-compile --check` says it is in use). A first install in a fresh venv
    used to fall back to the sources: its build's type check followed an import of gymnasium, a runtime dependency
    absent from pip's build environment (issue 43). Then the wheel `pip wheel .` builds in its own isolated build
    environment, installed into that venv (the README's dependencies, nothing from this Python), runs compiled and
    serves the shipped policies outside the checkout. Needs pip to reach a registry (or its cache)."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the install is pure, as the README says")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        pytest.skip("no Python headers: the install is pure, as the README says")
    checkout = copy_sources(tmp_path / "checkout")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)  # no system site-packages: from a venv they would be the base Python's
    env = fresh_venv_env(env_dir)
    bin_dir = Path(env["PATH"].split(os.pathsep)[0])
    ours = sorted(ROOT.glob("llmsched_env/**/*.so"))
    install = subprocess.run(readme_setup_command(), shell=True, cwd=checkout, env=env, capture_output=True, text=True)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    check = subprocess.run([str(bin_dir / "llmsched-compile"), "--check"], cwd=checkout, env=env, capture_output=True,
                           text=True)  # fmt: skip
    expected = f"llmsched-compile: compiled: in use ({checkout / 'llmsched_env' / compiled.MANIFEST.name})\n"
    assert (check.returncode, check.stdout) == (0, expected), check.stdout + check.stderr
    assert sorted(ROOT.glob("llmsched_env/**/*.so")) == ours  # the copy was built, not this checkout

    wheel = build_wheel(copy_sources(tmp_path / "src"), tmp_path / "wheel", env, str(bin_dir / "python"), isolated=True)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "llmsched_env/_compiled.json" in names
    assert any(n.startswith("llmsched_env/_native__mypyc") for n in names)
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)]  # replaces the editable
    subprocess.run(pip, check=True, capture_output=True, text=True, env=env)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(bin_dir / "python"), "-c", "import llmsched_env; print(llmsched_env.__file__)"],
                           cwd=work, env=env, check=True, capture_output=True, text=True).stdout  # fmt: skip
    assert where.startswith(str(env_dir))  # the installed package, not a checkout
    check = subprocess.run([str(bin_dir / "llmsched-compile"), "--check"], cwd=work, env=env, capture_output=True,
                           text=True)  # fmt: skip
    assert check.returncode == 0 and "compiled: in use" in check.stdout, check.stdout + check.stderr
    run = [str(bin_dir / "llmsched-evaluate"), "--policies", "fcfs,learned,agent=policies/generalist",
           "--scenarios", "mixed-slo", "--num-requests", "60", "--seeds", "0", "--no-progress"]  # fmt: skip
    done = subprocess.run(run, cwd=work, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines() if line.split()[:1] in (["learned"], ["agent"])]
    assert rows == ["learned", "agent"]
    for script in ("llmsched-train", "llmsched-tune", "llmsched-calibrate"):
        helped = subprocess.run([str(bin_dir / script), "--help"], cwd=work, env=env, capture_output=True, text=True)
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: {script}"), helped.stderr
