"""The error dialog's wording (issue 30): among the leading candidates, the one whose stored incidents were worded
like the task's goes first when the ranking's own choice was worded otherwise; the ranking's order stands when the
wording does not tell them apart."""

from __future__ import annotations

import random

from bamboo.analysis.contract import CandidateCause, Evidence, TaskClues
from bamboo.analysis.ranked import ranking_confidence, ranking_diagnosis
from bamboo.analysis.service import AnalysisService
from bamboo.analysis.wording import WORDING_POOL, contenders, order_by_wording, wording_match, words
from bamboo.extraction.panda.strategy import PandaExtractionStrategy
from bamboo.models.graph import GraphWrite
from bamboo.samples import generator
from bamboo.samples.templates import CAUSES
from bamboo.store.knowledge import GraphVectors
from bench.analysis_scale.store_builder import RecordWording

KEY = b"k" * 32
FILE = "<a href='https://bigpanda.cern.ch/job?pandaid=6568877795'>6568877795</a> pilot:1171 adler32 mismatch on input file EVNT.38134068._000647.pool.root.1"
TRUNCATED = "Error in TFile::Init: file EVNT.40685844._000127.pool.root.1 is truncated at 1073741824 bytes (corrupted input)"
DISK = "checksum mismatch on input for several files read from RAL-LCG2_UCORE storage"


def cand(name: str, breadth: int = 3, support: float = 1.0) -> CandidateCause:
    return CandidateCause(name=name, breadth=breadth, support=support, frequency=5, confidence=1.0)


def test_words_leave_out_numbers_and_case():
    assert words("Job 6568877795 at RAL-LCG2_UCORE: EVNT.38134068._000647 adler32") == {
        "job", "at", "ral", "lcg2_ucore", "evnt", "adler32"}


def test_a_dialog_of_the_same_template_matches_and_another_template_of_its_class_does_not():
    same = "checksum mismatch on input for several files read from INFN-T1_UCORE storage"
    assert wording_match([same], [FILE, DISK]) > 0.7
    assert wording_match([same], [FILE]) < 0.2
    assert wording_match([same], []) == 0.0


def test_the_contender_worded_like_the_task_goes_first_and_says_why():
    ranked = [cand("Corrupted input file", support=2.0), cand("Faulty storage disk server", support=1.0),
              cand("Lost input file replica", breadth=2)]
    stored = {"Corrupted input file": [FILE], "Faulty storage disk server": [DISK]}
    task = ["checksum mismatch on input for several files read from INFN-T1_UCORE storage"]
    out = order_by_wording(ranked, task, stored)
    assert [c.name for c in out] == ["Faulty storage disk server", "Corrupted input file", "Lost input file replica"]
    assert out[0].worded and not out[1].worded and out[2].wording is None
    evidence = Evidence(clues=TaskClues(clues=[]), candidates=out)
    diagnosis = ranking_diagnosis(evidence)
    assert diagnosis.root_cause == "Faulty storage disk server"
    assert "worded like its stored incidents'" in diagnosis.explanation
    # The moved cause's lower support is not read as the runner-up leading: the contest is as close as the supports,
    # as for look-alikes put in likelihood order.
    unflagged = [out[0].model_copy(update={"worded": False}), *out[1:]]
    assert ranking_confidence(out) > ranking_confidence(unflagged)


def test_the_order_stands_when_the_wording_does_not_tell_the_contenders_apart():
    ranked = [cand("Corrupted input file", support=2.0), cand("Faulty storage disk server", support=1.0)]
    both = {"Corrupted input file": [FILE, DISK], "Faulty storage disk server": [DISK]}
    assert [c.name for c in order_by_wording(ranked, [DISK], both)] == [c.name for c in ranked]
    assert order_by_wording(ranked, [], both) == ranked


def test_only_candidates_on_the_leading_breadth_contend():
    ranked = [cand("a"), cand("b", breadth=2), cand("c"), *[cand(f"d{i}") for i in range(WORDING_POOL)]]
    assert contenders(ranked) == ["a", "c", "d0"][:WORDING_POOL - 1]
    out = order_by_wording(ranked, [DISK], {"b": [DISK]})
    assert out[0].name == "a" and not any(c.worded for c in out)


def incident(template_name: str, task_id: int, dialog: str, rng: random.Random):
    template = next(t for t in CAUSES if t.cause == template_name)
    made = generator._make_incident(rng, task_id, 1, task_id, template, 0.0)
    made.task_data["errorDialog"] = dialog
    made.task_data.pop("failedJobs", None)
    return made


async def learn_with_passages(services, incidents) -> None:
    """Graphs as accumulation stores them from reviewed records, with their passages (the dialogs) embedded."""
    strategy = PandaExtractionStrategy(RecordWording(), KEY)  # type: ignore[arg-type]
    writes = []
    for i in incidents:
        result = await strategy.extract(i)
        write = GraphWrite(graph_id=i.graph_id(), incident_id=i.incident_id, task_id=i.task_data.get("jediTaskID"),
                           graph=result.graph, passages=result.passages, summary=result.summary)
        writes.append(GraphVectors(write, await services.embedder.embed([p.content for p in result.passages])))
    await services.store.knowledge.write_graphs(writes)


async def test_the_dialog_names_the_cause_when_the_other_clues_are_another_causes(services):
    """Six truncated-file incidents and one faulty disk server; a task whose other clues are the disk server
    incident's but whose dialog is worded as the truncated files': the dialog names the corrupted file. The ranking
    alone named the disk server, whose one incident shares the task's sites and settings."""
    rng = random.Random(7)
    files = [incident("Corrupted input file", 51_000_000 + n, TRUNCATED, rng) for n in range(6)]
    disk = incident("Faulty storage disk server", 52_000_000, DISK, rng)
    await learn_with_passages(services, [*files, disk])
    task = dict(disk.task_data)
    task.update(jediTaskID=53_000_000, errorDialog=TRUNCATED.replace("40685844", "39500500"))
    evidence = await AnalysisService(services).gather_evidence(task)
    names = [c.name for c in evidence.candidates]
    assert names[:2] == ["Corrupted input file", "Faulty storage disk server"], names
    assert evidence.candidates[0].worded
    assert ranking_diagnosis(evidence).root_cause == "Corrupted input file"

    # Worded as the disk server's incident, the same task keeps the ranking's answer.
    same = await AnalysisService(services).gather_evidence(dict(disk.task_data, jediTaskID=53_000_001))
    assert same.candidates[0].name == "Faulty storage disk server" and not same.candidates[0].worded
