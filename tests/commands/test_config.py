"""The tools file: executables resolved once at load, a missing one or a shell is a load error, and every
bad field is reported in one line naming the file and the field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bamboo.commands.config import CommandConfigError, load_command_config

GOOD_TOOL = '[[tools]]\nname = "panda_curl"\nexecutable = "curl"\ndialect = "curl"\n'
GOOD_RULE = ('[[rules]]\nname = "r"\ntool = "panda_curl"\naccess = "read"\nenvironments = ["staging"]\n'
             'channel = "ro"\nallowed_hosts = ["127.0.0.1"]\npositionals = [{ name = "url", value = "url" }]\n')


def _load(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tools.toml"
    path.write_text(text)
    with pytest.raises(CommandConfigError) as caught:
        load_command_config(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path)), message
    return message


def test_the_test_tools_file_loads_with_absolute_executables(config):
    for tool in config.policy.tools:
        assert os.path.isabs(tool.executable) and os.access(tool.executable, os.X_OK)
    assert config.policy.credentials["panda_ro"] == ["PANDA_AUTH_TOKEN"]


def test_a_missing_executable_is_a_load_error(tmp_path):
    message = _load(tmp_path, GOOD_TOOL.replace('"curl"\ndialect', '"no-such-program-xyz"\ndialect'))
    assert "tools[0].executable" in message and "not an executable file" in message


@pytest.mark.parametrize("program", ["sh", "bash", "env", "xargs", "/usr/bin/env"])
def test_a_shell_or_builder_cannot_be_a_tool(tmp_path, program):
    if not os.path.isabs(program) and not any(os.access(f"{d}/{program}", os.X_OK) for d in ("/usr/bin", "/bin")):
        pytest.skip(f"{program} is not installed")
    message = _load(tmp_path, GOOD_TOOL.replace('"curl"\ndialect = "curl"', f'"{program}"'))
    assert "shell or command builder" in message


def test_a_symlink_to_a_shell_is_a_shell(tmp_path):
    link = tmp_path / "innocent-tool"
    link.symlink_to(os.path.realpath("/bin/sh"))
    message = _load(tmp_path, GOOD_TOOL.replace('"curl"\ndialect = "curl"', f'"{link}"'))
    assert "tools[0].executable" in message and "shell or command builder" in message


@pytest.mark.parametrize("change, field", [
    (('access = "read"', 'access = "admin"'), "rules[0].access"),
    (('channel = "ro"', 'channel = "prod"'), "rules[0].channel"),
    (('environments = ["staging"]', "environments = []"), "rules[0].environments"),
    (('name = "url", value = "url"', 'name = "url", value = "shell"'), "rules[0].positionals[0].value"),
    (('tool = "panda_curl"', 'tool = "panda_curl"\nunknown_field = 1'), "rules[0].unknown_field"),
])
def test_a_bad_field_is_named(tmp_path, change, field):
    assert field in _load(tmp_path, GOOD_TOOL + GOOD_RULE.replace(*change))


@pytest.mark.parametrize("option, because", [
    ('{ name = "--config", aliases = ["-K"], value = "text" }', "loads a configuration file"),
    ('{ name = "--output", aliases = ["-o"], value = "text" }', "writes a file"),
    ('{ name = "--proxy", aliases = ["-x"], value = "text" }', "another endpoint"),
    ('{ name = "--url", value = "text" }', "value kind url"),
])
def test_a_rule_cannot_allow_a_banned_curl_flag(tmp_path, option, because):
    assert because in _load(tmp_path, GOOD_TOOL + GOOD_RULE + f"options = [{option}]\n")


def test_curl_positionals_are_urls_and_paths_need_a_root(tmp_path):
    assert "value kind url" in _load(tmp_path, GOOD_TOOL + GOOD_RULE.replace('value = "url"', 'value = "text"'))
    assert "declares no root" in _load(tmp_path, GOOD_TOOL + GOOD_RULE.replace(
        'positionals = [{ name = "url", value = "url" }]', 'options = [{ name = "--pubkey", value = "path" }]'))


def test_git_path_options_must_be_paths(tmp_path):
    tool = '[[tools]]\nname = "g"\nexecutable = "git"\ndialect = "git"\n'
    rule = ('[[rules]]\nname = "r"\ntool = "g"\naccess = "read"\nenvironments = ["staging"]\nchannel = "ro"\n'
            'subcommand = ["log"]\nglobal_options = [{ name = "-C", value = "text" }]\n')
    assert "value kind path" in _load(tmp_path, tool + rule)
    assert "sets configuration" in _load(tmp_path, tool + rule.replace('"-C", value = "text"', '"-c", value = "text"'))


def test_credentials_name_variables_and_are_checked(tmp_path):
    rule = GOOD_RULE + 'credential = "panda"\n'
    assert "rules[0].credential" in _load(tmp_path, GOOD_TOOL + rule)
    bad = '[credentials.panda]\nenv = { PANDA_AUTH_TOKEN = "OPENAI_API_KEY" }\n'
    assert "credentials.panda.env" in _load(tmp_path, bad + GOOD_TOOL + rule)
    assert "model-provider key" in _load(tmp_path, bad + GOOD_TOOL + rule)


def test_a_write_rule_must_say_what_it_targets(tmp_path):
    rule = GOOD_RULE.replace('access = "read"', 'access = "write"').replace('channel = "ro"', 'channel = "rw"')
    assert "targets" in _load(tmp_path, GOOD_TOOL + rule)


def test_unreadable_and_invalid_files(tmp_path):
    assert "not valid TOML" in _load(tmp_path, "[[tools]\n")
    assert "unknown section" in _load(tmp_path, "[shell]\nx = 1\n")
    with pytest.raises(CommandConfigError, match="no such file"):
        load_command_config(tmp_path / "absent.toml")


def test_the_root_must_exist(tmp_path):
    tool = f'[[tools]]\nname = "c"\nexecutable = "cat"\nroot = "{tmp_path}/absent"\n'
    assert "tools[0].root" in _load(tmp_path, tool)


@pytest.mark.parametrize("name, value, because", [
    ("API_TOKEN", "ghp_R7x2Lk9Qm4Tz8Wc1Vb6Ny3Hd5Js0Fg2Pa7Ue", "looks like a secret"),
    ("PANDA_AUTH_VO", "AKIAIOSFODNN7EXAMPLE", "looks like a secret"),
    ("PATH", "/tmp", "only the executor sets"), ("HOME", "/root", "only the executor sets"),
    ("OPENAI_API_KEY", "x", "only the executor sets"),
])
def test_a_tools_fixed_environment_carries_no_secret_or_runtime_variable(tmp_path, name, value, because):
    message = _load(tmp_path, GOOD_TOOL + f'environment = {{ {name} = "{value}" }}\n')
    assert name in message and because in message


@pytest.mark.parametrize("tool, line, because", [
    ("curl", 'environment = { LD_PRELOAD = "/tmp/x.so" }', "run other code"),
    ("curl", 'environment = { BASH_ENV = "/tmp/x.sh" }', "run other code"),
    ("curl", 'environment = { https_proxy = "http://10.0.0.1:3128" }', "where curl connects"),
    ("curl", 'environment = { CURL_HOME = "/tmp" }', "configuration it reads"),
    ("git", 'environment = { GIT_SSH_COMMAND = "id" }', "overrides git"),
    ("curl", 'leading_args = ["-K", "/tmp/x"]', "loads a configuration file"),
    ("curl", 'leading_args = ["--output=/tmp/x"]', "writes a file"),
    ("git", 'leading_args = ["--exec-path=/tmp"]', "names a program"),
])
def test_a_tools_fixed_arguments_and_environment_cannot_lift_the_bans(tmp_path, tool, line, because):
    declared = f'[[tools]]\nname = "t"\nexecutable = "{tool}"\ndialect = "{tool}"\n{line}\n'
    assert because in _load(tmp_path, declared)


def test_a_setting_with_a_secret_sounding_name_is_a_setting(tmp_path):
    path = tmp_path / "tools.toml"
    path.write_text(GOOD_TOOL + 'environment = { PANDA_AUTH = "oidc", PANDA_AUTH_VO = "atlas" }\n')
    assert load_command_config(path).policy.tools[0].environment == {"PANDA_AUTH": "oidc", "PANDA_AUTH_VO": "atlas"}


def test_the_setting_names_the_file(tools_file, monkeypatch):
    from bamboo.commands.config import configured_command_tools
    from bamboo.settings import Settings

    monkeypatch.delenv("BAMBOO_COMMAND_TOOLS_FILE", raising=False)
    assert configured_command_tools(Settings(_env_file=None)) is None
    monkeypatch.setenv("BAMBOO_COMMAND_TOOLS_FILE", str(tools_file))
    config = configured_command_tools(Settings(_env_file=None))
    assert config is not None and {t.name for t in config.policy.tools} >= {"panda_curl", "config_git"}


def test_the_root_cannot_be_the_whole_file_system(tmp_path):
    tool = '[[tools]]\nname = "c"\nexecutable = "cat"\nroot = "/"\n'
    assert "unbounded" in _load(tmp_path, tool)


def test_only_long_options_are_emitted_joined(tmp_path):
    rule = GOOD_RULE + 'options = [{ name = "-m", value = "integer", joined = true }]\n'
    assert "only a long option" in _load(tmp_path, GOOD_TOOL + rule)


@pytest.mark.parametrize("method", ["POST", "delete", "PUT"])
def test_a_read_rule_allows_get_or_head_only(tmp_path, method):
    """A read rule makes its tool read-only (automatic steps call it unreviewed): one that allows POST is a write."""
    assert "allows GET or HEAD only" in _load(tmp_path, GOOD_TOOL + GOOD_RULE + f'method = "{method}"\n')


@pytest.mark.parametrize("spelling, is_", [("--jso", "--json"), ("--data-bin", "--data-binary"),
                                           ("--upload-fi", "--upload-file"), ("--create-di", "--create-dirs")])
def test_a_curl_rule_names_options_in_full(tmp_path, spelling, is_):
    """curl reads an unambiguous prefix of a long option as that option: a read rule naming --jso or --data-bin
    sent a POST judged GET, and --upload-fi sent a local file with PUT past the ban on --upload-file."""
    option = f'{{ name = "{spelling}", value = "text" }}'
    assert "is not one of curl's option names in full" in _load(tmp_path, GOOD_TOOL + GOOD_RULE + f"options = [{option}]\n")


def test_a_git_rule_cannot_abbreviate_a_banned_option(tmp_path):
    tool = '[[tools]]\nname = "g"\nexecutable = "git"\ndialect = "git"\n'
    rule = ('[[rules]]\nname = "r"\ntool = "g"\naccess = "read"\nenvironments = ["staging"]\nchannel = "ro"\n'
            'subcommand = ["ls-remote"]\noptions = [{ name = "--upload-pa", value = "text" }]\n')
    assert "abbreviates --upload-pack" in _load(tmp_path, tool + rule)


@pytest.mark.parametrize("option, because", [
    ('{ name = "--url-query", value = "text" }', "value kind form"),
    ('{ name = "--data-urlencode", value = "text" }', "value kind form"),
    ('{ name = "--data-urlencode", value = "json" }', "value kind form"),
    ('{ name = "-d", aliases = ["--data"], value = "text" }', "value kind form or json"),
    ('{ name = "--data-binary", value = "text" }', "value kind form or json"),
    ('{ name = "--json", value = "text" }', "value kind json"),
])
def test_a_curl_body_or_query_option_is_a_form_or_json(tmp_path, option, because):
    """curl reads 'name@file' anywhere in --data-urlencode and --url-query: declared as text (which refuses only
    a leading '@'), a read rule sent any executor file, /proc/<executor>/environ included, to the allowed host."""
    message = _load(tmp_path, GOOD_TOOL + GOOD_RULE + f"options = [{option}]\n")
    assert because in message and "reads a local file" in message, message


def test_the_request_target_cannot_be_allowed(tmp_path):
    for option in ('{ name = "--request-target", value = "text" }', '{ name = "--path-as-is" }'):
        assert "another endpoint" in _load(tmp_path, GOOD_TOOL + GOOD_RULE + f"options = [{option}]\n")


@pytest.mark.parametrize("pattern", ["/server/panda/[A-Za-z_]+", "/server/panda/get[A-Za-z]+", "/server/.*", ".*",
                                     "/[a-z]+/[a-z]+/[A-Za-z_]+", "/server/panda/put_file_recovery_request"])
def test_a_read_rule_cannot_cover_pandas_legacy_api(tmp_path, pattern):
    """Every method PanDA still runs under /server/panda/ writes on a GET (a recovery request, a workflow, a
    checkpoint): a read rule over them loaded, and its 'read' registered a recovery of any task."""
    message = _load(tmp_path, GOOD_TOOL + GOOD_RULE + f"url_paths = ['{pattern}']\n")
    assert "legacy /server/panda/" in message and "never covers them" in message, message
    write = GOOD_RULE.replace('access = "read"', 'access = "write"').replace('channel = "ro"', 'channel = "rw"')
    path = tmp_path / "write.toml"
    path.write_text(GOOD_TOOL + write + 'method = "POST"\n' + f"url_paths = ['{pattern}']\n"
                    'targets = [{ source = "query", field = "jediTaskID" }]\n')
    load_command_config(path)  # a write rule may: it needs the write gates


@pytest.mark.parametrize("program", ["curl", "git"])
def test_curl_and_git_always_run_with_their_dialect(tmp_path, program):
    """`dialect` defaulted to generic: `executable = "curl"` without it lost every curl ban and --disable,
    --globoff and --proto, and a text positional fetched file:// and wrote raw bytes with gopher://."""
    tool = f'[[tools]]\nname = "t"\nexecutable = "{program}"\n'
    path = tmp_path / "tools.toml"
    path.write_text(tool)
    assert load_command_config(path).policy.tools[0].dialect == program
    link = tmp_path / f"my-{program}"  # a symlink named otherwise is still the program
    link.symlink_to(os.path.realpath(f"/usr/bin/{program}"))
    path.write_text(tool.replace(f'"{program}"', f'"{link}"'))
    assert load_command_config(path).policy.tools[0].dialect == program
    for other in ("generic", "curl" if program == "git" else "git"):
        message = _load(tmp_path, tool + f'dialect = "{other}"\n')
        assert "tools[0].dialect" in message and f'write dialect = "{program}"' in message, message
    rule = ('[[rules]]\nname = "r"\ntool = "t"\naccess = "read"\nenvironments = ["staging"]\nchannel = "ro"\n'
            'positionals = [{ name = "u", value = "text" }]\n')
    if program == "curl":  # the PoC's rule: a text positional, which took file:// and gopher://
        assert "value kind url" in _load(tmp_path, tool + rule)


def test_a_git_rule_names_its_sub_command(tmp_path):
    """Without a sub-command, a git rule's positional could be any sub-command: `git submodule foreach touch`
    passed although `submodule` is refused wherever it is declared."""
    tool = '[[tools]]\nname = "g"\nexecutable = "git"\ndialect = "git"\n'
    rule = ('[[rules]]\nname = "r"\ntool = "g"\naccess = "read"\nenvironments = ["staging"]\nchannel = "ro"\n'
            "positionals = [{ name = \"word\", value = \"text\", pattern = '[a-z-]+', repeat = true }]\n")
    assert "names its sub-command" in _load(tmp_path, tool + rule)
