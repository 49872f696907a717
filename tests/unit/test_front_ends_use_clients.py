"""Front ends talk to workflows only through the features' clients (docs/adding-a-front-end.md): the CLI, the
console and the bot call ``InvestigationClient``, ``AnalysisClient``, ``PopulateClient`` and ``BatchClient``,
never Temporal's own workflow calls, so an id policy, a message name or a progress reading is written once,
in ``bamboo/<feature>/client.py``, and not again in each front end. Read with ast, so a call inside a
function, a lambda or a lazily imported branch counts as much as one at the top."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FRONT_ENDS = ("bamboo/cli", "bamboo/frontends")

# What a Temporal client or workflow handle is asked to do to a workflow.
TEMPORAL_CALLS = frozenset({
    "start_workflow", "execute_workflow", "get_workflow_handle", "get_workflow_handle_for", "list_workflows",
    "count_workflows", "signal", "query", "execute_update", "start_update", "fetch_history",
    "fetch_history_events", "terminate",
})


def temporal_calls(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, method) of every call of a TEMPORAL_CALLS method on anything (``x.signal(...)``)."""
    return [(node.lineno, node.func.attr) for node in ast.walk(ast.parse(source, filename=filename))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in TEMPORAL_CALLS]


@pytest.mark.parametrize("snippet", [
    "await client.start_workflow('AnalyzeTask', inp, id=wid, task_queue='bamboo')",
    "handle = client.get_workflow_handle(wid)",
    "async def rows():\n    async for e in self.client.list_workflows(q):\n        yield e",
    "await handle.signal(action)",
    "p = await (read(h) if read else h.query('progress'))",
    "f = lambda h: h.execute_update('decide', d)",
])
def test_the_check_sees_a_direct_call(snippet: str):
    assert temporal_calls(snippet), snippet


def test_no_front_end_calls_temporal_directly():
    offenders = [f"{path.relative_to(ROOT)}:{line}: .{name}(...)"
                 for top in FRONT_ENDS for path in sorted((ROOT / top).rglob("*.py"))
                 for line, name in temporal_calls(path.read_text(), str(path))]
    assert not offenders, ("a front end calls Temporal itself; call the feature's client "
                           "(bamboo/<feature>/client.py) instead:\n" + "\n".join(offenders))
