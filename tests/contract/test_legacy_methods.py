"""PanDA's legacy methods (``/server/panda/<method>``) answer alike on the simulator and the real server.

The server routes seven methods of its old interface there, all of them writes, and reads their parameters from
a GET's query string too (``bamboo.panda.simulator.legacy``). The simulator used to refuse them all with a 403, so
a test could not have seen a GET of the project's reach one.
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.contract.conftest import Target

OTHER_USER = {"X-Test-DN": "/DC=ch/DC=cern/OU=Users/CN=someone else"}
NO_AUTH = {"X-Test-No-Auth": "1"}
ACCEPTED = '[true, "request was accepted and will be processed in a few minutes"]'
SSL = '[false, "SSL secure connection is required"]'

# (HTTP method, legacy method, parameters, headers) -> (status, body); a body of None is not compared.
CASES = [
    ("GET", "put_file_recovery_request", {"jediTaskID": "1001"}, {}, 200, ACCEPTED),
    ("GET", "put_file_recovery_request", {"jediTaskID": "424242"}, {}, 200, ACCEPTED),  # no such task
    ("GET", "put_file_recovery_request", {"jediTaskID": "1001"}, OTHER_USER, 200, ACCEPTED),  # not the owner
    ("HEAD", "put_file_recovery_request", {"jediTaskID": "1001"}, {}, 200, ""),
    ("POST", "put_file_recovery_request", {"jediTaskID": "1001"}, {}, 200, ACCEPTED),
    ("GET", "put_file_recovery_request", {"jediTaskID": "1001"}, NO_AUTH, 200, SSL),
    ("GET", "put_file_recovery_request", {"jediTaskID": "abc"}, {}, 200,
     '[false, "cannot put request due to invalid literal for int() with base 10: \'abc\' "]'),
    ("GET", "put_file_recovery_request", {}, {}, 500,
     "put_file_recovery_request() missing 1 required positional argument: 'jediTaskID'"),
    ("GET", "put_file_recovery_request", {"jediTaskID": "1001", "bogus": "1"}, {}, 500,
     "put_file_recovery_request() got an unexpected keyword argument 'bogus'"),
    ("JSON", "put_file_recovery_request", {"jediTaskID": "1001"}, {}, 500, None),
    ("GET", "put_workflow_request", {"data": '{"a": 1}'}, {}, 200, ACCEPTED),
    ("GET", "put_workflow_request", {"data": "notjson"}, {}, 200,
     '[false, "cannot put request due to Expecting value: line 1 column 1 (char 0) "]'),
    ("GET", "putEventPickingRequest", {"runEventList": "1 2"}, {}, 200,
     "ERROR : cannot get content-length from HTTP request."),
    ("POST", "putEventPickingRequest", {"runEventList": "1 2"}, {}, 200, "True"),
    ("GET", "put_checkpoint", {"file": "x"}, {}, 500, "'str' object has no attribute 'filename'"),
    ("FILE", "put_checkpoint", ("nounderscore", b"abc"), {}, 200, '{"status": false, "message": "failed to extract ID"}'),
    ("GET", "delete_checkpoint", {"task_id": "1001", "sub_id": "0"}, NO_AUTH, 200,
     '{"status": false, "message": "SSL secure connection is required"}'),
    ("GET", "execute_idds_workflow_command", {"command_name": "bogus+http://127.0.0.1:9"}, {}, 200,
     '[false, "bogus is unsupported"]'),
    ("GET", "execute_idds_workflow_command", {"command_name": "abort+http://127.0.0.1:9"}, {}, 200,
     '[false, "request_id is missing"]'),
    ("GET", "execute_idds_workflow_command", {"command_name": "abort+http://127.0.0.1:9"}, NO_AUTH, 200,
     '[false, "SSL_CLIENT_S_DN is missing in HTTP request"]'),
    ("GET", "relay_idds_command", {"command_name": "get_requests"}, NO_AUTH, 200, SSL),
    ("GET", "killTask", {"jediTaskID": "1001"}, {}, 403, "ERROR : method killTask is forbidden"),
    ("GET", "put_file_recovery_request/x", {}, {}, 403, "ERROR : method  is forbidden"),
]


def call(target: Target, method: str, name: str, params, headers: dict) -> httpx.Response:
    url = f"{target.base_url}/server/panda/{name}"
    if method == "JSON":
        return httpx.post(url, json=params, headers=headers, timeout=30)
    if method == "FILE":
        return httpx.post(url, files={"file": params}, headers=headers, timeout=30)
    if method == "POST":
        return httpx.post(url, data=params, headers=headers, timeout=30)
    return httpx.request(method, url, params=params, headers=headers, timeout=30)


@pytest.mark.parametrize(("method", "name", "params", "headers", "status", "body"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_legacy_methods_answer_as_the_server_does(target: Target, method, name, params, headers, status, body) -> None:
    response = call(target, method, name, params, headers)
    assert response.status_code == status
    assert response.headers["content-type"] == "text/plain"
    if body is not None:
        assert response.text == body


def test_a_checkpoint_put_by_a_form_can_be_deleted_once(target: Target) -> None:
    put = call(target, "FILE", "put_checkpoint", ("1001_7", b"abc"), {}).json()
    assert put["status"] is True and put["message"].endswith("/hpo_cp_1001_7")
    first = call(target, "GET", "delete_checkpoint", {"task_id": "1001", "sub_id": "7"}, {}).json()
    assert first == {"status": True, "message": "done"}
    again = call(target, "GET", "delete_checkpoint", {"task_id": "1001", "sub_id": "7"}, {}).json()
    assert again["status"] is False
    assert re.fullmatch(r"failed to delete file due to \[Errno 2\] No such file or directory: '/.+/hpo_cp_1001_7'",
                        again["message"])
