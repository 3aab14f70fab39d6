"""Policy export (agents.export) and its loaders: numpy (decision.policy_file) and torch (runtime.policy_file).

The exported policy must pick exactly the actions SB3's deterministic ``predict`` picks, and every kind of
bad file must fail at load time with a message naming the file or the difference.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from sb3_contrib import MaskablePPO
from stable_baselines3 import A2C, PPO

import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from agents.export import export_policy
from llmsched_env.decision.observation import SCHEMA_VERSION
from llmsched_env.decision.policy_file import field_digests, seal_meta
from llmsched_env.runtime.policy_file import ExportedPolicy, PolicyFileError, action_options, load_policy_file

ROOT = Path(__file__).resolve().parents[1]
ALGOS = {"maskable_ppo": MaskablePPO, "ppo": PPO, "a2c": A2C}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _env() -> gym.Env:
    return gym.make("LLMSched-v1", num_requests=30)


@pytest.fixture(scope="module")
def models() -> dict:
    out = {}
    for name, cls in ALGOS.items():
        kwargs = {"batch_size": 32} if name != "a2c" else {}
        model = cls("MlpPolicy", _env(), seed=0, n_steps=64, policy_kwargs={"net_arch": [32, 32]}, **kwargs)
        before = model.policy.action_net.weight.detach().clone()
        model.learn(total_timesteps=128)
        assert not torch.equal(before, model.policy.action_net.weight), f"{name}: weights did not move"
        out[name] = model
    return out


@pytest.fixture(scope="module")
def rollout() -> list[tuple[np.ndarray, np.ndarray]]:
    """At least 200 (observation, mask) pairs from episodes under random valid actions."""
    env = _env()
    rng = np.random.default_rng(0)
    nvec = env.unwrapped.action_spec.nvec
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    seed = 0
    while len(pairs) < 240:
        obs, _ = env.reset(seed=seed)
        seed += 1
        done = False
        while not done and len(pairs) < 240:
            mask = env.unwrapped.action_masks()
            pairs.append((obs, mask))
            action, start = [], 0
            for n in nvec:
                action.append(int(rng.choice(np.flatnonzero(mask[start : start + n]))))
                start += n
            obs, _, terminated, truncated, _ = env.step(np.array(action))
            done = terminated or truncated
    return pairs


@pytest.fixture(scope="module")
def exported(models, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "maskable"
    export_policy(models["maskable_ppo"], _env(), out, extra={"scenario": "default", "seed": 0, "timesteps": 128})
    return out


def _sb3_action(model, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    if isinstance(model, MaskablePPO):
        action, _ = model.predict(obs, action_masks=mask, deterministic=True)
    else:
        action, _ = model.predict(obs, deterministic=True)
    return np.asarray(action, dtype=np.int64)


# ------------------------------------------------------------------------------------------ parity with SB3
@pytest.mark.parametrize("algo", list(ALGOS))
def test_exported_actions_equal_sb3_predict(algo, models, rollout, tmp_path) -> None:
    model = models[algo]
    tensors_path, json_path = export_policy(model, _env(), tmp_path)
    assert (tensors_path.name, json_path.name) == ("policy.safetensors", "policy.json")
    policy = load_policy_file(tmp_path)
    assert isinstance(policy, ExportedPolicy)
    assert policy.masked == (algo == "maskable_ppo")
    assert policy.meta["algo"] == algo
    assert policy.meta["network"]["activation"] == "tanh"
    assert len(policy.meta["network"]["layers"]) == 3
    assert len(rollout) >= 200
    for obs, mask in rollout:
        got = policy.act(obs, mask)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, _sb3_action(model, obs, mask))


def test_normalization_matches_sb3_on_normalised_observations(models, rollout, tmp_path) -> None:
    model = models["maskable_ppo"]
    n = model.observation_space.shape[0]
    rng = np.random.default_rng(1)
    mean, var = rng.normal(0.0, 0.5, n), rng.uniform(0.01, 2.0, n)
    eps, clip = 1e-6, 2.0
    stats = [
        {"mean": mean, "var": var, "epsilon": eps, "clip_obs": clip},  # a mapping
        SimpleNamespace(obs_rms=SimpleNamespace(mean=mean, var=var), epsilon=eps, clip_obs=clip, norm_obs=True),
    ]  # ...and a VecNormalize look-alike
    for i, obs_rms in enumerate(stats):
        export_policy(model, _env(), tmp_path / str(i), obs_rms=obs_rms)
        policy = load_policy_file(tmp_path / str(i) / "policy.json")
        assert policy.meta["normalization"]["clip"] == clip
        clipped = 0
        for obs, mask in rollout:
            normed = np.clip((obs - mean) / np.sqrt(var + eps), -clip, clip)  # what VecNormalize feeds SB3
            clipped += int(np.any(np.abs(normed) == clip))
            np.testing.assert_array_equal(policy.act(obs, mask), _sb3_action(model, normed, mask))
        assert clipped > 0  # the clip path was exercised


def test_json_schema_and_paths(exported, models) -> None:
    env = _env()
    meta = json.loads((exported / "policy.json").read_text())
    assert meta["format"] == "llmsched-policy" and meta["format_version"] == 1
    assert meta["schema_version"] == SCHEMA_VERSION
    assert meta["obs_names"] == list(env.unwrapped.obs_names)
    assert meta["action_nvec"] == list(env.unwrapped.action_spec.nvec)
    assert meta["action_options"] == action_options(env.unwrapped.action_spec)
    assert meta["masked"] is True and meta["normalization"] is None
    assert meta["tensors_sha256"] == hashlib.sha256((exported / "policy.safetensors").read_bytes()).hexdigest()
    assert (meta["scenario"], meta["seed"], meta["timesteps"]) == ("default", 0, 128)
    assert meta["fields_sha256"] == field_digests(meta) and "masked" in meta["fields_sha256"]  # every field but these
    assert not {"scenario", "seed", "timesteps"} & set(meta["fields_sha256"])
    names = set(load_file(str(exported / "policy.safetensors")))
    assert not any("value" in n for n in names)  # the critic stays behind
    for p in (exported, exported / "policy.json", exported / "policy.safetensors"):
        assert load_policy_file(p).obs_names == tuple(meta["obs_names"])


def test_export_rejects_wrong_env_and_clashing_extra(models, tmp_path) -> None:
    env = _env()
    spec = env.unwrapped.action_spec
    with pytest.raises(ValueError, match="names 3"):
        export_policy(models["ppo"], SimpleNamespace(obs_names=("a", "b", "c"), action_spec=spec), tmp_path)
    with pytest.raises(ValueError, match="format"):
        export_policy(models["ppo"], env, tmp_path, extra={"format": "mine"})


# ------------------------------------------------------------------------------------------ bad files
def _copy(exported: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(exported, out)
    return out


def _edit_json(folder: Path, edit) -> None:
    meta = json.loads((folder / "policy.json").read_text())
    edit(meta)
    (folder / "policy.json").write_text(json.dumps(meta))


def _reseal(folder: Path) -> None:
    """The weights' digest and the fields' record made again, as an export of the edited pair would."""
    digest = hashlib.sha256((folder / "policy.safetensors").read_bytes()).hexdigest()
    meta = json.loads((folder / "policy.json").read_text())
    meta["tensors_sha256"] = digest
    (folder / "policy.json").write_text(json.dumps(seal_meta(meta)))


def test_flipped_byte_fails_the_checksum(exported, tmp_path) -> None:
    folder = _copy(exported, tmp_path)
    data = bytearray((folder / "policy.safetensors").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "policy.safetensors").write_bytes(bytes(data))
    with pytest.raises(PolicyFileError, match=r"policy\.safetensors: sha256 .* does not match"):
        load_policy_file(folder)


def test_truncated_tensors_fail_to_load(exported, tmp_path) -> None:
    folder = _copy(exported, tmp_path)
    data = (folder / "policy.safetensors").read_bytes()
    (folder / "policy.safetensors").write_bytes(data[: len(data) // 2])
    _reseal(folder)
    with pytest.raises(PolicyFileError, match=r"policy\.safetensors: not a readable safetensors file"):
        load_policy_file(folder)


def test_missing_tensors_file(exported, tmp_path) -> None:
    folder = _copy(exported, tmp_path)
    (folder / "policy.safetensors").unlink()
    with pytest.raises(PolicyFileError, match=r"policy\.safetensors: cannot read"):
        load_policy_file(folder)


def _normalization(n: int, clip: float) -> dict:
    return {"mean": [0.0] * n, "var": [1.0] * n, "epsilon": 1e-8, "clip": clip}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("action_nvec"), r"policy\.json: missing key 'action_nvec'"),
        (lambda m: m.update(format_version=2), r"policy\.json: format_version 2 is not supported"),
        (lambda m: m.update(format="other"), r"policy\.json: format is 'other'"),
        (lambda m: m.update(masked="yes"), r"policy\.json: key 'masked' must be true or false"),
        (lambda m: m.update(obs_names=m["obs_names"][:-1]), r"takes \d+ inputs, expected len\(obs_names\)"),
        (lambda m: m["network"]["layers"][0].update(weight="nope"), r"tensor 'nope' .* is missing"),
        (lambda m: m["network"].update(activation="swish"), r"network\.activation must be one of"),
        (lambda m: m["action_nvec"].__setitem__(0, 99), r"gives \d+ logits, expected sum\(action_nvec\) = \d+"),
        (
            lambda m: m["action_nvec"].__setitem__(1, 99),
            r"action_options\.token_budgets has \d+ options but action_nvec",
        ),
        (lambda m: m.update(normalization={"mean": [0.0]}), r"normalization\.mean must be a list of \d+"),
        (lambda m: m.update(normalization=_normalization(len(m["obs_names"]), 1e308)), r"clip must be at most 3\.403e"),
    ],
    ids=[
        "missing-key",
        "format-version",
        "format",
        "type",
        "obs-count",
        "tensor",
        "activation",
        "nvec",
        "options",
        "norm",
        "clip",
    ],
)
def test_bad_json_is_named(exported, tmp_path, edit, message) -> None:
    folder = _copy(exported, tmp_path)
    _edit_json(folder, edit)
    with pytest.raises(PolicyFileError, match=message):
        load_policy_file(folder)


def _overflowing(policy: ExportedPolicy) -> list:
    layers = list(policy.weights)
    (w, b), (w_last, b_last) = layers[-2], layers[-1]  # the last hidden layer saturates at +1, then 32 x 3e38
    layers[-2] = (np.zeros_like(w), np.full_like(b, 10.0))
    layers[-1] = (np.full_like(w_last, 3e38), np.zeros_like(b_last))
    return layers  # every weight finite


def test_finite_weights_that_overflow_are_refused_when_loaded(exported, tmp_path, recwarn) -> None:
    policy = load_policy_file(exported)
    with pytest.raises(PolicyFileError, match=r"non-finite logits on a probe input \(every input 0\): its weights"):
        ExportedPolicy(policy.meta, _overflowing(policy), policy.path)
    folder = _copy(exported, tmp_path)  # the same through the file
    tensors = load_file(str(folder / "policy.safetensors"))
    names = sorted(k for k in tensors if k.endswith(".weight") and "value" not in k and "vf" not in k)
    for name in names:  # every actor weight huge: the hidden layers saturate, the logits overflow
        tensors[name] = torch.full_like(tensors[name], 3e38)
    save_file(tensors, str(folder / "policy.safetensors"))
    _reseal(folder)
    with pytest.raises(PolicyFileError, match=r"copy/policy\.json: the network gives non-finite logits on a probe"):
        load_policy_file(folder)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # no bare numpy warning


def test_finite_weights_that_overflow_are_refused_when_they_act(exported, rollout, monkeypatch) -> None:
    policy = load_policy_file(exported)
    monkeypatch.setattr(ExportedPolicy, "_probe", lambda self: None)  # as if the probe inputs had not overflowed
    huge = ExportedPolicy(policy.meta, _overflowing(policy), policy.path)
    obs, mask = rollout[5]
    with pytest.raises(PolicyFileError, match="non-finite logits"), np.errstate(over="ignore", invalid="ignore"):
        huge.act(obs, mask)
    assert policy.act(obs, mask).shape == (len(policy.action_nvec),)  # the file as it is acts


def test_tensor_shape_mismatch_is_named(exported, tmp_path) -> None:
    folder = _copy(exported, tmp_path)
    tensors = load_file(str(folder / "policy.safetensors"))
    name = "mlp_extractor.policy_net.2.weight"
    tensors[name] = tensors[name][:, :-1].contiguous()  # [32, 31]: takes one input fewer than layer 0 gives
    save_file(tensors, str(folder / "policy.safetensors"))
    _reseal(folder)
    with pytest.raises(
        PolicyFileError, match=rf"layer 1: weight '{name}' \[32, 31\] takes 31 inputs, expected layer 0"
    ):
        load_policy_file(folder)


def test_unreadable_json_and_bad_path(tmp_path) -> None:
    (tmp_path / "policy.json").write_text("{not json")
    with pytest.raises(PolicyFileError, match=r"policy\.json: cannot read"):
        load_policy_file(tmp_path)
    (tmp_path / "model.zip").write_bytes(b"PK")
    with pytest.raises(PolicyFileError, match=r"expected a policy\.json"):
        load_policy_file(tmp_path / "model.zip")
    with pytest.raises(PolicyFileError, match="missing: no such policy file or folder"):
        load_policy_file(tmp_path / "missing")
    with pytest.raises(PolicyFileError, match=r"other\.json: policy description not found"):
        load_policy_file(tmp_path / "other.json")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"format_version": ' + "9" * 5000 + "}", "does not fit in 64 bits"),
        ('{"action_nvec": [' + str(2**64) + "]}", "does not fit in 64 bits"),
    ],
    ids=["deep", "5000-digit", "2**64"],
)
def test_a_deep_or_huge_json_is_a_policy_file_error(tmp_path, text: str, problem: str) -> None:
    (tmp_path / "policy.json").write_text(text)
    with pytest.raises(PolicyFileError, match=rf"policy\.json: cannot read the policy description:.*{problem}") as info:
        load_policy_file(tmp_path)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------ compatibility
def test_check_compatible_names_the_difference(exported) -> None:
    policy = load_policy_file(exported)
    env = _env().unwrapped
    names, nvec = list(env.obs_names), list(env.action_spec.nvec)
    policy.check_compatible(names, nvec)
    policy.check_compatible(names, nvec, action_options=action_options(env.action_spec))

    other = [*names[:4], "kv/new", *names[5:], "extra/one"]
    with pytest.raises(
        PolicyFileError,
        match=rf"expects {len(names)} observation features, this env has "
        rf"{len(names) + 1}: missing \['kv/used'\], unexpected \['kv/new', 'extra/one'\]",
    ):
        policy.check_compatible(other, nvec)
    swapped = [names[1], names[0], *names[2:]]
    with pytest.raises(PolicyFileError, match="different order: index 0"):
        policy.check_compatible(swapped, nvec)
    bigger = [nvec[0], nvec[1] + 1, *nvec[2:]]
    with pytest.raises(PolicyFileError, match=rf"action space mismatch: .*token_budget: policy {nvec[1]} options, env"):
        policy.check_compatible(names, bigger)
    with pytest.raises(PolicyFileError, match=rf"observation schema {SCHEMA_VERSION} .* uses schema 99"):
        policy.check_compatible(names, nvec, schema_version=99)
    opts = action_options(env.action_spec)
    opts["token_budgets"] = [b * 2 for b in opts["token_budgets"]]
    with pytest.raises(PolicyFileError, match="action options token_budgets differ"):
        policy.check_compatible(names, nvec, action_options=opts)
    with pytest.raises(PolicyFileError, match=r"policy\.json does not fit"):
        policy.check_compatible(other, bigger)
    with pytest.raises(PolicyFileError, match=r"policy\.json: the policy was trained on") as err:  # schema first
        policy.check_compatible(other, bigger, schema_version=99)
    assert "\n" not in str(err.value)


def test_act_validates_inputs(exported, rollout) -> None:
    policy = load_policy_file(exported)
    obs, mask = rollout[0]
    with pytest.raises(ValueError, match="observation must have shape"):
        policy.act(obs[:-1], mask)
    with pytest.raises(ValueError, match="action_mask must have shape"):
        policy.act(obs, mask[:-1])
    empty = mask.copy()
    empty[: policy.action_nvec[0]] = False
    with pytest.raises(PolicyFileError, match=r"no valid option for component.*queue_order"):
        policy.act(obs, empty)
    only = np.zeros_like(mask)
    only[np.cumsum((0, *policy.action_nvec[:-1])) + np.array(policy.action_nvec) - 1] = True  # last option each
    np.testing.assert_array_equal(policy.act(obs, only), np.array(policy.action_nvec) - 1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e300])
def test_a_non_finite_observation_is_refused(exported, rollout, bad: float) -> None:
    policy = load_policy_file(exported)
    obs, mask = rollout[0]
    x = obs.astype(np.float64)
    x[3] = bad  # 1e300: finite in float64, inf once cast to the network's float32
    with np.errstate(over="ignore"):
        for given in (x, x.astype(np.float32)):
            with pytest.raises(ValueError, match="observation has non-finite values"):
                policy.act(given, mask)


def test_act_takes_the_first_best_allowed_option_as_numpy_argmax_does(exported, rollout) -> None:
    policy = load_policy_file(exported)
    obs, _ = rollout[0]
    nvec, total = policy.action_nvec, sum(policy.action_nvec)
    starts = np.cumsum((0, *nvec[:-1]))
    rng = np.random.default_rng(3)
    for _ in range(200):
        logits = rng.integers(0, 3, total).astype(np.float32)  # many ties
        mask = rng.random(total) < 0.7
        mask[starts + rng.integers(0, nvec)] = True  # every component keeps an option
        policy._network = lambda x, v=logits: v  # type: ignore[method-assign]
        expected = [
            int(np.where(mask[s : s + n], logits[s : s + n], -np.inf).argmax())
            for s, n in zip(starts, nvec, strict=True)
        ]
        np.testing.assert_array_equal(policy.act(obs, mask), expected)


# ------------------------------------------------------------------------------------------ layering
def _module_imports(path: Path) -> set[str]:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    return imported


def test_policy_file_loaders_import_only_numpy_safetensors_and_torch_for_the_torch_one() -> None:
    numpy_loader = _module_imports(ROOT / "llmsched_env" / "decision" / "policy_file.py")
    assert {n.split(".")[0] for n in numpy_loader} - {"llmsched_env"} <= {"numpy", "safetensors"} | set(
        sys.stdlib_module_names
    )
    # common.files: the bounded reads (standard library only)
    # common.registry: FORWARDS, where the torch loader registers its forward pass (found by entry point)
    allowed = {"llmsched_env.common.files", "llmsched_env.common.registry", "llmsched_env.decision.actions",
               "llmsched_env.decision.schema"}  # fmt: skip
    assert {n for n in numpy_loader if n.startswith("llmsched_env")} <= allowed
    torch_loader = _module_imports(ROOT / "llmsched_env" / "runtime" / "policy_file.py")
    assert {n.split(".")[0] for n in torch_loader} - {"llmsched_env"} <= {"numpy", "torch"} | set(
        sys.stdlib_module_names
    )
    assert {n for n in torch_loader if n.startswith("llmsched_env")} <= {"llmsched_env.decision.policy_file"}


def test_an_activation_numpy_lacks_runs_on_torch_and_the_numpy_loader_says_so(exported, rollout, tmp_path) -> None:
    from llmsched_env.decision import policy_file as numpy_loader

    gelu = tmp_path / "gelu"
    shutil.copytree(exported, gelu)
    meta = json.loads((gelu / "policy.json").read_text())
    meta["network"]["activation"] = "gelu"
    (gelu / "policy.json").write_text(json.dumps(seal_meta(meta)))
    with pytest.raises(PolicyFileError, match="activation 'gelu' runs on torch: load the policy with llmsched_env"):
        numpy_loader.load_policy_file(gelu)
    policy = load_policy_file(gelu)  # the runtime's loader: a torch forward pass
    layers = [(torch.from_numpy(w), torch.from_numpy(b)) for w, b in policy.weights]
    for obs, mask in rollout[:50]:
        h = torch.as_tensor(obs, dtype=torch.float32)
        for i, (w, b) in enumerate(layers):
            h = h @ w.T + b
            h = torch.nn.functional.gelu(h) if i < len(layers) - 1 else h
        logits = h.numpy().copy()
        start, expected = 0, []
        for n in policy.action_nvec:
            part = np.where(mask[start : start + n], logits[start : start + n], -np.inf)
            expected.append(int(part.argmax()))
            start += n
        assert policy.act(obs, mask).tolist() == expected
    # the decision layer's resolver (llmsched-evaluate, the vLLM adapter) reaches torch's forward pass through
    # FORWARDS without importing torch itself
    from llmsched_env.decision.policy_spec import resolve_policy

    resolved = resolve_policy(f"g={gelu}").load()
    assert not resolved.bounded_act  # a forward pass given at load time
    assert all((resolved.act(o, m) == policy.act(o, m)).all() for o, m in rollout[:50])
    # a numpy activation gives the same actions through either loader
    same = numpy_loader.load_policy_file(exported)
    assert all((same.act(o, m) == load_policy_file(exported).act(o, m)).all() for o, m in rollout[:50])


def test_policy_file_loads_and_acts_without_torch_gymnasium_or_sb3(exported, rollout) -> None:
    obs, mask = rollout[5]
    blocked = ["gymnasium", "stable_baselines3", "sb3_contrib", "agents", "baselines", "torch"]
    code = (
        "import sys, numpy as np\n"
        f"for name in {blocked!r}: sys.modules[name] = None  # any import of these now fails\n"
        "from llmsched_env.decision.policy_file import load_policy_file\n"
        f"p = load_policy_file({str(exported)!r})\n"
        f"print(p.act(np.array({obs.tolist()!r}, dtype=np.float32), np.array({mask.tolist()!r})).tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == load_policy_file(exported).act(obs, mask).tolist()
