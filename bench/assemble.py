"""Assemble BENCHMARKS.md from the latest results each benchmark wrote under bench/<area>/results.md.

    .venv/bin/python -m bench.assemble
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = [
    ("populate", "Populate throughput (issue 2)"),
    ("sandbox", "Sandbox and tool bridge (issue 3)"),
    ("tools", "Tool layer (issue 4)"),
    ("diagnosis", "Diagnosis quality (issue 6)"),
    ("scrub", "Scrubbing (issue 15)"),
]


def main() -> None:
    parts = ["# Benchmarks", "",
             "Latest committed figures. Each section is the verbatim output of its benchmark and names the "
             "command that produced it; all comparisons are ratios measured side by side in one run on a shared 2-core machine.",
             ""]
    for folder, title in SECTIONS:
        results = ROOT / "bench" / folder / "results.md"
        if not results.exists():
            continue
        body = results.read_text().strip()
        lines = body.splitlines()
        if lines and lines[0].startswith("# "):
            lines = lines[1:]
        demoted = "\n".join(("#" + line) if line.startswith("## ") else line for line in lines).strip()
        parts += [f"## {title}", "", demoted, ""]
    (ROOT / "BENCHMARKS.md").write_text("\n".join(parts) + "\n")
    print(f"wrote {ROOT / 'BENCHMARKS.md'}")


if __name__ == "__main__":
    main()
