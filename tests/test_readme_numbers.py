"""The README's figures and the committed headline tables come from the committed data, and a number the README
states twice says the same both times.

- The README's headline (between ``<!-- headline -->`` and ``<!-- /headline -->``: the table and its summary) is
  what ``bench/headline.py --readme`` writes from docs/results/sustained; every committed full table
  (docs/results/*/headline.md, generalist.md, ...) is what it writes from its folder's (packed) runs.
- ``restated`` checks the README against itself: a scenario's figure quoted anywhere (``default`` (0.950 ±
  0.010×)) is a cell of that scenario's headline row; a count (``level with `tuned` on ten``, ``these twelve
  scenarios``) is what the table's cells give; a number quoted to four or more significant digits (``0.9798 s``)
  is copied from one of its code blocks or the table; and the intro's live figures are those of the verdict it
  links. The last test doctors a copy each way and requires a failure.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmsched_env.decision.planners.lookahead import BOUND_MARK
from tests.bench_scripts import bench_script, write_capacities

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results"
headline = bench_script("headline")
TABLES = {  # each committed full table -> the policy it judges
    "sustained/headline.md": "agent", "sustained/generalist.md": "learned", "sustained/quick.md": "quick",
    "test/headline.md": "agent", "test/generalist.md": "learned", "test/generalist-quick.md": "quick",
    "heldout/generalist.md": "learned", "heldout-fitted/generalist.md": "learned",
}  # fmt: skip
WORD = {w: n for n, w in enumerate(headline.WORDS)}
_FENCE = re.compile(r"^\s*```")
_ROW_FIGURE = re.compile(r"`([a-z0-9-]+)` \(?(-?\d+\.\d+ ± \d+\.\d+×?)")
_NUMBER = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?(?![\w.])")
_COUNTS = re.compile(r"(`learned`|the generalist|`mpc`)[^.;]*?(level with|matches) `tuned` on (\w+)", re.IGNORECASE)
_SCENARIOS = re.compile(r"\b(?:these|all|the) (\w+) scenarios")


def _block(text: str) -> str:
    return text.split(headline.README_START + "\n", 1)[1].split(headline.README_END, 1)[0].rstrip("\n")


def _rows(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """The README headline's header cells and scenario -> its row's cells (scenario first)."""
    lines = [line for line in _block(text).splitlines() if line.startswith("| ")]
    table = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return table[0], {row[0].strip("`"): row for row in table[1:]}


def _pair(cell: str) -> tuple[float, float]:
    mean, half = re.match(r"(-?\d+\.\d+) ± (\d+\.\d+)×", cell).groups()  # type: ignore[union-attr]
    return float(mean), float(half)


def _significant(number: str) -> int:
    return len(number.lstrip("+-").replace(".", "").lstrip("0"))


def restated(text: str) -> tuple[list[str], int]:
    """The README's restatements that disagree, and how many restatements were checked."""
    problems, checked = [], 0
    header, rows = _rows(text)
    table_lines = {line for line in _block(text).splitlines() if line.startswith("|")}
    blocks, prose, fence = [], [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fence = not fence
        elif fence or line in table_lines:
            blocks.append(line)
        else:
            prose.append(line)
    flat = " ".join(" ".join(prose).split())
    for scenario, figure in _ROW_FIGURE.findall(flat):
        checked += 1
        if scenario in rows and not any(figure in cell for cell in rows[scenario]):
            problems.append(f"`{scenario}` {figure}: not in its headline row")
    quoted = " ".join(blocks)
    for number in _NUMBER.findall(flat):
        if _significant(number) >= 4:
            checked += 1
            if not re.search(rf"(?<![\w.]){re.escape(number.lstrip('+'))}(?![\w])", quoted):
                problems.append(f"{number}: quoted to {_significant(number)} digits but in no code block or table")
    for subject, _, word in _COUNTS.findall(flat):
        column = header.index(f"{'`mpc`' if subject.lower() == '`mpc`' else '`learned`'} / `tuned`")
        level = sum(headline.versus(_pair(r[column])) == "level" for r in rows.values() if r[column] != "—")
        checked += 1
        if WORD.get(word, -1) != level:
            problems.append(f"{subject} level with `tuned` on {word}: the table has {level}")
    for word in _SCENARIOS.findall(flat):
        if word in WORD:
            checked += 1
            if WORD[word] != len(rows):
                problems.append(f"{word} scenarios: the table has {len(rows)}")
    problems_live, checked_live = _live_claims(flat)
    return problems + problems_live, checked + checked_live


def _live_claims(flat: str) -> tuple[list[str], int]:
    """The intro's live figures against the verdict report it links."""
    link = re.search(r"\]\((docs/results/vllm-verdict/[^)]+/report\.md)\)", flat)
    if link is None:
        return [], 0
    report = (ROOT / link.group(1)).read_text()
    problems, checked = [], 0
    fidelity = next(line for line in report.splitlines() if line.startswith("| held-out fidelity"))
    span = re.search(r"([\d.]+)-([\d.]+)% off at p50 and ([\d.]+)-([\d.]+)% at p99", flat)
    if span:
        checked += 1
        for k, quantile in enumerate(("p50", "p99")):
            values = [float(v) for v in re.findall(rf"{quantile} ([\d.]+)%", fidelity)]
            said = (float(span.group(2 * k + 1)), float(span.group(2 * k + 2)))
            if said != (min(values), max(values)):
                problems.append(f"{quantile} {said}: the verdict's range is {min(values)}-{max(values)}")
    for said, theirs in (
        (r"(\d+) of the (\d+) material differences it predicted were confirmed", r"(\d+) of (\d+) confirmed"),
        (r"(\d+) of (\d+) predicted differences lay inside", r"(\d+) of (\d+) inside"),
    ):
        ours, verdict = re.search(said, flat), re.search(theirs, report)
        if ours:
            checked += 1
            if verdict is None or ours.groups() != verdict.groups():
                problems.append(f"{ours.group(0)!r}: the verdict says {verdict and verdict.group(0)!r}")
    pair = re.search(
        r"`(\w+)` on two tenants at ([\d.]+)× the knee: ([+-][\d.]+) attainment points "
        r"\[([+-][\d.]+), ([+-][\d.]+)\] live, ([+-][\d.]+) predicted",
        flat,
    )
    if pair:
        checked += 1
        policy, load, *figures = pair.groups()
        row = re.search(rf"^\| \S+@{re.escape(load)} \| {policy} \| attainment \| .*$", report, flags=re.MULTILINE)
        found = re.findall(r"[+-][\d.]+(?= pp)", row.group(0)) if row else []
        if found[:4] != figures:
            problems.append(f"{pair.group(0)!r}: the verdict's row gives {found[:4]}")
    return problems, checked


def test_the_readme_headline_is_what_the_committed_data_give() -> None:
    table, summary = headline.compact(headline.collect(RESULTS / "sustained", "learned"), "learned")
    assert _block(README.read_text(encoding="utf-8")) == f"{table}\n\n{summary}", (
        "rebuild it: python bench/headline.py --results docs/results/sustained --agent learned "
        "--out docs/results/sustained/generalist --readme README.md"
    )
    header, rows = _rows(README.read_text(encoding="utf-8"))
    assert len(header) <= 8 and len(rows) >= 12


def test_the_compact_headline_pairs_every_policy_with_tuned_and_marks_a_pass_of_the_clairvoyant(
    tmp_path: Path,
) -> None:
    bound = "lookahead" + BOUND_MARK
    same = {"tuned": (2.0, 2.0, 2.0), "fcfs": (1.0, 1.0, 1.0)}
    write_capacities(tmp_path / "s-capacity", "s", {**same, "learned": (2.0, 2.2, 2.1), bound: (2.05,) * 3})
    write_capacities(tmp_path / "s-capacity-mpc", "s", {"mpc": (1.8, 1.8, 1.8)})
    write_capacities(tmp_path / "r-capacity", "r", {**same, "learned": (9.0, 9.0, 9.0)})  # its fitted twin shows
    write_capacities(tmp_path / "r-fitted-capacity", "r-fitted", {**same, "learned": (1.5, 1.6, 1.5)})
    table, summary = headline.compact(headline.collect(tmp_path, "learned"), "learned")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split(" | ")[0] for row in rows] == ["| `r-fitted`", "| `s`"]
    assert all(row.count(" | ") == 7 for row in rows)  # 8 columns
    paired = "| 1.050 ± 0.124× | `fcfs` 1.00 ± 0.00 | 0.500 ± 0.000× | 0.900 ± 0.000× | 1.025 ± 0.000× † |"
    assert rows[1].endswith(paired)
    assert headline.ABOVE_CLAIRVOYANT.split(":")[0] in table
    flat = " ".join(summary.split())
    assert flat.startswith("Of these two scenarios, `learned` is level with `tuned` on one (the paired interval")
    assert "behind it on `r-fitted` (0.767 ± 0.072×)" in flat and "`mpc` is level with `tuned` on none, behind" in flat
    assert flat.endswith("at most 1.025× `tuned` (`s`), and a deployable policy's mean passes it on `s` (`learned`).")


@pytest.mark.slow
@pytest.mark.parametrize(("table", "agent"), TABLES.items())
def test_every_committed_headline_table_is_what_its_data_give(table: str, agent: str) -> None:
    rows = headline.collect(RESULTS / Path(table).parent, agent)
    assert headline.full_text(rows, agent) + "\n" == (RESULTS / table).read_text(encoding="utf-8")


def test_every_number_the_readme_states_twice_agrees() -> None:
    problems, checked = restated(README.read_text(encoding="utf-8"))
    assert not problems, "the README disagrees with itself:\n  " + "\n  ".join(problems)
    assert checked >= 10  # the checks still find the README's restatements


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("level with `tuned` on ten", "level with `tuned` on eleven", "level with `tuned` on eleven"),
        ("## Documentation", "The generalist matches `tuned` on eleven of them.\n\n## Documentation", "eleven"),
        ("`default` (0.950 ± 0.010×)", "`default` (0.951 ± 0.010×)", "`default` 0.951 ± 0.010×"),
        ("reaches 0.9798 s", "reaches 0.9799 s", "0.9799: quoted to 4 digits"),
        ("Of these twelve scenarios", "Of these eleven scenarios", "eleven scenarios"),
        ("14 of the 16 material", "13 of the 16 material", "'13 of the 16 material"),
        ("+28.1 attainment", "+28.4 attainment", "the verdict's row gives"),
        ("4.5-16.7% off at p50", "4.5-16.9% off at p50", "p50 (4.5, 16.9)"),
    ],
)
def test_the_check_fails_on_a_doctored_copy(old: str, new: str, problem: str) -> None:
    text = README.read_text(encoding="utf-8")
    assert old in text
    problems, _ = restated(text.replace(old, new, 1))
    assert any(problem in p for p in problems), problems
