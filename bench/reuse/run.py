"""Reuse before regenerate (issue 26): model calls per turn and time from question to review, with reuse and
without, in one run.

The real stack: the Temporal dev server, Postgres, the production worker in this process with the sandbox,
the PanDA simulator, the offline MiniLM embedder (the one reuse matches with by default), and a scripted
OpenAI-compatible model that answers every call after a fixed latency (``--latency``, default 1 s: a hosted
model's turn-around). The scripted model is a good one: asked for code, it writes the right code for the
question at once, so the "without" side is today's best case.

The store holds the reviewed procedures bundled with the examples. A set of repeated investigation questions
(verbatim triggers of those procedures, paraphrases of them, and questions no stored procedure answers) is
asked on task 40112233, each in a session of its own and in both modes, interleaved question by question so a
shared machine's drift hits both alike:

- *reuse*: an ordinary message (a stored procedure that fits is proposed without a code-generation call);
- *regenerate*: the same message with ``fresh_code`` (no reuse: what every turn did before);

each as an ordinary message (the model classifies its intent first) and as a tool turn (``/tool``: no intent
call, as the demo sends them).

Per turn: model calls (intent, code generation, summary), code-generation calls alone, time from sending the
question to the review being pending (``pending`` query polled every 20 ms), and from the question to the run's
summary after a second person approved.

    .venv/bin/python -m bench.reuse.run [--rounds 3] [--latency 1.0] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bamboo.approvals.keys import KeyStore
from bamboo.investigation import client as inv
from bamboo.investigation.bundled import load_bundled, store_bundled
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.panda.simulator.server import PandaSimulator
from bamboo.settings import Settings
from bamboo.temporal_client import connect
from policy.approvers import Role
from policy.decisions import DecisionKind
from tests.services import ROOT, start_stack
from tests.support.scripted_llm import ScriptedLLMServer, schema_router
from worker.main import run_worker
from worker.services import build_services

RESULTS = Path(__file__).with_name("results.md")
TASK_ID = 40112233
PROCEDURES = {p.name: p for p in load_bundled(ROOT / "examples" / "procedures")}
STATUS = PROCEDURES["proc__get_task_details__get_task_jobs_summary"].code
SCOUTS = PROCEDURES["proc__get_scout_job_details__get_task_details"].code
DATASETS = "d = await tools.get_task_input_datasets(task_id=task_id)\nreturn {'datasets': [x['name'] for x in d]}"
CHAIN = "c = await tools.get_retry_chain(task_id=task_id)\nreturn {'attempts': len(c)}"
SIMILAR = "s = await tools.find_similar_successful_tasks(task_id=task_id)\nreturn {'similar': len(s)}"
LOG = "g = await tools.get_failed_job_log_summary(task_id=task_id)\nreturn {'log': bool(g)}"
# (question, what kind of question it is, the code a capable model writes for it)
QUESTIONS = [
    ("What happened to this task and its jobs?", "verbatim trigger", STATUS),
    ("What do the scout jobs say about memory?", "verbatim trigger", SCOUTS),
    ("how are the task's jobs doing?", "verbatim trigger", STATUS),
    ("How did the jobs of this task fail?", "paraphrase", STATUS),
    ("did the scout jobs run out of memory?", "paraphrase", SCOUTS),
    ("Summarise why this task's jobs failed", "paraphrase", STATUS),
    ("Which input datasets does the task read?", "no stored procedure", DATASETS),
    ("Has this task been retried before?", "no stored procedure", CHAIN),
    ("Compare this task with a similar one that worked", "no stored procedure", SIMILAR),
    ("What does the log of the first failed job say?", "no stored procedure", LOG),
]
MODES = ("reuse", "regenerate", "reuse, /tool", "regenerate, /tool")
POLL_S = 0.02


@dataclass
class Turn:
    mode: str
    kind: str
    question: str
    reused: bool
    model_calls: int
    codegen_calls: int
    to_review_s: float
    to_result_s: float


def scripted_model(codes: dict[str, str]):
    """A capable model: the right code for each question at the first try, a one-line summary."""
    def code(request):
        asked = request.first_user.split("Request: ", 1)[1].split("\n", 1)[0].strip()
        return {"code": codes[asked], "summary": "looks it up", "strategy": "lookup", "trigger_signals": [],
                "reason": ""}

    return schema_router({
        "InvestigationIntent": lambda request: {"intent": "tool", "confidence": 0.9, "reason": "a question"},
        "InvestigationCode": code,
        "InvestigationSummary": lambda request: {"reply": "done", "result_summary": "done"},
    })


async def one_turn(client, settings, llm, people, question: str, kind: str, mode: str) -> Turn:
    session = f"bench-{mode.replace(', ', '-').replace('/', '')}-{time.monotonic_ns()}"
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    before_calls, before_code = llm.call_count, llm.counts_by_schema().get("InvestigationCode", 0)
    started = time.perf_counter()
    await inv.send_message(client, session, question, people["alice"], force_tool=mode.endswith("/tool"),
                           fresh_code=mode.startswith("regenerate"))
    view = None
    while view is None:
        view = await inv.pending(client, session)
        if view is None:
            await asyncio.sleep(POLL_S)
    to_review = time.perf_counter() - started
    await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, people["bob"])
    while not [e for e in await inv.transcript(client, session) if e.kind == "reply" and e.turn == 1]:
        await asyncio.sleep(POLL_S)
    to_result = time.perf_counter() - started
    await asyncio.sleep(0.5)  # the turn's audit rows are written after its reply; let them land first
    turn = Turn(mode=mode, kind=kind, question=question, reused=view.reuse is not None,
                model_calls=llm.call_count - before_calls,
                codegen_calls=llm.counts_by_schema().get("InvestigationCode", 0) - before_code,
                to_review_s=to_review, to_result_s=to_result)
    await inv.handle(client, session).terminate("benchmark turn done")
    return turn


async def measure(rounds: int, latency: float) -> list[Turn]:
    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-reuse-"))
    stack = start_stack(base, persistent=False)
    turns: list[Turn] = []
    try:
        with ScriptedLLMServer(scripted_model({q: c for q, _, c in QUESTIONS}), latency_s=latency) as llm, \
                PandaSimulator(ROOT / "examples" / "incidents", port=0, require_token=None) as sim:
            keys = KeyStore(base / "keys")
            settings = Settings(
                _env_file=None, temporal_address=stack.temporal_address, database_url=stack.new_database(),
                llm_base_url=llm.base_url, admin_keys_file=stack.admin_keys_file, keys_dir=base / "keys",
                panda_api_url=sim.api_url, panda_monitor_url=sim.monitor_url,  # embeddings: the offline MiniLM
                deployment="bench")
            services = await build_services(settings, llm_base_url=settings.llm_base_url, pool_size=4)
            stop = asyncio.Event()
            worker = asyncio.create_task(run_worker(settings, services=services, stop=stop))
            try:
                registry = stack.registry(services.store, settings.resolved_deployment())
                roles = {"alice": {Role.REQUEST}, "bob": {Role.APPROVE}}
                people = {}
                for who, granted in roles.items():
                    key = keys.create(who)
                    await registry.register(stack.admin, who, key.public_key, granted)
                    people[who] = inv.Speaker(who, key, deployment=settings.resolved_deployment())
                await store_bundled(ProcedureRepository(services.store.pool), list(PROCEDURES.values()))
                client = await connect(settings)
                # One warm-up turn per mode (the embedder loads, the sandbox pool starts), not counted.
                for mode in MODES:
                    await one_turn(client, settings, llm, people, QUESTIONS[0][0], QUESTIONS[0][1], mode)
                for index in range(rounds):
                    for question, kind, _ in QUESTIONS:
                        order = MODES if (index + len(turns)) % 2 == 0 else tuple(reversed(MODES))
                        for mode in order:
                            turns.append(await one_turn(client, settings, llm, people, question, kind, mode))
                            print(f"{mode:10} {kind:20} reused={turns[-1].reused!s:5} calls={turns[-1].model_calls} "
                                  f"review={turns[-1].to_review_s:.2f}s  {question}", file=sys.stderr)
            finally:
                stop.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(worker, 30)
                await services.close()
    finally:
        stack.stop()
        shutil.rmtree(base, ignore_errors=True)
    return turns


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))] if ordered else 0.0


def report(turns: list[Turn], rounds: int, latency: float) -> str:
    lines = [
        f"{len(QUESTIONS)} questions x {rounds} rounds per mode, scripted model latency {latency:g} s per call, "
        f"offline MiniLM embedder, host {platform.machine()} {platform.python_version()}.",
        "",
        "\"reused\": turns that proposed a stored procedure (for questions no stored procedure answers, a wrong "
        "proposal the reviewer has to reject).",
        "",
        "| mode | questions | turns | reused | model calls / turn | code-generation calls / turn "
        "| question -> review, median (p90) | question -> result, median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind in ("all", *dict.fromkeys(k for _, k, _ in QUESTIONS)):
        for mode in MODES:
            chosen = [t for t in turns if t.mode == mode and kind in ("all", t.kind)]
            if not chosen:
                continue
            lines.append(
                f"| {mode} | {kind} | {len(chosen)} | {sum(t.reused for t in chosen)} "
                f"| {statistics.mean(t.model_calls for t in chosen):.2f} "
                f"| {statistics.mean(t.codegen_calls for t in chosen):.2f} "
                f"| {median([t.to_review_s for t in chosen]):.2f} s ({p90([t.to_review_s for t in chosen]):.2f} s) "
                f"| {median([t.to_result_s for t in chosen]):.2f} s |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds the scripted model takes per call")
    parser.add_argument("--write", action="store_true", help=f"store the output in {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--json", type=Path, help="also write every turn's figures here")
    args = parser.parse_args()
    turns = asyncio.run(measure(args.rounds, args.latency))
    text = report(turns, args.rounds, args.latency)
    print(text)
    if args.json:
        args.json.write_text(json.dumps([t.__dict__ for t in turns], indent=1))
    if args.write:
        command = "`.venv/bin/python -m bench.reuse.run" + (f" --rounds {args.rounds}" if args.rounds != 3 else "") \
            + (f" --latency {args.latency:g}" if args.latency != 1.0 else "") + " --write`"
        RESULTS.write_text(f"# Reuse before regenerate\n\n{command}\n\n{text}\n")


if __name__ == "__main__":
    main()
