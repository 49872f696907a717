"""curl requests the policy must refuse: configuration files, file writes, other endpoints, file bodies,
file:// and hosts that are not allow-listed. Each request would do harm if curl ran it."""

from __future__ import annotations

import re

import pytest

from policy.commands import CommandPolicy, CommandRule, OptionSpec, PositionalSpec

from .helpers import allow, deny


def test_an_allowed_get_is_normalised_with_disable_first(policy, api):
    match = allow(policy, "panda_curl", ["curl", "-sS", f"{api}/get_status?task_id=41234567"])
    assert match.argv[0] == match.executable and match.executable.endswith("/curl")
    assert match.argv[1] == "--disable"  # must be first, or curl reads ~/.curlrc
    assert "--globoff" in match.argv
    assert match.argv[-3:] == ["--silent", "--show-error", f"{api}/get_status?task_id=41234567"]
    assert match.targets == ["panda:task:41234567"]
    assert match.credential == "panda_ro" and match.access == "read"


@pytest.mark.parametrize("argv", [
    ["curl", "-K", "/tmp/evil.cfg", "URL"], ["curl", "--config", "/tmp/evil.cfg", "URL"],
    ["curl", "--config=/tmp/evil.cfg", "URL"], ["curl", "-sK", "/tmp/evil.cfg", "URL"],
    ["curl", "-sSK/tmp/evil.cfg", "URL"], ["curl", "-q", "URL"], ["curl", "--disable", "URL"],
])
def test_configuration_files_never_load(policy, api, argv):
    deny(policy, "panda_curl", [a.replace("URL", f"{api}/get_status") for a in argv], "loads a configuration file")


@pytest.mark.parametrize("argv", [
    ["curl", "-o", "/tmp/out", "URL"], ["curl", "--output", "/tmp/out", "URL"], ["curl", "--output=/tmp/out", "URL"],
    ["curl", "-so", "/tmp/out", "URL"], ["curl", "-so/tmp/out", "URL"], ["curl", "-O", "URL"],
    ["curl", "--remote-name", "URL"], ["curl", "-D", "/tmp/h", "URL"], ["curl", "--trace", "/tmp/t", "URL"],
    ["curl", "-c", "/tmp/jar", "URL"], ["curl", "--stderr", "/tmp/e", "URL"],
])
def test_nothing_writes_files(policy, api, argv):
    deny(policy, "panda_curl", [a.replace("URL", f"{api}/get_status") for a in argv], "writes a file")


@pytest.mark.parametrize("argv", [
    ["curl", "--proxy", "http://127.0.0.1:9", "URL"], ["curl", "-x", "http://127.0.0.1:9", "URL"],
    ["curl", "-sx", "http://127.0.0.1:9", "URL"], ["curl", "--proxy=http://127.0.0.1:9", "URL"],
    ["curl", "--resolve", "127.0.0.1:80:10.0.0.1", "URL"], ["curl", "--connect-to", "::10.0.0.1:80", "URL"],
    ["curl", "--preproxy", "socks5://10.0.0.1", "URL"], ["curl", "--socks5", "10.0.0.1:1080", "URL"],
    ["curl", "--proxy-header", "X: y", "URL"], ["curl", "-L", "URL"], ["curl", "--unix-socket", "/run/x", "URL"],
])
def test_no_other_endpoint(policy, api, argv):
    deny(policy, "panda_curl", [a.replace("URL", f"{api}/get_status") for a in argv], "another endpoint")


@pytest.mark.parametrize("argv", [
    ["curl", "-d", "@/etc/passwd", "URL"], ["curl", "-d@/etc/passwd", "URL"],
    ["curl", "--data-binary", "@/etc/passwd", "URL"], ["curl", "--data-binary=@/etc/passwd", "URL"],
    ["curl", "--data-urlencode", "task_id@/etc/passwd", "URL"], ["curl", "-d", "task_id=@/etc/passwd", "URL"],
    ["curl", "-d", "task_id=<secret.txt", "URL"], ["curl", "-d", "<secret.txt", "URL"],
])
def test_bodies_never_come_from_files(policy, api, argv):
    deny(policy, "panda_curl", [a.replace("URL", f"{api}/kill") for a in argv], "file", channel="rw")


@pytest.mark.parametrize("argv", [
    ["curl", "-T", "/etc/passwd", "URL"], ["curl", "--upload-file", "/etc/passwd", "URL"],
    ["curl", "-F", "f=@/etc/passwd", "URL"], ["curl", "-b", "/tmp/cookies", "URL"],
    ["curl", "--netrc-file", "/tmp/n", "URL"], ["curl", "-E", "/tmp/cert.pem", "URL"],
])
def test_no_local_file_is_read(policy, api, argv):
    deny(policy, "panda_curl", [a.replace("URL", f"{api}/kill") for a in argv], "reads a local file", channel="rw")


def test_the_next_separator_and_insecure_tls_are_refused(policy, api):
    deny(policy, "panda_curl", ["curl", f"{api}/get_status", "--next", "http://10.0.0.1/"], "second request")
    deny(policy, "panda_curl", ["curl", f"{api}/get_status", "-:", "http://10.0.0.1/"], "second request")
    deny(policy, "panda_curl", ["curl", "-k", f"{api}/get_status"], "transport security")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "FILE:///etc/passwd", "file://localhost/etc/passwd"])
def test_file_urls_are_refused(policy, url):
    deny(policy, "panda_curl", ["curl", url], "file:// reads local files")
    deny(policy, "panda_curl", ["curl", "--url", url], "file:// reads local files")
    deny(policy, "panda_curl", ["curl", f"--url={url}"], "file:// reads local files")


@pytest.mark.parametrize("template", [
    "http://evil.example/api/v1/task/get_status", "http://127.0.0.2:{port}/api/v1/task/get_status",
    "http://127.0.0.1:1/api/v1/task/get_status", "http://localhost:{port}/api/v1/task/get_status",
    "https://127.0.0.1/api/v1/task/get_status", "gopher://127.0.0.1:{port}/_x", "dict://127.0.0.1:{port}/x",
    "ftp://127.0.0.1:{port}/x", "//127.0.0.1:{port}/api/v1/task/get_status", "127.0.0.1:{port}/api/v1/task/x",
])
def test_hosts_and_schemes_outside_the_allow_list(policy, simulator, template):
    url = template.format(port=simulator.port)
    deny(policy, "panda_curl", ["curl", url], "no rule allows")
    deny(policy, "panda_curl", ["curl", "--url", url], "no rule allows")


@pytest.mark.parametrize("template", [
    "http://127.0.0.1:{port}@evil.example/api/v1/task/get_status",  # userinfo: curl goes to evil.example
    "http://evil.example#@127.0.0.1:{port}/api/v1/task/get_status",
    "http://evil.example\\@127.0.0.1:{port}/api/v1/task/get_status",
    "http://evil.example?@127.0.0.1:{port}/api/v1/task/get_status",
    "http://127.0.0.1:{port}/api/v1/task/get_status#frag", "http://127.0.0.1:{port} /api/v1/task/get_status",
    "http://127.0.0.1:{port}/api/v1/task/{{a,b}}", "http://127.0.0.1:{port}/api/v1/task/[1-9]",
])
def test_urls_parsers_could_disagree_about(policy, simulator, template):
    deny(policy, "panda_curl", ["curl", template.format(port=simulator.port)], "no rule allows")


def test_paths_outside_the_rule_are_refused(policy, simulator):
    base = f"http://127.0.0.1:{simulator.port}"
    deny(policy, "panda_curl", ["curl", f"{base}/sim/calls"], "is not one this rule allows")
    deny(policy, "panda_curl", ["curl", f"{base}/api/v1/task/../../sim/calls"], "another path than the one checked")


def test_the_method_must_be_the_rules(policy, api):
    deny(policy, "panda_curl", ["curl", "-XPOST", f"{api}/get_status"], "POST")
    deny(policy, "panda_curl", ["curl", "--request=DELETE", f"{api}/get_status"], "DELETE")
    # a body makes curl POST: no read rule allows it, and the write rule lives on rw only
    deny(policy, "panda_curl", ["curl", "-d", "task_id=1", f"{api}/kill"], "no rule allows")
    match = allow(policy, "panda_curl", ["curl", "-sS", "-d", "task_id=41234567", f"{api}/kill"], channel="rw")
    assert match.access == "write" and match.targets == ["panda:task:41234567"] and match.credential == "panda_rw"


@pytest.mark.parametrize("option, argv", [
    (OptionSpec(name="-d", aliases=["--data"], value="form"), ["-d", "task_id=41234567"]),
    (OptionSpec(name="-d", aliases=["--data"], value="form"), ["--data", "task_id=41234567"]),
    (OptionSpec(name="-X", aliases=["--request"], value="text"), ["-X", "POST"]),
])
def test_the_method_is_what_curl_does_with_the_option_as_emitted(policy, api, option, argv):
    """A rule may emit an option by its short spelling. A read rule (GET) that names --data as -d, --request as
    -X, was judged GET while curl sent POST: a read-only command tool, in every automatic step's allow-set, killed a
    task. (--form and --upload-file read local files and are refused whatever a rule says.)"""
    rule = policy.rules[0].model_copy(update={"name": "short_spellings", "options": [
        OptionSpec(name="-s", aliases=["--silent"]), option]})
    loose = policy.model_copy(update={"rules": [rule]})
    assert rule.access == "read" and (rule.method or "GET") == "GET"
    deny(loose, "panda_curl", ["curl", "-s", *argv, f"{api}/kill"], "is not GET")
    allow(loose, "panda_curl", ["curl", "-s", f"{api}/get_status?task_id=41234567"])


def test_a_repeated_request_method_is_judged_by_the_last(policy, api):
    """curl sends the last --request: judged by the first, '-X GET -X POST' read as GET."""
    rule = policy.rules[0].model_copy(update={"name": "two_methods", "options": [
        OptionSpec(name="-X", aliases=["--request"], value="enum", choices=["GET", "POST"], max_count=2)]})
    loose = policy.model_copy(update={"rules": [rule]})
    deny(loose, "panda_curl", ["curl", "-X", "GET", "-X", "POST", f"{api}/kill"], "is not GET")
    allow(loose, "panda_curl", ["curl", "-X", "POST", "-X", "GET", f"{api}/get_status?task_id=41234567"])


@pytest.mark.parametrize("body, because", [
    ('@/etc/passwd', "starts with '@'"), ('{"task_id": 1, "task_id": 2}', "repeats the key"),
    ('[1]', "JSON object"), ('{"task_id": {"$ne": 1}}', "scalar"), ('{"task_id": 1', "not valid JSON"),
    ('{"comment": "$(id)", "task_id": 1}', "command-substitution"),
])
def test_json_bodies_are_checked_and_re_encoded(policy, api, body, because):
    deny(policy, "panda_curl", ["curl", "--json", body, f"{api}/kill"], because, channel="rw")
    deny(policy, "panda_curl", ["curl", f"--json={body}", f"{api}/kill"], because, channel="rw")


def test_a_json_body_is_canonical(policy, api):
    match = allow(policy, "panda_curl", ["curl", "--json", '{ "task_id" : 7 , "broadcast": false }', f"{api}/kill"],
                  channel="rw")
    assert '{"broadcast":false,"task_id":7}' in match.argv and match.targets == ["panda:task:7"]


def test_a_write_without_its_target_is_refused(policy, api):
    deny(policy, "panda_curl", ["curl", "-d", "broadcast=1", f"{api}/kill"], "target", channel="rw")
    deny(policy, "panda_curl", ["curl", "-d", "task_id=12;34", f"{api}/kill"], "target", channel="rw")
    deny(policy, "panda_curl", ["curl", "--json", '{"task_id": true}', f"{api}/kill"], "target", channel="rw")


def test_spellings_curl_would_expand_are_not_the_allowed_ones(policy, api):
    # curl accepts unique prefixes and any letter case of long options; the policy only exact spellings
    for spelling in ["--conf", "--out", "--CONFIG", "--Output", "--prox", "--URL", "--Silent"]:
        reason = deny(policy, "panda_curl", ["curl", spelling, "x", f"{api}/get_status"], "")
        assert "no rule allows" in reason or "not one of curl's option names in full" in reason, reason


def test_a_rule_that_names_a_banned_flag_is_still_refused(policy, api):
    """A configuration cannot lift the fixed bans: a rule built without validation that lists -o/--output
    is refused at evaluation too."""
    sneaky = CommandRule.model_construct(**{
        **policy.rules[0].model_dump(), "name": "sneaky",
        "options": [OptionSpec(name="--silent", aliases=["-s"]),
                    OptionSpec.model_construct(name="--output", aliases=["-o"], value="text", choices=[],
                                               pattern=None, max_count=1, joined=False)],
        "positionals": [PositionalSpec(name="url", value="url")],
    })
    loose = CommandPolicy.model_construct(tools=policy.tools, rules=[sneaky], credentials=policy.credentials)
    deny(loose, "panda_curl", ["curl", "-o", "out", f"{api}/get_status"], "writes a file")
    deny(loose, "panda_curl", ["curl", "--output=out", f"{api}/get_status"], "writes a file")


def test_unknown_tool_environment_and_channel_fail_closed(policy, api):
    deny(policy, "wget", ["wget", f"{api}/get_status"], "unknown command tool")
    deny(policy, "panda_curl", ["curl", f"{api}/get_status"], "no rule allows", environment="dev")
    deny(policy, "panda_curl", ["curl", f"{api}/get_status"], "no rule allows", channel="rw")
    deny(policy, "panda_curl", ["wget", f"{api}/get_status"], "is not tool")


@pytest.mark.parametrize("value", ["7.0", "7e0", "true", "null", "[7, 8.0]", "[7, false]"])
def test_a_target_field_holding_anything_but_ids_is_refused(policy, api, value):
    """A float or a boolean in the target field was skipped: the body ran with it while the target set a grant
    and an approval show left it out."""
    deny(policy, "panda_curl", ["curl", "--json", f'{{"task_id": {value}}}', f"{api}/kill"], "not a string or an "
         "integer", channel="rw")


@pytest.mark.parametrize("path", [
    "/api/v1/task/get_x/../../../../server/panda/put_file_recovery_request", "/api/v1/task/get_x/./../kill",
    "/api/v1/task/get_x/%2e%2e/kill", "/api/v1/task/get_x/.%2E/kill", "/api/v1/task/get_x/%252e%252e/kill",
    "/api/v1/task/get_x%2f..%2fkill", "/api/v1/task/get_x%5c..%5ckill", "/api/v1/task/get_x/..",
])
def test_a_path_that_moves_once_sent_is_refused(path):
    """A read rule's url_paths matched the text; curl drops dot segments (and a server may decode %2e and %2f)
    before routing, so a GET that matched 'get_.*' reached PanDA's legacy write methods, which take any method."""
    from policy.command_models import CommandDenied
    from policy.command_values import check_url

    with pytest.raises(CommandDenied, match="another path than the one checked"):
        check_url("url", f"http://127.0.0.1:25080{path}?jediTaskID=1", ["127.0.0.1"], ["/api/v1/task/get_.*"])
    assert check_url("url", "http://127.0.0.1:25080/api/v1/task/get_x/..x/a.b", ["127.0.0.1"],
                     ["/api/v1/task/get_.*"])


def _unvalidated(policy, **changes):
    """The template's read rule changed as a tools file could not load it (built without validation): the fixed
    checks at evaluation must hold on their own."""
    rule = CommandRule.model_construct(**{**dict(policy.rules[0]), "name": "unvalidated", **changes})
    return CommandPolicy.model_construct(tools=policy.tools, rules=[rule], credentials=policy.credentials)


@pytest.mark.parametrize("kind", ["text", "form"])
@pytest.mark.parametrize("argv", [
    ["--url-query", "x@/proc/self/environ"], ["--url-query", "+x@/etc/passwd"], ["--url-query=x@/etc/passwd"],
    ["-G", "--data-urlencode", "task_id@/proc/self/environ"], ["-G", "--data-urlencode", "task_id=1@/etc/x"],
    ["-G", "--data-urlencode=a=b&c@/etc/passwd"], ["-G", "-d", "task_id=1@x"],
])
def test_a_body_or_query_value_never_names_a_file(policy, api, kind, argv):
    """curl reads 'name@file' anywhere in --data-urlencode and --url-query, not only a leading '@': declared as
    text, `--url-query x@/proc/<executor>/environ` sent the executor's environment to the allow-listed host,
    whose type error echoed it back to the model. Whatever a rule declares, no '@' reaches these options."""
    options = [OptionSpec(name="--silent", aliases=["-s"]), OptionSpec(name="--get", aliases=["-G"]),
               OptionSpec.model_construct(name="--url-query", aliases=[], value=kind, choices=[], pattern=None,
                                          max_count=1, joined=False),
               OptionSpec.model_construct(name="--data-urlencode", aliases=[], value=kind, choices=[], pattern=None,
                                          max_count=1, joined=False),
               OptionSpec.model_construct(name="-d", aliases=["--data"], value=kind, choices=[], pattern=None,
                                          max_count=1, joined=False)]
    loose = _unvalidated(policy, options=options)
    deny(loose, "panda_curl", ["curl", "-s", *argv, f"{api}/get_status"], "file")
    allow(loose, "panda_curl", ["curl", "-s", "--url-query", "task_id=1", f"{api}/get_status"])


@pytest.mark.parametrize("argv", [
    ["curl", "--request-target", "http://HOST/server/panda/put_file_recovery_request?jediTaskID=1", "URL"],
    ["curl", "--request-target=/server/panda/put_file_recovery_request", "URL"],
    ["curl", "--path-as-is", "URL"],
])
def test_the_request_target_is_the_url(policy, simulator, api, argv):
    """--request-target sends a request line url_paths never checked (the absolute form passes the text check's
    refusal of a leading '/'), and --path-as-is keeps the dot segments curl would resolve: both are bans, also for
    a rule that lists them."""
    argv = [a.replace("URL", f"{api}/get_status").replace("HOST", f"127.0.0.1:{simulator.port}") for a in argv]
    options = [OptionSpec(name="--silent", aliases=["-s"]),
               *(OptionSpec.model_construct(name=name, aliases=[], value=kind, choices=[], pattern=None, max_count=1,
                                            joined=False)
                 for name, kind in (("--request-target", "text"), ("--path-as-is", "switch")))]
    deny(policy, "panda_curl", argv, "another endpoint")
    deny(_unvalidated(policy, options=options), "panda_curl", argv, "another endpoint")


@pytest.mark.parametrize("path", [
    "/server/panda/put_file_recovery_request?jediTaskID=4242", "/server/panda/getJobStatus?ids=1",
    "/server//panda/put_file_recovery_request", "/SERVER/Panda/put_file_recovery_request",
    "/server/p%61nda/put_file_recovery_request", "/server/panda;x=1/put_file_recovery_request", "/server/panda",
])
def test_a_read_never_reaches_pandas_legacy_api(policy, simulator, path):
    """Every method PanDA still runs under /server/panda/ writes, from the query of a GET: a read rule whose
    url_paths covered them (or any path) judged `GET .../put_file_recovery_request?jediTaskID=N` a read, and the
    server registered a recovery of task N. However the path is spelled, it is never a read."""
    loose = _unvalidated(policy, url_paths=[".*"])
    url = f"http://127.0.0.1:{simulator.port}{path}"
    deny(loose, "panda_curl", ["curl", "-s", url], "PanDA's legacy API")
    deny(loose, "panda_curl", ["curl", "-s", "--url", url], "PanDA's legacy API")
    allow(loose, "panda_curl", ["curl", "-s", f"http://127.0.0.1:{simulator.port}/api/v1/task/get_status"])


@pytest.mark.parametrize("format_", ["%output{x}%{url}", "%output{>>x}%{http_code}", "%{http_code}%OUTPUT{x}"])
def test_write_out_never_names_a_file(policy, api, format_):
    """curl 8.3+ sends the rest of a --write-out format to the file '%output{name}' names; the template's own -w
    pattern ('[%{}a-z_\\n ]+') admits it. Refused in any curl value, whatever the executor's curl version."""
    free = _unvalidated(policy, options=[OptionSpec(name="--write-out", aliases=["-w"], value="text")])
    deny(free, "panda_curl", ["curl", "-w", format_, f"{api}/get_status"], "writes a file")
    template = next(o.pattern for o in policy.rules[0].options if o.name == "--write-out")
    if re.fullmatch(template, format_):  # the template's own rule admits it
        deny(policy, "panda_curl", ["curl", "-s", "-w", format_, f"{api}/get_status"], "writes a file")
    allow(policy, "panda_curl", ["curl", "-s", "-w", "%{http_code}", f"{api}/get_status"])
