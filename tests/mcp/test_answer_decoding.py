"""An external tool's answer is decoded off the worker's event loop (the review's F3).

Decoding JSON is one C call that keeps the GIL, so an offload thread did not free the loop from it (a 4 MiB
dense array: 0.35-0.4 s). A large single text block is decoded in a child process and handed back pickled, to a
loader that builds only plain data; the cap on an answer's text is 1 MiB. The value is the same as decoding it
in the worker. Structural checks only (which way an answer went, what was never decoded), never wall time.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import mcp.types as mt
import pytest

from bamboo import offload
from bamboo.mcp import external
from bamboo.offload import ChildFailed, load_plain


def _answer(*texts: str, is_error: bool = False) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=t) for t in texts], is_error=is_error)


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which way each answer was read: ``child:<job>`` or ``thread:<what>`` (both still run for real)."""
    seen: list[str] = []

    async def child(job: str, payload: bytes, *, budget_s: float, what: str) -> bytes:
        seen.append(f"child:{job}")
        return await offload.in_child(job, payload, budget_s=budget_s, what=what)

    async def thread(fn: Any, /, *args: Any, budget_s: float, what: str) -> Any:
        seen.append(f"thread:{what}")
        return await offload.in_thread(fn, *args, budget_s=budget_s, what=what)

    monkeypatch.setattr(external, "in_child", child, raising=False)
    monkeypatch.setattr(external, "in_thread", thread)
    return seen


def _dense(chars: int) -> str:
    """A JSON array of small numbers about ``chars`` long: the costliest JSON to decode per byte."""
    return "[" + ",".join(["0"] * (chars // 2 - 1)) + "]"


async def test_a_large_json_answer_is_decoded_in_a_child_process(routes):
    text = _dense(900 * 1024)
    result = await external.read_result(_answer(text))
    assert result.ok and result.data == json.loads(text)
    assert routes == ["child:decode_json"], "a large answer was decoded in this process"


@pytest.mark.parametrize("text", [
    json.dumps([{"PandaID": i, "jobStatus": "failed", "note": "é\u2028😀\ud800"[i % 5:]} for i in range(6000)]),
    json.dumps({"deep": json.loads("[" * 500 + "]" * 500), "big": 10 ** 200, "f": [0.1, -2.5e-300]}) + " " * 300_000,
    "not JSON at all, a log: " + "line\n" * 80_000,
    "[" * 300_000,  # deeper than the decoder goes: kept as text, as in the worker
    '"' + "x" * 300_000 + '"',
])
async def test_the_child_decodes_exactly_as_the_worker_would(routes, text):
    assert external.DECODE_THREAD_CHARS < len(text) <= external.MAX_RESULT_TEXT_CHARS
    result = await external.read_result(_answer(text))
    assert result == external.convert_result(_answer(text))
    assert routes == ["child:decode_json"]


async def test_a_middling_answer_is_decoded_in_the_offload_pool_and_a_small_one_inline(routes):
    middling = json.dumps([{"PandaID": i} for i in range(8000)])
    assert external.DECODE_INLINE_CHARS < len(middling) <= external.DECODE_THREAD_CHARS
    assert (await external.read_result(_answer(middling))).data == json.loads(middling)
    assert (await external.read_result(_answer('{"a": 1}'))).data == {"a": 1}
    assert routes == ["thread:reading the tool's answer"]


async def test_an_answer_with_nothing_to_decode_never_goes_to_a_child(routes):
    big = "x" * (512 * 1024)
    error = await external.read_result(_answer(big, is_error=True))
    assert not error.ok and error.error == big
    two = await external.read_result(_answer(big, "tail"))
    assert two.ok and two.data == [big, "tail"]
    assert not [r for r in routes if r.startswith("child:")]


async def test_an_answer_over_one_mib_is_refused_without_being_decoded(routes):
    text = _dense(1536 * 1024)  # was decoded (under the old 4 MiB cap): 0.1-0.15 s of the loop's time
    result = await external.read_result(_answer(text))
    assert not result.ok and "over the 1048576-character cap" in result.error
    assert routes == [], "an answer over the cap was decoded"


def test_the_loader_builds_plain_data_only():
    import datetime

    assert load_plain(pickle.dumps({"a": [1, 2.5, None, True, "é"]})) == {"a": [1, 2.5, None, True, "é"]}
    with pytest.raises(ChildFailed, match="only plain data"):
        load_plain(pickle.dumps(datetime.date(2024, 1, 1)))
    with pytest.raises(ChildFailed):
        load_plain(b"not a pickle")
