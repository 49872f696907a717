"""Read what the error dialog says: which of the leading candidates' stored incidents were worded like the task's.

The routing reduces an error dialog to a symptom class, and several causes share a class: "adler32 mismatch on
input file EVNT..." (a corrupted file), "checksum mismatch on input for several files read from RAL-LCG2_UCORE
storage" (a faulty disk server) and "Error in TFile::Init: file ... is truncated" are all InputFileCorrupted. The
words the class leaves out — the checksum kind, a site, a file's type, "memory" against "coreCount" in a
brokerage refusal — often name the cause outright, and they are there even when the field they come from is
missing, wrong or only in the dialog (issue 30). A cause learned from a single incident is told apart by them
where its one incident's other clues cannot say which of them define it.

The measure is the words two dialogs share over the words either has (Jaccard), on lower-case words without
numbers (job ids, file serials and counts change from one incident to the next); a cause's match is its best
stored dialog's. It decides only among the candidates on the leading breadth, and only when one of them
matches the task's wording by WORDING_MARGIN more than the ranking's first choice: two dialogs of one template
share nearly every word, two templates of one symptom class share a few.

Chosen offline on the calibration corpus's dumped rankings (bench/diagnosis/calibration.py; the measure, the
contenders and the margin chosen on seeds 30-35, seed 36 used only to check): known causes @1 at 2, 8 and 30
incidents per cause went 435/498/527 → 461/537/570 of 612 on seeds 30-35 and 70/87/88 → 72/94/92 of 102 on
seed 36; a margin of 0.3, 0.4 or 0.6 gained less (448-456, 525-532, 563-566), and letting every candidate among
the first four contend, whatever its breadth, no more. The product's own run is in bench/diagnosis/results.md.

Pure, so it is tested without a database.
"""

from __future__ import annotations

import re

from bamboo.analysis.contract import CandidateCause

# How much better a contender's stored wording must match the task's than the first choice's before it goes first.
WORDING_MARGIN = 0.5
# The leading candidates read: those on the first's breadth among this many.
WORDING_POOL = 4
# Stored dialogs read per (symptom class, cause): two templates of a cause are both among the first few.
STORED_DIALOGS_PER_CAUSE = 32
# Only so much of a dialog is read: the clue and the stored passage keep 2,000 characters.
MAX_DIALOG_CHARS = 2000

_WORD = re.compile(r"[a-z][a-z0-9_]+")
_NUMBER = re.compile(r"\d{3}")


def words(text: str) -> frozenset[str]:
    """The dialog's words, lower case, without those carrying a number of three digits or more."""
    return frozenset(w for w in _WORD.findall(text[:MAX_DIALOG_CHARS].lower()) if not _NUMBER.search(w))


def wording_match(task_dialogs: list[str], stored_dialogs: list[str]) -> float:
    """The best share of words one of the task's dialogs has in common with one stored dialog (0 when none)."""
    best = 0.0
    stored = {words(d) for d in stored_dialogs}
    for t in {words(d) for d in task_dialogs}:
        for s in stored:
            if t and s:
                best = max(best, len(t & s) / len(t | s))
    return round(best, 4)


def contenders(candidates: list[CandidateCause]) -> list[str]:
    """The candidates whose stored wording is read: on the first's breadth, among the first WORDING_POOL."""
    if not candidates:
        return []
    return [c.name for c in candidates[:WORDING_POOL] if c.breadth == candidates[0].breadth]


def order_by_wording(candidates: list[CandidateCause], task_dialogs: list[str],
                     stored: dict[str, list[str]]) -> list[CandidateCause]:
    """The candidates, with the contender whose stored dialogs match the task's best moved first when it leads the
    first choice by WORDING_MARGIN (module docstring); every contender carries its match. `stored`: cause name ->
    its stored dialogs of the task's symptom classes."""
    names = contenders(candidates)
    if len(names) < 2 or not task_dialogs:
        return candidates
    match = {name: wording_match(task_dialogs, stored.get(name, [])) for name in names}
    out = [c.model_copy(update={"wording": match[c.name]}) if c.name in match else c for c in candidates]
    best = max(names, key=lambda n: (match[n], -names.index(n)))
    if match[best] < match[names[0]] + WORDING_MARGIN:
        return out
    moved = next(c for c in out if c.name == best)
    return [moved.model_copy(update={"worded": True}), *(c for c in out if c.name != best)]
