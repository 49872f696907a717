"""The console shows what the model wrote as text to read: escaped HTML, every control and invisible character
spelled out, and the summary outside the card that carries the verdict, labelled as the model's (issue 24).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import jinja2
import pytest

from bamboo.investigation import client as inv
from policy.decisions import DecisionKind
from tests.investigation.conftest import KILL_CODE, READ_CODE, TASK_ID, new_session, pending_turn, wait_for

pytestmark = pytest.mark.usefixtures("terminate_sessions")

TEMPLATES = Path(__file__).resolve().parents[2] / "bamboo" / "frontends" / "console" / "templates"
SUMMARY = ("nothing to worry about \u202eevil\u202c \x1b[2J\x9b2J\u200b "
           "<script>alert(1)</script><a href=\"http://evil.example/\">read-only</a>")
REPLY = "all good \u2066isolated\u2069 \x1b]8;;http://evil\x1b\\ <img src=x onerror=alert(1)>"


def _hidden(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c not in "\n\t\r") or 0x7F <= ord(c) <= 0x9F
            or 0x200B <= ord(c) <= 0x200F or 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069
            or ord(c) == 0xFEFF]


def test_flash_messages_are_inert():
    """A flash can quote a session's answer (a refusal's detail); it is shown like any other such text."""
    from bamboo.frontends.console.render import inert_filter

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    env.filters["inert"] = inert_filter
    source = env.loader.get_source(env, "base.html")[0]
    flashes = re.search(r"{% for level, text in flashes %}.*?{% endfor %}", source).group(0)
    page = env.from_string(flashes).render(flashes=[("error", SUMMARY)])
    assert not _hidden(page) and "<script>" not in page


def test_every_template_is_autoescaped_and_none_marks_text_safe():
    """The console builds its templates with Starlette's default environment, which autoescapes .html files;
    no template may turn that off or mark a value safe (code_html and diff_html return Markup they built)."""
    autoescaped = jinja2.select_autoescape()
    for template in sorted(TEMPLATES.iterdir()):
        text = template.read_text()
        assert template.suffix == ".html" and autoescaped(template.name), template.name
        assert not re.search(r"\|\s*safe\b|autoescape\s+false|Markup\(", text), template.name


async def test_model_text_is_inert_and_outside_the_review_card(ops, client, settings, running_worker, brain,
                                                               http_clients):
    session = new_session()
    brain.code_summary, brain.reply = SUMMARY, REPLY
    brain.propose(READ_CODE, KILL_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "status please", ops.alice, force_tool=True)
    first = await pending_turn(client, session, 1)
    await inv.decide_by_review(client, session, first.review, DecisionKind.RUN_ONCE, ops.bob)

    async def replied():
        return [e for e in await inv.transcript(client, session) if e.kind == "reply"]
    await wait_for(replied)
    await inv.send_message(client, session, "kill it", ops.alice, force_tool=True)
    await pending_turn(client, session, 2)

    bob = http_clients()
    assert (await asyncio.to_thread(bob.sign_in, "bob")).status_code == 303
    review = (await asyncio.to_thread(bob.page, f"/sessions/{session}/review")).text
    transcript = (await asyncio.to_thread(bob.page, f"/sessions/{session}")).text
    approvals = (await asyncio.to_thread(bob.page, "/approvals")).text
    for page in (review, transcript, approvals):
        assert not _hidden(page), _hidden(page)
        assert "<script>alert" not in page and 'href="http://evil' not in page and "<img src=x" not in page
    assert "⟨U+202E⟩evil⟨U+202C⟩" in review and "⟨U+001B⟩[2J⟨U+009B⟩2J⟨U+200B⟩" in review
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in review
    assert "⟨U+2066⟩isolated⟨U+2069⟩ ⟨U+001B⟩]8;;http://evil" in transcript
    assert "&lt;img src=x" in transcript
    assert "⟨U+202E⟩evil" in approvals

    said = review.index('id="model-says"')
    card = review[review.index('id="review"'):]
    assert said < review.index('id="review"') and "The model says (unverified)" in review[said:]
    assert "STATE-CHANGING (kill_task)" in card and "nothing to worry" not in card and "evil" not in card
