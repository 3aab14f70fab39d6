"""The public traces shipped as package data: where they are looked up, that they equal the publishers' files,
that they carry their licenses and are packaged, and that every loader reads ``.gz`` files transparently."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path, PurePosixPath

import numpy as np
import pytest

from llmsched_env.workloads.lengths import load_length_file
from llmsched_env.workloads.public_traces import PACKAGED_TRACE_DIR, TRACE_DIR_ENV, TRACE_FILES, trace_dir, trace_path
from llmsched_env.workloads.scenarios import scenario_from_trace
from llmsched_env.workloads.traces import TraceError, clear_trace_cache, load_generic, load_trace

ROOT = Path(__file__).resolve().parents[1]
# sha256 and size of the publishers' uncompressed files (AzurePublicDataset, Mooncake FAST25-release, etalon)
ORIGINALS = {
    "azure-code": ("54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6", 320_117),
    "azure-conv": ("2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8", 719_188),
    "mooncake-conv": ("b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df", 3_029_533),
    "sharegpt": ("6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f", 949_600),
}
FORMATS = {"azure-conv": "azure", "azure-code": "azure", "mooncake-conv": "mooncake", "sharegpt": "lengths"}
COLUMNS = {"arrival": "t", "prompt_len": "in", "output_len": "out"}


def _gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode(), mtime=0))
    return path


def test_the_package_data_is_the_default_and_nothing_else_is_searched() -> None:
    assert TRACE_DIR_ENV not in os.environ  # tests/conftest.py drops it
    assert trace_dir() == PACKAGED_TRACE_DIR
    for key, rel in TRACE_FILES.items():
        assert trace_path(key) == PACKAGED_TRACE_DIR / (rel + ".gz")


@pytest.mark.parametrize("key", sorted(TRACE_FILES))
def test_packaged_traces_equal_the_originals_row_for_row(key: str, tmp_path: Path) -> None:
    """Compressed, otherwise unmodified: the decompressed bytes are the publishers' file (its sha256 and size),
    and the ``.gz`` parses to exactly the rows its plain copy parses to."""
    packaged = trace_path(key)
    raw = gzip.decompress(packaged.read_bytes())
    assert (hashlib.sha256(raw).hexdigest(), len(raw)) == ORIGINALS[key]
    plain = tmp_path / PurePosixPath(TRACE_FILES[key]).name
    plain.write_bytes(raw)
    ours, theirs = load_trace(packaged, FORMATS[key]), load_trace(plain, FORMATS[key])
    assert ours is not theirs and ours.name == theirs.name and len(ours) == len(theirs)
    for field in ("arrival_s", "prompt_len", "output_len"):
        np.testing.assert_array_equal(getattr(ours, field), getattr(theirs, field))
    assert ours.prefix_ids == theirs.prefix_ids
    if FORMATS[key] != "mooncake":  # the length-file reader reads the Azure and ShareGPT CSVs too
        for a, b in zip(load_length_file(packaged), load_length_file(plain), strict=True):
            np.testing.assert_array_equal(a, b)


def test_every_packaged_folder_has_its_license_and_attribution() -> None:
    folders = sorted({rel.split("/")[0] for rel in TRACE_FILES.values()})
    assert folders == sorted(p.name for p in PACKAGED_TRACE_DIR.iterdir() if p.is_dir())
    for name in folders:
        folder = PACKAGED_TRACE_DIR / name
        readme = (folder / "README.md").read_text()
        for needle in ("Source:", "License:", "Citation:", "gzip-compressed, otherwise unmodified"):
            assert needle in readme, f"{name}/README.md lacks {needle!r}"
        licenses = sorted(folder.glob("LICENSE*"))
        assert licenses, f"{name} has no LICENSE file"
        text = licenses[0].read_text(encoding="utf-8-sig")
        assert ("Apache License" in text) == ("Apache" in readme), name
        assert ("Attribution 4.0 International" in text) == ("CC-BY-4.0" in readme), name


def test_pyproject_package_data_covers_every_data_file() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["llmsched_env"]
    package = PACKAGED_TRACE_DIR.parents[1]
    for path in sorted(p for p in PACKAGED_TRACE_DIR.rglob("*") if p.is_file()):
        rel = PurePosixPath(path.relative_to(package).as_posix())
        assert any(rel.match(g) and len(rel.parts) == len(PurePosixPath(g).parts) for g in globs), rel


def test_trace_dir_env_replaces_the_package_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    rel = Path(TRACE_FILES["azure-code"])
    (tmp_path / rel.parent).mkdir()
    header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    packed = _gz(tmp_path / f"{rel}.gz", header + "2023-11-16 18:00:00.0,5,6\n")
    assert trace_path("azure-code") == packed
    assert load_trace(packed, "azure").prompt_len.tolist() == [5]
    plain = tmp_path / rel
    plain.write_text(header + "2023-11-16 18:00:00.0,7,8\n")
    assert trace_path("azure-code") == plain  # the plain file wins over its .gz copy
    with pytest.raises(TraceError) as info:  # no fallback to the package data for a file the folder lacks
        trace_path("mooncake-conv")
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "mooncake") in message and TRACE_DIR_ENV in message
    with pytest.raises(ValueError, match="unknown public trace 'nope'; known: \\['azure-code'"):
        trace_path("nope")


def test_gzip_files_load_like_plain_ones_and_stay_cached(tmp_path: Path) -> None:
    rows = "t,in,out\n" + "".join(f"{i / 2},{10 + i},{2 + i % 3}\n" for i in range(20))  # 3 in val, 3 in test
    plain = tmp_path / "mine.csv"
    plain.write_text(rows)
    packed = _gz(tmp_path / "mine.csv.gz", rows)
    a, b = load_generic(plain, COLUMNS), load_generic(packed, COLUMNS)
    assert b.name == a.name == "mine" and b.source == str(packed.resolve())
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.prompt_len, b.prompt_len)
    assert load_generic(packed, COLUMNS) is b  # parsed once per process
    clear_trace_cache()
    assert load_generic(packed, COLUMNS) is not b
    lines = "".join(json.dumps({"ts": 1000 * i, "p": 5 + i, "o": 2}) + "\n" for i in range(3))
    keys = {"arrival": "ts", "prompt_len": "p", "output_len": "o"}
    jsonl = load_generic(_gz(tmp_path / "mine.jsonl.gz", lines), keys)
    assert jsonl.prompt_len.tolist() == [5, 6, 7] and jsonl.name == "mine"
    assert scenario_from_trace(packed, "generic", columns=COLUMNS).name == "mine"
    lengths = _gz(tmp_path / "lens.csv.gz", "num_prefill_tokens,num_decode_tokens\n10,20\n30,40\n")
    assert load_length_file(lengths)[0].tolist() == [10, 30]


def test_errors_in_gzip_files_name_the_file_and_line(tmp_path: Path) -> None:
    bad_row = _gz(tmp_path / "bad.csv.gz", "t,in,out\n0.0,10,2\n0.5,x,3\n")
    with pytest.raises(TraceError, match=r"bad\.csv\.gz:3: column 'in' \(prompt_len\)"):
        load_generic(bad_row, COLUMNS)
    bad_lengths = _gz(tmp_path / "lens.csv.gz", "num_prefill_tokens,num_decode_tokens\n10,20\n0,5\n")
    with pytest.raises(ValueError, match=r"lens\.csv\.gz:3: column 'num_prefill_tokens'"):
        load_length_file(bad_lengths)
    not_gzip = tmp_path / "plain.csv.gz"
    not_gzip.write_text("t,in,out\n0.0,10,2\n")
    truncated = tmp_path / "cut.csv.gz"
    both = b"num_prefill_tokens,num_decode_tokens,t,in,out\n" + b"".join(b"1,2,%d,10,2\n" % i for i in range(500))
    whole = gzip.compress(both)
    truncated.write_bytes(whole[: len(whole) // 2])  # valid to beyond the header, cut short
    for path in (not_gzip, truncated):
        with pytest.raises(TraceError, match=rf"{path.name}: not a valid gzip file .*\.gz must hold gzip data"):
            load_generic(path, COLUMNS)
        with pytest.raises(ValueError, match=rf"{path.name}: not a valid gzip file"):
            load_length_file(path)
    with pytest.raises(TraceError, match=r"unknown file type '\.txt'; expected .* each optionally \.gz"):
        load_generic(_gz(tmp_path / "mine.txt.gz", "x"), COLUMNS)
