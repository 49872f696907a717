"""Clues weigh by how specific they are in the store, and the ranking's confidence reflects evidence, not a
lead over nothing (issue 30, item 1): a clue on every stored incident names no cause, a lone candidate is not
certain, and a pilot error code the store never linked to a cause is answered "no known cause"."""

from __future__ import annotations

import pytest

from bamboo.analysis import queries
from bamboo.analysis.clues import extract_clues
from bamboo.analysis.contract import CandidateCause, Clue, Evidence, TaskClues
from bamboo.analysis.queries import CauseStats, ClueCommonness, ClueEdge, clue_key
from bamboo.analysis.override import ModelAnswer, judge
from bamboo.analysis.ranked import UNSEEN_CODE_MIN_CONFIDENCE, ranking_confidence, ranking_diagnosis
from bamboo.analysis.ranking import rank_candidates, specificity
from bench.analysis_scale.store_builder import graph_writes, learn
from tests.analysis.test_evidence_scale import KEY, bundled

VO = Clue(type="task_context", kind="Task_Feature", name="vo=atlas")
CORE = Clue(type="task_feature", kind="Task_Feature", name="coreCount=1")
MEMORY = Clue(type="symptom", kind="Symptom", name="InsufficientMemory", text="pilot:1212 out of memory")
CODE = Clue(type="task_feature", kind="Task_Feature", name="pilotErrorCode=1212")
NEW_CODE = Clue(type="task_feature", kind="Task_Feature", name="pilotErrorCode=1299")
RAM = Clue(type="task_feature", kind="Task_Feature", name="ramCount=1.5-2GB")


def edge(clue: Clue, cause: str, freq: int, total: int) -> ClueEdge:
    return ClueEdge(clue.kind, clue.name, cause, f"{cause} detail", freq, 1.0, total)


def common(total: int, **per_clue: int) -> ClueCommonness:
    names = {c.name: c for c in (VO, CORE, MEMORY, CODE, NEW_CODE, RAM)}
    return ClueCommonness(total, {clue_key(names[n].kind, n): k for n, k in per_clue.items()})


def diagnose(clues: list[Clue], edges: list[ClueEdge], stats: dict[str, CauseStats], commonness: ClueCommonness):
    candidates = rank_candidates(clues, edges, stats, {}, commonness=commonness)
    return candidates, ranking_diagnosis(Evidence(clues=TaskClues(clues=clues), candidates=candidates))


def test_a_clues_weight_falls_to_nothing_as_it_covers_the_store():
    assert specificity(100, 100) == 0.0
    assert specificity(1, 100) == specificity(50, 100) == 1.0
    assert 0.4 < specificity(70, 100) < 0.6
    assert specificity(3, 0) == 1.0  # no counts: the weight is left as it was


def test_clues_every_stored_incident_shares_name_no_cause():
    # Issue 30: "No site with enough memory" at confidence 1.00 from vo=atlas and coreCount=1 alone. Here every
    # one of the 40 stored incidents has both clues; the lone candidate they reach is a suggestion, not a cause.
    edges = [edge(VO, "No site with enough memory", 40, 40), edge(CORE, "No site with enough memory", 40, 40)]
    stats = {"No site with enough memory": CauseStats(40, 0, 0, 0)}
    candidates, d = diagnose([VO, CORE], edges, stats, common(40, **{"vo=atlas": 40, "coreCount=1": 40}))
    assert [c.name for c in candidates] == ["No site with enough memory"]
    assert candidates[0].support == 0 and candidates[0].breadth == 0
    assert d.is_novel and d.confidence == 0.0 and d.root_cause.startswith("Novel: no known cause")
    evidence = Evidence(clues=TaskClues(clues=[VO, CORE]), candidates=candidates)
    taken = judge(evidence, ModelAnswer(cause="No site with enough memory", confidence=0.95, cited_clues=["vo=atlas"],
                                        reason="vo=atlas and coreCount=1 point at it"))
    assert taken.is_novel and taken.model is not None and taken.model.verdict == "override_refused"
    assert "most stored incidents share" in taken.model.verdict_reason


def test_a_shared_clue_gives_no_breadth_tier_over_a_specific_one():
    # Two causes of one symptom: only the second's incidents had the ram bucket; the first's share vo=atlas,
    # which every stored incident has. Counted as a tier, vo=atlas put the first ahead.
    edges = [edge(MEMORY, "Memory leak in payload", 3, 6), edge(VO, "Memory leak in payload", 3, 6),
             edge(MEMORY, "Insufficient memory request", 3, 6), edge(RAM, "Insufficient memory request", 3, 3)]
    stats = {"Memory leak in payload": CauseStats(3, 0, 0, 0), "Insufficient memory request": CauseStats(3, 0, 0, 0)}
    candidates, d = diagnose([MEMORY, VO, RAM], edges, stats,
                             common(6, **{"vo=atlas": 6, "InsufficientMemory": 6, "ramCount=1.5-2GB": 3}))
    assert candidates[0].name == "Insufficient memory request" == d.root_cause
    assert {m.name: m.weight for m in candidates[1].matched}["vo=atlas"] == 0.0


def lone(support: float, breadth: int) -> list[CandidateCause]:
    return [CandidateCause(name="Only cause", breadth=breadth, support=support, frequency=2, confidence=1.0)]


def test_a_lone_candidate_is_never_certain_and_its_confidence_follows_its_evidence():
    weak, strong = ranking_confidence(lone(0.05, 1)), ranking_confidence(lone(1.5, 2))
    assert weak < 0.5 < strong < 1.0
    assert ranking_confidence(lone(0.0, 0)) == 0.0
    # Alone, it is ahead on breadth of nothing: its many kinds of weak clue do not make it likely.
    assert ranking_confidence(lone(0.05, 4)) == weak


def pair(top_support: float, stored: int) -> list[CandidateCause]:
    return [CandidateCause(name="First", breadth=2, support=top_support, frequency=stored, confidence=1.0),
            CandidateCause(name="Second", breadth=2, support=1.0, frequency=stored, confidence=1.0)]


def test_the_same_lead_counts_for_more_between_causes_the_store_holds_often():
    # Calibrated on the benchmark corpus, the same lead was too confident between causes stored twice (0.78
    # said, 0.73 right) and not confident enough between causes stored thirty times (0.77 said, 0.83 right).
    assert ranking_confidence(pair(1.5, 2)) < ranking_confidence(pair(1.5, 30))
    assert ranking_confidence(pair(1.5, 30)) == ranking_confidence(pair(1.5, 3000))  # held where it was measured
    # Ties of a small store: below even odds between causes stored once; near them between causes stored twice (the
    # fit after the wording step reads such a tie 0.55, and 0.55 of those answers were right).
    assert ranking_confidence(pair(1.0, 1)) < 0.5 and ranking_confidence(pair(1.0, 2)) < 0.6
    assert ranking_confidence(pair(3.0, 30)) > ranking_confidence(pair(1.5, 30)) > ranking_confidence(pair(1.0, 30))


def test_a_pilot_error_code_the_store_never_linked_abstains():
    # The symptom class is known (two causes share it, nothing else tells them apart); the task's pilot code
    # was never stored with a cause. Before, the symptom's link made the first of the two the diagnosis.
    edges = [edge(MEMORY, "Insufficient memory request", 4, 8), edge(MEMORY, "Memory leak in payload", 4, 8)]
    stats = {"Insufficient memory request": CauseStats(4, 0, 0, 0), "Memory leak in payload": CauseStats(4, 0, 0, 0)}
    counts = common(20, **{"InsufficientMemory": 8})
    candidates, d = diagnose([MEMORY, NEW_CODE], edges, stats, counts)
    assert candidates and d.is_novel and d.confidence == 0.0
    assert "pilotErrorCode=1299" in d.root_cause and "Insufficient memory request" in d.explanation
    edges.append(edge(RAM, "Insufficient memory request", 4, 4))
    # The same task with a code the store did link to a cause is answered.
    edges.append(edge(CODE, "Insufficient memory request", 4, 4))
    _, known = diagnose([MEMORY, CODE, RAM], edges, stats, common(20, **{"InsufficientMemory": 8, "ramCount=1.5-2GB": 4,
                                                                         "pilotErrorCode=1212": 4}))
    assert not known.is_novel and known.root_cause == "Insufficient memory request" and 0.5 < known.confidence < 1.0


def test_a_symptom_class_no_cause_is_linked_to_abstains_whatever_its_job_records_say():
    # A token expired on a storage endpoint: a symptom class the store never saw. One of the task's failed jobs
    # carries pilot code 1212, which a stored cause has in every incident; that code alone named the cause.
    expired = Clue(type="symptom", kind="Symptom", name="AuthenticationExpired", text="pilot:1338 token expired")
    edges = [edge(CODE, "Insufficient memory request", 12, 12), edge(RAM, "Insufficient memory request", 12, 12)]
    stats = {"Insufficient memory request": CauseStats(12, 0, 0, 0)}
    candidates, d = diagnose([expired, CODE, RAM], edges, stats, common(40, **{"pilotErrorCode=1212": 12,
                                                                              "ramCount=1.5-2GB": 12}))
    assert candidates[0].name == "Insufficient memory request"
    assert d.is_novel and d.root_cause == "Novel: no known cause (AuthenticationExpired)"
    assert "Insufficient memory request" in d.explanation, "the closest known cause is still shown as a suggestion"


def test_a_pilot_code_a_well_known_cause_never_showed_abstains_however_confident_the_ranking():
    # The symptom class and the task's other clues point firmly at one cause, stored twelve times, none of them
    # with the task's pilot code: a confident ranking named it (the code rule asked only for confidence < 0.8).
    edges = [edge(MEMORY, "Insufficient memory request", 12, 13), edge(RAM, "Insufficient memory request", 12, 12),
             edge(MEMORY, "Memory leak in payload", 1, 13)]
    stats = {"Insufficient memory request": CauseStats(12, 0, 0, 0), "Memory leak in payload": CauseStats(1, 0, 0, 0)}
    counts = common(40, **{"InsufficientMemory": 13, "ramCount=1.5-2GB": 12})
    candidates, d = diagnose([MEMORY, NEW_CODE, RAM], edges, stats, counts)
    assert ranking_confidence(candidates) >= 0.8
    assert d.is_novel and "pilotErrorCode=1299" in d.root_cause
    # The same evidence from a cause stored only a few times: it may not have shown all of its codes yet.
    few = {"Insufficient memory request": CauseStats(4, 0, 0, 0), "Memory leak in payload": CauseStats(1, 0, 0, 0)}
    fewer = [edge(MEMORY, "Insufficient memory request", 4, 5), edge(RAM, "Insufficient memory request", 4, 4),
             edge(MEMORY, "Memory leak in payload", 1, 5)]
    candidates, d = diagnose([MEMORY, NEW_CODE, RAM], fewer, few, common(40, **{"InsufficientMemory": 5,
                                                                                "ramCount=1.5-2GB": 4}))
    assert ranking_confidence(candidates) >= 0.8 and not d.is_novel


def test_a_pilot_code_no_cause_showed_abstains_unless_the_ranking_is_nearly_certain():
    # A small store: two causes of one symptom class, four incidents each, the memory request on all of the
    # first's and one of the second's. The ranking leads at about 0.9, and the task's pilot code is one neither
    # cause was stored with: the rule once named the first cause above 0.8; only a nearly certain ranking may.
    stats = {"Insufficient memory request": CauseStats(4, 0, 0, 0), "Memory leak in payload": CauseStats(4, 0, 0, 0)}
    edges = [edge(MEMORY, "Insufficient memory request", 4, 8), edge(RAM, "Insufficient memory request", 4, 5),
             edge(MEMORY, "Memory leak in payload", 4, 8), edge(RAM, "Memory leak in payload", 1, 5)]
    candidates, d = diagnose([MEMORY, NEW_CODE, RAM], edges, stats,
                             common(40, **{"InsufficientMemory": 8, "ramCount=1.5-2GB": 5}))
    assert 0.8 < ranking_confidence(candidates) < UNSEEN_CODE_MIN_CONFIDENCE
    assert d.is_novel and "pilotErrorCode=1299" in d.root_cause
    assert "Insufficient memory request" in d.explanation, "the closest known cause is still shown as a suggestion"


def test_a_code_no_cause_showed_beside_another_causes_code_abstains_when_the_top_cause_has_neither():
    # A checksum failure after transfer, new to the store, among stage-out failures: the task's job records
    # carry a code no stored cause showed (1299) and 1212, which the runner-up showed. The top candidate, stored
    # six times, showed neither; its other clues named it (the rule looked only at whether any candidate had
    # any of the codes).
    edges = [edge(MEMORY, "Insufficient memory request", 6, 12), edge(RAM, "Insufficient memory request", 6, 6),
             edge(MEMORY, "Memory leak in payload", 6, 12), edge(CODE, "Memory leak in payload", 2, 2)]
    stats = {"Insufficient memory request": CauseStats(6, 0, 0, 0), "Memory leak in payload": CauseStats(6, 0, 0, 0)}
    counts = common(40, **{"InsufficientMemory": 12, "ramCount=1.5-2GB": 6, "pilotErrorCode=1212": 2})
    candidates, d = diagnose([MEMORY, NEW_CODE, CODE, RAM], edges, stats, counts)
    assert candidates[0].name == "Insufficient memory request"
    assert d.is_novel and d.root_cause == "Novel: no known cause (pilotErrorCode=1299)"
    assert "Insufficient memory request" in d.explanation, "the closest known cause is still shown as a suggestion"
    # The top candidate showed the known code: the unseen one may be noise in its job records.
    edges.append(edge(CODE, "Insufficient memory request", 3, 5))
    _, named = diagnose([MEMORY, NEW_CODE, CODE, RAM], edges, stats, counts)
    assert not named.is_novel and named.root_cause == "Insufficient memory request"
    # Stored only a few times, it may not have shown its codes yet: the weaker clues still name it.
    few = {"Insufficient memory request": CauseStats(4, 0, 0, 0), "Memory leak in payload": CauseStats(6, 0, 0, 0)}
    fewer = [edge(MEMORY, "Insufficient memory request", 4, 10), edge(RAM, "Insufficient memory request", 4, 4),
             edge(MEMORY, "Memory leak in payload", 6, 10), edge(CODE, "Memory leak in payload", 2, 2)]
    top, d = diagnose([MEMORY, NEW_CODE, CODE, RAM], fewer, few, counts)
    assert top[0].name == "Insufficient memory request" and not d.is_novel


@pytest.fixture
async def examples_store(services):
    await learn(services.store.knowledge, await graph_writes(bundled(), KEY), group=10)
    return services


async def test_commonness_is_read_from_the_counts_the_store_keeps(examples_store):
    pool = examples_store.store.pool
    task = bundled()[0].task_data
    clues = extract_clues(task, KEY).clues
    read = await queries.clue_commonness(pool, clues)
    async with pool.connection() as conn:
        graphs = (await (await conn.execute("SELECT count(*) FROM graphs")).fetchone())[0]
        rows = await (await conn.execute(
            "SELECT n.kind, n.name, count(DISTINCT p.graph_id) FROM nodes n JOIN edges e ON e.src = n.id OR e.dst = n.id "
            "JOIN edge_provenance p ON p.edge_id = e.id GROUP BY n.kind, n.name")).fetchall()
    counted = {clue_key(k, n): c for k, n, c in rows}
    assert read.incidents == graphs == len(bundled())
    assert read.per_clue and read.per_clue == {clue_key(c.kind, c.name): counted[clue_key(c.kind, c.name)]
                                               for c in clues if clue_key(c.kind, c.name) in counted}
    assert read.per_clue[clue_key("Task_Feature", "vo=atlas")] == graphs  # on every bundled incident: weight 0
