"""constraints.txt against pyproject.toml: every dependency (the project's and its extras') is pinned exactly,
each pin meets the pyproject floor, and the file is well formed (one ``name==version`` a line, no duplicates)."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli below Python 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


def read_constraints(path: Path) -> dict[str, Version]:
    """The pins of a constraints file by canonical name; ValueError naming the file and line otherwise."""
    pins: dict[str, Version] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        if match is None:
            raise ValueError(f"{path.name}:{number}: expected 'name==version', got {line!r}")
        name = canonicalize_name(match[1])
        if name in pins:
            raise ValueError(f"{path.name}:{number}: {match[1]} pinned twice")
        try:
            pins[name] = Version(match[2])
        except InvalidVersion as exc:
            raise ValueError(f"{path.name}:{number}: {exc}") from exc
    return pins


def project_requirements(path: Path) -> dict[str, list[Requirement]]:
    """pyproject.toml's requirements by where they are declared: ``dependencies`` or the extra's name."""
    project = tomllib.loads(path.read_text())["project"]
    groups = {"dependencies": project["dependencies"], **project.get("optional-dependencies", {})}
    return {group: [Requirement(r) for r in reqs] for group, reqs in groups.items()}


def unmet(requirements: dict[str, list[Requirement]], pins: dict[str, Version]) -> list[str]:
    """One line per requirement that the pins leave out or do not satisfy; empty when all hold."""
    problems = []
    for group, reqs in requirements.items():
        for req in reqs:
            pin = pins.get(canonicalize_name(req.name))
            if pin is None:
                problems.append(f"{group}: {req.name} is not pinned in constraints.txt")
            elif not req.specifier.contains(pin, prereleases=True):
                problems.append(f"{group}: {req.name}=={pin} does not satisfy pyproject's '{req}'")
    return problems


def test_every_dependency_is_pinned_and_meets_its_floor() -> None:
    requirements = project_requirements(ROOT / "pyproject.toml")
    assert {"dependencies", "dev", "distributed"} <= set(requirements)
    assert "scipy" in {canonicalize_name(r.name) for r in requirements["dev"]}  # CI checks the NNLS fit against it
    assert unmet(requirements, read_constraints(ROOT / "constraints.txt")) == []


def test_constraints_leave_out_the_project_and_pin_torch_without_a_build_label() -> None:
    pins = read_constraints(ROOT / "constraints.txt")
    assert "llmsched" not in pins
    assert pins["torch"].local is None  # a CPU or a CUDA build of the same release both satisfy the pin
    assert "pip install -c constraints.txt" in (ROOT / "constraints.txt").read_text()


def test_pins_satisfy_each_others_requirements() -> None:
    """For each package installed here at its pinned version, its own requirements (as its metadata states them,
    markers evaluated on this machine) are pinned too, at versions they accept: pip can install the set whole."""
    pins = read_constraints(ROOT / "constraints.txt")
    checked, problems = 0, []
    for name, version in pins.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if Version(dist.version).public != str(version):
            continue  # another version is installed here: its requirements say nothing about the pinned one
        checked += 1
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            pin = pins.get(canonicalize_name(req.name))
            if pin is None:
                problems.append(f"{name}=={version} requires {req}, which is not pinned")
            elif not req.specifier.contains(pin, prereleases=True):
                problems.append(f"{name}=={version} requires {req}, pinned {pin}")
    if checked == 0:
        pytest.skip("no pinned package is installed at its pinned version here")
    assert problems == []


def test_unmet_names_missing_and_too_old_pins() -> None:
    reqs = {"dependencies": [Requirement("numpy>=1.24"), Requirement("rich>=13.0")], "dev": [Requirement("ray")]}
    pins = {"numpy": Version("1.23.5"), "ray": Version("2.10.0")}
    assert unmet(reqs, pins) == [
        "dependencies: numpy==1.23.5 does not satisfy pyproject's 'numpy>=1.24'",
        "dependencies: rich is not pinned in constraints.txt",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("numpy>=1.24\n", r"constraints.txt:1: expected 'name==version'"),
        ("# header\n\nnumpy==2.0\nNumPy==2.1\n", r"constraints.txt:4: NumPy pinned twice"),
        ("numpy==two\n", r"constraints.txt:1: .*two"),
    ],
)
def test_malformed_constraints_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "constraints.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_constraints(path)
