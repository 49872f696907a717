"""The bot's parsing and rendering, without services: what a post asks for, which review a reply answers,
and code in a post that no chat client can crop or cut short."""

from __future__ import annotations

from bamboo.frontends.mattermost.bot import Prompt, Thread
from bamboo.frontends.mattermost.chat import split_message
from bamboo.frontends.mattermost.commands import parse_root, parse_thread
from bamboo.frontends.mattermost.render import WRAP, numbered
from policy.decisions import DecisionKind


def test_channel_commands():
    assert parse_root("investigate 40112233 --verbose").model_dump(include={"kind", "task_id", "verbose"}) == {
        "kind": "investigate", "task_id": 40112233, "verbose": True}
    assert parse_root("investigate jobs die with exit 137").symptom == "jobs die with exit 137"
    assert parse_root("investigate 1 --sudo").kind == "invalid"
    assert parse_root("/approvals").kind == "pending" and parse_root("analyze 7").task_id == 7
    assert parse_root("good morning everyone") is None


def test_thread_replies():
    assert parse_thread("y").decision is DecisionKind.RUN_ONCE
    assert parse_thread("N").decision is DecisionKind.REJECT and parse_thread("k").decision is DecisionKind.ALWAYS_ASK
    edit = parse_thread("e\n```python\nreturn 1\n```")
    assert edit.decision is DecisionKind.EDIT and edit.replacement_code == "return 1"
    assert parse_thread("e").kind == "invalid"  # an edit without its replacement block
    assert parse_thread("/revoke all").target == "all" and parse_thread("/approvals").kind == "approvals"
    assert parse_thread("--verbose").verbose and not parse_thread("verbose off").verbose
    assert parse_thread("yes please look at the logs").kind == "message"


def test_a_reply_answers_the_review_posted_before_it():
    thread = Thread(root_id="r", channel_id="c", session_id="mm-r",
                    prompts=[Prompt(100, 1, "aa"), Prompt(200, 1, "bb"), Prompt(300, 2, "cc")])
    assert thread.prompt_for(250) == Prompt(200, 1, "bb")  # typed before turn 2's review was posted
    assert thread.prompt_for(300).turn == 2 and thread.prompt_for(50) is None


def test_code_in_a_post_is_wrapped_spelled_out_and_cannot_close_its_fence():
    code = "x = 1;" + " " * 300 + "kill()\ny = '\u202e'\nz = '```'"
    text = numbered(code, {1})
    lines = text.split("\n")[1:-1]
    assert all(len(line) <= WRAP + 8 for line in lines)
    assert lines[0].startswith("▶  1 │") and any("kill()" in line for line in lines if line.startswith("    ↪"))
    assert "⟨U+202E⟩" in text and text.count("```") == 2


def test_long_posts_are_split_with_their_code_fences_balanced():
    message = "head\n```text\n" + "\n".join(f"line {i}" for i in range(5000)) + "\n```\ntail"
    parts = split_message(message, limit=2000)
    assert len(parts) > 1 and all(len(p) <= 2000 + 10 for p in parts)
    assert all(p.count("```") % 2 == 0 for p in parts)
    assert "".join(parts).count("line 4999") == 1
