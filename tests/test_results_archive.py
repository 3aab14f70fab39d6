"""docs/results/ packed (bench/results_archive.py): at most ``MAX_FILES`` files, every archive deterministic, the
reports plain, and ``pack``/``unpacked`` a lossless round trip that refuses a member escaping the archive."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from tests.bench_scripts import bench_script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
MAX_FILES = 150
archive = bench_script("results_archive")
PACKED = sorted(RESULTS.rglob("*" + archive.SUFFIX))


def test_the_results_folder_holds_at_most_150_files_and_its_reports_plain() -> None:
    files = [p for p in RESULTS.rglob("*") if p.is_file()]
    assert len(files) <= MAX_FILES, (
        f"docs/results holds {len(files)} files: pack the raw runs (bench/results_archive.py)"
    )
    for packed in PACKED:
        members = archive.read_archive(packed)
        assert not [m for m in members if m.endswith(".md")], f"{packed}: a report belongs beside it, plain"


@pytest.mark.parametrize("packed", PACKED, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_archive_is_the_deterministic_packing_of_its_members(packed: Path) -> None:
    raw = packed.read_bytes()
    assert raw[3] == 0 and raw[4:8] == b"\0\0\0\0", "gzip with a file name or a time"  # FLG, MTIME
    members = archive.read_archive(packed)
    assert gzip.decompress(raw) == archive.tar_bytes(members)  # sorted, mode 0644, owner 0, mtime 0
    assert all(archive.group_of(name.split("/")[0]) + archive.SUFFIX == packed.name for name in members)


def test_pack_and_unpacked_give_back_the_same_tree(tmp_path: Path) -> None:
    results = tmp_path / "results"
    tree = {
        "s-capacity/results.csv": b"a", "s-capacity-tuned/results.csv": b"b", "s-capacity-tuned/deep/x.json": b"{}",
        "run/report.md": b"# report", "run/data.json": b"1", "headline.md": b"| t |",
    }  # fmt: skip
    for name, data in tree.items():
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_bytes(data)
    assert [p.name for p in archive.pack(results)] == ["run.tar.gz", "s.tar.gz"]
    first = {p.name: p.read_bytes() for p in results.glob("*.tar.gz")}
    left = sorted(p.relative_to(results).as_posix() for p in results.rglob("*") if p.is_file())
    assert left == ["headline.md", "run.tar.gz", "run/report.md", "s.tar.gz"]  # reports plain, runs packed
    with archive.unpacked(results) as root:
        assert {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()} == tree
    (results / "s-capacity-tuned").mkdir()
    (results / "s-capacity-tuned" / "results.csv").write_bytes(b"new")  # a run written since wins
    with archive.unpacked(results) as root:
        assert (root / "s-capacity-tuned" / "results.csv").read_bytes() == b"new"
    archive.pack(results)  # merged into the archive; the same bytes as packing the tree at once
    assert archive.read_member(results / "s.tar.gz", "s-capacity-tuned/results.csv") == b"new"
    (results / "s-capacity-tuned").mkdir()
    (results / "s-capacity-tuned" / "results.csv").write_bytes(b"b")
    archive.pack(results)
    assert {p.name: p.read_bytes() for p in results.glob("*.tar.gz")} == first


def test_a_member_outside_the_archive_or_a_broken_archive_is_one_line(tmp_path: Path) -> None:
    evil = tmp_path / "evil.tar.gz"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    evil.write_bytes(buffer.getvalue())
    with pytest.raises(ValueError, match=r"evil\.tar\.gz: member '\.\./escape\.txt' is not a plain file inside"):
        archive.extract(evil, tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()
    (tmp_path / "cut.tar.gz").write_bytes(evil.read_bytes()[:20])
    with pytest.raises(ValueError, match=r"cut\.tar\.gz: not a readable \.tar\.gz archive"):
        archive.read_archive(tmp_path / "cut.tar.gz")
    with pytest.raises(SystemExit):
        archive.main(["unpack", str(tmp_path / "cut.tar.gz")])
