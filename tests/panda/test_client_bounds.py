"""What the PanDA client reads and whom it tells who it is: structural checks, no timing.

* A link in task data is fetched without the worker's credential (no token, no Origin, no client
  certificate), so it cannot make the worker send a credentialed request to e.g. a command endpoint.
* API answers are read up to ``MAX_API_BYTES`` (decoded bytes, so gzip too) and refused past it without
  being read whole; large ones are parsed in the offload pool, and the tools' reductions and log
  summaries run there too.
* A job log is read only up to ``MAX_LOG_BYTES``.
"""

from __future__ import annotations

import datetime
import gzip
import http.server
import ipaddress
import json
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from bamboo import offload
from bamboo.panda import client as client_module
from bamboo.panda import tools as tools_module
from bamboo.panda.client import MAX_LOG_BYTES, PandaAuth, PandaClient
from bamboo.panda.errors import PandaApiError, PandaHttpError
from bamboo.panda.toolbox import PandaToolbox

API = "https://panda.example.org/api/v1"
MONITOR = "https://bigpanda.example.org"
# Links a task's errorDialog can carry: the first two resolve to state-changing endpoints of the API host (refused
# as API endpoints), the last two are fetched, and so must carry no credential.
HOSTILE_DIALOG = ('brokerage failed, see <a href="https://panda.example.org/api/v1/task/retry?task_id=777">log</a> '
                  '<a href="https://panda.example.org/logs/brokerage.txt">log3</a> '
                  '<a href="https://bigpanda.example.org/filebrowser/?pandaid=777">log4</a> '
                  'and <a href="https://panda.example.org/server/panda/killTask?jediTaskID=777">log2</a>')
CHUNK = 256 * 1024


def envelope(data: Any) -> dict[str, Any]:
    return {"success": True, "message": "", "data": data}


class Counted:
    """A streamed body in ``CHUNK``-sized pieces that counts what the client really pulled from it."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.payload), CHUNK):
            piece = self.payload[start:start + CHUNK]
            self.pulled += len(piece)
            yield piece


def mock(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.MockTransport:
    return httpx.MockTransport(handler)


# --- A: links from task data carry no credential ----------------------------------------------------


async def test_linked_log_fetch_carries_no_token_or_origin_while_api_calls_do() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/api/v1/task/get_detailed_info":
            return httpx.Response(200, json=envelope({"jediTaskID": 1, "errorDialog": HOSTILE_DIALOG}))
        return httpx.Response(200, text="a log line\n")

    auth = PandaAuth(mode="oidc", oidc_token=SecretStr("SECRET-TOKEN"), vo="atlas")
    async with PandaClient(API, MONITOR, auth, transport=mock(handler)) as client:
        result = await PandaToolbox(client).call_tool("fetch_linked_log_files", {"task_id": 1, "max_files": 5})
    assert result.ok
    api = [r for r in seen if r.url.path == "/api/v1/task/get_detailed_info"]
    links = [r for r in seen if r not in api]
    assert api and all(r.headers.get("authorization") == "Bearer SECRET-TOKEN" and r.headers.get("origin") == "atlas"
                       for r in api)
    assert [str(r.url) for r in links] == ["https://panda.example.org/logs/brokerage.txt",
                                           "https://bigpanda.example.org/filebrowser/?pandaid=777"]
    assert sorted(result.data["refused"]) == ["https://panda.example.org/api/v1/task/retry?task_id=777",
                                              "https://panda.example.org/server/panda/killTask?jediTaskID=777"]
    for request in links:
        assert request.method == "GET"
        assert "authorization" not in request.headers and "origin" not in request.headers
        assert "SECRET-TOKEN" not in str(request.headers) and "cookie" not in request.headers


async def test_the_monitor_is_not_sent_the_api_credential() -> None:
    """The log browser is another service (BigPanDA's monitor): the PanDA API's bearer token and VO went to it
    with every job-log read, from read-only tools that run with no one watching."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="a log line\n")

    auth = PandaAuth(mode="oidc", oidc_token=SecretStr("SECRET-TOKEN"), vo="atlas")
    async with PandaClient(API, MONITOR, auth, transport=mock(handler)) as client:
        assert await client.get_job_log(5001) == "a log line\n"
    assert [r.url.host for r in seen] == ["bigpanda.example.org"]
    assert "authorization" not in seen[0].headers and "origin" not in seen[0].headers
    assert "SECRET-TOKEN" not in str(seen[0].headers)


@pytest.mark.parametrize("link", [
    "https://panda.example.org:6379/FLUSHALL", "http://panda.example.org/logs/x.txt",
    "https://panda.example.org/api/v1/task/retry?task_id=7", "https://panda.example.org/logs/../api/v1/task/kill",
    "https://panda.example.org/logs/%2e%2e/server/panda/killTask", "https://panda.example.org//server/panda/x",
    "https://bigpanda.example.org:8443/x", "https://evil.example.org/x",
])
async def test_a_link_is_fetched_only_from_an_allowed_origin_and_never_from_the_api(link: str) -> None:
    """The allow-list named hosts: any port of an allowed host (a database's, a daemon's) and the API's own write
    endpoints (the legacy ones take a GET) were fetched as logs."""
    from bamboo.panda.errors import LogHostNotAllowed

    seen: list[httpx.Request] = []
    async with PandaClient(API, MONITOR, transport=mock(lambda r: seen.append(r) or httpx.Response(200))) as client:
        with pytest.raises(LogHostNotAllowed):
            await client.fetch_linked_log(link)
        assert await client.fetch_linked_log("https://panda.example.org/logs/brokerage.txt") == ""
        assert await client.fetch_linked_log("/filebrowser/?pandaid=1") == ""
    assert [str(r.url) for r in seen] == ["https://panda.example.org/logs/brokerage.txt",
                                          "https://bigpanda.example.org/filebrowser/?pandaid=1"]


async def test_linked_log_redirect_is_not_followed() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(302, headers={"location": f"{API}/task/kill?task_id=1"})

    async with PandaClient(API, MONITOR, transport=mock(handler)) as client:
        with pytest.raises(PandaHttpError, match="not followed"):
            await client.fetch_linked_log(f"{MONITOR}/logs/brokerage.log")
    assert seen == ["/logs/brokerage.log"]


def _self_signed(tmp: Path, name: str, *, server: bool) -> tuple[Path, Path]:
    """A self-signed certificate (for 127.0.0.1 when ``server``) and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                        critical=False)
    cert = builder.sign(key, hashes.SHA256())
    cert_path, key_path = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path, Path, list[tuple[str, bool]]]]:
    """An HTTPS server on 127.0.0.1 that asks for a client certificate (optional) and records, per request,
    the path and whether one was presented. Yields (port, server CA file, client proxy file, records)."""
    server_cert, server_key = _self_signed(tmp_path, "server", server=True)
    client_cert, client_key = _self_signed(tmp_path, "client", server=False)
    proxy = tmp_path / "x509up"
    proxy.write_bytes(client_cert.read_bytes() + client_key.read_bytes())  # a proxy file holds cert and key
    records: list[tuple[str, bool]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            assert isinstance(self.connection, ssl.SSLSocket)
            records.append((self.path, bool(self.connection.getpeercert())))
            if self.path.startswith("/api/v1/task/get_detailed_info"):
                port = self.server.server_address[1]
                body = json.dumps(envelope({"jediTaskID": 1, "errorDialog":
                                            f'<a href="https://127.0.0.1:{port}/logs/task7.txt">x</a>'})).encode()
            else:
                body = b"a log line\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server_cert, server_key)
    context.load_verify_locations(client_cert)
    context.verify_mode = ssl.CERT_OPTIONAL
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], server_cert, proxy, records
    finally:
        httpd.shutdown()
        httpd.server_close()


async def test_linked_log_fetch_presents_no_client_certificate(
    tls_server: tuple[int, Path, Path, list[tuple[str, bool]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, server_ca, proxy, records = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(server_ca))  # trust the test server (default verify paths)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("X509_CERT_DIR", raising=False)
    base = f"https://127.0.0.1:{port}"
    async with PandaClient(f"{base}/api/v1", base, PandaAuth(mode="x509", x509_proxy=proxy)) as client:
        result = await PandaToolbox(client).call_tool("fetch_linked_log_files", {"task_id": 1, "max_files": 5})
    assert result.ok, result.error
    assert [path.split("?")[0] for path, _ in records] == ["/api/v1/task/get_detailed_info", "/logs/task7.txt"]
    assert records[0][1] is True, "the API call must present the proxy"
    assert records[1][1] is False, "the linked log must be fetched without a client certificate"


# --- B: API answers are capped and parsed off the loop -----------------------------------------------


def _jobs_answer(n: int) -> bytes:
    job = {"PandaID": 1, "jobStatus": "failed", "pilotErrorDiag": "x" * 200,
           "modificationTime": {"__datetime__": "2026-01-02T00:00:00"}}
    return json.dumps(envelope([{**job, "PandaID": i} for i in range(n)])).encode()


async def test_api_answer_over_the_cap_is_refused_in_one_line_without_reading_it_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cap = 1024 * 1024
    monkeypatch.setattr(client_module, "MAX_API_BYTES", cap, raising=False)
    body = Counted(_jobs_answer(40_000))  # about 11 MB, valid JSON: read whole, it would be accepted
    assert len(body.payload) > 8 * cap

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})  # no length

    async with PandaClient(API, MONITOR, transport=mock(handler)) as client:
        with pytest.raises(PandaApiError) as info:
            await client.get_job_descriptions(1)
    message = str(info.value)
    assert "\n" not in message and "MiB" in message and "task/get_job_descriptions" in message
    assert body.pulled <= cap + CHUNK


async def test_declared_length_over_the_cap_is_refused_before_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "MAX_API_BYTES", 1024 * 1024, raising=False)
    payload = _jobs_answer(10_000)
    body = Counted(payload)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-length": str(len(payload))})

    async with PandaClient(API, MONITOR, transport=mock(handler)) as client:
        with pytest.raises(PandaApiError, match="MiB"):
            await client.get_job_descriptions(1)
    assert body.pulled == 0


async def test_the_cap_counts_decompressed_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    cap = 1024 * 1024
    monkeypatch.setattr(client_module, "MAX_API_BYTES", cap, raising=False)
    payload = _jobs_answer(20_000)
    compressed = gzip.compress(payload)
    assert len(compressed) < cap < len(payload)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=compressed, headers={"content-encoding": "gzip"})

    async with PandaClient(API, MONITOR, transport=mock(handler)) as client:
        with pytest.raises(PandaApiError, match="MiB"):
            await client.get_job_descriptions(1)


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[str]:
    """Record the names of the functions ``module`` hands to ``in_thread`` (and still run them there)."""
    calls: list[str] = []

    async def spy(fn: Callable[..., Any], /, *args: Any, budget_s: float, what: str) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await offload.in_thread(fn, *args, budget_s=budget_s, what=what)

    monkeypatch.setattr(module, "in_thread", spy, raising=False)  # raising=False: fails on the assertion instead
    return calls


async def test_a_large_answer_is_parsed_in_the_offload_pool_a_small_one_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch, client_module)
    answers = {"1": _jobs_answer(2_000), "2": _jobs_answer(1)}
    assert len(answers["1"]) > getattr(client_module, "INLINE_DECODE_BYTES", 64 * 1024) >= len(answers["2"])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=answers[request.url.params["task_id"]])

    async with PandaClient(API, MONITOR, transport=mock(handler)) as client:
        jobs = await client.get_job_descriptions(1)
        assert calls == ["_decode_json"]
        assert len(jobs) == 2_000 and jobs[5]["modificationTime"] == "2026-01-02T00:00:00"  # datetimes decoded
        small = await client.get_job_descriptions(2)
    assert calls == ["_decode_json"] and small[0]["modificationTime"] == "2026-01-02T00:00:00"


async def test_job_reductions_and_log_summaries_run_in_the_offload_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch, tools_module)
    n_jobs = getattr(tools_module, "INLINE_ITEMS", 200) + 1

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/filebrowser/":
            return httpx.Response(200, text="=== execute ===\nERROR: it broke\n")
        return httpx.Response(200, content=_jobs_answer(n_jobs))

    async with PandaClient(API, MONITOR, transport=mock(handler)) as client:
        box = PandaToolbox(client)
        summary = await box.call_tool("get_task_jobs_summary", {"task_id": 1})
        scouts = await box.call_tool("get_scout_job_details", {"task_id": 1})
        log = await box.call_tool("get_failed_job_log_summary", {"task_id": 1})
    assert summary.ok and scouts.ok and log.ok
    assert calls == ["_jobs_summary", "_scout_jobs", "_first_in", "summarize_log"]


# --- C: job logs are read only up to the cap ---------------------------------------------------------


@pytest.mark.parametrize("declared", [False, True], ids=["streamed", "with-content-length"])
async def test_a_job_log_is_read_only_up_to_the_cap(declared: bool) -> None:
    line = b"2026-01-01 12:00:00 | INFO | executing step 42\n"
    bodies: list[Counted] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(Counted(line * (20 * MAX_LOG_BYTES // len(line))))  # 40 MB of log
        headers = {"content-type": "text/plain"}
        if declared:  # a long log is still read up to the cap, not refused for its declared length
            headers["content-length"] = str(len(bodies[-1].payload))
        return httpx.Response(200, content=bodies[-1], headers=headers)

    async with PandaClient(API, MONITOR, transport=mock(handler)) as client:
        text = await client.get_job_log(1)
        linked = await client.fetch_linked_log(f"{MONITOR}/logs/brokerage.log")
    for got, body in zip((text, linked), bodies, strict=True):
        assert MAX_LOG_BYTES - len(line) < len(got.encode()) <= MAX_LOG_BYTES and got.startswith("2026-01-01 12:00:00 | INFO")
        assert body.pulled <= MAX_LOG_BYTES + CHUNK < len(body.payload)


@pytest.mark.parametrize("api, ok", [("http://panda.example.org/api/v1", False), ("http://10.0.0.5:8080/api/v1", False),
                                     ("https://panda.example.org/api/v1", True), ("http://127.0.0.1:8780/api/v1", True),
                                     ("http://localhost:8780/api/v1", True), ("http://[::1]:8780/api/v1", True)])
async def test_an_oidc_token_is_not_sent_over_plain_http_off_this_machine(api: str, ok: bool) -> None:
    from bamboo.panda.errors import PandaConfigError

    auth = PandaAuth(mode="oidc", oidc_token=SecretStr("SECRET-TOKEN"), vo="atlas")
    if ok:
        await PandaClient(api, MONITOR, auth).aclose()
    else:
        with pytest.raises(PandaConfigError, match="clear text"):
            PandaClient(api, MONITOR, auth)
