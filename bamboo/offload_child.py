"""The child side of `bamboo.offload.in_child`: one job on the bytes read from stdin, the answer on stdout.

Only the jobs named here run, so the parent can never be talked into running anything else. Each is
pure (policy code or a decoder, on data) and sized by its input, which is why it is worth a process of its own: its
long C calls would otherwise hold the worker's GIL (see `bamboo.offload`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable


def _scrub_text(payload: bytes) -> bytes:
    from policy.scrub import scrub_text

    result = scrub_text(payload.decode("utf-8", "surrogatepass"))
    return json.dumps({"text": result.text, "findings": len(result.findings)}).encode("ascii")


def _scrub_value(payload: bytes) -> bytes:
    from policy.scrub import scrub_value

    value, hits = scrub_value(json.loads(payload))
    return json.dumps({"value": value, "findings": hits}).encode("ascii")


def _decode_json(payload: bytes) -> bytes:
    """The UTF-8 text in ``payload`` decoded as JSON, for a parent that would otherwise decode it in one long C call:
    ``J`` and the value pickled (the parent loads it with `bamboo.offload.load_plain`, several times faster than
    decoding the JSON, and refusing anything but JSON's types); ``T`` when the text is not JSON (or is nested
    deeper than the decoder goes), as the parent's own ``json.loads`` would have raised."""
    import pickle

    try:
        value = json.loads(payload.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):
        return b"T"
    sys.setrecursionlimit(10_000)  # the pickler recurses once per level the decoder could reach, from a deeper frame
    return b"J" + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


JOBS: dict[str, Callable[[bytes], bytes]] = {"scrub_text": _scrub_text, "scrub_value": _scrub_value,
                                             "decode_json": _decode_json}


def main(job: str) -> None:
    run = JOBS.get(job)
    if run is None:
        sys.exit(f"no such job: {job!r}")
    sys.stdout.buffer.write(run(sys.stdin.buffer.read()))
    sys.stdout.buffer.flush()
