"""The one registry type (schedulers, routers, scenarios, cluster scenarios) and its entry-point plugins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llmsched_env.cluster.scenarios import CLUSTER_SCENARIOS
from llmsched_env.common import registry as registry_module
from llmsched_env.common.registry import Registry
from llmsched_env.decision.registry import ROUTERS, SCHEDULERS
from llmsched_env.workloads.library import SCENARIOS

ROOT = Path(__file__).resolve().parents[1]


def test_register_get_names_and_membership() -> None:
    reg: Registry[int] = Registry("thing")
    assert reg.register("one", 1) == 1

    @reg.register("two")
    def two() -> int:
        return 2

    assert reg.get("one") == 1 and reg.get("two") is two
    assert reg.names() == ["one", "two"] and list(reg) == ["one", "two"] and len(reg) == 2
    assert "one" in reg and "three" not in reg
    reg.register("one", 1)  # the same object again is harmless (a module imported twice)
    with pytest.raises(ValueError, match="thing 'one' is already registered"):
        reg.register("one", 11)
    with pytest.raises(ValueError, match="unknown thing 'three'; available things: one, two"):
        reg.get("three")
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("", 3)


def test_an_empty_plugin_registry_says_how_to_fill_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "entry_points", lambda group: [])
    reg: Registry[int] = Registry("widget", plugins="no.such.group")
    with pytest.raises(ValueError, match=r"none registered .*no\.such\.group"):
        reg.get("x")


def test_plugins_load_once_on_the_first_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    reg: Registry[int] = Registry("widget", plugins="test.widgets")
    loads: list[str] = []

    class EntryPoint:
        def load(self) -> Any:
            loads.append("plugin")
            reg.register("gear", 7)

    asked: list[str] = []

    def entry_points(group: str) -> list[EntryPoint]:
        asked.append(group)
        return [EntryPoint()]

    monkeypatch.setattr(registry_module, "entry_points", entry_points)
    reg.register("cog", 5)
    assert reg.get("cog") == 5 and not loads  # a registered name needs no plugin
    assert reg.get("gear") == 7 and "gear" in reg and reg.names() == ["cog", "gear"]
    assert loads == ["plugin"] and asked == ["test.widgets"]


def test_the_project_registries_hold_their_entries() -> None:
    assert {"fcfs", "slo_aware", "random"} <= set(SCHEDULERS.names())
    assert {"round_robin", "least_kv_load", "random"} <= set(ROUTERS.names())
    assert {"default", "mixed-slo", "azure-conv"} <= set(SCENARIOS.names())
    assert "cluster-azure-conv-pd" in CLUSTER_SCENARIOS
    for reg in (SCHEDULERS, ROUTERS, SCENARIOS, CLUSTER_SCENARIOS):
        assert type(reg) is Registry


def test_the_cluster_env_finds_the_baselines_through_the_entry_point() -> None:
    """A fresh interpreter: the env layer never imports ``baselines``; the registry's plugin lookup does."""
    code = (
        "import sys, gymnasium as gym, llmsched_env.envs, llmsched_env.evaluation\n"
        "assert 'baselines' not in sys.modules, 'a layer of llmsched_env imported baselines'\n"
        "env = gym.make('LLMSchedCluster-v0', scenario='default', num_replicas=2, num_requests=20)\n"
        "env.reset(seed=0)\n"
        "assert 'baselines' in sys.modules, 'the registry did not load the entry point'\n"
        "from llmsched_env.decision.registry import SCHEDULERS\n"
        "assert SCHEDULERS.get('fcfs').__module__.startswith('baselines.')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("entry", [None, 3, b"fcfs", ["fcfs"]])
def test_resolve_policy_names_an_entry_that_is_no_text(entry: object) -> None:
    """``resolve_policy(None)`` ended in an AttributeError deep in the resolver."""
    from llmsched_env.decision.policy_spec import resolve_policy

    with pytest.raises(TypeError, match=r"^resolve_policy: entry must be a policy name or path \(str\), got "):
        resolve_policy(entry)  # type: ignore[arg-type]
    assert resolve_policy(Path("fcfs")).baseline == "fcfs"
