"""docs/architecture.md is the page the code cites: every "invariant N" citation in the package, the tests
and the docs names an invariant the page numbers, and the page's layer map names every row of the contract.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"

# "docs/architecture.md, invariant 5", "... invariants 4 and 5", "[architecture](architecture.md), invariant 6"
CITATION = re.compile(r"architecture(?:\.md|\]\(architecture\.md\))\s*,\s+"
                      r"invariants?\s+(\d+(?:(?:,\s*|\s+and\s+)\d+)*)", re.IGNORECASE)


def numbered_invariants(page: str) -> set[int]:
    """The numbers of the page's invariant list (``N. **Title.**`` under ``## Invariants``)."""
    section = page.split("## Invariants", 1)[1].split("\n## ", 1)[0]
    return {int(n) for n in re.findall(r"^(\d+)\. \*\*", section, re.MULTILINE)}


def citations(root: Path) -> dict[str, set[int]]:
    """``file -> invariant numbers it cites`` over the package, the tests and the docs (the page itself aside)."""
    out: dict[str, set[int]] = {}
    files = [*root.joinpath("reasearch").rglob("*.py"), *root.joinpath("tests").rglob("*.py"),
             *root.joinpath("docs").rglob("*.md"), root / "README.md", root / "pyproject.toml"]
    for path in files:
        if path in (root / "docs" / "architecture.md", Path(__file__).resolve()):
            continue  # the page itself; this file's examples
        text = " ".join(path.read_text(encoding="utf-8").split())  # a citation may wrap across lines
        nums = {int(n) for m in CITATION.finditer(text) for n in re.findall(r"\d+", m.group(1))}
        if nums:
            out[str(path.relative_to(root))] = nums
    return out


def test_the_finder_reads_each_citation_form() -> None:
    text = ("(docs/architecture.md, invariant 4) (docs/architecture.md,\n invariants 5 and 7) "
            "([architecture](architecture.md), invariant 6) (architecture.md, invariants 1, 2 and 3)")
    found = {int(n) for m in CITATION.finditer(" ".join(text.split())) for n in re.findall(r"\d+", m.group(1))}
    assert found == {1, 2, 3, 4, 5, 6, 7}


def test_every_cited_invariant_is_on_the_page() -> None:
    numbered = numbered_invariants(PAGE.read_text(encoding="utf-8"))
    assert numbered == set(range(1, len(numbered) + 1)), numbered  # 1..N, none skipped
    cited = citations(ROOT)
    assert cited, "no citation found: the pattern no longer matches how the code cites the page"
    dangling = {f: sorted(n - numbered) for f, n in cited.items() if n - numbered}
    assert not dangling, f"citations of invariants the page does not number: {dangling}"


def test_no_citation_points_at_a_page_outside_the_repository() -> None:
    stale = [str(p.relative_to(ROOT)) for p in [*ROOT.joinpath("reasearch").rglob("*.py"),
                                                  *ROOT.joinpath("tests").rglob("*.py"),
                                                  *ROOT.joinpath("docs").rglob("*.md"), ROOT / "pyproject.toml"]
             if re.search(r"ARCHITECTURE(?:\.md)? invariant", p.read_text(encoding="utf-8"))]
    assert not stale, f"cite docs/architecture.md instead: {stale}"


def test_the_layer_map_names_every_row_of_the_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    rows = [row for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers" for row in c["layers"]]
    block = PAGE.read_text(encoding="utf-8").split("## Layers", 1)[1].split("```", 2)[1]
    names = {name.strip().removeprefix("reasearch.") for row in rows for part in row.split("|")
             for name in part.split(":")}
    missing = sorted(n for n in names if not re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])", block))
    assert not missing, f"docs/architecture.md's layer map lacks {missing}"
