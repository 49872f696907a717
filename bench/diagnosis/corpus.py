"""A held-out corpus shaped like an operators' store, for the calibration benchmark (issue 30, item 4).

`bamboo.samples` writes causes that a field or two tell apart, every incident complete. Real stores are
harder, and this module makes the generator's incidents so:

* **Look-alike causes.** Eight causes get a twin: the same symptom family, the same error dialogs (so the
  same pilot error code) and the same sites, told apart only by weaker evidence — the payload type against
  the memory request, managed against user tasks, the core count.
* **Job records.** Most tasks carry failed-job records (`failedJobs`: the pilot's error code and the site
  that ran the job), as the analysis attaches them from PanDA; about a quarter come without any.
* **Noise in the defining fields.** Besides the generator's own (a signature field replaced at random),
  a task may lose its error dialog, lose a signature field, or carry a job record with another cause's
  pilot error code.
* **A long tail.** A quarter of the known causes are learned once, whatever the store's size.
* **Novel causes.** Six causes are never learned: two whole symptom families (their symptom classes
  are new to the store) and two causes of known families whose pilot error codes the store never saw.
  Their tasks are about 18% of the held-out set, and the right answer for them is "no known cause".

Deterministic per seed. Builds on the generator's incident assembly (`bamboo.samples.generator`), so the
dialogs, e-mails and resolution records are written as everywhere else.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field, replace

from bamboo.extraction.labels import normalise_label
from bamboo.models.incident import Incident
from bamboo.samples import generator
from bamboo.samples.templates import CAUSES, CauseTemplate

HELD_OUT_PER_CAUSE = 3
NOVEL_TASKS_PER_CAUSE = 4
TAIL_SHARE = 0.25
JOB_RECORDS_SHARE = 0.75
DROP_DIALOG = 0.08
DROP_SIGNATURE_FIELD = 0.10
WRONG_JOB_CODE = 0.08

# base cause -> (twin cause, what the twin changes): same family, dialogs and sites.
TWINS: dict[str, tuple[str, dict]] = {
    "Insufficient memory request": ("Memory-hungry reconstruction configuration", {
        "signature": {"processingType": ("reco", "pile"), "coreCount": (1,), "ramCount": (2500, 3000)}}),
    "Memory leak in payload": ("Memory leak in user analysis code", {
        "analysis": True, "signature": {"prodSourceLabel": ("user",), "ramCount": (16000, 20000)}}),
    "Walltime request too short": ("Walltime too short for reconstruction", {
        "signature": {"processingType": ("reco",), "coreCount": (8,), "walltime": (3600, 7200)}}),
    "Lost input file replica": ("Lost replicas of user input", {
        "analysis": True, "signature": {"prodSourceLabel": ("user",), "nucleus": ("IN2P3-CC", "NDGF-T1")}}),
    "Storage endpoint unavailable": ("Storage endpoint refusing user outputs", {
        "analysis": True, "signature": {"site": ("BNL_PROD_UCORE", "TRIUMF_UCORE"), "prodSourceLabel": ("user",)}}),
    "Corrupted input file": ("Corrupted simulation inputs", {
        "signature": {"processingType": ("simul", "merge")}}),
    "Site misconfiguration": ("Site misconfigured for single-core jobs", {
        "signature": {"site": ("SARA-MATRIX_UCORE", "IFIC-LCG2_UCORE"), "coreCount": (1,)}}),
    "Invalid transform arguments": ("Invalid transform arguments in reprocessing", {
        "signature": {"processingType": ("reco", "pile"), "prodSourceLabel": ("managed",)}}),
}
# Never learned: whole families (a symptom class new to the store) ...
NOVEL_FAMILIES = ("ContainerFailure", "AuthenticationExpired")
# ... and causes of known families whose pilot error codes are rewritten to ones the store never saw.
NOVEL_CODES: dict[str, dict[str, str]] = {
    "Output checksum mismatch after transfer": {"1141": "1142", "1172": "1173"},
    "Slow worker nodes at site": {"1213": "1223"},
}
_CODE = re.compile(r"(pilot(?::| error |Error ?Code=?))(\d{4})")


@dataclass
class Corpus:
    """Incidents to learn (per known cause, in order) and the held-out tasks with their truth."""

    train: dict[str, list[Incident]]
    held_out: list[Incident]
    truth: list[str]
    novel: list[bool]
    lookalike: list[bool]
    tail: set[str] = field(default_factory=set)

    def learn(self, per_cause: int) -> list[Incident]:
        """The first ``per_cause`` incidents of every known cause, one of a tail cause."""
        return [i for cause, v in self.train.items() for i in v[:1 if cause in self.tail else per_cause]]


def templates() -> tuple[list[CauseTemplate], list[CauseTemplate], set[str]]:
    """(known causes, novel causes, look-alike cause labels)."""
    known: list[CauseTemplate] = []
    novel: list[CauseTemplate] = []
    lookalike: set[str] = set()
    for t in CAUSES:
        if t.family in NOVEL_FAMILIES:
            novel.append(t)
        elif t.cause in NOVEL_CODES:
            codes = NOVEL_CODES[t.cause]
            novel.append(replace(t, dialogs=tuple(_CODE.sub(lambda m: m.group(1) + codes.get(m.group(2), m.group(2)), d)
                                                  for d in t.dialogs)))
        else:
            known.append(t)
            if t.cause in TWINS:
                name, change = TWINS[t.cause]
                known.append(replace(t, cause=name, **change))
                lookalike |= {normalise_label(t.cause), normalise_label(name)}
    return known, novel, lookalike


def build(seed: int, max_per_cause: int, noise: float = 0.2) -> Corpus:
    rng = random.Random(seed)
    known, novel, lookalike = templates()
    ids = iter(rng.sample(range(51_000_000, 59_999_999), len(known) * (max_per_cause + HELD_OUT_PER_CAUSE)
                          + len(novel) * NOVEL_TASKS_PER_CAUSE))
    counter = iter(range(10**6))
    all_codes = sorted({c for t in known for d in t.dialogs for _, c in _CODE.findall(d)})

    def make(t: CauseTemplate) -> Incident:
        incident = generator._make_incident(rng, next(counter), seed, next(ids), t, noise)
        _roughen(rng, incident, t, all_codes)
        return incident

    train: dict[str, list[Incident]] = {}
    held_out: list[tuple[Incident, str, bool]] = []
    for t in known:
        label = normalise_label(t.cause)
        held_out += [(make(t), label, False) for _ in range(HELD_OUT_PER_CAUSE)]
        train[label] = [make(t) for _ in range(max_per_cause)]
    for t in novel:
        held_out += [(make(t), normalise_label(t.cause), True) for _ in range(NOVEL_TASKS_PER_CAUSE)]
    rng.shuffle(held_out)
    plain = sorted(c for c in train if c not in lookalike)
    tail = set(rng.sample(plain, round(TAIL_SHARE * len(train))))
    return Corpus(train=train, held_out=[h[0] for h in held_out], truth=[h[1] for h in held_out],
                  novel=[h[2] for h in held_out], lookalike=[h[1] in lookalike for h in held_out], tail=tail)


def _roughen(rng: random.Random, incident: Incident, t: CauseTemplate, codes: list[str]) -> None:
    """Job records for most tasks, and the defining fields' noise (module docstring)."""
    task = incident.task_data
    dialog = str(task.get("errorDialog") or "")
    own = [c for _, c in _CODE.findall(dialog)]
    if own and rng.random() < JOB_RECORDS_SHARE:
        site = task.get("site") if "site" in t.signature else None
        jobs = []
        for _ in range(rng.randint(1, 3)):
            code = own[0] if rng.random() >= WRONG_JOB_CODE else rng.choice(codes)
            jobs.append({"pilotErrorCode": int(code),
                         "computingSite": site or rng.choice(generator._POOLS["site"])})
        task["failedJobs"] = jobs
    if rng.random() < DROP_DIALOG and task.get("failedJobs"):
        task["errorDialog"] = ""
    present = [k for k in t.signature if k in task and k not in ("prodSourceLabel", "taskType")]
    if present and rng.random() < DROP_SIGNATURE_FIELD:
        task.pop(rng.choice(present))
