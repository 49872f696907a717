"""What `CodeExecutor` does with a finished run stays off the worker's event loop (the review's F4 and F5).

- A done frame whose value must be over the return cap is refused by the frame's size, before anything walks
  the value (a 1 MiB frame of ``[0, 0, ...]`` was walked and encoded on the loop: 0.8 s).
- The rest of the value's checks (a walk, one encoding) run in the offload pool.
- The transcript blob (two captures of up to 4 MiB, six times that once control characters are escaped) is
  encoded off the loop, byte for byte as before.

Structural checks only (where a function ran, what was never called), never wall-clock thresholds; one real run
checks that the frame's size gets from the runner to the service.
"""

from __future__ import annotations

import asyncio
import json
import types
from typing import Any

import pytest

from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.sandbox import service
from bamboo.sandbox.models import OutputLimits, SandboxLimits
from bamboo.sandbox.output import CappedStream
from bamboo.sandbox.protocol import FRAME_SIZE, FrameSize, decode_frame
from bamboo.sandbox.runner import ChildOutcome
from bamboo.sandbox.service import CodeExecutor
from bamboo.sandbox import isolation as isolation_mod
from tests.sandbox.conftest import MemoryToolCaller, harness

CAP = OutputLimits().max_return_bytes
CHUNK = getattr(service, "TRANSCRIPT_CHUNK_CHARS", 64 * 1024)


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _done_frame(value: Any) -> dict[str, Any]:
    """A done frame as the runner has it: written as the child runner writes it, decoded by the protocol."""
    body = json.dumps({"type": "done", "token": "t" * 43, "ok": True, "value": value},
                      separators=(",", ":"), allow_nan=False).encode("utf-8")
    return decode_frame(body)


def _stream(data: bytes) -> CappedStream:
    stream = CappedStream(4 * 1024 * 1024, lambda: None)
    stream.data = bytearray(data)
    stream.total = len(data)
    return stream


class _FinishedRunner:
    """Hands back one prepared outcome, as if a script had run."""

    isolation = "bwrap"

    def __init__(self, outcome: ChildOutcome) -> None:
        self.outcome = outcome
        self.output = OutputLimits()
        self.limits = SandboxLimits()

    async def run(self, code: str, bridge: Any, *, timeout_s: float) -> ChildOutcome:
        return self.outcome


def _outcome(done: dict[str, Any] | None, stdout: bytes = b"", stderr: bytes = b"") -> ChildOutcome:
    return ChildOutcome(isolation="bwrap", ending="done" if done else "exited", done=done, stdout=_stream(stdout),
                        stderr=_stream(stderr), exit_code=0, duration_ms=1.0, warm_start=True)


async def _execute(outcome: ChildOutcome, blobs: MemoryBlobSink | None = None) -> Any:
    executor = CodeExecutor(runner=_FinishedRunner(outcome), caller=MemoryToolCaller(),  # type: ignore[arg-type]
                            audit=MemoryAuditSink(), blobs=blobs or MemoryBlobSink(), specs=[])
    return await executor.execute(run_id="r1", code="return {}", allowed_tools=frozenset(), phase="interactive")


@pytest.fixture
def encoded_on_loop(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of the JSON texts the service encodes while on the event loop."""
    found: list[int] = []
    real_dumps = json.dumps

    def dumps(value: Any, **kw: Any) -> str:
        text = real_dumps(value, **kw)
        if _on_loop():
            found.append(len(text))
        return text

    monkeypatch.setattr(service, "json", types.SimpleNamespace(dumps=dumps, loads=json.loads))
    return found


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every walk of a return value, as whether it ran on the event loop."""
    seen: list[bool] = []
    real = service.value_problem

    def spy(value: Any, *args: Any) -> str | None:
        seen.append(_on_loop())
        return real(value, *args)

    monkeypatch.setattr(service, "value_problem", spy)
    return seen


# --- F4: the done value ---------------------------------------------------------------------------------------


async def test_a_value_far_over_the_cap_is_refused_by_its_frame_size_unwalked(walks):
    frame = _done_frame({"v": [0] * 300_000})  # 600 KB on the wire, 900 KB as the service measures it
    assert isinstance(frame[FRAME_SIZE], FrameSize)
    result = await _execute(_outcome(frame))
    assert result.status == "error" and result.return_value is None
    assert f"over the {CAP}-byte cap" in result.error and "at least" in result.error
    assert walks == [], "the value was walked although its frame alone was over the cap"


async def test_the_checks_of_a_value_within_the_frame_bound_run_off_the_loop(walks, encoded_on_loop):
    value = {"v": list(range(20_000)), "note": "ok"}
    result = await _execute(_outcome(_done_frame(value)))
    assert result.status == "ok", result.error
    assert result.return_value == value
    assert walks == [False], "the return value was walked on the event loop"
    assert not [n for n in encoded_on_loop if n > 4096], "the return value was encoded on the event loop"


async def test_text_escaped_on_the_wire_is_measured_as_utf8_not_refused_by_the_frame():
    value = {"t": "é" * 100_000}  # 200 KB as UTF-8 (under the cap), 600 KB as \u escapes in the frame
    result = await _execute(_outcome(_done_frame(value)))
    assert result.status == "ok", result.error
    assert result.return_value == value


async def test_a_value_just_over_the_cap_is_still_refused_by_its_exact_size(walks):
    value = {"t": "x" * CAP}  # its frame is within the envelope's slack: measured, then refused
    result = await _execute(_outcome(_done_frame(value)))
    assert result.status == "error" and f"is {CAP + 9} bytes, over the {CAP}-byte cap" in result.error
    assert walks == [False]


async def test_a_value_that_cannot_be_reported_is_still_found_off_the_loop(walks):
    result = await _execute(_outcome(_done_frame({"deep": json.loads("[" * 80 + "]" * 80)})))
    assert result.status == "error" and "nested more than" in result.error
    assert walks == [False]


def test_a_child_cannot_choose_the_size_its_done_frame_is_measured_by():
    body = b'{"type":"done","ok":true,"value":{"t":"\\u00e9\\u00e9"},"frame_size":1}'
    assert decode_frame(body)[FRAME_SIZE] == FrameSize(body_bytes=len(body), escapes=2)
    assert decode_frame(b'{"type":"call","frame_size":1}')[FRAME_SIZE] == 1  # only done frames are measured


async def test_a_real_run_returning_a_value_far_over_the_cap_is_refused_by_its_frame(walks):
    async with harness("bwrap" if isolation_mod.find_bwrap() else "degraded") as h:
        result = await h.run("return {'v': [0] * 300000}")
    assert result.status == "error" and "at least" in result.error and f"{CAP}-byte cap" in result.error
    assert walks == []


# --- F5: the transcript blob ----------------------------------------------------------------------------------


def _reference(transcript: dict[str, Any]) -> bytes:
    """The blob's format as it always was."""
    return json.dumps(transcript, ensure_ascii=False, sort_keys=True).encode("utf-8")


@pytest.mark.parametrize("text", [
    "",
    "plain output\n",
    "\x01" * (3 * CHUNK + 7),
    ("ab\"c\\d\n\te\x00f\x7fé€😀\u2028" * 40_000)[: 5 * CHUNK - 1],
    "😀" * (CHUNK + 1),
])
def test_the_transcript_blob_is_byte_for_byte_the_json_it_always_was(text):
    transcript = {"run_id": "r1", "stdout": text, "stderr": text[::-1], "stdout_bytes": len(text.encode()),
                  "stderr_bytes": 3, "return_value": {"z": [1, 2.5, None, True], "a": {"y": "é", "b": "\x02"}},
                  "error": None}
    assert service.transcript_blob(transcript) == _reference(transcript)
    assert service.transcript_blob({}) == _reference({})


def test_text_that_is_not_unicode_still_raises_as_before():
    transcript = {"stdout": "x" * CHUNK + "\ud800", "stderr": ""}
    with pytest.raises(UnicodeEncodeError):
        _reference(transcript)
    with pytest.raises(UnicodeEncodeError):
        service.transcript_blob(transcript)


async def test_the_transcript_is_encoded_off_the_event_loop(encoded_on_loop):
    out = b"\x01" * (512 * 1024) + b"\nend\n"
    blobs = MemoryBlobSink()
    result = await _execute(_outcome(_done_frame({"n": 1}), stdout=out, stderr=b"warning\n"), blobs)
    assert result.status == "ok", result.error
    assert not [n for n in encoded_on_loop if n > 4096], f"encoded on the event loop: {encoded_on_loop}"
    stored = json.loads(blobs.blobs[result.full_output_ref])
    assert stored["stdout"] == out.decode() and stored["stderr"] == "warning\n" and stored["return_value"] == {"n": 1}
    assert blobs.blobs[result.full_output_ref] == _reference(stored)


async def test_a_transcript_that_cannot_be_encoded_in_time_leaves_the_result_standing(monkeypatch):
    real = service.in_thread

    async def stuck(fn: Any, /, *args: Any, budget_s: float, what: str) -> Any:
        if fn is getattr(service, "transcript_blob", None):
            raise service.BudgetExceeded(f"{what} took longer than {budget_s:g} s")
        return await real(fn, *args, budget_s=budget_s, what=what)

    monkeypatch.setattr(service, "in_thread", stuck)
    result = await _execute(_outcome(_done_frame({"n": 1}), stdout=b"hello\n"))
    assert result.status == "ok" and result.return_value == {"n": 1} and result.full_output_ref is None
    assert any("transcript was not stored" in w and "took longer than" in w for w in result.warnings)
