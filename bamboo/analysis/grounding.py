"""Whether model-written prose may be shown: it must say what the diagnosis says and nothing it does not.

The offline model writes fluent text that is often wrong: an invented script name, a resolution the store
never recorded, raw JSON pasted into an e-mail. Prose is shown only when every check holds:

* it is within its length bound and not empty;
* it has no markup (HTML tags, markdown headings, emphasis or code fences) and no JSON fragments;
* it names the chosen cause (most of the cause label's words) and, for an e-mail, the task;
* where a resolution is stored, it carries that resolution's *action* words (most of them): the words of
  the resolution the cause's name does not already hold. "Renew the VOMS proxy and retry the task" shares
  "VOMS proxy task" with the cause "The user's VOMS proxy expired while the task was running", so a draft
  that only restates the cause carried three of its five words and passed while telling the owner nothing
  to do; what it must carry is "renew" and "retry" (in any inflection: "renewed", "retrying");
* every number and every identifier-like token (digits, underscores, dots inside a word, CamelCase) it
  contains appears in what the model was given.

Prose that fails is replaced by a deterministic draft built from the stored knowledge, and the result says
which one is shown and why. Words that are merely unusual are not judged (there is no dictionary here), so
an invented plain word can still pass; numbers and identifiers cannot. Pure, so it is tested without a model.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

EXPLANATION_MAX_WORDS = 120
EMAIL_MAX_WORDS = 220
COVERAGE = 0.6  # share of a label's content words the prose must contain

_MARKUP = [
    (re.compile(r"<\s*/?\s*[a-zA-Z][^>]*>"), "HTML markup"),
    (re.compile(r"^\s{0,3}#{1,6}\s", re.M), "a markdown heading"),
    (re.compile(r"\*\*|__|```"), "markdown emphasis or a code fence"),
]
_JSON = [
    (re.compile(r"[{\[]\s*\""), "a JSON fragment"),
    (re.compile(r"\"\s*:\s*[\"\[{\d]"), "a JSON fragment"),
    (re.compile(r"\"\s*\+"), "a JSON fragment"),
]
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]*[A-Za-z0-9]|\d")
# Where a reader is sent: a URL, a www. host, a host with a path or an e-mail address (a bare dotted name is an
# identifier, and must be in the evidence like any other). What the model was shown includes the task's
# errorDialog, which its owner writes: a link repeated from there passed as grounded and went into the draft to
# that owner ("renew it at https://voms-renew.evil.example/login with your grid certificate password").
_ADDRESS = re.compile(r"[a-z][a-z0-9+.\-]*://\S+|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+|\bwww\.[\w.-]+\S*"
                      r"|\b[\w-]+(?:\.[\w-]+)*\.[a-z]{2,63}/\S*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an and are as at be by for from in is it of on or the to was were with its this that".split())


class ProseCheck(BaseModel):
    passed: bool
    problems: list[str] = Field(default_factory=list)

    @property
    def reason(self) -> str:
        return "; ".join(self.problems)


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def _stem(word: str) -> str:
    """A crude stem, enough that "retried", "retrying" and "retry" (or "renewed" and "renew") are one word."""
    if word.endswith(("ies", "ied")) and len(word) > 4:
        word = word[:-3] + "i"
    elif word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    elif word.endswith("es") and len(word) > 4:
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]  # "resubmitt(ed)" → "resubmit"
    if word.endswith("y") and len(word) > 3:
        word = word[:-1] + "i"
    return word


def _stems(text: str) -> set[str]:
    return {_stem(w) for w in _content_words(text)}


def _covers(prose: str, label: str) -> bool:
    wanted = _stems(label)
    if not wanted:
        return True
    return len(wanted & _stems(prose)) >= COVERAGE * len(wanted)


def action_words(resolution: str, cause: str) -> set[str]:
    """The resolution's words that say what to do: its content words (stemmed) less the cause's name's.

    When the resolution only repeats the cause's words, all of them are wanted (nothing else tells them apart)."""
    wanted = _stems(resolution)
    return (wanted - _stems(cause)) or wanted


def carries_resolution(prose: str, resolution: str, cause: str) -> bool:
    """Most of the resolution's action words are in the prose (words shared with the cause's name do not count)."""
    wanted = action_words(resolution, cause)
    if not wanted:
        return True
    return len(wanted & _stems(prose)) >= COVERAGE * len(wanted)


def _needs_grounding(token: str) -> bool:
    """Numbers and identifiers: what a model invents that a reader would take for a fact."""
    if any(ch.isdigit() for ch in token):
        return True
    if "_" in token or "/" in token or re.search(r"[a-z]\.[a-z]", token):
        return True
    return bool(re.search(r"[a-z][A-Z]", token))  # CamelCase inside a word


def ungrounded_tokens(prose: str, given: str) -> list[str]:
    """Numbers and identifiers of `prose` that `given` (what the model was shown) does not contain."""
    known = {t.lower().strip(".") for t in _TOKEN.findall(given)}
    known_text = given.lower()
    out = []
    for token in _TOKEN.findall(prose):
        bare = token.strip(".").lower()
        if _needs_grounding(token) and bare not in known and bare not in known_text and bare not in out:
            out.append(bare)
    return out


def check_prose(prose: str, *, cause: str, given: str, resolution: str = "", task_id: int | None = None,
                max_words: int = EXPLANATION_MAX_WORDS, one_line: bool = False, vouched: str = "") -> ProseCheck:
    """Whether ``prose`` may be shown as the model's: it names the cause (and carries the stored resolution when
    one is given), invents no number or identifier, sends the reader to no address but those the stored knowledge
    holds (the cause, the resolution, ``vouched``), and (``one_line``) keeps to one line, so it cannot print lines
    of its own beside the system's."""
    problems: list[str] = []
    words = prose.split()
    if not words:
        return ProseCheck(passed=False, problems=["it is empty"])
    if one_line and "\n" in prose.strip():
        problems.append("it spans several lines")
    vouched = f"{cause} {resolution} {vouched}".lower()
    sent_to = [a for a in dict.fromkeys(m.group(0).rstrip(".,;:)") for m in _ADDRESS.finditer(prose))
               if a.lower() not in vouched]
    if sent_to:
        problems.append(f"it points to addresses the stored knowledge does not hold: {', '.join(sent_to[:3])}")
    if len(words) > max_words:
        problems.append(f"it is {len(words)} words long (at most {max_words})")
    for patterns in (_MARKUP, _JSON):
        for pattern, what in patterns:
            if pattern.search(prose):
                problems.append(f"it contains {what}")
                break
    if not _covers(prose, cause):
        problems.append(f"it does not name the cause {cause!r}")
    if resolution and not carries_resolution(prose, resolution, cause):
        absent = action_words(resolution, cause) - _stems(prose)
        missing = list(dict.fromkeys(w for w in _WORD.findall(resolution.lower()) if _stem(w) in absent))
        problems.append(f"it does not carry the stored resolution (what to do: {', '.join(missing[:5])})")
    if task_id is not None and str(task_id) not in prose:
        problems.append(f"it does not name task {task_id}")
    invented = ungrounded_tokens(prose, given)
    if invented:
        problems.append(f"it names what the evidence does not: {', '.join(invented[:5])}")
    return ProseCheck(passed=not problems, problems=problems)
