"""The simulator's HTTP surface: the PanDA API v1 methods the official client uses for tasks and jobs, the
monitor's log browser, and a record of every state-changing call (``GET /sim/calls``) and of the commands
registered for JEDI (``GET /sim/commands``) so tests and the demo can see what was asked and what was done.

Each API method is declared with the server's checks and arguments (see ``protocol``); its handler only
computes the envelope from the world. Refusal rules and messages are the server's.
"""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bamboo.panda.simulator.jedi import Jedi
from bamboo.panda.simulator.legacy import CONTAINER_ERROR, LEGACY_METHODS, LegacyCall
from bamboo.panda.simulator.protocol import (
    MESSAGE_PROD_ROLE, MESSAGE_SSL, MESSAGE_TASK_ID, MESSAGE_TASK_OWNER, ArgumentProblem, Caller, Endpoint, Envelope,
    Param, bind, render, text,
)
from bamboo.panda.simulator.records import (
    FINAL_JOB_STATES, TASK_ATTRIBUTES, UNSUCCESSFUL_JOB_STATES, decode_split_rule, job_description,
)
from bamboo.panda.simulator.world import World

TASK_ID = Param("task_id", int)
MAX_JOB_IDS = 5500
SINCE_FORMAT = "%Y-%m-%d %H:%M:%S"
SINCE_CAP = timedelta(days=90)
_REGEX_META = r"^$*+?\|()"
# Only links to PanDA's own hosts are redirected here; anything else stays as written (and the client's
# allowlist refuses it), which is how a hostile link in an errorDialog would look in production.
_HOST_RE = re.compile(r"""(href\s*=\s*["'])https?://[^/"':]+\.cern\.ch(:\d+)?""", re.I)


class SimAuth(BaseModel):
    """How the simulator authenticates, standing in for mod_ssl and the server's token check.

    ``default_dn`` is the client certificate every request presents (None: no certificate, so a request
    needs a token); ``tokens`` maps each bearer token the simulator accepts to its holder's DN; ``vos`` are
    the VOs an ``Origin`` header may name. The ``X-Test-DN``, ``X-Test-FQAN`` and ``X-Test-No-Auth`` headers
    act as they do on the real server's test runner, so one contract test can call as another user.
    """

    default_dn: str | None = "/DC=ch/DC=cern/OU=Users/CN=bamboo tester"
    default_fqans: tuple[str, ...] = ()
    tokens: dict[str, str] = {}
    vos: tuple[str, ...] = ("atlas",)
    production_dns: tuple[str, ...] = ()


class RecordedCall(BaseModel):
    """One state-changing request as the simulator received it; ``accepted`` means PanDA registered it."""

    endpoint: str
    task_id: int | None
    accepted: bool
    message: str
    authenticated: bool
    at: str


class SimulatorState:
    """The world, JEDI's command table and the call record, behind one lock (handlers run concurrently)."""

    def __init__(self, world: World, auth: SimAuth | None = None, jedi_delay_s: float = 5.0) -> None:
        self.world = world
        self.auth = auth or SimAuth()
        self.jedi = Jedi(world, jedi_delay_s)
        self.calls: list[RecordedCall] = []
        self.checkpoints: dict[str, bytes] = {}  # HPO checkpoints put through the legacy methods, by path
        self.lock = self.jedi.lock
        self._record_lock = threading.Lock()

    def reset(self, world: World) -> None:
        """Start over with ``world``'s contents: no calls recorded, no commands registered (tests)."""
        with self.lock:
            self.world.__dict__.update(world.__dict__)
            self.jedi.pending.clear()
            self.jedi.registered.clear()
            self.checkpoints.clear()
        with self._record_lock:
            self.calls.clear()

    def record(self, endpoint: str, task_id: int | None, accepted: bool, message: str, authenticated: bool) -> None:
        call = RecordedCall(endpoint=endpoint, task_id=task_id, accepted=accepted, message=message,
                            authenticated=authenticated, at=datetime.now(timezone.utc).isoformat())
        with self._record_lock:
            self.calls.append(call)


# --- what the server computes from its tables --------------------------------------------------------


def task_details(world: World, tid: int, base_url: str | None = None) -> dict[str, Any] | None:
    """get_detailed_info's record: every JediTaskSpec attribute, decoded splitRule, parameters, file counts."""
    row = world.tasks.get(tid)
    if row is None:
        return None
    out: dict[str, Any] = {name: row.get(name) for name in TASK_ATTRIBUTES}
    out["splitRule"] = decode_split_rule(row.get("splitRule"))
    if base_url and out.get("errorDialog"):  # fixtures link PanDA hosts; serve them from here for the demo
        out["errorDialog"] = _HOST_RE.sub(lambda m: m.group(1) + base_url, out["errorDialog"])
    out["job_execution_params"] = world.job_templates.get(tid)
    params = world.task_params.get(tid)
    if params is not None:
        out["task_creation_arguments"] = params.get("cliParams")
        out["raw_task_params"] = params
    inputs = [d for d in world.datasets.get(tid, []) if d.type == "input"]
    n_files = sum(len(d.files) for d in inputs)
    finished = sum(d.count("finished") for d in inputs)
    failed = sum(d.count("failed") for d in inputs)
    out.update({"nFiles": n_files, "nFilesFinished": finished, "nFilesFailed": failed,
                "nFilesMissing": sum(d.n_missing for d in inputs),
                "pctFinished": round(100 * finished / n_files) if n_files else 0,
                "pctFailed": round(100 * failed / n_files) if n_files else 0})
    return out


def _statistics(world: World, tid: int) -> str:
    counts: dict[str, int] = {}
    for dataset in world.datasets.get(tid, []):
        if dataset.type == "input":
            for f in dataset.files:
                counts[f["status"]] = counts.get(f["status"], 0) + 1
    return ",".join(f"{status}*{n}" for status, n in counts.items())


def _looks_like_regex(pattern: Any) -> bool:
    return any(c in pattern for c in _REGEX_META)  # a non-string pattern crashes here, as on the server


def _matches(row: dict[str, Any], field: str, value: Any) -> bool:
    actual = row.get(field)
    if value in ("NULL", None):
        return actual is None
    if value == "NOT NULL":
        return actual is not None
    return actual is not None and str(actual) == str(value)


# --- the API --------------------------------------------------------------------------------------------


def build_endpoints(state: SimulatorState) -> dict[tuple[str, str], Endpoint]:
    world, jedi = state.world, state.jedi

    def get_status(caller: Caller, task_id: Any) -> Envelope:
        try:
            tid = int(task_id)
        except (TypeError, ValueError):
            return Envelope.fail(MESSAGE_TASK_ID)
        task = world.tasks.get(tid)
        return Envelope.ok(task["status"]) if task else Envelope.fail("Task not found")

    def get_details(caller: Caller, task_id: int, include_parameters: bool, include_status: bool) -> Envelope:
        params = world.task_params.get(task_id)
        task = world.tasks.get(task_id)
        if (include_parameters and params is None) or (include_status and task is None):
            return Envelope.fail("Task not found or error retrieving the details")
        datasets = world.datasets.get(task_id, [])
        jobs = world.jobs.get(task_id, [])
        out: dict[str, Any] = {
            "inDS": ",".join(d.name for d in datasets if d.type == "input"),
            "outDS": ",".join(d.name for d in datasets if d.type == "output"),
            "statistics": _statistics(world, task_id),
            "PandaID": [j["PandaID"] for j in jobs if j["jobStatus"] not in FINAL_JOB_STATES],
            "mergeStatus": None, "mergePandaID": [],
        }
        if include_status:
            assert task is not None  # checked above
            out["status"] = task["status"]
        if include_parameters:
            assert params is not None  # checked above
            out["cliParams"] = params.get("cliParams")
        return Envelope.ok(out)

    def get_detailed_info(caller: Caller, task_id: int, *, base_url: str | None = None) -> Envelope:
        details = task_details(world, task_id, base_url)
        return Envelope.ok(details) if details else Envelope.fail("Task not found or error retrieving task info")

    def get_parent_detailed_info(caller: Caller, task_id: int) -> Envelope:
        child = world.tasks.get(task_id)
        if child is None:
            return Envelope.fail("Child task not found")
        parent = child.get("parent_tid")
        if parent in (None, task_id):
            return Envelope.fail("No parent task found")
        details = task_details(world, parent)
        return Envelope.ok(details) if details else Envelope.fail("Parent task not found")

    def get_job_descriptions(caller: Caller, task_id: int, unsuccessful_only: bool) -> Envelope:
        jobs = world.jobs.get(task_id, [])
        if unsuccessful_only:
            jobs = [j for j in jobs if j["jobStatus"] in UNSUCCESSFUL_JOB_STATES]
        return Envelope.ok([job_description(j, extra_info=True) for j in jobs[:MAX_JOB_IDS]])

    def get_datasets_and_files(caller: Caller, task_id: Any, dataset_types: Any, dataset_only: bool) -> Envelope:
        try:
            tid = int(task_id)
        except (TypeError, ValueError):
            return Envelope.fail("Database exception while gathering files")
        types = list(dataset_types)
        data = [{"dataset": {"name": d.name, "id": d.dataset_id}, "files": [dict(f) for f in d.files]}
                for d in world.datasets.get(tid, []) if d.type in types]  # dataset_only is ignored, as in 1.0.4
        return Envelope.ok(data) if data else Envelope.fail("No data found for the task")

    def get_tasks_detailed_info_since(caller: Caller, since: str | None, filters: str | None, n_tasks: int) -> Envelope:
        criteria: dict[str, Any] = {"userName": caller.user}
        patterns: dict[str, Any] = {}
        if filters:
            try:
                parsed = json.loads(filters)
            except ValueError:
                return Envelope.fail("filters is not valid JSON")
            if not isinstance(parsed, dict):
                return Envelope.fail("filters must be a JSON object")
            for name, pattern in parsed.items():
                (patterns if _looks_like_regex(pattern) else criteria)[name] = pattern
        if any(name not in TASK_ATTRIBUTES for name in criteria):
            return Envelope.fail("Failed to retrieve task IDs")
        floor = datetime.now() - SINCE_CAP
        if since is not None:
            try:
                floor = max(floor, datetime.strptime(since, SINCE_FORMAT))
            except ValueError:
                return Envelope.fail("Failed to retrieve task IDs")
        ids = sorted(tid for tid, row in world.tasks.items()
                     if all(_matches(row, k, v) for k, v in criteria.items())
                     and isinstance(row.get("modificationTime"), datetime) and row["modificationTime"] >= floor)
        result = []
        for tid in ids[: max(n_tasks, 0)]:
            details = task_details(world, tid)
            if details is None:
                continue
            try:
                if any(name in details and re.search(p, str(details[name])) is None for name, p in patterns.items()):
                    continue
            except re.error:
                continue
            result.append(details)
        return Envelope.ok(result)

    def get_job_ids(caller: Caller, task_id: int) -> Envelope:
        return Envelope.ok([j["PandaID"] for j in world.jobs.get(task_id, [])])

    def get_task_parameters(caller: Caller, task_id: int) -> Envelope:
        params = world.deft_task_params.get(task_id)
        return Envelope.ok(params) if params else Envelope.fail("Task not found")

    def command(name: str, *, success_always: bool = False, qualifier=None, endpoint: str | None = None):
        def handler(caller: Caller, task_id: int, **options: Any) -> Envelope:
            outcome = jedi.send(task_id, name, caller.user, caller.production, qualifier(options) if qualifier else None)
            code, message = outcome.code, outcome.message
            if code == 5:  # a running user task: its failed jobs are retried, no command is registered
                code, message = 0, f"retry has been triggered for failed jobs while the task is still {message}"
            state.record(f"task/{endpoint or name}", task_id, outcome.code == 0, message, True)
            return Envelope(success=success_always or code == 0, message=message, data=code)
        return handler

    def retry(caller: Caller, task_id: int, new_parameters: Any, **options: Any) -> Envelope:
        if new_parameters:
            state.record("task/retry", task_id, False, "new parameters", True)
            return Envelope.ok(1, "new parameter conversion failed with the task has no parameters to update")
        return command("retry", success_always=True, qualifier=_retry_qualifiers)(caller, task_id, **options)

    def reactivate(caller: Caller, task_id: int, keep_attempt_nr: bool, trigger_job_generation: bool) -> Envelope:
        task = world.tasks.get(task_id)
        if task is None:
            return Envelope.fail(f"jediTaskID={task_id} not found", 1)
        with state.lock:
            task["status"], task["oldStatus"] = "ready", task["status"]
        state.record("task/reactivate", task_id, True, "reactivated", True)
        return Envelope.ok(0, f"jediTaskID={task_id} reactivated")

    def increase_attempts(caller: Caller, task_id: int, increase: int) -> Envelope:
        if task_id not in world.tasks:
            return Envelope.fail("unknown task", 1)
        return Envelope.ok(0, f"increased attemptNr for jediTaskID={task_id}")

    def job_descriptions(caller: Caller, job_ids: list[int]) -> Envelope:
        out = []
        for panda_id in job_ids[:MAX_JOB_IDS]:
            job = world.job(panda_id)
            out.append(job_description(job, extra_info=False) if job else None)
        return Envelope.ok(out)

    def job_metadata(caller: Caller, task_id: int) -> Envelope:
        metadata = world.job_metadata.get(task_id)
        return Envelope.ok(metadata) if metadata else Envelope.ok({}, "No metadata found")

    def kill_jobs(caller: Caller, job_ids: list[int], **options: Any) -> Envelope:
        done = []
        for panda_id in job_ids:
            job = world.job(panda_id)
            ok = (job is not None and job["jobStatus"] not in FINAL_JOB_STATES
                  and (caller.production or job.get("prodUserName") == caller.user))
            if ok and job is not None:
                job["commandToPilot"] = "tobekilled"
            done.append(ok)
        state.record("job/kill", None, any(done), f"killed {sum(done)} of {len(done)} jobs", True)
        return Envelope.ok(done)

    def is_alive(caller: Caller) -> Envelope:
        return Envelope.ok(None)

    flag = lambda name: Param(name, bool, False)  # noqa: E731
    job_ids = Param("job_ids", "list[int]")
    endpoints = [
        Endpoint("task", "get_status", get_status, (Param("task_id"),), "GET"),
        Endpoint("task", "get_details", get_details, (TASK_ID, flag("include_parameters"), flag("include_status")), "GET"),
        Endpoint("task", "get_detailed_info", get_detailed_info, (TASK_ID,), "GET", extra={"base_url": True}),
        Endpoint("task", "get_parent_detailed_info", get_parent_detailed_info, (TASK_ID,), "GET"),
        Endpoint("task", "get_job_descriptions", get_job_descriptions, (TASK_ID, flag("unsuccessful_only")), "GET"),
        Endpoint("task", "get_datasets_and_files", get_datasets_and_files,
                 (Param("task_id"), Param("dataset_types", "list[str]", ("input", "pseudo_input")),
                  flag("dataset_only")), "GET"),
        Endpoint("task", "get_tasks_detailed_info_since", get_tasks_detailed_info_since,
                 (Param("since", str, None), Param("filters", str, None), Param("n_tasks", int, 500)), "GET"),
        Endpoint("task", "get_job_ids", get_job_ids, (TASK_ID,), "GET"),
        Endpoint("task", "get_task_parameters", get_task_parameters, (TASK_ID,), "GET"),
        Endpoint("task", "kill", command("kill"), (TASK_ID, flag("broadcast")), "POST", task_owner=True),
        Endpoint("task", "finish", command("finish", qualifier=lambda o: "soft" if o.get("soft") else None),
                 (TASK_ID, flag("soft"), flag("broadcast")), "POST", task_owner=True),
        Endpoint("task", "retry", retry,
                 (TASK_ID, Param("new_parameters", "dict|str", None), flag("no_child_retry"), flag("discard_events"),
                  flag("disable_staging_mode"), flag("keep_gshare_priority"), flag("ignore_hard_exhausted")),
                 "POST", task_owner=True),
        Endpoint("task", "pause", command("pause"), (TASK_ID,), "POST", production=True),
        Endpoint("task", "resume", command("resume"), (TASK_ID,), "POST", production=True),
        Endpoint("task", "reactivate", reactivate, (TASK_ID, flag("keep_attempt_nr"), flag("trigger_job_generation")),
                 "POST", production=True),
        Endpoint("task", "reload_input", command("incexec", endpoint="reload_input"), (TASK_ID, flag("ignore_hard_exhausted")), "POST"),
        Endpoint("task", "increase_attempts", increase_attempts, (TASK_ID, Param("increase", int)), "POST",
                 production=True),
        Endpoint("job", "get_description", job_descriptions, (job_ids,)),
        Endpoint("job", "get_description_incl_archive", job_descriptions, (job_ids,)),
        Endpoint("job", "get_metadata_for_analysis_jobs", job_metadata, (TASK_ID,), "GET"),
        Endpoint("job", "kill", kill_jobs, (job_ids, Param("code", int, None), flag("use_email_as_id"),
                                             Param("kill_options", "list[str]", [])), "POST"),
        Endpoint("system", "is_alive", is_alive, (), secure=False),
    ]
    return {(e.module, e.name): e for e in endpoints}


def _retry_qualifiers(options: dict[str, Any]) -> str | None:
    names = {"no_child_retry": "sole", "discard_events": "discard", "disable_staging_mode": "staged",
             "keep_gshare_priority": "keep", "ignore_hard_exhausted": "transcend"}
    picked = [q for option, q in names.items() if options.get(option)]
    return " ".join(picked) or None


# --- the request pipeline -------------------------------------------------------------------------------


def _caller(state: SimulatorState, request: Request) -> Caller | Response:
    """The server's authentication step: a client DN, and a bearer token checked with its Origin VO."""
    auth, headers = state.auth, request.headers
    no_cert = "x-test-no-auth" in headers
    dn = None if no_cert else headers.get("x-test-dn", auth.default_dn)
    raw_fqans = (headers["x-test-fqan"],) if "x-test-fqan" in headers else auth.default_fqans
    # like mod_gridsite's GRST_CRED_* values: "VOMS <fqan>" (only VOMS attributes count)
    fqans = tuple(f.split()[-1] for f in raw_fqans if f.startswith("VOMS"))
    authorization = headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        token = authorization.split(None, 1)[1]
        origin = headers.get("origin")
        failed = "ERROR : Token authentication failed. "
        if origin is None:  # the server derives the VO from Origin before it looks at the token
            return text(403, failed + "Token decode failure. 'NoneType' object has no attribute 'replace'")
        holder = auth.tokens.get(token)
        if holder is None:
            return text(403, failed + "Invalid token. Signature verification failed")
        vo = origin.replace(":", ".").split(".")[0]
        if vo not in auth.vos:
            return text(403, failed + f"Unknown vo : {vo}")
        dn = dn or holder
    return Caller(dn=dn, fqans=fqans if dn else (), production_dns=auth.production_dns)


async def _arguments(request: Request) -> dict[str, Any]:
    """Query parameters for GET (a repeated key becomes a list), the JSON body of a JSON POST, else the form."""
    if request.method in ("GET", "HEAD"):
        out: dict[str, Any] = {}
        for key, value in request.query_params.multi_items():
            if key in out:
                out[key] = (out[key] if isinstance(out[key], list) else [out[key]]) + [value]
            else:
                out[key] = value
        return out
    if request.headers.get("content-type") == "application/json":
        body = await request.body()
        return json.loads(body) if body else {}
    return dict((await request.form()).items())


def build_app(state: SimulatorState) -> Starlette:
    world = state.world
    endpoints = build_endpoints(state)

    async def api(request: Request) -> Response:
        module, name = request.path_params["module"], request.path_params["method"]
        endpoint = endpoints.get((module, name)) if request.path_params["version"] in ("v1", "latest") else None
        if endpoint is None:
            return text(403, f"ERROR : method {name} is forbidden")
        caller = _caller(state, request)
        if isinstance(caller, Response):
            if module == "task" and request.method == "POST":
                state.record(f"task/{name}", None, False, "token authentication failed", False)
            return caller
        content_type = request.headers.get("content-type")
        json_app = content_type == "application/json" or request.headers.get("accept") == "application/json"
        try:
            raw = await _arguments(request)
        except ValueError as exc:
            return text(500, f"ERROR : received invalid JSON : {exc}")
        try:
            envelope = _guarded(endpoint, caller, raw, request, world, state)
        except Exception as exc:  # a crash is a 500 with the exception's text, as on the server
            return text(500, str(exc))
        return render(envelope, json_app)

    def _guarded(endpoint: Endpoint, caller: Caller, raw: dict[str, Any], request: Request, world: World,
                 state: SimulatorState) -> Envelope:
        if endpoint.secure and not caller.secure:
            return Envelope.fail(MESSAGE_SSL)
        if endpoint.production and not caller.production:
            return Envelope.fail(MESSAGE_PROD_ROLE)
        if endpoint.method and endpoint.method != request.method:
            return Envelope.fail(f"expecting {endpoint.method}, received {request.method}")
        try:
            args = bind(endpoint, raw, request.method)
        except ArgumentProblem as exc:
            return Envelope.fail(exc.message)
        with state.lock:
            state.jedi.tick()
            if endpoint.task_owner and args.get("task_id"):
                task = world.tasks.get(args["task_id"])
                if not caller.production and (task is None or task.get("userName") != caller.user):
                    state.record(f"{endpoint.module}/{endpoint.name}", args["task_id"], False, MESSAGE_TASK_OWNER, True)
                    return Envelope.fail(MESSAGE_TASK_OWNER)
            if endpoint.extra.get("base_url"):
                args["base_url"] = str(request.base_url).rstrip("/")
            return endpoint.handler(caller, **args)

    async def legacy(request: Request) -> Response:
        """The old interface's methods, in the server's order: the name, authentication, the arguments."""
        name = request.path_params["method"]
        handler = LEGACY_METHODS.get(name)
        if handler is None:
            return text(403, f"ERROR : method {name} is forbidden")
        caller = _caller(state, request)
        if isinstance(caller, Response):
            state.record(f"legacy/{name}", None, False, "token authentication failed", False)
            return caller
        if request.headers.get("content-type") == "application/json":
            return text(500, CONTAINER_ERROR)  # the server gunzips a JSON body unasked; the error escapes it
        raw = await _arguments(request)

        def record(task_id: int | None, accepted: bool, message: str) -> None:
            state.record(f"legacy/{name}", task_id, accepted, message, True)

        call = LegacyCall(caller=caller, content_length=_int(request.headers.get("content-length")), record=record,
                          checkpoints=state.checkpoints)
        try:
            with state.lock:
                body = handler(call, **raw)
        except Exception as exc:  # a crash is a 500 with the exception's text, as on the server
            return text(500, str(exc))
        return text(200, "" if request.method == "HEAD" else body)

    async def legacy_path(request: Request) -> Response:
        return text(403, "ERROR : method  is forbidden")  # the server parses no method from a deeper path

    async def filebrowser(request: Request) -> Response:
        panda_id = _int(request.query_params.get("pandaid"))
        files = world.logs.get(panda_id or -1)
        if files is None:
            return PlainTextResponse(f"no logs for PandaID {panda_id}", status_code=404)
        filename = request.query_params.get("filename")
        if not filename:
            return JSONResponse({"pandaid": panda_id, "files": [{"name": n, "size": len(t)} for n, t in files.items()]})
        if filename not in files:
            return PlainTextResponse(f"PandaID {panda_id} has no file {filename}", status_code=404)
        return PlainTextResponse(files[filename])

    async def linked_log(request: Request) -> Response:
        """Pages that errorDialogs link to: a job page, a task's job list, or a JEDI log."""
        pandaid = _int(request.query_params.get("pandaid"))
        if pandaid is not None:
            job = world.job(pandaid)
            if job is None:
                return PlainTextResponse(f"no job {pandaid}", status_code=404)
            return PlainTextResponse("\n".join(f"{k}: {v}" for k, v in job.items() if k != "Files") + "\n")
        tid = _int(request.query_params.get("jeditaskid"))
        if tid is not None:
            if tid not in world.tasks:
                return PlainTextResponse(f"no task {tid}", status_code=404)
            wanted = request.query_params.get("jobstatus")
            rows = [j for j in world.jobs.get(tid, []) if wanted in (None, j["jobStatus"])]
            lines = [f"{j['PandaID']} {j['jobStatus']} {j['computingSite']} pilot:{j['pilotErrorCode']} "
                     f"{j['pilotErrorDiag'] or ''}" for j in rows]
            return PlainTextResponse(f"jobs of task {tid}: {len(rows)}\n" + "\n".join(lines) + "\n")
        path = request.url.path
        owner = next((t for t in world.tasks.values() if path in str(t.get("errorDialog") or "")), None)
        if owner is None:
            return PlainTextResponse(f"no log at {path}", status_code=404)
        text_ = (f"JEDI log for jediTaskID={owner['jediTaskID']}\nstatus={owner.get('status')} site={owner.get('site')}\n"
                 f"errorDialog: {owner.get('errorDialog')}\n")
        return PlainTextResponse(text_)

    async def calls(request: Request) -> Response:
        with state._record_lock:
            return JSONResponse([c.model_dump() for c in state.calls])

    async def reset_calls(request: Request) -> Response:
        with state._record_lock:
            state.calls.clear()
        return JSONResponse({"cleared": True})

    async def commands(request: Request) -> Response:
        """Every command registered for JEDI since the start, and which of them JEDI has applied."""
        with state.lock:
            state.jedi.tick()
            return JSONResponse([r.model_dump() for r in state.jedi.registered])

    async def health(request: Request) -> Response:
        return JSONResponse({"tasks": len(world.tasks), "skipped_files": world.skipped_files})

    methods = ["GET", "POST", "PUT", "DELETE", "HEAD"]
    routes = [
        Route("/api/{version}/{module}/{method}", api, methods=methods),
        Route("/server/panda/{method}", legacy, methods=methods),
        Route("/server/panda/{rest:path}", legacy_path, methods=methods),
        Route("/filebrowser/", filebrowser),
        Route("/sim/calls", calls),
        Route("/sim/calls", reset_calls, methods=["DELETE"]),
        Route("/sim/commands", commands),
        Route("/sim/health", health),
        Route("/{path:path}", linked_log),
    ]
    return Starlette(routes=routes)


def _int(raw: Any) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None
