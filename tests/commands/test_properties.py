"""Whatever argv a model writes, an allowed curl or git command never carries a banned flag, a URL off the
allow-list, a path out of the root, a secret reference or a response file: generated requests built from
dangerous pieces, glued in the ways the binaries accept, either are refused or satisfy every invariant."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bamboo.commands.config import CommandConfig
from policy.command_dialects import CURL_DENIED, CURL_LEADING, GIT_DENIED, GIT_LEADING
from policy.command_values import parse_url, within
from policy.commands import CommandDenied, evaluate

CURL_PIECES = [
    "-s", "-S", "-f", "-i", "-X", "GET", "POST", "-H", "Accept: application/json", "--header", "--url", "-m", "5",
    "-K", "--config", "-o", "--output", "-O", "-x", "--proxy", "-d", "--data", "@/etc/passwd", "task_id=1",
    "--json", '{"task_id": 1}', "-T", "-L", "--resolve", "127.0.0.1:80:10.0.0.1", "-q", "--next", "-:", "--",
    "file:///etc/passwd", "http://evil.example/api/v1/task/get_status", "{{secret:PANDA_AUTH_TOKEN}}",
    "Authorization: {{secret:PANDA_AUTH_TOKEN}}", "\uff0do", "\u2013output", "--\u0440roxy", "sh", "env", "=",
    "URL", "URL?task_id=5", "KILL", "-w", "%{http_code}", "--conf", "--OUTPUT", "-sK", "-so", "-sS", "-XPOST",
]
GIT_PIECES = [
    "-C", "config.git", "config", "..", "../..", "/etc", "escape", "--git-dir", "--work-tree", "log", "ls-remote",
    "status", "config", "--get", "core.fsmonitor", "user.name", "-c", "core.pager=id", "--exec-path=/tmp",
    "--upload-pack=id", "-u", "ext::sh -c id", "--oneline", "-n", "3", "--format=%s", "--", "main", "HEAD",
    "--output=/tmp/x", "submodule", "-s", "--short", "--heads", "sh", "x::y", "@opts", "config/../../etc",
]


# valid requests to start from (reads on ro, kills on rw) and the pieces that keep them valid
CURL_BASES = [["-sS", "URL"], ["-s", "-H", "Accept: application/json", "URL?task_id=5"], ["--url", "URL"],
              ["-sS", "-d", "task_id=7", "KILL"], ["--json", '{"task_id": 7}', "KILL"], ["-XPOST", "-d", "task_id=1", "KILL"]]
CURL_CHANNEL = {"URL": "ro", "KILL": "rw"}  # a base's channel follows its URL
CURL_BENIGN = ["-s", "-S", "-f", "-i", "-sS", "-fsS", "--silent", "--fail"]
GIT_BENIGN = ["--oneline", "main", "HEAD", "-s", "--short", "--heads", "--format=%s", "--tags"]
GIT_BASES = [["-C", "config.git", "log"], ["ls-remote", "config.git"], ["-C", "config", "status", "-s"],
             ["-C", "config.git", "config", "--get", "user.name"], ["--git-dir", "config.git", "log", "-n", "3"]]


def _glued(pieces: list[str]) -> st.SearchStrategy[str]:
    piece = st.sampled_from(pieces)
    return st.one_of(piece, st.builds(lambda a, b: a + b, piece, piece), st.builds(lambda a, b: f"{a}={b}", piece, piece))


def _requests(bases: list[list[str]], benign: list[str], pieces: list[str]) -> st.SearchStrategy[list[str]]:
    """A valid request with benign pieces and at most one generated piece put anywhere in it, or pieces only."""
    @st.composite
    def build(draw: st.DrawFn) -> list[str]:
        argv = list(draw(st.sampled_from(bases)))
        extras = draw(st.lists(st.sampled_from(benign), max_size=3)) + draw(st.lists(_glued(pieces), max_size=1))
        for extra in extras:
            argv.insert(draw(st.integers(0, len(argv))), extra)
        return argv
    return st.one_of(build(), build(), build(), build(), st.lists(_glued(pieces), max_size=8))


def _curl_channel(args: list[str], fallback: str) -> str:
    for arg in args:
        for marker, channel in CURL_CHANNEL.items():
            if arg.startswith(marker):
                return channel
    return fallback


def _check_curl(config: CommandConfig, api: str, argv: list[str], channel: str) -> None:
    argv = ["curl", *(a.replace("URL", f"{api}/get_status").replace("KILL", f"{api}/kill") for a in argv)]
    try:
        match = evaluate(config.policy, "panda_curl", argv, environment="staging", channel=channel)
    except CommandDenied as denied:
        assert "\n" not in denied.reason
        return
    rule = next(r for r in config.policy.rules if r.name == match.rule)
    tail = match.argv[1 + len(CURL_LEADING):]
    assert match.argv[1] == "--disable"
    for arg in tail:
        assert arg.split("=", 1)[0] not in CURL_DENIED, argv
        assert "{{" not in arg and not arg.startswith("@"), argv
        if arg.startswith(("http://", "https://")):
            _, host, port, path, _ = parse_url(arg)
            assert f"{host}:{port}" in rule.allowed_hosts, argv
        assert "file:" not in arg.lower(), argv


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=_requests(CURL_BASES, CURL_BENIGN, CURL_PIECES), channel=st.sampled_from(["ro", "rw"]))
def test_generated_curl_requests(config: CommandConfig, api: str, args: list[str], channel: str) -> None:
    _check_curl(config, api, args, _curl_channel(args, channel))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=_requests(GIT_BASES, GIT_BENIGN, GIT_PIECES))
def test_generated_git_requests(config: CommandConfig, root, args: list[str]) -> None:
    try:
        match = evaluate(config.policy, "config_git", ["git", *args], environment="staging", channel="ro",
                         resolve_path=os.path.realpath)
    except CommandDenied as denied:
        assert "\n" not in denied.reason
        return
    tail = match.argv[1 + len(GIT_LEADING):]
    for arg in tail:
        assert arg.split("=", 1)[0] not in GIT_DENIED, args
        # A core.* or alias.* setting runs code (core.fsmonitor, core.pager, an alias); the same name as a revision
        # to `git log` or a key `git config --get` reads sets nothing (hypothesis drew `log core.fsmonitor`).
        assert "::" not in arg and not (arg.lower().startswith(("core.", "alias.")) and "=" in arg), args
    for path in match.paths:
        assert within(os.path.realpath(path), str(root)), args
