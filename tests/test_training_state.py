"""Training that matches what it claims: a RecurrentPPO is evaluated with its LSTM state carried through each
episode (and refused by the stateless policy export), and ``--resume`` keeps the best evaluation so far, so a
worse model never replaces ``best_model.zip``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import RecurrentPPO

import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from agents import SB3Policy
from agents.callbacks import PeriodicEvalCallback
from agents.cli import main as train_main
from agents.export import export_policy
from llmsched_env.envs.episode import run_episode

ENV_KWARGS = {"scenario": "mixed-slo", "num_requests": 30, "iterations_per_step": 32}
TINY = [
    "--scenario", "mixed-slo", "--timesteps", "128", "--n-envs", "1", "--bc", "none", "--hp", "eval_freq=128",
    "--hp", "eval_episodes=1", "--hp", "n_steps=64", "--hp", "batch_size=64", "--hp", "env_kwargs.num_requests=30",
    "--hp", "env_kwargs.iterations_per_step=32", "--eval-baselines", "fcfs", "--no-progress",
]  # fmt: skip


@pytest.fixture(scope="module")
def recurrent() -> RecurrentPPO:
    torch.set_num_threads(1)
    env = gym.make("LLMSched-v1", **ENV_KWARGS)
    kwargs = {"net_arch": [16], "lstm_hidden_size": 16}
    return RecurrentPPO("MlpLstmPolicy", env, n_steps=32, batch_size=32, seed=3, device="cpu", policy_kwargs=kwargs)


def test_a_recurrent_policy_carries_its_lstm_state_through_each_episode(
    recurrent: RecurrentPPO, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Any, bool, Any]] = []  # (state received, episode_start, state returned)
    predict = recurrent.predict

    def spy(obs: np.ndarray, state: Any = None, episode_start: Any = None, deterministic: bool = False) -> Any:
        action, new_state = predict(obs, state=state, episode_start=episode_start, deterministic=deterministic)
        calls.append((state, bool(np.asarray(episode_start).item()), new_state))
        return action, new_state

    monkeypatch.setattr(recurrent, "predict", spy)
    env = gym.make("LLMSched-v1", **ENV_KWARGS)
    policy = SB3Policy(recurrent)
    run_episode(env, policy, seed=0)
    first_len = len(calls)
    run_episode(env, policy, seed=1)
    assert first_len > 2 and len(calls) > first_len + 2
    for i, (received, start, _) in enumerate(calls):
        if i in (0, first_len):  # each episode's first step: a fresh state
            assert start and received is None, i
        else:  # every other step: the state the previous step returned
            assert not start and received is calls[i - 1][2], i
    hidden = [np.asarray(c[2][0]) for c in calls[:first_len]]
    assert any(not np.array_equal(hidden[0], h) for h in hidden[1:])  # the state does move


def test_a_recurrent_policy_acts_as_a_manual_loop_with_state(recurrent: RecurrentPPO) -> None:
    env = gym.make("LLMSched-v1", **ENV_KWARGS)
    mine: list[list[int]] = []
    policy = SB3Policy(recurrent)
    act = policy.act
    policy.act = lambda o, m: mine.append(act(o, m).tolist()) or np.asarray(mine[-1])  # type: ignore[method-assign]
    metrics = run_episode(env, policy, seed=2)
    theirs: list[list[int]] = []
    obs, _ = env.reset(seed=2)
    state, start, done = None, np.array([True]), False
    while not done:
        action, state = recurrent.predict(obs, state=state, episode_start=start, deterministic=True)
        start = np.array([False])
        theirs.append(np.asarray(action).tolist())
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    assert mine == theirs and metrics == info["metrics"]


def test_export_refuses_a_recurrent_policy_in_one_line(recurrent: RecurrentPPO, tmp_path: Path) -> None:
    env = gym.make("LLMSched-v1", **ENV_KWARGS)
    with pytest.raises(ValueError, match="RecurrentPPO policy cannot be exported") as caught:
        export_policy(recurrent, env, tmp_path / "out")
    assert "\n" not in str(caught.value) and not (tmp_path / "out").exists()


def _fake_evaluation(monkeypatch: pytest.MonkeyPatch, attainment: float) -> None:
    monkeypatch.setattr(PeriodicEvalCallback, "evaluate", lambda self: attainment)


@pytest.fixture
def first_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Path:
    """A finished tiny run whose evaluations all scored 0.7 (its checkpoints signed with a key of its own)."""
    torch.set_num_threads(1)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the checkpoint key: not the user's
    out = tmp_path / "run"
    _fake_evaluation(monkeypatch, 0.7)
    assert train_main([*TINY, "--out", str(out)]) == 0
    capsys.readouterr()
    return out


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_resume_keeps_the_best_evaluation_so_far(
    first_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = first_run
    best = json.loads((out / "best.json").read_text())
    assert best["best_eval_attainment"] == 0.7 and best["eval_seeds"] == [0]
    kept = {name: (out / name).read_bytes() for name in ("best_model.zip", "policy.safetensors", "policy.json")}

    _fake_evaluation(monkeypatch, 0.4)  # a worse model: must not replace the best
    first = json.loads((out / "summary.json").read_text())["eval_history"]
    assert [step for step, _ in first] == [0, 128]
    assert train_main([*TINY, "--out", str(out), "--resume", "--timesteps", "256"]) == 0  # 128 steps more
    summary = json.loads((out / "summary.json").read_text())
    assert summary["timesteps"] == 256 and summary["eval_history"] == [*first, [256, 0.4]]
    assert summary["best_eval_attainment"] == 0.7
    assert {name: (out / name).read_bytes() for name in kept} == kept
    assert json.loads((out / "best.json").read_text()) == best

    _fake_evaluation(monkeypatch, 0.9)  # a better one does
    assert train_main([*TINY, "--out", str(out), "--resume", "--timesteps", "384"]) == 0
    assert json.loads((out / "best.json").read_text())["best_eval_attainment"] == 0.9
    assert (out / "best_model.zip").read_bytes() != kept["best_model.zip"]
    assert json.loads((out / "policy.json").read_text())["timesteps"] == 384
    assert "best now 0.900" in capsys.readouterr().out


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_resume_under_another_evaluation_does_not_compare_scores(
    first_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _fake_evaluation(monkeypatch, 0.4)
    argv = [*TINY, "--out", str(first_run), "--resume", "--timesteps", "256", "--hp", "eval_load=2.0"]
    assert train_main(argv) == 0
    assert capsys.readouterr().err.count("the scores do not compare") == 1
    assert json.loads((first_run / "best.json").read_text())["best_eval_attainment"] == 0.4


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_resume_with_a_bad_best_file_is_a_one_line_usage_error(first_run: Path, capsys: pytest.CaptureFixture) -> None:
    (first_run / "best.json").write_text('{"best_eval_attainment": "high"}')
    with pytest.raises(SystemExit) as caught:
        train_main([*TINY, "--out", str(first_run), "--resume"])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "best.json" in err and "'best_eval_attainment' must be a finite number" in err


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_training_and_its_checkpoint_selection_never_touch_the_test_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every env a training run builds (its learning envs, the periodic evaluation that picks the checkpoint,
    the baselines it is compared with) is on the train or val split; the evaluation ones on val."""
    torch.set_num_threads(1)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    splits: list[str] = []
    make = gym.make

    def spy(env_id: Any, *args: Any, **kwargs: Any) -> gym.Env:
        splits.append(kwargs.get("split", "train"))  # the envs' default split is train
        return make(env_id, *args, **kwargs)

    monkeypatch.setattr(gym, "make", spy)
    assert train_main([*TINY, "--out", str(tmp_path / "run")]) == 0
    assert "val" in splits and set(splits) <= {"train", "val"}
