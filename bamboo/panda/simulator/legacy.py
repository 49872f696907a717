"""PanDA's legacy methods, ``/server/panda/<method>``, as the real server (1.0.4) runs them.

The server still routes seven methods of its old user interface there (its ``allowed_methods``); any other
name is a 403. Every one of them writes: a lost-file recovery request, a workflow request, an HPO checkpoint
put or deleted, an event-picking request, an iDDS command. And the server reads their parameters from the query
string of a GET or HEAD as readily as from a POST form: ``GET /server/panda/put_file_recovery_request?jediTaskID=N``
registers a recovery of task N for any authenticated caller, whoever owns the task and whether or not it exists.
A client that fetches a URL on the PanDA host as a "read" may therefore have written.

The simulator answers each as the server was observed to (the contract tier runs both) and records every call
(``/sim/calls``, endpoint ``legacy/<method>``), so that a test can tell whether anything of the project reached
one. Each handler has the server's own signature after the request, so a missing or unexpected parameter is the
server's 500 with Python's own ``TypeError`` text. The simulator has no iDDS: its commands fail as they do on a
server with no iDDS configured.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import UploadFile

from bamboo.panda.simulator.protocol import MESSAGE_SSL, Caller

ACCEPTED = "request was accepted and will be processed in a few minutes"
CACHE_DIR = "/var/cache/pandaserver"  # where the server writes request files (panda_config.cache_dir)
CHECKPOINT_LIMIT = 500 * 2**20
EVENT_PICKING_LIMIT = 10 * 2**20
NO_IDDS = "No section: 'rest'"  # the server's answer when it has no iDDS configured
IDDS_UNREACHABLE = "Rest exception.: {}\nDetails: Cannot find a valid x509 proxy."
IDDS_COMMANDS = ("get_status", "abort", "suspend", "resume", "retry", "finish")
# What the server's WSGI container answers when a handler's OSError escapes (a JSON body it tries to gunzip).
CONTAINER_ERROR = "A server error occurred.  Please contact the administrator."


@dataclass
class LegacyCall:
    """What a handler sees of the request: the caller, its Content-Length, and where its call is recorded
    (``record(task_id, accepted, message)``, under the method called)."""

    caller: Caller
    content_length: int | None
    record: Callable[[int | None, bool, str], None]
    checkpoints: dict[str, bytes] = field(default_factory=dict)


def _pair(ok: bool, message: Any) -> str:
    return json.dumps((ok, message))


def _task_id(raw: Any) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def put_file_recovery_request(panda_request: LegacyCall, jediTaskID: str, dryRun: bool | None = None) -> str:
    if not panda_request.caller.secure:
        return _pair(False, MESSAGE_SSL)
    try:
        task_id = int(jediTaskID)
    except Exception as exc:  # the server's own wording, trailing space included
        return _pair(False, f"cannot put request due to {exc} ")
    panda_request.record(task_id, True, ACCEPTED + (" (dry run)" if dryRun else ""))
    return _pair(True, ACCEPTED)


def put_workflow_request(panda_request: LegacyCall, data: str, check: bool = False, sync: bool = False) -> str:
    if not panda_request.caller.secure:
        return _pair(False, MESSAGE_SSL)
    try:
        json.loads(data)
    except Exception as exc:
        return _pair(False, f"cannot put request due to {exc} ")
    if check in ("True", True) or sync in ("True", True):
        # The request file is written, then the server's workflow processor fails on a name it never set.
        failure = "cannot put request due to cannot access local variable 'tmpLog' where it is not associated with a value "
        panda_request.record(None, False, failure)
        return _pair(False, failure)
    panda_request.record(None, True, ACCEPTED)
    return _pair(True, ACCEPTED)


def put_checkpoint(panda_request: LegacyCall, file: UploadFile) -> str:
    name = file.filename  # a plain string parameter has none: the server's 500 names the attribute
    if not panda_request.caller.secure:
        return json.dumps({"status": False, "message": "insecure request"})
    try:
        task_id, sub_id = (name or "").split("/")[-1].split("_")
    except ValueError:
        return json.dumps({"status": False, "message": "failed to extract ID"})
    size = panda_request.content_length
    if size is None:
        return json.dumps({"status": False, "message": "cannot get int(content-length) due to 'content-length'"})
    if size > CHECKPOINT_LIMIT:
        return json.dumps({"status": False, "message": f"exceeded size limit {size}>{CHECKPOINT_LIMIT}"})
    path = _checkpoint_path(task_id, sub_id)
    panda_request.checkpoints[path] = file.file.read()
    panda_request.record(_task_id(task_id), True, f"placed {path}")
    return json.dumps({"status": True, "message": f"successfully placed at {path}"})


def delete_checkpoint(panda_request: LegacyCall, task_id: str, sub_id: str) -> str:
    if not panda_request.caller.secure:
        return json.dumps({"status": False, "message": MESSAGE_SSL})
    path = _checkpoint_path(task_id, sub_id)
    deleted = panda_request.checkpoints.pop(path, None) is not None
    message = "done" if deleted else f"failed to delete file due to [Errno 2] No such file or directory: '{path}'"
    panda_request.record(_task_id(task_id), deleted, message)
    return json.dumps({"status": deleted, "message": message})


def _checkpoint_path(task_id: str, sub_id: str) -> str:
    return f"{CACHE_DIR}/hpo_cp_{task_id}_{sub_id}"


def putEventPickingRequest(  # noqa: N802 - the server's name
    panda_request: LegacyCall, runEventList: str = "", eventPickDataType: str = "", eventPickStreamName: str = "",
    eventPickDS: str = "", eventPickAmiTag: str = "", userDatasetName: str = "", lockedBy: str = "", params: str = "",
    inputFileList: str = "", eventPickNumSites: str = "", userTaskName: str = "", ei_api: str = "",
    giveGUID: str | None = None,
) -> str:
    if not panda_request.caller.secure:
        return MESSAGE_SSL
    size = panda_request.content_length
    if size is None:  # a GET has no body, so no length: the server refuses before it writes
        return "ERROR : cannot get content-length from HTTP request."
    if size > EVENT_PICKING_LIMIT:
        return f"ERROR : Run/event list is too large. Exceeded size limit {size}>{EVENT_PICKING_LIMIT}."
    panda_request.record(None, True, f"event picking for {eventPickDS or 'no dataset'}")
    return "True"


def relay_idds_command(req: LegacyCall, command_name: str, args: str | None = None, kwargs: str | None = None,
                       manager: str | None = None, json_outputs: str | None = None) -> str:
    if not req.caller.secure:
        return _pair(False, MESSAGE_SSL)
    failure = f"failed to execute command with {IDDS_UNREACHABLE if '+' in command_name else NO_IDDS}"
    req.record(None, False, failure)
    return _pair(False, failure)


def execute_idds_workflow_command(panda_request: LegacyCall, command_name: str, kwargs: str | None = None,
                                  json_outputs: str | None = None) -> str:
    try:
        arguments = json.loads(kwargs) if kwargs else {}
    except Exception as exc:
        return _refused(panda_request, f"server failed with {exc}")
    if "+" not in command_name:  # the server looks up its own iDDS host first
        return _refused(panda_request, f"server failed with {NO_IDDS}")
    command = command_name.split("+")[0]
    if command not in IDDS_COMMANDS:
        return _refused(panda_request, f"{command} is unsupported")
    if command != "get_status":
        if not panda_request.caller.dn:
            return _refused(panda_request, "SSL_CLIENT_S_DN is missing in HTTP request")
        if not isinstance(arguments, dict):
            return _refused(panda_request, f"server failed with '{type(arguments).__name__}' object has no attribute 'get'")
        if arguments.get("request_id") is None:
            return _refused(panda_request, "request_id is missing")
        # The server asks iDDS who owns the request; without iDDS its client answers False, which it then reads.
        return _refused(panda_request, "server failed with 'bool' object has no attribute 'get'")
    return _refused(panda_request, f"server failed with {IDDS_UNREACHABLE}")


def _refused(panda_request: LegacyCall, message: str) -> str:
    panda_request.record(None, False, message)
    return _pair(False, message)


# The server's allowed_methods for /server/panda/ (pandaserver.srvcore.allowed_methods).
LEGACY_METHODS: dict[str, Callable[..., str]] = {f.__name__: f for f in (
    relay_idds_command, execute_idds_workflow_command, putEventPickingRequest, put_checkpoint, delete_checkpoint,
    put_file_recovery_request, put_workflow_request,
)}
