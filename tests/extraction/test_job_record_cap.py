"""One incident's failed-job records linked up to 50 pilot codes and 50 sites to its cause: one crafted incident
(/tmp/s46/review-ingest/make_poison.py) was linked to every code and site of the store. A task links at most
MAX_JOB_CODES codes and MAX_JOB_SITES sites: those the most job records carry, ties by first seen, the error
dialog's own code always; a task with no more than that keeps its features as they were."""

from __future__ import annotations

from bamboo.extraction.panda import routing
from bamboo.extraction.panda.routing import route_task_data

CAP = 3  # routing.MAX_JOB_CODES and MAX_JOB_SITES


def _linked(task: dict) -> tuple[list[str], list[str], list[str]]:
    clues = route_task_data(task, b"k")
    names = [f.name for f in clues.features]
    return ([n.split("=", 1)[1] for n in names if n.startswith("pilotErrorCode=")],
            [n.split("=", 1)[1] for n in names if n.startswith("computingSite=")], clues.skipped)


def test_a_crafted_incident_links_at_most_three_codes_and_three_sites():
    jobs = [{"pilotErrorCode": 1000 + i, "computingSite": f"SITE_{i}"} for i in range(50)]
    codes, sites, skipped = _linked({"errorDialog": "pilot:1204 walltime exceeded", "failedJobs": jobs})
    assert codes == ["1204", "1000", "1001"], "the dialog's code, then the first seen of equally carried ones"
    assert sites == ["SITE_0", "SITE_1", "SITE_2"]
    assert any("48 more pilot error code(s)" in s for s in skipped), skipped
    assert any("47 more computing site(s)" in s for s in skipped), skipped
    assert routing.MAX_JOB_CODES == routing.MAX_JOB_SITES == CAP


def test_the_codes_and_sites_most_job_records_carry_are_linked_in_the_order_first_seen():
    jobs = [{"pilotErrorCode": c, "computingSite": s} for c, s in [
        (1, "A"), (2, "B"), (2, "C"), (3, "C"), (3, "D"), (3, "D"), (4, "D"), (4, "E"), (4, "E"), (4, "E"), (5, "B")]]
    codes, sites, _ = _linked({"failedJobs": jobs})
    assert codes == ["2", "3", "4"]  # 4 x4, 3 x3, 2 x2; 1 and 5 once
    assert sites == ["B", "D", "E"]  # D x3, E x3, then B and C x2: B seen first
    with_dialog, _, _ = _linked({"errorDialog": "pilot:1386 PanDA queue is not online", "failedJobs": jobs})
    assert with_dialog == ["1386", "3", "4"]


def test_a_task_with_few_codes_and_sites_keeps_them_all_as_before():
    jobs = [{"pilotErrorCode": 1213, "computingSite": "CERN-PROD"}, {"pilotErrorCode": 1386, "computingSite": "BNL"},
            {"pilotErrorCode": 1213, "computingSite": "BNL"}]
    codes, sites, skipped = _linked({"errorDialog": "pilot:1386 PanDA queue is not online", "failedJobs": jobs})
    assert codes == ["1386", "1213"] and sites == ["CERN-PROD", "BNL"] and skipped == []


def test_no_generated_incident_carries_more_codes_or_sites_than_are_linked():
    """The benchmark's corpora are unchanged by the cap: no task they generate carries more (the dialog's code
    counted with its jobs')."""
    from bamboo.extraction.panda.error_classes import classify_error_dialog
    from bamboo.samples.generator import generate_incidents
    from bench.diagnosis.corpus import build

    most_codes = most_sites = 0
    for seed in range(30, 37):
        corpus = build(seed, 30)
        incidents = [i for v in corpus.train.values() for i in v] + corpus.held_out + generate_incidents(60, seed)
        for incident in incidents:
            task = incident.task_data
            jobs = task.get("failedJobs") or []
            dialog = task.get("errorDialog") or ""
            own = classify_error_dialog(dialog).pilot_error_code if dialog.strip() else None
            most_codes = max(most_codes, len({j["pilotErrorCode"] for j in jobs} | ({own} if own else set())))
            most_sites = max(most_sites, len({j["computingSite"] for j in jobs}))
    assert most_codes <= CAP and most_sites <= CAP, (most_codes, most_sites)
