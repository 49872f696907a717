"""The simulator's HTTP surface: PanDA API v1 task endpoints, the monitor's log browser, and a record
of every state-changing call (``GET /sim/calls``) so tests and the demo can see what the agent did.
"""

from __future__ import annotations

import re
import threading
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bamboo.panda.simulator.world import World

API = "/api/v1"
UNKILLABLE = {"done", "finished", "aborted", "broken"}
# Only links to PanDA's own hosts are redirected here; anything else stays as written (and the client's
# allowlist refuses it), which is how a hostile link in an errorDialog would look in production.
_HOST_RE = re.compile(r"""(href\s*=\s*["'])https?://[^/"':]+\.cern\.ch(:\d+)?""", re.I)


class RecordedCall(BaseModel):
    """One state-changing request as the simulator received it."""

    endpoint: str
    task_id: int | None
    accepted: bool
    message: str
    authenticated: bool
    at: str


class SimulatorState:
    """Mutable state behind a lock: request handlers run concurrently with readers of the record."""

    def __init__(self, world: World, require_token: str | None = None) -> None:
        self.world = world
        self.require_token = require_token
        self.calls: list[RecordedCall] = []
        self.lock = threading.Lock()

    def record(self, endpoint: str, task_id: int | None, accepted: bool, message: str, authenticated: bool) -> None:
        call = RecordedCall(endpoint=endpoint, task_id=task_id, accepted=accepted, message=message,
                            authenticated=authenticated, at=datetime.now(timezone.utc).isoformat())
        with self.lock:
            self.calls.append(call)


def _ok(data: Any) -> JSONResponse:
    return JSONResponse({"success": True, "message": "", "data": data})


def _fail(message: str, status: int = 200) -> JSONResponse:
    return JSONResponse({"success": False, "message": message, "data": None}, status_code=status)


def _task_id(raw: Any) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def _truthy(raw: str | None) -> bool:
    return str(raw).lower() in {"1", "true", "yes"}


def build_app(state: SimulatorState) -> Starlette:
    world = state.world

    def authorised(request: Request) -> bool:
        return state.require_token is None or request.headers.get("authorization") == f"Bearer {state.require_token}"

    def guard(request: Request) -> Response | None:
        if not authorised(request):
            return _fail("authentication required: send a valid OIDC bearer token", 401)
        return None

    def lookup(request: Request) -> tuple[int | None, Response | None]:
        if (denied := guard(request)) is not None:
            return None, denied
        tid = _task_id(request.query_params.get("task_id"))
        if tid is None:
            return None, _fail("task_id must be an integer", 400)
        if tid not in world.tasks:
            return None, _fail(f"task {tid} not found", 404)
        return tid, None

    async def task_details(request: Request) -> Response:
        tid, error = lookup(request)
        if error is not None:
            return error
        task = dict(world.tasks[tid])
        if task.get("errorDialog"):
            # Links in fixtures point at PanDA hosts; serve them from here so the demo can follow them.
            base = str(request.base_url).rstrip("/")
            task["errorDialog"] = _HOST_RE.sub(lambda m: m.group(1) + base, task["errorDialog"])
        return _ok(task)

    async def job_descriptions(request: Request) -> Response:
        tid, error = lookup(request)
        if error is not None:
            return error
        jobs = world.jobs.get(tid, [])
        if _truthy(request.query_params.get("unsuccessful_only")):
            jobs = [j for j in jobs if j["jobStatus"] in {"failed", "cancelled", "closed"}]
        return _ok(jobs)

    async def datasets(request: Request) -> Response:
        tid, error = lookup(request)
        if error is not None:
            return error
        return _ok(world.datasets.get(tid, []))

    async def tasks_since(request: Request) -> Response:
        if (denied := guard(request)) is not None:
            return denied
        since = request.query_params.get("since", "")
        try:
            cutoff = datetime.fromisoformat(since)
        except ValueError:
            return _fail(f"since must be an ISO timestamp, got {since!r}", 400)
        out = []
        for task in world.tasks.values():
            try:
                modified = datetime.fromisoformat(str(task.get("modificationTime")))
            except ValueError:
                continue
            if modified.replace(tzinfo=None) >= cutoff.replace(tzinfo=None):
                out.append(task)
        return _ok(out)

    async def change(request: Request, action: str, new_status: str) -> Response:
        endpoint = f"task/{action}"
        try:
            body = await request.json()
        except ValueError:
            body = {}
        tid = _task_id(body.get("task_id") if isinstance(body, dict) else None)
        authed = request.headers.get("authorization", "").startswith("Bearer ")
        if not authorised(request):
            state.record(endpoint, tid, False, "unauthenticated", authed)
            return _fail("authentication required: send a valid OIDC bearer token", 401)
        if tid is None or tid not in world.tasks:
            state.record(endpoint, tid, False, "unknown task", authed)
            return _fail(f"task {tid} not found", 404)
        with state.lock:
            status = world.tasks[tid].get("status")
            if action == "kill" and status in UNKILLABLE:
                message, accepted = f"task {tid} is {status} and cannot be killed", False
            else:
                world.tasks[tid]["status"] = new_status
                message, accepted = f"{action} requested for task {tid}", True
        state.record(endpoint, tid, accepted, message, authed)
        return _ok({"task_id": tid, "status": world.tasks[tid]["status"]}) if accepted else _fail(message)

    async def kill(request: Request) -> Response:
        return await change(request, "kill", "aborting")

    async def retry(request: Request) -> Response:
        return await change(request, "retry", "ready")

    async def filebrowser(request: Request) -> Response:
        if (denied := guard(request)) is not None:
            return denied
        panda_id = _task_id(request.query_params.get("pandaid"))
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
        pandaid = _task_id(request.query_params.get("pandaid"))
        if pandaid is not None:
            job = next((j for jobs in world.jobs.values() for j in jobs if j["PandaID"] == pandaid), None)
            if job is None:
                return PlainTextResponse(f"no job {pandaid}", status_code=404)
            return PlainTextResponse("\n".join(f"{k}: {v}" for k, v in job.items()) + "\n")
        tid = _task_id(request.query_params.get("jeditaskid"))
        if tid is not None:
            if tid not in world.tasks:
                return PlainTextResponse(f"no task {tid}", status_code=404)
            wanted = request.query_params.get("jobstatus")
            rows = [j for j in world.jobs.get(tid, []) if wanted in (None, j["jobStatus"])]
            lines = [f"{j['PandaID']} {j['jobStatus']} {j['computingSite']} pilot:{j['pilotErrorCode']} "
                     f"{j['pilotErrorDiag']}" for j in rows]
            return PlainTextResponse(f"jobs of task {tid}: {len(rows)}\n" + "\n".join(lines) + "\n")
        path = request.url.path
        owner = next((t for t in world.tasks.values() if path in str(t.get("errorDialog") or "")), None)
        if owner is None:
            return PlainTextResponse(f"no log at {path}", status_code=404)
        text = (
            f"JEDI log for jediTaskID={owner['jediTaskID']}\n"
            f"status={owner.get('status')} site={owner.get('site')}\n"
            f"errorDialog: {owner.get('errorDialog')}\n"
        )
        return PlainTextResponse(text)

    async def calls(request: Request) -> Response:
        with state.lock:
            return JSONResponse([c.model_dump() for c in state.calls])

    async def reset_calls(request: Request) -> Response:
        with state.lock:
            state.calls.clear()
        return JSONResponse({"cleared": True})

    async def health(request: Request) -> Response:
        return JSONResponse({"tasks": len(world.tasks), "skipped_files": world.skipped_files})

    routes = [
        Route(f"{API}/task/get_detailed_info", task_details),
        Route(f"{API}/task/get_job_descriptions", job_descriptions),
        Route(f"{API}/task/get_datasets_and_files", datasets),
        Route(f"{API}/task/get_tasks_detailed_info_since", tasks_since),
        Route(f"{API}/task/kill", kill, methods=["POST"]),
        Route(f"{API}/task/retry", retry, methods=["POST"]),
        Route("/filebrowser/", filebrowser),
        Route("/sim/calls", calls),
        Route("/sim/calls", reset_calls, methods=["DELETE"]),
        Route("/sim/health", health),
        Route("/{path:path}", linked_log),
    ]
    return Starlette(routes=routes)
