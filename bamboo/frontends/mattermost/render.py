"""Reviews and session narration as Mattermost posts (Markdown).

A review post carries the exact hashed code, numbered, with invisible characters spelled out
(``policy.code_hazards.visible``) and every line wrapped at a fixed width with a continuation mark, so
nothing scrolls out of a chat client's code block; state-changing lines are marked; then the facts the
workflow computed, every replayed procedure's body and its diff since its grant, and the answers offered.

The verdict, tools, policy and hash lines are built from the workflow's facts only. Everything the model wrote
or a tool returned (the summary, the signals it names, replies, tool arguments and results) is Markdown-inert
(``bamboo.frontends.inert_text``): the summary is a block quote of its own under a label saying it is the
model's, after the trusted lines and closed by a blank line, so it can neither link, mention, fence or head
anything nor take the lines around it in.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

from bamboo.frontends.inert_text import inert_markdown, markdown_code, markdown_quote
from bamboo.frontends.mattermost.chat import split_message
from bamboo.frontends.review import (
    CHOICE_KEYS, CHOICE_WORDS, MODEL_SAYS, context, effect, flagged_lines, grants_line, notes, procedure_effect,
    procedure_notes, reuse_change, said,
)
from bamboo.investigation.client import PendingApproval
from bamboo.investigation.contract import ApprovalsView, PendingView, TranscriptEntry
from policy.code_hazards import visible
from policy.code_identity import short_hash

WRAP = 96
# The model's words a review post quotes at most: a longer summary was split across posts, its rest outside
# the quote and the review's own lines (the console shows it whole).
MAX_MODEL_WORDS = 4000
# A review post's first line: what a reply in the thread answers is read back from it after a restart.
REVIEW_HEADER = "#### Review · turn {turn} · `{code_hash}` · review `{review}`"
_REVIEW_HEADER = re.compile(r"#### Review · turn (\d+) · `([0-9a-f]{64})` · review `([0-9a-f]{64})`(?:\n|$)")
# The last line of each post of a review split over several: which review (its tag) and which post of how many, so
# a restarted bot finds every post of a review again (a later post edited or deleted is then noticed).
REVIEW_PART = "_review `{tag}`, post {part} of {parts}_"
_REVIEW_PART = re.compile(r"\n\n_review `([a-z2-7]+)`, post (\d+) of (\d+)_$")
ALWAYS = {"reply", "notice", "finding", "refused_run", "refused_request", "refused_decision", "suggestion", "hypothesis",
          "grant", "revoke", "system", "decision"}
VERBOSE_ONLY = {"intent", "code", "policy", "run", "operator"}


def numbered(code: str, flagged: set[int] | None = None) -> str:
    """The code in a fenced block: ``NN │`` per line, ``   ↪`` where a long line continues, ``▶`` on
    state-changing lines. Backticks cannot close the fence early: a run of three is spelled out."""
    flagged = flagged or set()
    out = []
    for number, line in enumerate(visible(code).split("\n"), start=1):
        line = line.replace("```", "`\u2060``")
        mark = "▶" if number in flagged else " "
        chunks = [line[i:i + WRAP] for i in range(0, len(line), WRAP)] or [""]
        out.append(f"{mark}{number:>3} │ {chunks[0]}")
        out += [f"    ↪ │ {chunk}" for chunk in chunks[1:]]
    return "```text\n" + "\n".join(out) + "\n```"


def model_block(summary: str, signals: list[str] | None = None, label: str = MODEL_SAYS) -> str:
    """Words about the code no check vouches for: a label saying whose they are (the model's, or a reused
    procedure's stored summary), then the words as an inert block quote and a blank line."""
    words = summary.strip() or "(nothing)"
    if len(words) > MAX_MODEL_WORDS:  # the review's own lines stay in one post, near the code
        words = f"{words[:MAX_MODEL_WORDS]} … ({len(words) - MAX_MODEL_WORDS} more characters: see the console)"
    if signals:
        words += "\nbecause: " + "; ".join(signals)
    return f"**{label}**\n{markdown_quote(words)}"


def _context_lines(view: PendingView) -> list[str]:
    """The task, the request (the requester's words, inert) and the waiting time, as the other front ends say them."""
    about = context(view, datetime.now(UTC))
    return [f"task: {inert_markdown(about.task)} · waiting {about.waiting}",
            f"request: {inert_markdown(about.request)}"]


def reviewed_in(message: str) -> tuple[int, str, str] | None:
    """(turn, full code hash, review digest) of a review post by this bot, from its first line; None for any other
    post. Only the bot's own posts may be read so (a person can type the same line); no other line of a review
    starts so: model text is escaped, code is numbered."""
    found = _REVIEW_HEADER.match(message)
    return (int(found[1]), found[2], found[3]) if found else None


def review_parts(text: str, tag: str) -> list[str]:
    """A review post's text as the posts it goes out in: one, or several (``split_message``) each ending with its
    part line (``REVIEW_PART``), after a blank line so it joins no quote or list."""
    parts = split_message(text)
    if len(parts) == 1:
        return parts
    return [f"{part}\n\n{REVIEW_PART.format(tag=tag, part=number, parts=len(parts))}"
            for number, part in enumerate(parts, start=1)]


def review_part(message: str) -> tuple[str, int, int] | None:
    """(tag, part, parts) of a post of this bot that is one of a split review's posts; None for any other post."""
    found = _REVIEW_PART.search(message)
    return (found[1], int(found[2]), int(found[3])) if found else None


def posted_digest(messages: list[str]) -> str:
    """What a review's posts said, as one hash: an answer is taken only while its posts still say it."""
    digest = hashlib.sha256()
    for message in messages:
        encoded = message.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "big") + encoded)
    return digest.hexdigest()


def review_post(view: PendingView, changed: str = "", *, tag: str) -> str:
    """The review as a post; ``tag`` (``review_tags``) is what a reply that runs the code must repeat."""
    what = effect(view)
    lines = [REVIEW_HEADER.format(turn=view.turn, code_hash=view.code_hash, review=view.review),
             f"**{inert_markdown(what.text)}** · asked by **{inert_markdown(view.requester)}**",
             *_context_lines(view),
             f"tools: {inert_markdown(', '.join(view.tools) or 'none')} · may call when run: "
             f"{inert_markdown(', '.join(view.allow_set) or 'none')}",
             f"policy: {inert_markdown(view.detail)} (version `{view.policy_version}`)", "",
             model_block(said(view).words, label=said(view).label), numbered(view.code, flagged_lines(view))]
    if changed:
        lines.append("changed since this turn was last reviewed:\n" + numbered(changed))
    # A reused procedure's line carries values bound from the task (PanDA's words) and the store's record of where
    # it came from (whoever writes the procedure rows writes it): every note is inert and on one line, so none
    # starts a line of the post's own.
    lines += [f"- {inert_markdown(note, one_line=True)}" for note in notes(view)]
    stored_change = reuse_change(view)
    if stored_change is not None and view.reuse is not None:
        lines.append(inert_markdown(stored_change, one_line=True) + "\n" + numbered(view.reuse.diff_from_previous))
    for procedure in view.procedures:
        lines.append(f"replays **{inert_markdown(procedure.name, one_line=True)}** · "
                     f"`{short_hash(procedure.code_hash)}` · {inert_markdown(procedure_effect(procedure), one_line=True)}")
        lines.append(numbered(procedure.code))
        lines += [f"- {inert_markdown(note, one_line=True)}" for note in procedure_notes(procedure)]
        if procedure.diff_from_granted:
            lines.append("changed since it was granted:\n" + numbered(procedure.diff_from_granted))
    granted = grants_line(view)
    if granted is not None:
        lines.append(inert_markdown(granted, one_line=True))
    offered = " · ".join(f"`{CHOICE_KEYS[c]} {tag}`" if c.runs_code else f"`{CHOICE_KEYS[c]}`" for c in view.choices)
    words = " · ".join(f"{CHOICE_KEYS[c]} {CHOICE_WORDS[c]}" for c in view.choices)
    edit = " (`e` then the replacement code in a ``` block)" if any(c.value == "edit" for c in view.choices) else ""
    lines.append(f"Reply in this thread: {offered}{edit} ({words}); an answer that runs code names this review's tag "
                 f"`{tag}`. Only registered approvers' answers count.")
    return "\n".join(lines)


def entry_post(entry: TranscriptEntry, verbose: bool) -> str | None:
    """One transcript entry as this thread shows it, or None when it is not shown at this verbosity."""
    if entry.kind not in ALWAYS and not (verbose and entry.kind in VERBOSE_ONLY):
        return None
    who = f"{entry.actor}: " if entry.actor and entry.kind in ("operator", "finding") else ""
    if entry.kind == "code":
        tools = ", ".join(entry.data.get("tools") or [])
        # The strategy is the model's words: on one line, or it drew lines under the label that read as the bot's.
        return (f"`[code]` strategy {inert_markdown(str(entry.data.get('strategy') or '-'), one_line=True)} · tools "
                f"{inert_markdown(tools or '-', one_line=True)}\n" + numbered(entry.text))
    if entry.kind == "run":
        calls = [f"- tool {markdown_code(str(c['tool']) + '(' + str(c.get('args_preview') or '') + ')')} → "
                 + inert_markdown(" ".join(str(part) for part in (c["outcome"], c.get("result_shape") or "",
                                                                  f"({c['bytes']} bytes)", c.get("reason") or "")
                                           if part), one_line=True)
                 for c in entry.data.get("calls", [])]
        return "\n".join([f"`[run]` {inert_markdown(entry.text, one_line=True)}", *calls])
    text = who + entry.text.strip()
    if len(text.splitlines()) > 1:
        # Text of several lines (a model's reply, a finding) is quoted: each of its lines starts "> ", so none
        # reads as a post of the bot's own (Mattermost runs the bot's posts together without a header). Decided on
        # the text as it is shown: the check read the stripped text and the line showed it unstripped, so leading
        # breaks put a line of the model's after the label, at the start of a line.
        return f"`[{entry.kind}]`\n" + markdown_quote(text)
    return f"`[{entry.kind}]` {inert_markdown(text, one_line=True)}"


def pending_list(found: list[PendingApproval]) -> str:
    if not found:
        return "No investigation is waiting for approval."
    rows = ["| session | turn | code hash | asked by | effect |", "|---|---|---|---|---|"]
    for item in found:
        rows.append(f"| {inert_markdown(item.session_id)} | {item.view.turn} | `{item.view.code_hash}` | "
                    f"{inert_markdown(item.view.requester)} | {inert_markdown(effect(item.view).text)} |")
    return "\n".join(rows)


def approvals_post(view: ApprovalsView) -> str:
    if not view.session_policies and not view.grants:
        return "No standing approvals in this session."
    rows = ["| kind | code hash or procedure | policy | by |", "|---|---|---|---|"]
    rows += [f"| session | `{h}` | {p.policy.value} | {inert_markdown(p.approved_by)} |"
             for h, p in sorted(view.session_policies.items())]
    rows += [f"| durable | {inert_markdown(n)} `{g.code_hash}` | auto-run | {inert_markdown(g.granted_by)} |"
             for n, g in sorted(view.grants.items())]
    return "\n".join(rows)
