"""BENCHMARKS.md is only ever assembled: every area that keeps a results.md or notes.md under bench/ is in it,
so an area added later, or a reading kept beside a benchmark's output, is not lost at the next `make bench`
(the assembler used to know a fixed list of five areas, and sections written straight into BENCHMARKS.md
were overwritten)."""

from __future__ import annotations

from pathlib import Path

from bench import assemble


def test_every_area_with_results_or_notes_is_assembled(tmp_path: Path) -> None:
    (tmp_path / "populate").mkdir()
    (tmp_path / "populate" / "results.md").write_text("# Populate\n\nlatest table\n\n## A subsection\n")
    (tmp_path / "populate" / "notes.md").write_text("## Recorded at commit abc123\n\nold table\n")
    (tmp_path / "zzz_new_area").mkdir()
    (tmp_path / "zzz_new_area" / "results.md").write_text("# A new area\n\nits figures\n")
    (tmp_path / "only_notes").mkdir()
    (tmp_path / "only_notes" / "notes.md").write_text("# Notes only\n\nrecorded figures\n")
    (tmp_path / "no_results").mkdir()
    (tmp_path / "no_results" / "run.py").write_text("")

    text = assemble.assemble(tmp_path)

    assert assemble.areas(tmp_path) == ["populate", "only_notes", "zzz_new_area"]
    assert "## Populate\n\nlatest table\n\n### A subsection" in text
    # notes come after the benchmark's output, one heading level down like it
    assert text.index("latest table") < text.index("### Recorded at commit abc123") < text.index("old table")
    assert "## A new area\n\nits figures" in text
    assert "## Notes only\n\nrecorded figures" in text
    assert "no_results" not in text


def test_the_committed_areas_keep_their_sections() -> None:
    """What BENCHMARKS.md held before the assembler included every area survives regeneration."""
    text = assemble.assemble()
    for title in ("## Sandbox and tool bridge (issue 3)", "## Scrubbing (issue 15)", "## Tool layer (issue 4)",
                  "## Diagnosis quality (issue 6; grounding of model prose, issue 19",
                  "## Install: a fresh venv, then offline (issue 19)",
                  "## Small work beside a pathological neighbour on the same worker (issue 28)",
                  "## Reuse before regenerate (issue 26)", "old lanes and new slices side by side"):
        assert title in text
