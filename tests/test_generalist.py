"""The generalist's machinery: ``LLMSchedMix-v0`` (a workload per episode), a schema-2 policy on any trace (one
tenant, twelve) in the simulator and on the torch runtime, ``--policies learned``, ``--init`` (fine-tuning)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from gymnasium.utils.env_checker import check_env as gym_check_env
from sb3_contrib import MaskablePPO

import baselines
import llmsched_env  # noqa: F401
from agents.export import export_policy
from agents.generalist import init_from_policy, init_network, knee_loads
from agents.train_config import TrainConfig
from llmsched_env.decision import policy_spec as eval_policies
from llmsched_env.envs.episode import run_episode
from llmsched_env.envs.mixture import WorkloadMixEnv
from llmsched_env.runtime.policy_file import load_policy_file
from llmsched_env.workloads.library import mixture_scenarios
from llmsched_env.workloads.randomized import SMALL_ENGINE, RandomizedSpace

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "tests" / "data" / "heldout"
GENERIC = "arrival=arrival,prompt_len=prompt_len,output_len=output_len,tenant=tenant"


def test_mix_env_draws_a_workload_per_episode_deterministically() -> None:
    env = WorkloadMixEnv(num_requests=50)
    draws = [env.reset(seed=s)[1]["workload"] for s in range(40)]
    assert draws == [env.reset(seed=s)[1]["workload"] for s in range(40)]  # same seed, same workload
    randoms = sum(d["scenario"].startswith("random-") for d in draws)
    assert 10 <= randoms <= 30  # random_share 0.5
    library = [d for d in draws if not d["scenario"].startswith("random-")]
    assert len({d["scenario"] for d in library}) >= 5
    assert {d["length_prediction"] for d in draws} == {"none", "exact", "lognormal:0.5", "lognormal:1"}
    shapes = set()
    for s in range(6):  # one observation and action layout whatever the workload (tenants, engine)
        obs, _ = env.reset(seed=s)
        shapes.add((obs.shape, tuple(env.action_spec.nvec), env.action_masks().shape))
        assert env.observation_space.contains(obs)
    assert len(shapes) == 1


def test_mix_env_val_split_plays_each_library_scenario_at_its_knee() -> None:
    knees = knee_loads()
    assert set(knees) == set(mixture_scenarios()) and all(v > 0.5 for v in knees.values())
    env = WorkloadMixEnv(split="val", knee_loads=knees, num_requests=40)
    seen = [env.reset(seed=s)[1]["workload"] for s in range(len(mixture_scenarios()))]
    assert [d["scenario"] for d in seen] == list(mixture_scenarios())
    assert all(d["load"] == knees[d["scenario"]] and d["length_prediction"] == "none" for d in seen)


def test_mix_env_load_span_and_val_load_set_the_loads() -> None:
    knees = knee_loads()
    val = WorkloadMixEnv(split="val", knee_loads=knees, num_requests=40, val_load=1.4)
    for s in range(3):
        d = val.reset(seed=s)[1]["workload"]
        assert d["load"] == pytest.approx(1.4 * knees[d["scenario"]])
    train = WorkloadMixEnv(knee_loads=knees, num_requests=40, random_share=0.0, load_span=(1.8, 2.0))
    ratios = [d["load"] / knees[d["scenario"]] for d in (train.reset(seed=s)[1]["workload"] for s in range(20))]
    assert min(ratios) >= 1.8 - 1e-9 and max(ratios) <= 2.0 + 1e-9


def test_mix_env_passes_the_gymnasium_checker_and_keeps_invariants() -> None:
    # the invariant check scans the whole KV pool every step: small engines keep it quick
    small = RandomizedSpace(engines=(SMALL_ENGINE,))
    gym_check_env(WorkloadMixEnv(num_requests=30, random_space=small), skip_render_check=True)
    env = gym.make(
        "LLMSchedMix-v0", scenarios=["default", "mixed-slo", "tenants-on-off"], random_space=small, num_requests=40,
        check_invariants=True,
    )  # fmt: skip
    for seed in range(3):  # a heuristic built for each episode's own workload (run_episode's factory)
        m = run_episode(env, lambda e: baselines.make("slo_aware", e.unwrapped.policy_context()), seed)
        assert m["num_finished"] + m["num_rejected"] == m["num_requests"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"scenarios": ["nope"]}, "unknown"), ({"random_share": 1.5}, "random_share"),
     ({"length_predictions": ["oracle"]}, "kind must be"), ({"split": "eval"}, "val"),
     ({"load_span": (2.0, 1.0)}, "load_span"), ({"load_span": (0.5,)}, "load_span"), ({"val_load": 0}, "val_load")],
)  # fmt: skip
def test_mix_env_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        WorkloadMixEnv(**kwargs)


@pytest.fixture(scope="module")
def schema2_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An exported schema-2 policy (an untrained MaskablePPO of the generalist's shape)."""
    torch.set_num_threads(1)
    env = WorkloadMixEnv(num_requests=30)
    model = MaskablePPO("MlpPolicy", env, seed=0, n_steps=64, policy_kwargs={"net_arch": [32, 32]})
    out = tmp_path_factory.mktemp("g") / "generalist"
    export_policy(model, env, out, extra={"scenario": "generalist", "iterations_per_step": 4})
    return out


@pytest.mark.parametrize(
    ("trace", "fmt", "columns"),
    [pytest.param("azure_code_1tenant.csv", "azure", None, marks=pytest.mark.slow),
     pytest.param("sharegpt_12tenants.csv", "generic", GENERIC, marks=pytest.mark.slow),
     pytest.param("mooncake_1tenant.jsonl", "mooncake", None, marks=pytest.mark.slow),
     pytest.param("conv_code_2tenants.csv", "generic", GENERIC, marks=pytest.mark.slow)],
)  # fmt: skip
def test_the_shipped_generalist_runs_on_any_trace_in_the_simulator(
    tmp_path: Path, trace: str, fmt: str, columns: str | None
) -> None:
    from llmsched_env.commands.evaluate import main

    out = tmp_path / "ev"
    extra = ["--trace-columns", columns] if columns else []
    code = main(
        ["--trace", str(HELDOUT / trace), "--trace-format", fmt, *extra, "--num-requests", "40",
         "--policies", "sprw,learned", "--check-invariants", "--out", str(out), "--no-plots",
         "--no-progress", "--length-prediction", "lognormal:0.5"]
    )  # fmt: skip
    assert code == 0
    rows = (out / "results.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert len(rows) == 3
    for row in rows[1:]:
        values = dict(zip(header, row.split(","), strict=True))
        assert float(values["num_finished"]) + float(values["num_rejected"]) == 40


@pytest.mark.parametrize(
    "trace", ["azure_code_1tenant.csv", pytest.param("sharegpt_12tenants.csv", marks=pytest.mark.slow)]
)
def test_the_shipped_generalist_runs_on_the_torch_runtime(tmp_path: Path, trace: str) -> None:
    from llmsched_env.commands.evaluate import main

    fmt = (
        ["--trace-format", "azure"]
        if trace.startswith("azure")
        else ["--trace-format", "generic", "--trace-columns", GENERIC]
    )
    out = tmp_path / "rt"
    code = main(
        ["--backend", "runtime", "--model", "tiny", "--trace", str(HELDOUT / trace), *fmt, "--num-requests", "4",
         "--max-model-len", "2048", "--policies", "learned", "--check-invariants", "--out", str(out),
         "--no-plots", "--no-progress"]
    )  # fmt: skip
    assert code == 0
    header, row = (out / "results.csv").read_text().splitlines()
    values = dict(zip(header.split(","), row.split(","), strict=True))
    assert float(values["num_finished"]) + float(values["num_rejected"]) == 4
    assert float(values["policy_fallbacks"]) == 0


def test_learned_names_the_shipped_generalist(monkeypatch: pytest.MonkeyPatch, schema2_policy: Path, tmp_path: Path):
    monkeypatch.setattr(eval_policies, "GENERALIST_PATH", tmp_path / "missing")
    with pytest.raises(ValueError, match="llmsched-train --scenario generalist"):
        eval_policies.resolve_policy("learned")
    monkeypatch.setattr(eval_policies, "GENERALIST_PATH", schema2_policy)
    spec = eval_policies.resolve_policy("learned")
    assert spec.name == "learned" and spec.schema == 2 and spec.path == schema2_policy


def test_init_copies_the_policy_and_refuses_what_does_not_fit(schema2_policy: Path) -> None:
    policy, net = init_network(schema2_policy)
    assert net["net_arch"] == {"pi": [32, 32], "vf": [32, 32]}
    env = WorkloadMixEnv(num_requests=30)
    model = MaskablePPO("MlpPolicy", env, seed=1, n_steps=64, policy_kwargs=net)
    init_from_policy(model, policy, env)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    mask = np.ones(sum(env.action_spec.nvec), dtype=bool)
    for _ in range(20):  # the model now acts as the exported policy
        obs = rng.uniform(-1, 1, env.observation_space.shape).astype(np.float32)
        mine, _ = model.predict(obs, deterministic=True, action_masks=mask)
        assert mine.tolist() == policy.act(obs, mask).tolist()
    with pytest.raises(ValueError, match="schema 1"):  # an old per-scenario policy cannot start the generalist
        TrainConfig(scenario="generalist", init=ROOT / "tests" / "data" / "policies" / "mixed-slo")
    with pytest.raises(ValueError, match=r"init: .*no such policy"):
        TrainConfig(scenario="mixed-slo", init=ROOT / "nope")
    with pytest.raises(ValueError, match="--resume"):
        TrainConfig(scenario="mixed-slo", init=schema2_policy, resume=True)
    assert load_policy_file(schema2_policy).schema_version == 2


@pytest.mark.slow  # a training of its own: the fast tier trains once (tests/trained_run.py)
def test_fine_tuning_reads_the_init_policy_once(
    schema2_policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import llmsched_env.runtime.policy_file as policy_file
    from agents.cli import main as train_main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    reads: list[Path] = []
    real = policy_file.load_policy_file
    monkeypatch.setattr(policy_file, "load_policy_file", lambda path: reads.append(Path(path)) or real(path))
    run = tmp_path / "ft"
    train_main([
        "--scenario", "mixed-slo", "--init", str(schema2_policy), "--timesteps", "128", "--n-envs", "1",
        "--hp", "n_steps=128", "--hp", "batch_size=64", "--hp", "eval_freq=128", "--hp", "eval_episodes=1",
        "--hp", "env_kwargs.num_requests=30", "--eval-baselines", "fcfs", "--no-progress", "--out", str(run),
    ])  # fmt: skip
    assert reads == [schema2_policy]  # the config's check; the training takes the policy from the config
    trained = load_policy_file(run)
    assert trained.schema_version == 2 and trained.meta["scenario"] == "mixed-slo"


def test_a_fine_tuning_never_ships_a_policy_below_its_start_on_val(
    schema2_policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from safetensors.numpy import load_file

    from agents.callbacks import PeriodicEvalCallback
    from agents.cli import main as train_main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    scores = iter([0.8, 0.5])  # the start, evaluated before learning, then the checkpoint after 128 steps
    monkeypatch.setattr(PeriodicEvalCallback, "evaluate", lambda self: next(scores))
    run = tmp_path / "ft"
    assert train_main([
        "--scenario", "mixed-slo", "--init", str(schema2_policy), "--timesteps", "128", "--n-envs", "1",
        "--hp", "n_steps=128", "--hp", "batch_size=64", "--hp", "eval_freq=128", "--hp", "eval_episodes=1",
        "--hp", "env_kwargs.num_requests=30", "--eval-baselines", "fcfs", "--no-progress", "--out", str(run),
    ]) == 0  # fmt: skip
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval_history"] == [[0, 0.8], [128, 0.5]] and summary["best_eval_attainment"] == 0.8
    shipped, start = load_file(run / "policy.safetensors"), load_file(schema2_policy / "policy.safetensors")
    assert shipped.keys() == start.keys()
    assert all(np.array_equal(shipped[k], start[k]) for k in start)  # the start itself, not the later model
    assert json.loads((run / "policy.json").read_text())["timesteps"] == 0


@pytest.mark.slow  # a training of its own
def test_an_anchored_fine_tuning_logs_its_pull_and_cannot_be_resumed(
    schema2_policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from agents.cli import main as train_main
    from agents.train_config import TrainConfig
    from agents.training import preflight

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    run = tmp_path / "ft"
    common = ["--scenario", "mixed-slo", "--timesteps", "256", "--n-envs", "1", "--hp", "n_steps=128",
              "--hp", "batch_size=64", "--hp", "eval_freq=128", "--hp", "eval_episodes=1",
              "--hp", "env_kwargs.num_requests=30", "--hp", "anchor_coef=1.0", "--eval-baselines", "fcfs",
              "--no-progress", "--out", str(run)]  # fmt: skip
    train_main([*common, "--init", str(schema2_policy)])
    events = EventAccumulator(str(next((run / "tb").rglob("events.out.tfevents.*")).parent))
    events.Reload()
    assert {"anchor/kl", "anchor/kl_after"} <= set(events.Tags()["scalars"])
    with pytest.raises(ValueError, match="resumed run cannot be anchored"):
        preflight(TrainConfig(scenario="mixed-slo", out=run, resume=True, hp={"anchor_coef": 1.0}, progress=False))


def test_per_workload_builds_the_first_baseline_that_fits_each_episode() -> None:
    env = WorkloadMixEnv(num_requests=30, random_share=0.5)
    make = baselines.per_workload("tuned,slo_aware", seed=0)
    kinds = set()
    for seed in range(8):
        env.reset(seed=seed)
        policy = make(env)
        assert make(env) is policy  # the same workload: built once
        random = env.workload["scenario"].startswith("random-")
        assert policy.name == ("slo_aware" if random else "tuned")  # tuned has no settings for a random workload
        kinds.add(policy.name)
    assert kinds == {"tuned", "slo_aware"}
    single = gym.make("LLMSched-v1", scenario="mixed-slo", num_requests=30)
    single.reset(seed=0)
    first = baselines.per_workload("fcfs")(single)
    assert first.name == "fcfs"
    with pytest.raises(ValueError, match="no baseline"):
        baselines.per_workload(",")
    with pytest.raises(ValueError, match="nope"):
        baselines.per_workload("nope")(single)


def _user_trace(path: Path, n: int = 900) -> Path:
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(0.3, n))
    rows = [f"{t:.4f},{int(rng.integers(50, 800))},{int(rng.integers(10, 200))},{'a' if i % 3 else 'b'}"
            for i, t in enumerate(arrivals)]  # fmt: skip
    path.write_text("arrival,prompt_len,output_len,tenant\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.slow
def test_train_fine_tunes_on_a_users_trace(schema2_policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from agents.cli import main as train_main
    from agents.cli import parse_args

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    trace = _user_trace(tmp_path / "mine.csv")
    run = tmp_path / "ft"
    argv = [
        "--trace", str(trace), "--trace-format", "generic", "--trace-columns", GENERIC,
        "--tenant-slo", "a=chat,b=interactive", "--max-num-seqs", "32", "--init", str(schema2_policy),
        "--timesteps", "128", "--n-envs", "1", "--hp", "n_steps=128", "--hp", "batch_size=64",
        "--hp", "eval_freq=128", "--hp", "eval_episodes=1", "--eval-baselines", "fcfs", "--no-progress",
        "--out", str(run),
    ]  # fmt: skip
    config = parse_args(argv).config
    assert config.scenario == "mine" and config.env_scenario.engine.max_num_seqs == 32
    assert [t.name for t in config.env_scenario.source("test").tenants] == ["b", "a"]  # order of appearance
    assert parse_args(config.to_argv()).config == config  # command.txt trains the same again
    train_main(argv)
    policy = load_policy_file(run)
    assert policy.schema_version == 2 and policy.meta["scenario"] == "mine"
    sizes = yaml.safe_load((run / "config.yml").read_text())["env_kwargs"]["num_requests"]
    assert sizes <= config.env_scenario.num_requests  # episodes fit the trace's val and test parts


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--scenarios", "default,bursty"], "--trace replaces --scenario"),
     (["--scenario", "generalist"], "--trace replaces --scenario"),
     (["--trace-format", "azure"], "mine.csv:1: missing colum"),
     (["--trace-format", "generic"], "--trace-columns: the generic format needs them")],
)  # fmt: skip
def test_train_trace_options_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture, extra: list, message: str):
    from agents.cli import parse_args

    trace = _user_trace(tmp_path / "mine.csv", 50)
    with pytest.raises(SystemExit):
        parse_args(["--trace", str(trace), "--out", str(tmp_path / "r"), *extra])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err
    with pytest.raises(SystemExit):
        parse_args(["--trace-format", "azure", "--out", str(tmp_path / "r")])  # no --trace
    assert "apply to --trace only" in capsys.readouterr().err
    with pytest.raises(ValueError, match="generalist trains on its mix"):
        TrainConfig(scenario="generalist", trace={"trace": trace, "trace_format": "generic", "trace_columns": GENERIC})
