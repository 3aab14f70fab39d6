"""Human views of a running simulator: ``render_ansi`` (a text dashboard of at most ``MAX_COLS`` columns) and
``render_rgb`` (a plot frame, matplotlib imported lazily, no pyplot). Both only read engine state, so rendering
leaves an episode bit-for-bit the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from llmsched_env.sim.simulator import Simulator

if TYPE_CHECKING:
    from llmsched_env.cluster.simulator import Cluster
    from llmsched_env.engine.batch import Batch

MAX_COLS = 100
KV_BAR_WIDTH = 60
FRAME_SHAPE = (480, 800, 3)  # height, width, RGB
_RULE = "-" * 96
_CHAR_USED, _CHAR_CACHED, _CHAR_FREE = "#", ":", "."


# ------------------------------------------------------------------------------------------- ansi
def _fmt_s(t_s: float) -> str:
    """A duration, short: ``850ms``, ``1.25s``, ``75.0s``."""
    if t_s < 1.0:
        return f"{t_s * 1e3:.0f}ms" if t_s >= 0.01 else f"{t_s * 1e3:.1f}ms"
    return f"{t_s:.2f}s" if t_s < 10.0 else f"{t_s:.1f}s"


def _pct(num: int, den: int) -> str:
    return f"{100.0 * num / den:5.1f}%" if den else "  n/a"


def kv_bar(num_used: int, num_cached: int, num_blocks: int, width: int = KV_BAR_WIDTH) -> str:
    """``[###:::...]``: used, cached-evictable and free blocks, rounded cumulatively so the widths sum up."""
    assert num_blocks > 0 and num_used >= 0 and num_cached >= 0 and num_used + num_cached <= num_blocks
    n_used = round(width * num_used / num_blocks)
    n_cached = round(width * (num_used + num_cached) / num_blocks) - n_used
    return "[" + _CHAR_USED * n_used + _CHAR_CACHED * n_cached + _CHAR_FREE * (width - n_used - n_cached) + "]"


def _tenant_table(sim: Simulator) -> list[str]:
    engine = sim.engine
    now = engine.now_s
    oldest: dict[int, float] = {}
    for r in engine.waiting_requests():  # read-only walk; ``head()`` would drop stale queue entries
        if r.tenant not in oldest or r.arrival_s < oldest[r.tenant]:
            oldest[r.tenant] = r.arrival_s
    lines = [
        f"{'tenant':<12} {'ttft/tpot slo':>14} {'wait':>5} {'wait_tok':>8} {'oldest/ttft':>15} "
        f"{'run':>4} {'dec':>4} {'pre':>4} {'good':>5} {'miss':>5}"
    ]
    for t, cfg in enumerate(engine.tenants):
        slo = f"{_fmt_s(cfg.slo.ttft_s)}/{_fmt_s(cfg.slo.tpot_s)}"
        if t in oldest:
            wait_s = now - oldest[t]
            flag = "!" if wait_s > cfg.slo.ttft_s else " "
            old = f"{_fmt_s(wait_s)}/{_fmt_s(cfg.slo.ttft_s)}{flag}"
        else:
            old = "-"
        running, decoding = engine.num_running_t[t], engine.num_decoding_t[t]
        lines.append(
            f"{cfg.name[:12]:<12} {slo:>14} {engine.num_waiting[t]:>5} {engine.waiting_tokens[t]:>8} {old:>15} "
            f"{running:>4} {decoding:>4} {running - decoding:>4} {engine.num_good_t[t]:>5} "
            f"{engine.num_missed_t[t]:>5}"
        )
    return lines


def _kv_lines(sim: Simulator) -> list[str]:
    pool = sim.engine.pool
    n = pool.num_blocks
    used, cached = pool.num_used, pool.num_cached_blocks
    free = n - used - cached
    return [
        f"KV {kv_bar(used, cached, n)} {_pct(used, n)} used",
        f"   {_CHAR_USED} used {used} ({_pct(used, n).strip()})   {_CHAR_CACHED} cached {cached} "
        f"({_pct(cached, n).strip()})   {_CHAR_FREE} free {free} ({_pct(free, n).strip()})   "
        f"of {n} blocks x {pool.block_size} tok",
    ]


def _chunk_list(batch: Batch, width: int) -> str:
    """``#12:512 #40:128+ ...``, cut to ``width`` columns with a count of what was left off."""
    items = [f"#{r.request_id}:{c}" for r, c in zip(batch.prefill_reqs, batch.prefill_chunks, strict=True)]
    out = ""
    for i, item in enumerate(items):
        more = f" ... +{len(items) - i} more"
        if len(out) + 1 + len(item) + (len(more) if i + 1 < len(items) else 0) > width:
            return out + more
        out += " " + item
    return out


def _batch_lines(sim: Simulator, last_step_s: float, tightest_tpot_s: float) -> list[str]:
    engine = sim.engine
    batch = engine.last_batch
    if batch is None:
        return ["last batch: none yet"]
    d = batch.decision
    admit = "all" if d.max_admit >= engine.config.max_num_seqs else str(d.max_admit)
    mix = "prefill-first" if d.prefill_first else "decode-first"
    head = (
        f"last batch: order {d.order.name}  budget {d.token_budget}  chunk cap {d.chunk_cap}  {mix}  "
        f"admit<={admit}  reserve {d.kv_reserve:.0%}  shed {'on' if d.shed else 'off'}"
    )
    prefill = f"  prefill {len(batch.prefill_reqs)} ({batch.num_prefill_tokens} tok):"
    prefill += _chunk_list(batch, MAX_COLS - len(prefill)) if batch.prefill_reqs else " -"
    ratio = last_step_s / tightest_tpot_s
    stats = (
        f"  decodes {batch.num_decode_seqs}  tokens {batch.num_tokens}/{d.token_budget}  "
        f"admitted {batch.num_admitted}  preempted {batch.num_preempted}  rejected {batch.num_rejected}  "
        f"iter {_fmt_s(last_step_s)} ({ratio:.2f}x tpot)"
    )
    return [head, prefill, stats]


def render_ansi(sim: Simulator, last_step_s: float) -> str:
    """A text dashboard of the engine now: clock, queues per tenant, running set, KV pool, last batch,
    counters. Plain ASCII, every line at most ``MAX_COLS`` columns, no colour codes."""
    engine = sim.engine
    tightest = min(t.slo.tpot_s for t in engine.tenants)
    nxt = sim.next_arrival_s
    pending = f"{sim.num_pending_arrivals} pending"
    if nxt is not None:
        pending += f", next in {_fmt_s(nxt - engine.now_s)}"
    num_prefilling = len(engine.prefilling)
    resolved = engine.num_good + engine.num_missed
    attain = f"{engine.num_good / resolved:.1%}" if resolved else "n/a"
    lines = [
        f"LLMSched  t={engine.now_s:.3f}s  step {sim.num_steps}  iter {_fmt_s(last_step_s)}  "
        f"arrived {engine.num_arrived}/{len(sim.requests)} ({pending})",
        _RULE,
        *_tenant_table(sim),
        _RULE,
        f"running {len(engine.running)}/{engine.config.max_num_seqs}: {engine.num_decoding} decoding, "
        f"{num_prefilling} prefilling ({engine.remaining_prefill_tokens()} prefill tok left)",
        *_kv_lines(sim),
        _RULE,
        *_batch_lines(sim, last_step_s, tightest),
        _RULE,
        f"finished {len(engine.finished)}  rejected {len(engine.rejected)}  preemptions {engine.num_preemptions}"
        f"  SLO met {engine.num_good}  missed {engine.num_missed}  attainment {attain}",
    ]
    return "\n".join(line[:MAX_COLS].rstrip() for line in lines)


# ------------------------------------------------------------------------------------------- rgb
def render_rgb(sim: Simulator, history: Sequence[tuple[float, int, float, float]]) -> np.ndarray:
    """An RGB frame (``FRAME_SHAPE``, uint8) of the recent ``history`` of (time_s, num_waiting, kv_usage, iteration
    time_s): waiting queue, KV usage, and iteration time against the tightest TPOT SLO (dashed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    engine = sim.engine
    tightest_ms = 1e3 * min(t.slo.tpot_s for t in engine.tenants)
    h, w, _ = FRAME_SHAPE
    dpi = 100
    fig = Figure(figsize=(w / dpi, h / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    ax_q, ax_kv, ax_it = fig.subplots(3, 1, sharex=True)
    if history:
        arr = np.asarray(history, dtype=np.float64)
        t, waiting, kv, it_ms = arr[:, 0], arr[:, 1], 100.0 * arr[:, 2], 1e3 * arr[:, 3]
        ax_q.step(t, waiting, where="post", color="tab:blue", lw=1.2)
        ax_kv.plot(t, kv, color="tab:green", lw=1.2)
        ax_kv.fill_between(t, kv, color="tab:green", alpha=0.2)
        ax_it.plot(t, it_ms, color="tab:purple", lw=1.0)
        lo, hi = float(t[0]), float(t[-1])
        ax_it.set_xlim(lo, hi if hi > lo else lo + 1e-3)
        ax_q.set_ylim(0, max(1.0, float(waiting.max()) * 1.1))
        ax_it.set_ylim(0, max(tightest_ms, float(it_ms.max())) * 1.4)  # room for the legend
    else:
        ax_it.set_xlim(engine.now_s, engine.now_s + 1.0)
        ax_q.set_ylim(0, 1)
        ax_it.set_ylim(0, tightest_ms * 1.4)
    ax_kv.set_ylim(0, 110)
    ax_kv.axhline(100.0, color="tab:red", lw=1.0)
    ax_it.axhline(tightest_ms, color="tab:red", lw=1.0, ls="--", label=f"tightest TPOT SLO {tightest_ms:.0f} ms")
    ax_it.legend(loc="upper left", fontsize=7, frameon=False)
    ax_q.set_ylabel("waiting")
    ax_kv.set_ylabel("KV used %")
    ax_it.set_ylabel("iter ms")
    ax_it.set_xlabel("time (s)")
    for ax in (ax_q, ax_kv, ax_it):
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    fig.suptitle(
        f"t={engine.now_s:.2f}s  step {sim.num_steps}  waiting {engine.num_waiting_total}  "
        f"running {len(engine.running)}  KV {engine.pool.usage:.0%}  good {engine.num_good}  "
        f"missed {engine.num_missed}",
        fontsize=9,
    )
    fig.subplots_adjust(left=0.08, right=0.98, top=0.92, bottom=0.09, hspace=0.12)
    canvas.draw()
    frame = np.asarray(canvas.buffer_rgba())[:, :, :3].copy()
    assert frame.shape == FRAME_SHAPE, f"frame shape {frame.shape} != {FRAME_SHAPE}"
    return frame


def render_cluster_ansi(cluster: Cluster) -> str:
    """One line for the clock and routing, one per replica: queue, running set, KV use, iterations."""
    lines = [f"t={cluster.now_s:9.3f}s  routed {cluster.num_routed}/{len(cluster.requests)}"]
    for rep in cluster.replicas:
        e = rep.engine
        lines.append(
            f"  replica {rep.index} ({rep.role:7s}) waiting {sum(e.num_waiting) + len(e.landed):4d}  running "
            f"{len(e.running):4d}  KV {e.pool.usage:5.1%}  iterations {rep.num_iterations}"
        )
    return "\n".join(lines)
