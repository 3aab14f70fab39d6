"""Load an exported policy (``policy.safetensors`` + ``policy.json``, from ``agents.export``) and act in numpy.

The JSON carries the weights' sha256 and ``fields_sha256`` over every field but ``INFORMATIONAL_FIELDS``, so
an edit after export is refused; every fault is a ``PolicyFileError`` naming the file at load time. Activations
outside ``NUMPY_ACTIVATIONS`` use a torch ``forward`` from the ``FORWARDS`` registry (``runtime.policy_file``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as load_safetensors

from llmsched_env.common.files import (
    CONFIG_BYTES,
    POLICY_BYTES,
    FileRefusedError,
    InputFileError,
    link_problem,
    parse_json,
    read_bytes,
    read_text,
)
from llmsched_env.common.registry import Registry
from llmsched_env.decision.actions import ACTION_COMPONENTS
from llmsched_env.decision.schema import SCHEMAS, schema_summary

FORMAT = "llmsched-policy"
FORMAT_VERSION = 1
JSON_NAME = "policy.json"
TENSORS_NAME = "policy.safetensors"
FIELDS_KEY = "fields_sha256"  # field -> sha256 of its canonical JSON, for every field but these and itself:
INFORMATIONAL_FIELDS = ("scenario", "seed", "timesteps")  # what the training was; no decision reads them
SEAL_COMMAND = "python -m llmsched_env.commands.seal_policy"
ACTIVATION_NAMES = ("tanh", "relu", "elu", "leaky_relu", "gelu", "silu", "sigmoid", "identity")  # torch.nn's
NUMPY_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda h: np.maximum(h, 0.0, out=h),
    "identity": lambda h: h,
}
_FLOAT32_MAX = float(np.finfo(np.float32).max)
Forward = Callable[[np.ndarray], np.ndarray]  # the network input [num_obs] (float32) -> its logits [sum(nvec)]
# (meta, weights) -> the forward pass of that network
ForwardBuilder = Callable[[dict[str, Any], list[tuple[np.ndarray, np.ndarray]]], Forward]
# Builders of the actor's forward pass for the activations numpy lacks: ``torch`` is registered by the torch runtime
# (llmsched_env/runtime/policy_file.py), which the entry point ``llmsched.forwards`` imports on the first lookup.
FORWARDS: Registry[ForwardBuilder] = Registry("policy forward pass", plugins="llmsched.forwards")
# ActionSpec option lists and the action component each one sizes
OPTION_KEYS = {
    "token_budgets": "token_budget",
    "chunk_caps": "chunk_cap",
    "admission_caps": "admission_cap",
    "kv_reserves": "kv_reserve",
}


class PolicyFileError(InputFileError):
    """An exported policy file is missing, corrupt, inconsistent, or does not fit the environment."""


class UnsealedPolicyError(PolicyFileError):
    """A policy file without ``FIELDS_KEY`` (exported before policy files recorded their fields), else sound."""


def action_options(spec: Any) -> dict[str, list[float]]:
    """The option values of an ``ActionSpec`` (what each action index means), as stored in the JSON."""
    return {key: list(getattr(spec, key)) for key in OPTION_KEYS}


# ------------------------------------------------------------------------------------------------ loading
def torch_forward(meta: dict[str, Any], weights: list[tuple[np.ndarray, np.ndarray]]) -> Forward:
    """The network of ``meta`` in torch (``FORWARDS["torch"]``), for an activation numpy lacks; ``PolicyFileError``
    where torch's builder is not to be had."""
    try:
        builder = FORWARDS.get("torch")
    except (ValueError, ImportError) as exc:
        raise PolicyFileError(
            f"activation {meta['network']['activation']!r} runs on torch, whose forward pass is not available here "
            f"({str(exc).splitlines()[0]})"
        ) from None
    return builder(meta, weights)


def load_policy_file(path: str | Path, forward: ForwardBuilder | None = None) -> ExportedPolicy:
    """Load and verify an exported policy from ``policy.json``, ``policy.safetensors`` or their folder; ``forward``
    builds the pass for an activation numpy lacks (``runtime.policy_file`` passes torch's), else it is refused."""
    json_path, tensors_path = _paths(Path(path))
    meta = _read_json(json_path)
    _check_meta(meta, json_path)
    tensors = _read_tensors(tensors_path, meta["tensors_sha256"])
    weights = _check_layers(meta, tensors, tensors_path)
    check_fields(meta, json_path)  # last: a file edited into another fault is named for that fault
    in_numpy = meta["network"]["activation"] in NUMPY_ACTIVATIONS
    return ExportedPolicy(meta, weights, json_path, None if in_numpy or forward is None else forward(meta, weights))


def _field_digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)  # canonical
    return hashlib.sha256(text.encode()).hexdigest()


def field_digests(meta: Mapping[str, Any]) -> dict[str, str]:
    """``FIELDS_KEY``'s record of ``meta``: each field but ``INFORMATIONAL_FIELDS`` (and the record itself) ->
    the sha256 of its canonical JSON (keys sorted, no spaces)."""
    skip = (FIELDS_KEY, *INFORMATIONAL_FIELDS)
    return {key: _field_digest(meta[key]) for key in sorted(meta) if key not in skip}


def seal_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` with its ``FIELDS_KEY`` record (``field_digests``), as an export writes it."""
    return {**{k: v for k, v in meta.items() if k != FIELDS_KEY}, FIELDS_KEY: field_digests(meta)}


def check_fields(meta: Mapping[str, Any], where: Path) -> None:
    """``PolicyFileError`` unless ``meta``'s fields are those its ``FIELDS_KEY`` record was made of, naming each
    changed, added or removed field; a file without the record is refused with the command that adds it."""
    if FIELDS_KEY not in meta:
        raise UnsealedPolicyError(
            f"{where}: no {FIELDS_KEY}: the file was exported before policy files recorded their fields, so an edit "
            f"of masked, iterations_per_step or any other field cannot be told; if it is as it was exported, add the "
            f"record with `{SEAL_COMMAND} {shlex.quote(str(where.parent))}` (or export the policy again)"
        )
    recorded = meta[FIELDS_KEY]
    if not (isinstance(recorded, dict) and all(_is_digest(v) for v in recorded.values())):
        raise PolicyFileError(f"{where}: key {FIELDS_KEY!r} must be an object of sha256 digests, got {recorded!r:.80}")
    now = field_digests(meta)
    changed = [k for k in now if k in recorded and now[k] != recorded[k]]
    added = [k for k in now if k not in recorded]
    removed = [k for k in recorded if k not in meta]
    if changed or added or removed:
        edits = [f"{', '.join(map(repr, keys))} {what}" for keys, what in ((changed, "changed"), (added, "added"),
                 (removed, "removed")) if keys]  # fmt: skip
        raise PolicyFileError(
            f"{where}: edited after export: {'; '.join(edits)} ({FIELDS_KEY} records every field that decides the "
            "policy's actions as it was exported); export the policy again or restore the file"
        )


def _is_digest(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch("[0-9a-f]{64}", v) is not None


def policy_file_paths(path: str | Path) -> tuple[Path, Path] | None:
    """The description and the weights an exported policy named by ``path`` (a folder, or either file) is read
    from, or None when ``path`` names neither."""
    p = Path(path)
    if p.is_dir():
        return p / JSON_NAME, p / TENSORS_NAME
    if p.suffix in (".json", ".safetensors"):
        return p.with_suffix(".json"), p.with_suffix(".safetensors")
    return None


def _paths(path: Path) -> tuple[Path, Path]:
    paths = policy_file_paths(path)
    if paths is None:
        what = f"expected a {JSON_NAME}, a {TENSORS_NAME} or a folder holding them"
        raise PolicyFileError(
            f"{path}: {link_problem(path) or (what if path.exists() else 'no such policy file or folder')}"
        )
    json_path = paths[0]
    problem = link_problem(json_path)
    if problem is not None:  # a link loop, a link to nothing
        raise PolicyFileError(f"{json_path}: {problem}")
    if not json_path.exists():  # one that is there but not a regular file is refused as it is read
        raise PolicyFileError(f"{json_path}: policy description not found")
    return json_path, json_path.with_suffix(".safetensors")


def _int64(text: str) -> int:
    """A JSON integer of the policy description: it must fit in 64 bits (every count and id does)."""
    value = int(text) if len(text) <= 21 else None
    if value is None or not -(2**63) <= value < 2**63:
        raise ValueError(f"integer {text[:30]}{'...' if len(text) > 30 else ''} does not fit in 64 bits")
    return value


def _read_json(path: Path) -> dict[str, Any]:
    try:
        meta = parse_json(read_text(path, CONFIG_BYTES), parse_int=_int64)
    except FileRefusedError as exc:  # a FIFO, a device, a file over the limit: the message names it already
        raise PolicyFileError(str(exc)) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise PolicyFileError(f"{path}: cannot read the policy description: {exc}") from None
    except RecursionError:
        raise PolicyFileError(f"{path}: cannot read the policy description: nested too deeply") from None
    if not isinstance(meta, dict):
        raise PolicyFileError(f"{path}: the policy description must be a JSON object, got {type(meta).__name__}")
    return meta


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _ints(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(n) for n in v)


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


_CHECKS: dict[str, tuple[str, Any]] = {  # key -> (what it must be, test)
    "format": ("a string", lambda v: isinstance(v, str)),
    "format_version": ("an integer", _is_int),
    "schema_version": ("an integer", _is_int),
    "obs_names": ("a non-empty list of strings", lambda v: _strings(v) and len(v) > 0),
    "action_components": ("a list of strings", _strings),
    "action_nvec": ("a non-empty list of integers >= 1", lambda v: _ints(v) and len(v) > 0 and min(v) >= 1),
    "action_options": ("an object", lambda v: isinstance(v, dict)),
    "masked": ("true or false", lambda v: isinstance(v, bool)),
    "normalization": ("null or an object", lambda v: v is None or isinstance(v, dict)),
    "network": ("an object", lambda v: isinstance(v, dict)),
    "tensors_sha256": ("a sha256 hex digest", _is_digest),
    "algo": ("a string", lambda v: isinstance(v, str)),
}


def _check_meta(meta: dict[str, Any], where: Path) -> None:
    def fail(msg: str) -> PolicyFileError:
        return PolicyFileError(f"{where}: {msg}")

    for key, (what, ok) in _CHECKS.items():
        if key not in meta:
            raise fail(f"missing key {key!r}")
        if not ok(meta[key]):
            raise fail(f"key {key!r} must be {what}, got {meta[key]!r:.80}")
    steps = meta.get("iterations_per_step", 1)
    if not (_is_int(steps) and steps >= 1):
        raise fail(f"key 'iterations_per_step' must be an integer >= 1, got {steps!r:.80}")
    if meta["format"] != FORMAT:
        raise fail(f"format is {meta['format']!r}, expected {FORMAT!r}")
    if meta["format_version"] != FORMAT_VERSION:
        raise fail(f"format_version {meta['format_version']} is not supported (this code reads {FORMAT_VERSION})")
    if meta["schema_version"] not in SCHEMAS:
        raise fail(
            f"observation schema {meta['schema_version']} is not supported (this code reads schemas "
            f"{', '.join(map(str, SCHEMAS))}): retrain the policy with this version of llmsched"
        )
    n_obs, comps, nvec = len(meta["obs_names"]), meta["action_components"], meta["action_nvec"]
    if len(set(meta["obs_names"])) != n_obs:
        raise fail("obs_names has duplicates")
    if len(comps) != len(nvec):
        raise fail(f"action_components has {len(comps)} names but action_nvec has {len(nvec)} entries")
    for key, opts in meta["action_options"].items():
        if not (isinstance(opts, list) and opts and all(_is_num(o) for o in opts)):
            raise fail(f"action_options.{key} must be a non-empty list of numbers, got {opts!r:.80}")
        comp = OPTION_KEYS.get(key)
        if comp in comps and len(opts) != nvec[comps.index(comp)]:
            raise fail(
                f"action_options.{key} has {len(opts)} options but action_nvec gives {comp} {nvec[comps.index(comp)]}"
            )
    norm = meta["normalization"]
    if norm is not None:
        for key in ("mean", "var"):
            v = norm.get(key)
            if not (isinstance(v, list) and len(v) == n_obs and all(_is_num(x) for x in v)):
                raise fail(f"normalization.{key} must be a list of {n_obs} finite numbers (one per observation)")
        if any(x < 0 for x in norm["var"]):
            raise fail("normalization.var must be >= 0")
        for key in ("epsilon", "clip"):
            if not (_is_num(norm.get(key)) and norm[key] >= 0):
                raise fail(f"normalization.{key} must be a number >= 0, got {norm.get(key)!r}")
        if norm["clip"] == 0 or any(v + norm["epsilon"] <= 0 for v in norm["var"]):
            raise fail("normalization: clip must be > 0 and var + epsilon > 0")
        if norm["clip"] > _FLOAT32_MAX:  # the clipped observation goes into the network as float32
            raise fail(f"normalization.clip must be at most {_FLOAT32_MAX:.4g} (float32), got {norm['clip']!r}")
    net = meta["network"]
    if net.get("activation") not in ACTIVATION_NAMES:
        raise fail(f"network.activation must be one of {sorted(ACTIVATION_NAMES)}, got {net.get('activation')!r}")
    layers = net.get("layers")
    if not (isinstance(layers, list) and layers):
        raise fail("network.layers must be a non-empty list")
    for i, layer in enumerate(layers):
        if not (isinstance(layer, dict) and _strings([layer.get("weight"), layer.get("bias")])):
            raise fail(f"network.layers[{i}] must be an object with string keys 'weight' and 'bias', got {layer!r:.80}")


def _read_tensors(path: Path, sha256: str) -> dict[str, np.ndarray]:
    try:
        data = read_bytes(path, POLICY_BYTES)
    except FileRefusedError as exc:
        raise PolicyFileError(str(exc)) from None
    except OSError as exc:
        raise PolicyFileError(f"{path}: cannot read the policy weights: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise PolicyFileError(
            f"{path}: sha256 {digest} does not match tensors_sha256 {sha256} in {path.with_suffix('.json').name} "
            "(corrupt or replaced weights file)"
        )
    try:  # parse the very bytes that were hashed
        return load_safetensors(data)
    except Exception as exc:  # safetensors raises its own SafetensorError, or ValueError/RuntimeError
        raise PolicyFileError(f"{path}: not a readable safetensors file: {exc}") from exc


def _check_layers(
    meta: dict[str, Any], tensors: dict[str, np.ndarray], where: Path
) -> list[tuple[np.ndarray, np.ndarray]]:
    layers = meta["network"]["layers"]
    n_in = len(meta["obs_names"])
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for i, layer in enumerate(layers):
        w_name, b_name = layer["weight"], layer["bias"]
        for name in (w_name, b_name):
            if name not in tensors:
                have = sorted(tensors)
                raise PolicyFileError(f"{where}: tensor {name!r} (network.layers[{i}]) is missing; has {have}")
            t = tensors[name]
            if t.dtype.kind != "f" or not bool(np.isfinite(t).all()):
                raise PolicyFileError(f"{where}: tensor {name!r} must hold finite floats (dtype {t.dtype})")
        w, b = tensors[w_name], tensors[b_name]
        if w.ndim != 2 or b.ndim != 1 or b.shape[0] != w.shape[0]:
            raise PolicyFileError(
                f"{where}: layer {i}: weight {w_name!r} must be [out, in] and bias {b_name!r} [out]; "
                f"got {list(w.shape)} and {list(b.shape)}"
            )
        if w.shape[1] != n_in:
            what = f"len(obs_names) = {n_in}" if i == 0 else f"layer {i - 1}'s {n_in} outputs"
            raise PolicyFileError(
                f"{where}: layer {i}: weight {w_name!r} {list(w.shape)} takes {w.shape[1]} inputs, expected {what}"
            )
        n_in = w.shape[0]
        out.append((w.astype(np.float32), b.astype(np.float32)))
    n_logits = sum(meta["action_nvec"])
    if n_in != n_logits:
        raise PolicyFileError(f"{where}: the last layer gives {n_in} logits, expected sum(action_nvec) = {n_logits}")
    return out


# ------------------------------------------------------------------------------------------------ the policy
class ExportedPolicy:
    """An exported MLP policy: SB3's deterministic ``predict`` (normalise as VecNormalize did, run the actor, drop
    masked-out options for a ``masked`` policy, argmax per component). Not thread-safe: one input buffer."""

    def __init__(
        self,
        meta: dict[str, Any],
        weights: Sequence[tuple[np.ndarray, np.ndarray]],
        path: Path,
        forward: Forward | None = None,
    ) -> None:
        self.meta = meta
        self.path = path
        self.obs_names: tuple[str, ...] = tuple(meta["obs_names"])
        self.action_components: tuple[str, ...] = tuple(meta["action_components"])
        self.action_nvec: tuple[int, ...] = tuple(meta["action_nvec"])
        self.action_options: dict[str, list[float]] = dict(meta["action_options"])
        self.masked: bool = meta["masked"]
        self.schema_version: int = meta["schema_version"]
        self.weights = [(w, b) for w, b in weights]  # (weight [out, in], bias [out]) per layer, float32
        # The network in numpy (a call of a small MLP through torch costs tens of microseconds of dispatch,
        # most of a decision: bench/bench_vllm_adapter.py), or ``forward`` for an activation numpy lacks.
        self._forward = forward
        self._np_act = NUMPY_ACTIVATIONS.get(meta["network"]["activation"])
        if forward is None and self._np_act is None:
            raise PolicyFileError(
                f"{path}: activation {meta['network']['activation']!r} runs on torch: load the policy with "
                "llmsched_env.runtime.policy_file.load_policy_file"
            )
        self._np_layers = [(w.T.copy(), b.copy()) for w, b in weights]
        n_obs, total = len(self.obs_names), sum(self.action_nvec)
        self._x_np = np.zeros(n_obs, dtype=np.float32)  # the network input, reused by every act()
        norm = meta["normalization"]
        self._norm = norm is not None
        if norm is not None:  # VecNormalize: clip((obs - mean) / sqrt(var + eps), ±clip), in float64 as SB3 does
            self._mean = np.asarray(norm["mean"], dtype=np.float64)
            self._std = np.sqrt(np.asarray(norm["var"], dtype=np.float64) + float(norm["epsilon"]))
            self._clip = float(norm["clip"])
            self._scratch = np.empty(n_obs, dtype=np.float64)
        starts = np.cumsum((0, *self.action_nvec[:-1])).tolist()
        # each component's slice of the logits: (start, end)
        self._ranges = [(s, s + n) for s, n in zip(starts, self.action_nvec, strict=True)]
        self._total = total

        self._probe()

    def _network(self, x: np.ndarray) -> np.ndarray:
        """The actor's logits (float32, ``[sum(nvec)]``) for the network input ``x`` (after normalisation)."""
        if self._forward is not None:
            return np.asarray(self._forward(x), dtype=np.float32)
        assert self._np_act is not None  # checked in __init__
        h = x
        last = len(self._np_layers) - 1
        for i, (w_t, b) in enumerate(self._np_layers):  # w_t: [in, out]
            h = h @ w_t
            h += b
            if i < last:
                h = self._np_act(h)
        return h

    def _probe(self) -> None:
        """``PolicyFileError`` when the network gives a non-finite logit on a probe input (0, 1 or -1 after
        normalisation): weights whose products overflow float32 are refused at load time."""
        n = len(self.obs_names)
        with np.errstate(over="ignore", invalid="ignore"):  # the overflow is the finding, not a warning
            for value in (0.0, 1.0, -1.0):
                if not np.isfinite(self._network(np.full(n, value, dtype=np.float32))).all():
                    raise PolicyFileError(
                        f"{self.path}: the network gives non-finite logits on a probe input (every input {value:g}): "
                        "its weights overflow float32"
                    )

    def __repr__(self) -> str:
        return (
            f"ExportedPolicy({str(self.path)!r}, algo={self.meta['algo']!r}, obs={len(self.obs_names)}, "
            f"nvec={list(self.action_nvec)}, masked={self.masked})"
        )

    @property
    def bounded_act(self) -> bool:
        """True when the network runs in numpy (a fixed number of small array operations: no deadline timer need
        interrupt it, ``decision.policy.bounded_act``); False for a forward pass given at load time."""
        return self._forward is None

    def act(self, observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        """The action (int64, one option index per component) for one observation and its mask (first maximum wins)."""
        obs = np.asarray(observation)
        x = self._x_np
        if obs.shape != x.shape:
            raise ValueError(f"observation must have shape {x.shape} ({self.path.name}), got {obs.shape}")
        if self._norm:
            s = self._scratch
            np.subtract(obs, self._mean, out=s)
            np.divide(s, self._std, out=s)
            np.clip(s, -self._clip, self._clip, out=s)
            x[:] = s
        elif obs.dtype == np.float32:
            x = obs  # the network does not write to its input
        else:
            x[:] = obs
        if not np.isfinite(x).all():
            raise ValueError(f"observation has non-finite values: {obs!r}")
        logits = self._network(x).tolist()
        if not math.isfinite(sum(logits)):  # e.g. finite weights so large that a product overflows
            raise PolicyFileError(f"{self.path}: the network gives non-finite logits for this observation")
        allowed: list[bool] | None = None
        if self.masked:
            mask = np.asarray(action_mask, dtype=bool)
            if mask.shape != (self._total,):
                raise ValueError(f"action_mask must have shape ({self._total},), got {mask.shape}")
            allowed = mask.tolist()
        action = []
        for s, e in self._ranges:
            seg = logits[s:e]
            if allowed is not None:
                ok = allowed[s:e]
                if False in ok:
                    if True not in ok:
                        empty = self._empty(allowed)
                        raise PolicyFileError(f"action_mask leaves no valid option for component(s) {empty}")
                    seg = [v if a else -math.inf for v, a in zip(seg, ok, strict=True)]
            action.append(seg.index(max(seg)))
        return np.array(action, dtype=np.int64)

    def _empty(self, allowed: list[bool]) -> list[str]:
        """The action components ``allowed`` leaves no option for."""
        return [c for c, (s, e) in zip(self.action_components, self._ranges, strict=True) if not any(allowed[s:e])]

    def check_compatible(
        self,
        obs_names: Sequence[str],
        action_nvec: Sequence[int],
        schema_version: int | None = None,
        action_options: Mapping[str, Sequence[float]] | None = None,
        action_components: Sequence[str] = ACTION_COMPONENTS,
    ) -> None:
        """``PolicyFileError`` saying what differs between this policy and an env: its schema (None: not compared;
        checked first), observation names, nvec, ``action_components`` (``("replica",)`` for a router) and, when
        given, ``action_options`` (what each index means: equal nvec with other budgets would change actions)."""
        if schema_version is not None and schema_version != self.schema_version:
            raise PolicyFileError(
                f"{self.path}: the policy was trained on observation {schema_summary(self.schema_version)}, this "
                f"env uses {schema_summary(schema_version)}; build the env with schema={self.schema_version} "
                "(evaluate.py does so by itself) or use a policy of this schema"
            )
        problems = []
        env_obs = tuple(obs_names)
        if env_obs != self.obs_names:
            mine, theirs = set(self.obs_names), set(env_obs)
            missing = [n for n in self.obs_names if n not in theirs]
            unexpected = [n for n in env_obs if n not in mine]
            if not missing and not unexpected and len(env_obs) == len(self.obs_names):
                i = next(i for i, (a, b) in enumerate(zip(self.obs_names, env_obs, strict=True)) if a != b)
                problems.append(
                    f"observation features in a different order: index {i} is {self.obs_names[i]!r} "
                    f"for the policy, {env_obs[i]!r} in this env"
                )
            else:
                problems.append(
                    f"policy expects {len(self.obs_names)} observation features, this env has "
                    f"{len(env_obs)}: missing {missing}, unexpected {unexpected}"
                )
        env_nvec = tuple(int(n) for n in action_nvec)
        if env_nvec != self.action_nvec:
            if len(env_nvec) == len(self.action_nvec):
                pairs = zip(self.action_components, self.action_nvec, env_nvec, strict=True)
                diff = ", ".join(f"{c}: policy {a} options, env {b}" for c, a, b in pairs if a != b)
            else:
                diff = f"policy has {len(self.action_nvec)} components, env {len(env_nvec)}"
            problems.append(
                f"action space mismatch: policy nvec {list(self.action_nvec)}, env nvec {list(env_nvec)} ({diff})"
            )
        if self.action_components != tuple(action_components):
            problems.append(
                f"action components {list(self.action_components)} differ from this env's {list(action_components)}"
            )
        for key, env_opts in (action_options or {}).items():
            mine_opts = self.action_options.get(key)
            if mine_opts is not None and [float(v) for v in mine_opts] != [float(v) for v in env_opts]:
                problems.append(f"action options {key} differ: policy {list(mine_opts)}, env {list(env_opts)}")
        if problems:
            raise PolicyFileError(f"{self.path} does not fit this environment: " + "; ".join(problems))
