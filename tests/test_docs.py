"""The documents stay what docs/notes/README.md says they are: a short README, reference pages without a diary,
and links that lead somewhere.

- README.md is the front door: at most ``README_MAX_LINES`` lines.
- README.md and a reference page (``docs/*.md`` but ``results.md``; ``docs/notes/`` is the diary and is exempt)
  hold no dated entry: no calendar date in their prose (``2026-12-04``, ``4 December 2026``, ``Dec 4, 2026``).
  Code blocks and code spans may hold one (a log line, a file name); a year alone (a trace's 2023, a paper's
  2024) is no entry.
- Every relative link of README.md and ``docs/**/*.md`` names a file or folder that exists, and a ``#anchor``
  into a Markdown file names one of its headings, slugged as GitHub slugs them.

The last two tests check the checkers themselves: each must fail on what it exists to catch.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 200

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_MONTHS = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
    r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?"
)
_DATES = re.compile(
    r"(?<![\w.-])(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?![\w-])"  # 2026-12-04
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)? {_MONTHS},? (?:19|20)\d\d\b"  # 4 December 2026
    rf"|\b{_MONTHS} \d{{1,2}}(?:st|nd|rd|th)?,? (?:19|20)\d\d\b"  # December 4, 2026
)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_HTML_ID = re.compile(r"<a\s[^>]*\b(?:name|id)=[\"']([^\"']+)[\"']", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def markdown_files() -> list[Path]:
    """README.md and every Markdown file under docs/ (notes and the results folders included)."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def reference_pages() -> list[Path]:
    """The pages that say what the code does now: docs/*.md but results.md (notes/ lies below docs/)."""
    return [p for p in sorted(DOCS.glob("*.md")) if p.name != "results.md"]


def unfenced_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(line)
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        lines.append((number, line))
    return lines


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    return [(number, _CODE_SPAN.sub("``", line)) for number, line in unfenced_lines(text)]


def dated_entries(text: str) -> list[str]:
    """Every calendar date in the prose of ``text``, as 'line N: ...'."""
    return [
        f"line {number}: {match.group(0)!r} in {line.strip()[:120]!r}"
        for number, line in prose_lines(text)
        for match in _DATES.finditer(line)
    ]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text, lower-cased, every character but a letter, a
    mark, a digit, a connector (``_``), a space or a hyphen dropped, spaces turned into hyphens."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "")
    kept = [
        c
        for c in text.strip().lower()
        if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"
    ]
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown page: its headings' slugs (a repeated slug gets -1, -2, ... as on GitHub) and
    any HTML ``name``/``id``."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in unfenced_lines(text):
        found.update(_HTML_ID.findall(line))
        heading = _HEADING.match(line)
        if heading:
            slug = github_slug(heading.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition in the prose."""
    found: list[tuple[int, str]] = []
    for number, line in prose_lines(text):
        found.extend((number, m.group(1)) for m in _LINK.finditer(line))
        reference = _REFERENCE.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Every relative link of ``page`` that names no file, or an anchor its Markdown target lacks."""
    problems: list[str] = []
    cache: dict[Path, set[str]] = {}
    for number, target in links(page.read_text(encoding="utf-8")):
        if not target or _SCHEME.match(target) or target.startswith("//"):
            continue  # a web address or mailto: is not this repository's to check
        path_part, _, anchor = target.partition("#")
        path = (page.parent / unquote(path_part)).resolve() if path_part else page.resolve()
        where = f"{page.relative_to(root)}:{number}: ({target})"
        if not path.exists():
            problems.append(f"{where}: no such file {path_part!r}")
            continue
        if anchor and path.suffix == ".md" and path.is_file():
            if path not in cache:
                cache[path] = anchors(path.read_text(encoding="utf-8"))
            if unquote(anchor) not in cache[path]:
                problems.append(f"{where}: {path.name} has no heading with the anchor #{anchor}")
    return problems


def test_the_readme_is_a_front_door_of_at_most_200_lines() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, over {README_MAX_LINES}: it is the front door (what, set up, run, test, the "
        "env, one headline table, links); move results to docs/results.md and history to docs/notes/"
    )


@pytest.mark.parametrize("page", [README, *reference_pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reference_page_holds_a_dated_entry(page: Path) -> None:
    entries = dated_entries(page.read_text(encoding="utf-8"))
    assert not entries, (
        f"{page.relative_to(ROOT)} says when, not what: reference pages describe what the code does now, and the "
        "dated history goes to docs/notes/ (docs/notes/README.md):\n  " + "\n  ".join(entries)
    )


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    problems = broken_links(page)
    assert not problems, "broken links:\n  " + "\n  ".join(problems)


def test_the_checkers_catch_a_diary_entry_and_spare_what_pages_legitimately_hold() -> None:
    diary = "Measured on 2026-12-04, evening: 81 passed.\nOn 4 December 2026 it took 3 s.\nDec 4, 2026: faster.\n"
    assert len(dated_entries(diary)) == 3
    legitimate = (
        "The Azure LLM inference 2023 traces (Patel et al., ISCA 2024) on vllm 0.33.0 and torch 2.13.0.\n"
        "A file `trace-2023-11-16.csv` and commit ce542b8; a range of 2,000-12,000 requests.\n"
        "```\n2026-12-04 12:00:01 INFO a log line\n```\n"
    )
    assert dated_entries(legitimate) == []


def test_the_checkers_catch_a_broken_link_and_a_missing_anchor(tmp_path: Path) -> None:
    assert github_slug("Fork an episode: `snapshot()` and `restore()`") == "fork-an-episode-snapshot-and-restore"
    assert github_slug("Per-request moves (`candidates=requests`)") == "per-request-moves-candidatesrequests"
    assert github_slug("Fine-tuning: `--init`") == "fine-tuning---init"
    assert github_slug("The compiled engine, and `gym.make` ≥ 2× — [fast](x.md)") == (
        "the-compiled-engine-and-gymmake--2--fast"
    )
    assert anchors("# A\n## Setup\n```\n## not a heading\n```\n## Setup\n") == {"a", "setup", "setup-1"}
    (tmp_path / "other.md").write_text("# Other\n## The decision loop\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n[fine](other.md#the-decision-loop) [here](#page) [web](https://example.com/x.md)\n"
        "[gone](missing.md) [no heading](other.md#the-decison-loop) [self](#nowhere)\n"
        "`[in code](missing-too.md)`\n```\n[in a block](missing-three.md)\n```\n[ref]: ./nothing.md\n",
        encoding="utf-8",
    )
    problems = broken_links(page, root=tmp_path)
    assert len(problems) == 4, problems
    assert any("no such file 'missing.md'" in p for p in problems)
    assert any("#the-decison-loop" in p for p in problems)
    assert any("#nowhere" in p for p in problems)
    assert any("nothing.md" in p for p in problems)
