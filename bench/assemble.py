"""Assemble BENCHMARKS.md from what each benchmark area keeps under bench/<area>/:

- `results.md`: the latest output of the area's benchmark, written by the benchmark itself (it names the
  command that produced it);
- further outputs an area names in EXTRA (a second benchmark of the area writing its own file, headed by a
  `## ` title), between results.md and notes.md;
- `notes.md`, optional: what a benchmark cannot print — the reading of its figures, and figures recorded
  from earlier code, each labelled with the commit it came from (a benchmark runs this tree only, so an
  old-against-new comparison is kept as recorded, not re-measured).

Every area that has either file is included, so an area added later needs no edit here; BENCHMARKS.md
is only ever this script's output, and anything written straight into it is lost at the next `make bench`.
A section's title is the first `# ` heading of its files unless TITLES names one (benchmarks that print
a generic heading of their own).

    .venv/bin/python -m bench.assemble [--out PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
FILES = ("results.md", "notes.md")
# Second benchmarks of an area, each writing its own file: diagnosis time to the first answer (issue 30).
EXTRA = {"diagnosis": ("first_answer.md",)}
# The order of the sections that existed when this was written; other areas follow alphabetically.
ORDER = ["populate", "sandbox", "scrub", "tools", "diagnosis", "install", "resilience", "reuse"]
TITLES = {
    "sandbox": "Sandbox and tool bridge (issue 3)",
    "scrub": "Scrubbing (issue 15)",
    "tools": "Tool layer (issue 4)",
    "reuse": "Reuse before regenerate (issue 26)",
}


def areas(bench: Path = BENCH) -> list[str]:
    """Every bench/<area> holding a results.md or a notes.md, in ORDER first, then by name."""
    found = {d.name for d in bench.iterdir() if d.is_dir() and any((d / f).exists() for f in FILES)}
    return [a for a in ORDER if a in found] + sorted(found - set(ORDER))


def _split(text: str) -> tuple[str | None, list[str]]:
    """A file's first-line `# ` title (if any) and the rest of its lines."""
    lines = text.strip().splitlines()
    if lines and lines[0].startswith("# "):
        return lines[0][2:].strip(), lines[1:]
    return None, lines


def section(area: str, bench: Path = BENCH) -> str:
    """One area's section: its title, then results.md, its EXTRA files, then notes.md, headings one level down."""
    title = TITLES.get(area)
    body: list[str] = []
    for name in (FILES[0], *EXTRA.get(area, ()), *FILES[1:]):
        path = bench / area / name
        if not path.exists():
            continue
        heading, lines = _split(path.read_text())
        title = title or heading
        text = "\n".join(("#" + line) if line.startswith("## ") else line for line in lines).strip()
        if text:
            body += [text, ""]
    return "\n".join([f"## {title or area}", "", *body])


def assemble(bench: Path = BENCH) -> str:
    parts = ["# Benchmarks", "",
             "Latest committed figures, assembled by `make bench` (`bench/assemble.py`) from each area's "
             "`bench/<area>/results.md` (a benchmark's latest output, naming its command) and `notes.md` (its "
             "reading, and figures recorded from earlier code with the commit they came from). All comparisons "
             "are ratios measured side by side in one run on a shared 2-core machine.",
             ""]
    parts += [section(area, bench) for area in areas(bench)]
    return "\n".join(parts).rstrip() + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    out = ap.parse_args().out
    out.write_text(assemble())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
