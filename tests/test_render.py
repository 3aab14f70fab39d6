"""Rendering: the ansi dashboard's content and width, the rgb frame's shape, and that rendering is read-only."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsched_env  # noqa: F401  (registers LLMSched-v0)
from llmsched_env.costs.loader import load_cost_model
from llmsched_env.engine.batch import Decision
from llmsched_env.engine.config import EngineConfig, TenantConfig
from llmsched_env.engine.request import Request
from llmsched_env.envs.render import FRAME_SHAPE, MAX_COLS, kv_bar, render_ansi, render_rgb
from llmsched_env.sim.simulator import Simulator

# FCFS, budget and chunk-cap index 2, decode-first, admit as many as fit, no reserve, no shedding.
ADMIT = np.array([0, 2, 2, 0, 6, 0, 0])


def make_env(render_mode: str | None, **kwargs) -> gym.Env:
    return gym.make("LLMSched-v1", render_mode=render_mode, num_requests=50, **kwargs)


def check_ascii_width(text: str) -> None:
    assert text.isascii() and "\x1b" not in text, "the dashboard must be plain ASCII without colour codes"
    for line in text.splitlines():
        assert len(line) <= MAX_COLS, f"line of {len(line)} columns: {line!r}"


def test_ansi_dashboard_content_and_width():
    env = make_env("ansi")
    env.reset(seed=0)
    first = env.render()
    check_ascii_width(first)
    assert "last batch: none yet" in first
    saw_prefill = False
    for _ in range(60):
        _, _, terminated, truncated, _ = env.step(ADMIT)
        text = env.render()
        check_ascii_width(text)
        saw_prefill |= "prefill 0 " not in text
        if terminated or truncated:
            break
    assert saw_prefill, "no step rendered a prefill chunk"
    for tenant in env.unwrapped.tenants:
        assert tenant.name in text
    assert "KV [" in text and "# used" in text and ": cached" in text and ". free" in text
    bar = next(line for line in text.splitlines() if line.startswith("KV ["))
    assert bar.index("]") - bar.index("[") - 1 == 60
    assert "last batch: order FCFS" in text and "attainment" in text
    env.close()


def test_kv_bar_widths():
    assert kv_bar(30, 10, 100, width=10) == "[###:......]"
    assert kv_bar(100, 0, 100, width=8) == "[########]"
    assert kv_bar(0, 0, 7, width=5) == "[.....]"
    for used, cached in [(1, 1), (33, 33), (50, 49), (0, 99)]:
        assert len(kv_bar(used, cached, 99, width=37)) == 39


def test_ansi_long_prefill_list_is_cut():
    tenants = (TenantConfig("solo"),)
    requests = [Request(i, 0.0, prompt_len=20, output_len=4) for i in range(200)]
    sim = Simulator(EngineConfig(), tenants, load_cost_model("llama3-8b-h100"), requests)
    sim.step(Decision(token_budget=4096, chunk_cap=128))
    text = render_ansi(sim, 0.01)
    check_ascii_width(text)
    assert "prefill 128 (2560 tok): #0:20 #1:20" in text and "more" in text
    assert "solo" in text


def test_render_does_not_change_the_episode():
    plain, shown = make_env(None), make_env("ansi")
    obs_a, _ = plain.reset(seed=3)
    obs_b, _ = shown.reset(seed=3)
    for _ in range(40):
        shown.render()
        obs_a, r_a, *_ = plain.step(ADMIT)
        obs_b, r_b, *_ = shown.step(ADMIT)
        np.testing.assert_array_equal(obs_a, obs_b)
        assert r_a == r_b


@pytest.mark.parametrize("num_steps", [0, 80])
def test_rgb_frame(num_steps):
    env = make_env("rgb_array")
    env.reset(seed=0)
    for _ in range(num_steps):
        env.step(ADMIT)
    frame = env.render()
    assert frame.shape == FRAME_SHAPE and frame.dtype == np.uint8
    assert frame.std() > 10 and len(np.unique(frame.reshape(-1, 3), axis=0)) > 20, "blank frame"
    if num_steps:
        empty = render_rgb(env.unwrapped.sim, [])
        assert empty.shape == FRAME_SHAPE
        assert not np.array_equal(frame, empty), "the history drew nothing"
    env.close()
