"""TensorBoard a researcher can read: every tag a training writes is in docs/training.md's table (and every tag
of the table that this project writes is written), the generalist's evaluation is logged per library scenario
with per-tenant tags only there, and an on-policy update is written at the step of the rollout it learnt
from, whatever SB3's log interval."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback, CallbackList

from agents.callbacks import PeriodicEvalCallback, UpdateLogCallback, write_scalars
from tests.trained_run import TrainedRun, tensorboard_scalars

DOC = Path(__file__).resolve().parents[1] / "docs" / "training.md"
PLACEHOLDERS = ("SCENARIO", "NAME", "COMPONENT")  # one path segment each in the table's tags
OURS = ("clone/", "episode/", "eval/", "eval_scenario/")  # this project's groups (SB3 writes the others)


def documented() -> dict[str, re.Pattern[str]]:
    """The tags of the table in docs/training.md's TensorBoard section (first column), as patterns."""
    text = DOC.read_text(encoding="utf-8")
    section = re.search(r"^## TensorBoard\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert section is not None, f"{DOC}: no '## TensorBoard' section"
    tags: dict[str, re.Pattern[str]] = {}
    for line in section.group(1).splitlines():
        if not line.startswith("| `"):
            continue
        for tag in re.findall(r"`([^`]+)`", line.split("|")[1]):
            pattern = re.escape(tag)
            for word in PLACEHOLDERS:
                pattern = pattern.replace(word, "[^/]+")
            tags[tag] = re.compile(pattern)
    assert len(tags) > 40, f"{DOC}: the TensorBoard table was not found ({len(tags)} tags)"
    return tags


def undocumented(tags: set[str]) -> set[str]:
    patterns = documented().values()
    return {tag for tag in tags if not any(p.fullmatch(tag) for p in patterns)}


@pytest.fixture(scope="module")
def generalist_eval(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, float]]:
    """The generalist's periodic evaluation on three val episodes of LLMSchedMix-v0 (sjf as the policy, fcfs
    and slo_aware as the baselines, 20 requests each): each episode's scenario, and the scalars it logs."""
    from agents.training import make_env_fn

    def make_env(agent: bool) -> gym.Env:
        kwargs = {"num_requests": 20, "val_load": 1.4, "iterations_per_step": 4 if agent else 1}
        return make_env_fn("generalist", "maskable_ppo", kwargs, split="val", agent=agent)()

    out = tmp_path_factory.mktemp("generalist_eval")
    callback = PeriodicEvalCallback(make_env, ["fcfs", "slo_aware"], [0, 1, 2], 1, out, per_scenario=True)
    callback._init_callback()  # the baselines' evaluation: needs no model
    import baselines

    policy = baselines.per_workload("sjf", seed=0)
    callback.last_runs = [callback._episode(callback._agent_env, policy, seed) for seed in (0, 1, 2)]
    scenarios = [str(scenario) for scenario, _ in callback.last_runs]
    attainment = sum(m["slo_attainment"] for _, m in callback.last_runs) / 3
    return scenarios, callback.eval_scalars(attainment)


def test_every_tag_the_training_writes_is_documented(trained_run: TrainedRun) -> None:
    runs = tensorboard_scalars(trained_run.out / "tb")
    written = {tag for tags in runs.values() for tag in tags}
    assert written and undocumented(written) == set()


def test_the_generalists_evaluation_is_logged_per_scenario(generalist_eval: tuple[list[str], dict[str, float]]) -> None:
    from llmsched_env.workloads.library import get_scenario, mixture_scenarios

    scenarios, values = generalist_eval
    assert scenarios == mixture_scenarios()[:3]  # val seed s plays library scenario s
    for scenario in scenarios:
        for key in (
            "slo_attainment",
            "ttft_p50_s",
            "ttft_p99_s",
            "tpot_p50_s",
            "tpot_p99_s",
            "best_baseline_attainment",
        ):
            assert f"eval_scenario/{scenario}/{key}" in values, (scenario, key)
        assert values[f"eval_scenario/{scenario}/ttft_p50_s"] <= values[f"eval_scenario/{scenario}/ttft_p99_s"]
        for tenant in get_scenario(scenario).source("val").tenants:  # each tenant under its own scenario
            assert f"eval_scenario/{scenario}/tenant/{tenant.name}/slo_attainment" in values
    assert not any(tag.startswith("eval/tenant/") for tag in values)  # `chat` of default is not azure-conv's
    per_scenario = [values[f"eval_scenario/{s}/slo_attainment"] for s in scenarios]
    assert values["eval/slo_attainment"] == pytest.approx(sum(per_scenario) / 3)  # one episode each
    assert undocumented(set(values)) == set()


def test_each_tag_of_the_table_this_project_writes_is_written(
    trained_run: TrainedRun, generalist_eval: tuple[list[str], dict[str, float]]
) -> None:
    runs = tensorboard_scalars(trained_run.out / "tb")
    written = {tag for tags in runs.values() for tag in tags} | set(generalist_eval[1])
    ours = {tag: p for tag, p in documented().items() if tag.startswith(OURS)}
    assert {tag for tag, p in ours.items() if not any(p.fullmatch(t) for t in written)} == set()


def test_the_check_refuses_a_tag_the_table_does_not_hold() -> None:
    # the duplicate that was removed, a typo, and a per-tenant tag of the generalist's training episodes
    assert undocumented({"eval/mean_slo_attainment", "eval/slo_attainement", "eval_scenario/chat/service"}) == {
        "eval/mean_slo_attainment",
        "eval/slo_attainement",
        "eval_scenario/chat/service",
    }
    assert undocumented({"eval_scenario/default/tenant/chat/service", "clone/accuracy/shed"}) == set()


class _Updates(BaseCallback):
    """Each update's ``train/value_loss`` as SB3 records it, by the step of the rollout it learnt from."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[int, float] = {}

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:  # the update on the rollout that ended at num_timesteps is just made
        self._note()

    def _on_training_end(self) -> None:
        self._note()

    def _note(self) -> None:
        if self.num_timesteps not in self.seen and "train/value_loss" in self.logger.name_to_value:
            self.seen[self.num_timesteps] = float(self.logger.name_to_value["train/value_loss"])


def test_an_update_is_written_at_its_rollouts_step_whatever_the_log_interval(tmp_path: Path) -> None:
    from stable_baselines3 import A2C

    torch.set_num_threads(1)
    written: dict[bool, list[tuple[int, float]]] = {}
    for ours in (False, True):
        model = A2C("MlpPolicy", "CartPole-v1", n_steps=8, seed=0, tensorboard_log=str(tmp_path / str(ours)))
        updates = _Updates()
        callbacks = CallbackList([updates, UpdateLogCallback()] if ours else [updates])
        model.learn(56, log_interval=3, callback=callbacks)  # 7 rollouts of 8 steps, SB3 dumping every 3rd
        tags = tensorboard_scalars(tmp_path / str(ours))["A2C_1"]
        assert [step for step, _ in tags["time/fps"]] == [24, 48]
        written[ours] = tags["train/value_loss"]
        assert sorted(updates.seen) == [8 * k for k in range(1, 8)]  # one update per rollout, the same runs
    seen = updates.seen
    # SB3 alone writes the update on an earlier rollout at each dump (rollout 2's at 24, 5's at 48), not the last
    assert written[False] == [(24, pytest.approx(seen[16])), (48, pytest.approx(seen[40]))]
    # here: the update on each dumped rollout at its step, and the last one at the end
    assert written[True] == [(step, pytest.approx(seen[step])) for step in (24, 48, 56)]
    assert seen[16] != pytest.approx(seen[24])  # the two differ: the check above could fail


def test_write_scalars_leaves_what_sb3_has_pending(tmp_path: Path) -> None:
    from stable_baselines3.common.logger import configure

    logger = configure(str(tmp_path), ["tensorboard"])
    logger.record_mean("episode/slo_attainment", 0.5)
    write_scalars(logger, {"eval/slo_attainment": 0.9}, 10)
    assert logger.name_to_value == {"episode/slo_attainment": 0.5}  # still to be written at SB3's next dump
    logger.dump(12)
    logger.close()
    tags = tensorboard_scalars(tmp_path)["."]
    assert tags == {"eval/slo_attainment": [(10, pytest.approx(0.9))], "episode/slo_attainment": [(12, 0.5)]}
