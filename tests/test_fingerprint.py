"""Regression: episodes' metrics, rewards and observations equal the recorded fingerprint.

The fingerprint (``tests/data/fingerprint.json``) was recorded before the package was split into one folder
per concern; code moves and de-duplication must leave it unchanged. ``python tests/fingerprint.py`` rewrites
it, for a change that is meant to alter behaviour only.
"""

from __future__ import annotations

import json

import pytest

from tests.fingerprint import DATA, fingerprint


def test_episodes_match_the_recorded_fingerprint() -> None:
    expected = json.loads(DATA.read_text())
    got = json.loads(json.dumps(fingerprint()))
    assert sorted(got) == sorted(expected), sorted(set(got) ^ set(expected))
    for key, want in expected.items():
        have = got[key]
        assert have["steps"] == want["steps"], key
        assert have["obs_sha256"] == want["obs_sha256"], key
        assert have["reward"] == pytest.approx(want["reward"], rel=1e-12, abs=1e-12), key
        assert sorted(have["metrics"]) == sorted(want["metrics"]), key
        for name, value in want["metrics"].items():
            assert have["metrics"][name] == pytest.approx(value, rel=1e-12, abs=1e-12), f"{key}: {name}"
