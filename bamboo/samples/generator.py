"""Synthetic, labelled PanDA incidents for the diagnosis-quality harness and the populate benchmark.

How the templates were chosen
-----------------------------
The cause catalogue (:mod:`bamboo.samples.templates`) covers the failure modes operators triage most
often in PanDA: memory, walltime, lost and corrupted input, stage-out, software releases and
containers, brokerage, user-code crashes, credentials, disk, job splitting and site availability.
Every symptom family (the CamelCase category the deterministic errorDialog classifier gives) has two or
three causes, because that is where diagnosis is hard: the dialog alone says *what* failed, the task
parameters say *why*. Dialog texts imitate what the pilot and JEDI write (pilot error codes with their
diagnostic text, brokerage and splitting messages, monitor links); each cause carries a ``signature`` of
task fields that really do point at it (a low ``ramCount`` on single-core derivations, a leaky release
in ``transUses``, an unservable ``coreCount``, a pinned ``includedSite``, one misbehaving ``site``).

What the noise does
-------------------
``noise`` (0..1) is the probability of each of these, drawn independently per incident:

* **feature noise** — every signature field except the identity pair (prodSourceLabel, taskType) is,
  with probability ``noise``, replaced by a value drawn from the global pool of that field, so the
  feature-to-cause correlation is strong but not perfect (the dialog, logs and email are rendered from
  the true values, so the story stays consistent with the cause; only the recorded fields are noisy);
* **red herring** — the first reply mentions a plausible but wrong suspicion before the real finding;
* **retry history** — the task has a non-zero ``retryID`` and the owner mentions the failed retries.

Fields outside a cause's signature (campaign, nucleus, gshare, site, release, ... whichever the cause does
not name) are always drawn at random from their pools: they are the background a ranking has to see
through. The errorDialog always keeps its family's category, so ``expected.symptom`` is exact; only
the evidence pointing at the *cause* is noisy.

Determinism: everything is drawn from one ``random.Random(seed)``; the same ``(n, seed, noise)`` gives
byte-identical output. jediTaskIDs are drawn without replacement from 41,000,000–49,999,999, a range
the hand-written examples (40,xxx,xxx) never use.
"""

from __future__ import annotations

import json
import random
import re
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from bamboo.models.incident import Incident, ResolutionRecord
from bamboo.samples.templates import CAUSES, CauseTemplate

_TASK_ID_RANGE = (41_000_000, 50_000_000)
_PANDAID_BASE = 6_500_000_000
_EPOCH = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
_NOISE_EXEMPT = frozenset({"prodSourceLabel", "taskType"})

# Made-up people: task owners in data, pseudonymised by the pipeline.
_FIRST = ("Mira", "Tobias", "Anouk", "Radek", "Ines", "Joaquin", "Saskia", "Emeric", "Yuna", "Lorenz",
          "Petra", "Cosmin", "Halima", "Bjarki", "Ottilie", "Marek")
_LAST = ("Kovanen", "Ferreiro", "Delacroix", "Oberholt", "Vantongeren", "Szabolcs", "Quennell", "Marchetti",
         "Holmqvist", "Abernathy", "Draskovic", "Lindqvist", "Okonkwo-Reyes", "Tamborini", "Ushakova", "Brennholt")

_POOLS: dict[str, tuple[Any, ...]] = {
    "site": ("CERN-PROD_UCORE", "BNL_PROD_UCORE", "TRIUMF_UCORE", "IN2P3-CC_UCORE", "FZK-LCG2_UCORE",
             "RAL-LCG2_UCORE", "INFN-T1_UCORE", "MWT2_UCORE", "AGLT2_UCORE", "DESY-HH_UCORE", "PIC_UCORE",
             "NDGF-T1_UCORE", "SARA-MATRIX_UCORE", "TOKYO-LCG2_UCORE", "SWT2_CPB_UCORE", "IFIC-LCG2_UCORE",
             "praguelcg2_UCORE", "UKI-SCOTGRID-ECDF_UCORE"),
    "nucleus": ("CERN-PROD", "BNL-ATLAS", "TRIUMF", "IN2P3-CC", "FZK-LCG2", "RAL-LCG2", "NDGF-T1", "INFN-T1", "pic"),
    "campaign": ("MC23a", "MC23c", "MC23d", "MC23e", "data23_13p6TeV", "data24_13p6TeV"),
    "prod_gshare": ("Full Simulation", "Fast Simulation", "Event Generation", "Derivations", "Reprocessing default",
                    "Group production"),
    "prod_processingType": ("evgen", "simul", "reco", "deriv", "pile", "merge"),
    "anal_processingType": ("panda-client-1.5.86-jedi-run", "panda-client-1.5.86-jedi-athena"),
    "prod_transUses": ("Athena-24.0.53", "Athena-24.0.60", "Athena-23.0.58", "AthSimulation-23.0.21"),
    "anal_transUses": ("AnalysisBase-24.2.35", "AthAnalysis-24.2.35", "AnalysisBase-25.2.12"),
    "architecture": ("x86_64-el9-gcc13-opt", "x86_64-el9-gcc13-opt@el9", "x86_64-el9-gcc14-opt"),
    "coreCount": (1, 8),
    "ramCount": (2000, 3000, 4000, 16000),
    "walltime": (14400, 28800, 43200, 86400),
    "outDiskCount": (500, 1000, 2000),
    "splitRule": ("nG=1,mF=1,nChunksToWait=1", "nEventsPerJob=1000,nG=1", "nGBPerJob=10,mF=1"),
    "includedSite": ("CERN-PROD_UCORE", "MWT2_UCORE", "DESY-HH_UCORE"),
    "gshare": ("User Analysis", "Full Simulation", "Derivations"),
    "transUses": ("Athena-24.0.53", "Athena-24.0.60", "AnalysisBase-24.2.35"),
    "processingType": ("reco", "simul", "deriv", "merge", "panda-client-1.5.86-jedi-run"),
    "prodSourceLabel": ("managed", "user"),
}

_TRANS_PATH = {
    "evgen": "Gen_tf.py", "simul": "Sim_tf.py", "reco": "Reco_tf.py", "deriv": "Derivation_tf.py",
    "pile": "Reco_tf.py", "merge": "HITSMerge_tf.py",
}
_TASKNAME_STEP = {
    "evgen": ("evgen.EVNT", "e8557"), "simul": ("simul.HITS", "e8557_s4162"), "reco": ("recon.AOD", "e8557_s4162_r15540"),
    "deriv": ("deriv.DAOD_PHYS", "e8557_s4162_r15540_p6266"), "pile": ("recon.RDO", "e8557_s4162_d1907"),
    "merge": ("merge.HITS", "e8557_s4162_s4114"),
}
_PHYSICS = ("601229.PhPy8EG_A14_ttbar_hdamp258p75_SingleLep", "700320.Sh_2214_Zee_maxHTpTV2_BFilter",
            "801165.Py8EG_A14NNPDF23LO_jj_JZ0", "512115.MGPy8EG_A14N23LO_HH_bbtautau")

_RED_HERRINGS = (
    "At first it looked like a site problem, but the failures are not confined to one site.",
    "I also checked whether the input had been recently reprocessed - it was not, so that is not it.",
    "The pilot version was updated last week, but the same pilot runs fine for other tasks.",
    "There was a short DDM hiccup yesterday, unrelated as far as I can tell.",
)
_TIMES = {1: "once", 2: "twice", 3: "three times"}
_USER_CLOSERS = ("Thanks a lot!", "Many thanks for the quick help.", "Thanks, that fixed it.", "Cheers, all good now.")
_NOISE_TRAILERS = ("", "\n\nSent from my phone", "\n\n-- \nThis message was scanned for viruses.",
                   "\n\n(Apologies for the delay, I was on a shift.)")


def generate_incidents(n: int, seed: int, noise: float = 0.2) -> list[Incident]:
    """``n`` labelled incidents, cause labels balanced to within one, byte-for-byte reproducible per seed."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be between 0 and 1, got {noise}")
    rng = random.Random(seed)
    task_ids = rng.sample(range(*_TASK_ID_RANGE), n)
    causes = _balanced_causes(rng, n)
    return [
        _make_incident(rng, index, seed, task_id, cause, noise)
        for index, (task_id, cause) in enumerate(zip(task_ids, causes))
    ]


def write_incidents(incidents: list[Incident], path: str | Path) -> Path:
    """Write one JSON file per incident into a directory, or one line per incident if ``path`` ends in .jsonl."""
    target = Path(path)
    if target.suffix == ".jsonl":
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8") as fh:
            for incident in incidents:
                fh.write(json.dumps(incident.model_dump(mode="json"), ensure_ascii=False) + "\n")
        return target
    if target.suffix:
        raise ValueError(f"{target}: expected a directory or a .jsonl file, not a '{target.suffix}' file")
    target.mkdir(parents=True, exist_ok=True)
    for incident in incidents:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", incident.incident_id) + ".json"
        (target / name).write_text(json.dumps(incident.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n",
                                   encoding="utf-8")
    return target


def read_incidents(path: str | Path) -> list[Incident]:
    """Read back what :func:`write_incidents` wrote (directory in file-name order, or JSONL in line order)."""
    source = Path(path)
    if source.is_dir():
        return [Incident.model_validate_json(p.read_text(encoding="utf-8")) for p in sorted(source.glob("*.json"))]
    lines = source.read_text(encoding="utf-8").splitlines()
    return [Incident.model_validate_json(line) for line in lines if line.strip()]


def cause_families() -> dict[str, list[str]]:
    """Symptom family -> its cause labels, in catalogue order (documentation and tests)."""
    families: dict[str, list[str]] = {}
    for template in CAUSES:
        families.setdefault(template.family, []).append(template.cause)
    return families


# --------------------------------------------------------------------------------------------------


def _balanced_causes(rng: random.Random, n: int) -> list[CauseTemplate]:
    """Round-robin over freshly shuffled cycles: every label appears floor(n/k) or ceil(n/k) times."""
    picked: list[CauseTemplate] = []
    while len(picked) < n:
        cycle = list(CAUSES)
        rng.shuffle(cycle)
        picked.extend(cycle)
    return picked[:n]


def _person(rng: random.Random) -> tuple[str, str]:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    login = (first[0].lower() + re.sub(r"[^a-z]", "", last.lower()))[:12]
    return f"{first} {last}", login


def _base_task(rng: random.Random, template: CauseTemplate, task_id: int, owner: str, login: str) -> dict[str, Any]:
    analysis = template.analysis
    processing = rng.choice(_POOLS["anal_processingType" if analysis else "prod_processingType"])
    trans_uses = rng.choice(_POOLS["anal_transUses" if analysis else "prod_transUses"])
    core = 1 if analysis else rng.choice(_POOLS["coreCount"])
    return {
        "jediTaskID": task_id,
        "taskName": "",
        "status": "",
        "errorDialog": "",
        "taskType": "anal" if analysis else "prod",
        "processingType": processing,
        "prodSourceLabel": "user" if analysis else "managed",
        "site": rng.choice(_POOLS["site"]),
        "ramCount": rng.choice(_POOLS["ramCount"]),
        "baseRamCount": 0,
        "coreCount": core,
        "walltime": rng.choice(_POOLS["walltime"]),
        "cpuTime": rng.choice((0, 12, 35, 80)),
        "outDiskCount": rng.choice(_POOLS["outDiskCount"]),
        "splitRule": rng.choice(_POOLS["splitRule"]),
        "transUses": trans_uses,
        "transHome": trans_uses,
        "transPath": "",
        "architecture": rng.choice(_POOLS["architecture"]),
        "userName": owner,
        "campaign": "" if analysis else rng.choice(_POOLS["campaign"]),
        "gshare": "User Analysis" if analysis else rng.choice(_POOLS["prod_gshare"]),
        "nucleus": rng.choice(_POOLS["nucleus"]),
        "vo": "atlas",
        "taskPriority": 1000 if analysis else rng.choice((500, 700, 900)),
        "retryID": 0,
        "modificationTime": "",
        "nJobs": 0,
        "nJobsFinished": 0,
        "nJobsFailed": 0,
        "_login": login,
    }


def _apply_signature(rng: random.Random, task: dict[str, Any], template: CauseTemplate,
                     noise: float) -> dict[str, Any]:
    """Set the cause's signature fields (some replaced by noise); return the true, pre-noise values.

    The narrative (dialog, logs, email) is rendered from the true values so that it stays consistent
    with the cause; only the recorded task fields carry the noise.
    """
    intended: dict[str, Any] = {}
    for key, choices in template.signature.items():
        value = intended[key] = rng.choice(choices)
        if key not in _NOISE_EXEMPT and rng.random() < noise:
            value = rng.choice(_POOLS[key])
        task[key] = value
    if "includedSite" in task:
        task.pop("site", None)
    elif template.family == "BrokerageNoSite":
        task.pop("site", None)  # nothing was ever brokered
    return intended


def _finish_task(rng: random.Random, task: dict[str, Any], template: CauseTemplate, when: datetime) -> None:
    login = task.pop("_login")
    processing = task["processingType"]
    if task["taskType"] == "anal":
        task["taskName"] = f"user.{login}.{rng.choice(_PHYSICS).split('.')[0]}.ntuple_v{rng.randint(1, 9)}/"
        task["transPath"] = "https://pandaserver.cern.ch:25443/trf/user/runGen-00-00-02"
        task["transHome"] = None
    else:
        step, tags = _TASKNAME_STEP.get(processing, ("recon.AOD", "e8557_s4162_r15540"))
        task["taskName"] = f"mc23_13p6TeV.{rng.choice(_PHYSICS)}.{step}.{tags}"
        task["transPath"] = _TRANS_PATH.get(processing, "Reco_tf.py")
    task["baseRamCount"] = rng.choice((0, 500, 1000)) if task["coreCount"] > 1 else 0
    task["status"] = rng.choice(template.statuses)
    task["modificationTime"] = when.strftime("%Y-%m-%d %H:%M:%S")
    _job_counts(rng, task, template)


def _job_counts(rng: random.Random, task: dict[str, Any], template: CauseTemplate) -> None:
    status = task["status"]
    if template.family == "BrokerageNoSite" or template.family == "TooManyFilesPerJob":
        n_jobs, finished = 0, 0
    elif status == "broken":
        n_jobs, finished = rng.randint(3, 10), 0
    elif status == "finished":
        n_jobs = rng.randint(200, 2000)
        finished = n_jobs - rng.randint(5, n_jobs // 10)
    else:
        n_jobs = rng.randint(50, 1500)
        finished = rng.randint(0, n_jobs // 2)
    task["nJobs"], task["nJobsFinished"], task["nJobsFailed"] = n_jobs, finished, n_jobs - finished


def _placeholders(rng: random.Random, task: dict[str, Any]) -> dict[str, Any]:
    ram = int(task["ramCount"])
    site = task.get("site") or task.get("includedSite") or rng.choice(_POOLS["site"])
    trans_uses = task["transUses"] or "Athena-24.0.53"
    split = dict(part.split("=", 1) for part in task["splitRule"].split(",") if "=" in part)
    nfiles = int(split.get("nFilesPerJob", rng.choice((450, 800, 1200))))
    return {
        "tid": task["jediTaskID"],
        "pandaid": _PANDAID_BASE + rng.randint(0, 99_999_999),
        "site": site,
        "ram": ram,
        "ram_fixed": int(ram * 1.5) // 500 * 500 + 500,
        "maxpss": int(ram * rng.uniform(1.05, 1.4)),
        "walltime": task["walltime"],
        "events": rng.randint(400, 4800),
        "nfailed": max(task["nJobsFailed"], 1),
        "nlost": rng.randint(1, 40),
        "lfn": f"EVNT.{rng.randint(38_000_000, 42_999_999)}._{rng.randint(1, 999):06d}.pool.root.1",
        "release": trans_uses.replace("-", ",", 1),
        "architecture": task["architecture"],
        "cores": task["coreCount"],
        "nfiles": nfiles,
    }


def _make_incident(rng: random.Random, index: int, seed: int, task_id: int, template: CauseTemplate,
                   noise: float) -> Incident:
    owner, login = _person(rng)
    when = _EPOCH + timedelta(minutes=rng.randint(0, 60 * 24 * 300))
    task = _base_task(rng, template, task_id, owner, login)
    intended = _apply_signature(rng, task, template, noise)
    _finish_task(rng, task, template, when)
    red_herring = rng.random() < noise
    retried = rng.random() < noise
    if retried:
        task["retryID"] = rng.randint(1, 3)
    values = _placeholders(rng, {**task, **intended})
    task["errorDialog"] = rng.choice(template.dialogs).format(**values)
    logs = {"pilot_log": template.log.format(**values)} if template.log and rng.random() < 0.6 else {}
    email = _email_thread(rng, task, template, values, owner, when, red_herring, retried)
    return Incident(
        incident_id=f"synthetic-{seed}-{index:05d}",
        task_data=task,
        email_text=email,
        task_logs=logs,
        external_data={},
        resolution_record=ResolutionRecord(
            cause=template.cause,
            cause_detail=template.cause_detail,
            resolution=template.resolution,
            resolution_steps=list(template.resolution_steps),
            procedure=list(template.procedure),
            reviewed_by="synthetic-generator",
        ),
        expected={
            "symptom": template.family,
            "status_symptom": "TaskStatus" + task["status"].capitalize(),
            "cause": template.cause,
            "features": [f"{key}={task[key]}" for key in ("processingType", "taskType", "prodSourceLabel", "coreCount")],
        },
    )


def _email_thread(rng: random.Random, task: dict[str, Any], template: CauseTemplate, values: dict[str, Any],
                  owner: str, when: datetime, red_herring: bool, retried: bool) -> str:
    first = owner.split()[0]
    user_addr = f"{owner} <{owner.lower().replace(' ', '.')}@example.org>"
    support = ("Distributed Analysis Support <dast-support@example.org>" if template.analysis
               else "ADC Shifters <adc-shifters@example.org>")
    signer = "DAST shifter on duty" if template.analysis else "ADC shifter (CRC)"
    subject = f"Task {task['jediTaskID']} {task['status']}"
    t0 = when + timedelta(minutes=rng.randint(20, 600))

    report = (f"Hi,\n\nmy task {task['jediTaskID']} ({task['taskName']}) ended up {task['status']}. "
              f"{template.user_report}")
    if retried:
        report += f" I already retried it {_TIMES[task['retryID']]} without luck."
    report += f"\nCould someone take a look?\n\nThanks,\n{first}{rng.choice(_NOISE_TRAILERS)}"

    framing = rng.choice(("Here is what I looked at:", "What I checked:", "Investigation so far:"))
    steps = "\n".join(f"- {step}" for step in template.procedure)
    reply = f"Hello {first},\n\n{framing}\n{steps}\n\n"
    if red_herring:
        reply += rng.choice(_RED_HERRINGS) + "\n\n"
    reply += f"{template.finding.format(**values)}\n\n{template.fix.format(**values)}\n\nBest regards,\n{signer}"

    messages = [
        _message(user_addr, support, t0, subject, report),
        _message(support, user_addr, t0 + timedelta(hours=rng.randint(1, 20)), "Re: " + subject,
                 reply + "\n\n" + _quote(report)),
    ]
    if rng.random() < 0.6:
        closing = f"{rng.choice(_USER_CLOSERS)}\n\n{first}"
        messages.append(_message(user_addr, support, t0 + timedelta(hours=rng.randint(21, 48)), "Re: " + subject, closing))
    return "\n\n".join(messages)


def _message(sender: str, recipient: str, at: datetime, subject: str, body: str) -> str:
    return f"From: {sender}\nTo: {recipient}\nDate: {format_datetime(at)}\nSubject: {subject}\n\n{body}"


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines())
