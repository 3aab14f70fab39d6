"""Regression: episodes' metrics, rewards and observations equal the recorded fingerprint.

The fingerprint (``tests/data/fingerprint.json``) was recorded before the package was split into one folder
per concern; code moves and de-duplication must leave it unchanged. ``python tests/fingerprint.py`` rewrites
it, for a change that is meant to alter behaviour only. Each recorded episode is its own test, so that workers
(``-n 2``) share them.
"""

from __future__ import annotations

import json

import pytest

from tests.fingerprint import DATA, cases

EXPECTED = json.loads(DATA.read_text())


def test_the_recorded_episodes_are_the_ones_the_code_plays() -> None:
    assert sorted(cases()) == sorted(EXPECTED), sorted(set(cases()) ^ set(EXPECTED))


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_episodes_match_the_recorded_fingerprint(key: str) -> None:
    want = EXPECTED[key]
    have = json.loads(json.dumps(cases()[key]()))
    assert have["steps"] == want["steps"], key
    assert have["obs_sha256"] == want["obs_sha256"], key
    assert have["reward"] == pytest.approx(want["reward"], rel=1e-12, abs=1e-12), key
    assert sorted(have["metrics"]) == sorted(want["metrics"]), key
    for name, value in want["metrics"].items():
        assert have["metrics"][name] == pytest.approx(value, rel=1e-12, abs=1e-12), f"{key}: {name}"
