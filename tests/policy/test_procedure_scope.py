"""A decision handed only the stored bodies its code reaches decides as with the whole store.

The policy context used to carry every approved procedure's code, and past a few hundred procedures it exceeded
Temporal's payload limit: every turn failed. It now carries ``procedure_scope`` of the code judged. These tests
draw stores of procedures that call each other (nested, cyclic, missing, long names the stub maps with a digest,
raw tools whose Python name is a procedure's) and check every use the workflow makes of the catalogue: the review
decision in both phases, the review's facts, the bodies a run pins, the stub's names, the read-only judgement and a
session's standing approval. What differs is deliberate and narrower: a procedure the code does not name is not
in an unattended run's allow-set, and approved opaque code finds one pinned as absent.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from bamboo.investigation.contract import PolicyContext
from policy.catalog import ToolCatalog, ToolFacts
from policy.code_identity import code_hash
from policy.grants import CodePolicy, ProcedureGrant, make_session_policy
from policy.phases import Phase
from policy.procedures import assess_read_only, procedure_scope
from policy.review import ReviewRequest, decide_review
from policy.review_facts import review_facts
from policy.signature import DEFAULT_CONVENTIONS, ScanConventions
from workflows.investigation import judged_read_only, pinned_procedures, run_tool_names

RAW = {"get_task": True, "get_jobs": True, "kill_task": False, "proc__x-y": True}
LONG = "proc__" + "very_long_procedure_name_" * 4
# A row's name is not always one the store would give (a requester may write the table): "proc__odd-name" is
# reached as tools.proc__odd_name only where the catalogue lists it.
PROCEDURES = ["proc__a", "proc__b", "proc__c", "proc__d", "proc__e", "proc__x_y", LONG, "proc__odd-name"]
REFERENCES = [*RAW, *PROCEDURES, "proc__missing"]


def _call(name: str, catalogue: list[str]) -> str:
    python = {real: py for py, real in ScanConventions.for_tools(catalogue).python_names.items()}.get(name, name)
    return f"r = await tools.{python}(task_id=task_id)"


def _body(called: list[str], catalogue: list[str]) -> str:
    return "\n".join([*(_call(name, catalogue) for name in called), "return {}"])


stores = st.fixed_dictionaries(
    {name: st.lists(st.sampled_from(REFERENCES), max_size=3) for name in PROCEDURES})
codes = st.lists(st.sampled_from(REFERENCES), min_size=1, max_size=3)


def _context(tools: tuple[ToolFacts, ...], code: dict[str, str]) -> PolicyContext:
    return PolicyContext(session_run="r", catalog=ToolCatalog.build(tools, code))


@settings(max_examples=300, deadline=None)
@given(store=stores, called=codes, stored=st.sets(st.sampled_from(PROCEDURES)), hidden=st.sets(st.sampled_from(PROCEDURES)),
       granted=st.booleans())
def test_a_scoped_context_decides_as_the_whole_store(store, called, stored, hidden, granted):
    catalogue = [*RAW, *sorted(stored - hidden)]  # a stored procedure that is not exposed is not listed
    full_code = {name: _body(store[name], catalogue) for name in sorted(stored)}
    tools = (*(ToolFacts(name=n, read_only=ro) for n, ro in RAW.items()),
             *(ToolFacts(name=n, origin="procedure") for n in sorted(stored - hidden)))
    code = _body(called, catalogue)
    scoped_code = procedure_scope([code], [], full_code, catalogue)
    assert set(scoped_code) <= set(full_code)
    full, scoped = _context(tools, full_code), _context(tools, scoped_code)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    grants = {name: ProcedureGrant(procedure=name, code_hash=code_hash(body), granted_by="bob", granted_at=now)
              for name, body in full_code.items()} if granted else {}

    for phase in Phase:
        whole, decision = (decide_review(ReviewRequest(phase=phase, code=code, catalog=c.catalog, grants=grants))
                           for c in (full, scoped))
        # The one difference: an unattended run may no longer call a read-only procedure its code does not name.
        assert decision.allow_set == tuple(t for t in whole.allow_set if t in scoped_code or t not in full_code)
        assert decision == whole.model_copy(update={"allow_set": decision.allow_set})
    assert pinned_procedures(decision.allow_set, full) == pinned_procedures(decision.allow_set, scoped)
    assert run_tool_names(decision.allow_set, full) == run_tool_names(decision.allow_set, scoped)
    assert judged_read_only(decision.allow_set, full) == judged_read_only(decision.allow_set, scoped)
    request = ReviewRequest(phase=Phase.INTERACTIVE, code=code, catalog=scoped.catalog)
    flags = scoped.catalog.read_only_flags()
    facts = [review_facts(code, assess_read_only(code, flags, c.catalog.procedure_code, request.conventions), flags,
                          c.catalog.procedure_code, grants, {}, request.conventions) for c in (full, scoped)]
    assert facts[0] == facts[1]
    for conventions in (request.conventions, DEFAULT_CONVENTIONS):
        policies = [make_session_policy(code, CodePolicy.AUTO_RUN, c.catalog.procedure_code, "bob", conventions)
                    for c in (full, scoped)]
        assert policies[0] == policies[1]


@settings(max_examples=200, deadline=None)
@given(store=stores, named=st.lists(st.sampled_from(PROCEDURES), max_size=3))
def test_a_named_procedure_brings_its_body_and_all_it_reaches(store, named):
    catalogue = [*RAW, *PROCEDURES]
    full_code = {name: _body(store[name], catalogue) for name in PROCEDURES}
    scoped = procedure_scope([], named, full_code, catalogue)
    for name in named:
        assert scoped[name] == full_code[name]
        verdict = assess_read_only(full_code[name], RAW, full_code, ScanConventions.for_tools(catalogue))
        assert set(verdict.procedures) <= set(scoped)


def test_the_scope_leaves_out_what_the_code_does_not_reach():
    """What makes the context small: 600 bodies stored, the code reaches one and what that one calls."""
    store = {f"proc__p{i}": "r = await tools.get_task(task_id=task_id)\nreturn {}" for i in range(600)}
    store["proc__p1"] = "r = await tools.proc__p2(task_id=task_id)\nreturn {}"
    code = "a = await tools.proc__p1(task_id=1)\nb = await tools.proc__nowhere(task_id=1)"
    assert procedure_scope([code], [], store) == {"proc__p1": store["proc__p1"], "proc__p2": store["proc__p2"]}
    assert procedure_scope([], ["proc__p7", "proc__absent"], store) == {"proc__p7": store["proc__p7"]}


def test_opaque_code_finds_a_procedure_it_does_not_name_pinned_as_absent():
    """Approved opaque code may call any bridged tool; a stored procedure its review never showed replays nothing
    (the body was not in the decision's context, so no reviewer saw it)."""
    from policy.procedures import ABSENT_PROCEDURE

    store = {"proc__a": "r = await tools.get_task(task_id=task_id)\nreturn {}",
             "proc__b": "r = await tools.get_jobs(task_id=task_id)\nreturn {}"}
    tools = (*(ToolFacts(name=n, read_only=ro) for n, ro in RAW.items()),
             *(ToolFacts(name=n, origin="procedure") for n in store))
    code = "name = 'get_' + 'task'\nr = await getattr(tools, name)(task_id=1)\ns = await tools.proc__a(task_id=1)"
    context = _context(tools, procedure_scope([code], [], store, [t.name for t in tools]))
    decision = decide_review(ReviewRequest(phase=Phase.INTERACTIVE, code=code, catalog=context.catalog))
    assert "proc__b" in decision.allow_set  # opaque: every bridged tool
    pins = pinned_procedures(decision.allow_set, context)
    assert pins["proc__a"] == code_hash(store["proc__a"])
    assert pins["proc__b"] == ABSENT_PROCEDURE
