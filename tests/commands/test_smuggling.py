"""Argument smuggling: the same flag written every way the binary accepts it is judged the same, '--' ends
options, combined short flags are unpacked, look-alike characters and symlinks do not get a path or a flag
past the policy, and shells or command builders are refused wherever they appear."""

from __future__ import annotations

import os

import pytest

from policy.commands import argv_digest

from .helpers import allow, deny


def test_every_spelling_of_one_request_normalises_to_one_argv(policy, api):
    url = f"{api}/get_status?task_id=1"
    spellings = [
        ["curl", "--silent", "--header", "Accept: application/json", "--request", "GET", url],
        ["curl", "-s", "-H", "Accept: application/json", "-X", "GET", url],
        ["curl", "-sHAccept: application/json", "-XGET", url],
        ["curl", "--silent", "--header=Accept: application/json", "--request=GET", "--url", url],
        ["curl", "-s", "-H", "Accept: application/json", "-X", "GET", "--", url],
    ]
    digests = {argv_digest(allow(policy, "panda_curl", argv).argv) for argv in spellings[:3]}
    assert len(digests) == 1
    canonical = allow(policy, "panda_curl", spellings[0]).argv
    assert canonical[-6:] == ["--silent", "--header", "Accept: application/json", "--request", "GET", url]
    assert allow(policy, "panda_curl", spellings[3]).argv[-2:] == ["--url", url]
    assert allow(policy, "panda_curl", spellings[4]).argv[-2:] == ["--", url]


@pytest.mark.parametrize("argv", [
    ["curl", "--output", "x", "URL"], ["curl", "--output=x", "URL"], ["curl", "-o", "x", "URL"], ["curl", "-ox", "URL"],
    ["curl", "-sox", "URL"], ["curl", "-sSo", "x", "URL"],
])
def test_a_banned_flag_in_any_spelling(policy, api, argv):
    deny(policy, "panda_curl", [a.replace("URL", f"{api}/get_status") for a in argv], "writes a file")


def test_a_value_cannot_hide_a_flag_and_a_flag_cannot_hide_in_a_value(policy, api):
    # -H takes the rest of the cluster as its value: "-Hx -o /tmp/f" is one header, refused by its pattern
    deny(policy, "panda_curl", ["curl", "-sH", "Accept: x -o /tmp/f", f"{api}/get_status"], "no rule allows")
    # a switch given a value with '=' is not the switch
    deny(policy, "panda_curl", ["curl", "--silent=--output", f"{api}/get_status"], "takes no value")
    # an option at the end with its value missing would make curl read the next token from nowhere
    deny(policy, "panda_curl", ["curl", f"{api}/get_status", "--max-time"], "needs a value")


def test_everything_after_double_dash_is_positional(policy, api):
    deny(policy, "panda_curl", ["curl", "-s", "--", "-o", "/tmp/x", f"{api}/get_status"], "no rule allows")
    deny(policy, "panda_curl", ["curl", "--", "--config=/tmp/x"], "no rule allows")
    # ... and the '--' stays in the executed argv, so curl also reads what follows as URLs
    assert allow(policy, "panda_curl", ["curl", "--", f"{api}/get_status"]).argv[-2:] == ["--", f"{api}/get_status"]


def test_a_sub_command_after_double_dash_is_no_sub_command(policy):
    deny(policy, "config_git", ["git", "-C", "config.git", "--", "log"], "sub-command must come before")


@pytest.mark.parametrize("argv", [
    ["curl", "\uff0do", "/tmp/x", "URL"],              # fullwidth hyphen-minus
    ["curl", "\uff0d\uff0doutput", "/tmp/x", "URL"],
    ["curl", "\u2013output", "/tmp/x", "URL"],         # en dash
    ["curl", "\u2014output", "/tmp/x", "URL"],         # em dash
    ["curl", "\u2212o", "/tmp/x", "URL"],              # minus sign
    ["curl", "--\u0440roxy", "http://10.0.0.1", "URL"],  # Cyrillic er
    ["curl", "--pr\u043exy", "http://10.0.0.1", "URL"],  # Cyrillic o
    ["curl", "--out\u200bput", "/tmp/x", "URL"],       # zero-width space
    ["curl", "-\u0455", "URL"],                        # Cyrillic dze looks like s
    ["\uff43url", "URL"],                              # fullwidth program name
    ["\u0441url", "URL"],                              # Cyrillic es in the program name
    ["curl", "--header", "Accept:\u00a0x", "URL"],     # no-break space normalises to a space
])
def test_unicode_look_alikes(policy, api, argv):
    reason = deny(policy, "panda_curl", [a.replace("URL", f"{api}/get_status") for a in argv], "")
    assert any(word in reason for word in ("look-alike", "non-ASCII", "plain ASCII")), reason


def test_a_cyrillic_host_is_refused(policy, simulator):
    deny(policy, "panda_curl", ["curl", f"http://127.0.0.1:{simulator.port}/api/v1/task/get_st\u0430tus"],
         "not ASCII")
    deny(policy, "panda_curl", ["curl", "http://\u0435vil.example/api/v1/task/get_status"], "not ASCII")


def test_dotdot_paths(policy, root):
    deny(policy, "file_probe", ["cat", "../../../etc/passwd"], "outside the allowed root")
    deny(policy, "file_probe", ["cat", "/etc/passwd"], "outside the allowed root")
    deny(policy, "file_probe", ["cat", f"{root}/../{root.name}-other/x"], "outside the allowed root")
    assert allow(policy, "file_probe", ["cat", "config/../notes.txt"]).argv[-1] == f"{root}/notes.txt"


@pytest.fixture
def escape_link(root):
    link = root / "escape"
    link.symlink_to("/etc")
    yield link
    link.unlink()


def test_a_symlink_out_of_the_root_is_refused_when_resolved(policy, escape_link):
    deny(policy, "file_probe", ["cat", "escape/hostname"], "symlink", resolve_path=os.path.realpath)
    deny(policy, "config_git", ["git", "-C", "escape", "log"], "symlink", resolve_path=os.path.realpath)


@pytest.mark.parametrize("argv", [
    ["sh", "-c", "id"], ["/bin/sh", "-c", "id"], ["bash", "-c", "id"], ["env", "curl"], ["/usr/bin/env", "curl"],
    ["xargs", "curl"], ["sudo", "curl"], ["nice", "curl"], ["timeout", "5", "curl"], ["python3", "-c", "1"],
])
def test_shells_and_command_builders_are_never_the_program(policy, argv):
    deny(policy, "panda_curl", argv, "shell or command builder")


@pytest.mark.parametrize("argv", [
    ["git", "log", "--format=sh"], ["git", "log", "sh"], ["git", "log", "/bin/bash"], ["git", "log", "xargs"],
    ["git", "ls-remote", "--upload-pack=env", "config.git"], ["git", "log", "-n", "bash -c id"],
])
def test_shells_and_command_builders_are_refused_as_arguments(policy, argv):
    deny(policy, "config_git", argv, "command builder")


@pytest.mark.parametrize("header", ["Accept: $(id)", "Accept: `id`", "Accept: ${HOME}"])
def test_command_substitution_in_arguments(policy, api, header):
    deny(policy, "panda_curl", ["curl", "-H", header, f"{api}/get_status"], "command substitution")


@pytest.mark.parametrize("argv", [["curl", "@args.txt"], ["curl", "-s", "@/tmp/args"], ["git", "@opts", "log"]])
def test_response_files(policy, argv):
    deny(policy, "panda_curl" if argv[0] == "curl" else "config_git", argv, "response file")


def test_control_characters_and_oversize(policy, api):
    deny(policy, "panda_curl", ["curl", "-H", "Accept: x\r\nX-Evil: 1", f"{api}/get_status"], "control character")
    deny(policy, "panda_curl", ["curl", f"{api}/get_status\x00"], "NUL")
    deny(policy, "panda_curl", ["curl", "-s" * 5000, f"{api}/get_status"], "over the limit")


@pytest.mark.parametrize("value", ["/etc/passwd", "~/.ssh/id_rsa", "../outside", "a/../../b", ".."])
def test_free_text_cannot_carry_an_unbounded_path(policy, value):
    """A path must be declared as a root-bounded path; free text that looks like one is refused."""
    deny(policy, "config_git", ["git", "-C", "config.git", "log", "--", value], "looks like a path")


@pytest.mark.parametrize("value", ["..", "x/..", ".//..", "a/../b", "../x", "./..", "x//../.."])
def test_text_has_no_dotdot_segment_anywhere(tmp_path, value):
    """A text value ending in a '..' segment ('x/..', './/..') passed the check for '../', and `ls .//..`
    under a text positional listed the parent of the tool's root."""
    from bamboo.commands.config import load_command_config

    root = (tmp_path / "root").resolve()
    root.mkdir()
    path = tmp_path / "tools.toml"
    path.write_text(f'[[tools]]\nname = "lister"\nexecutable = "ls"\nroot = "{root}"\n'
                    '[[rules]]\nname = "ls_ro"\ntool = "lister"\naccess = "read"\nenvironments = ["staging"]\n'
                    'channel = "ro"\npositionals = [{ name = "name", value = "text" }]\n')
    policy = load_command_config(path).policy
    deny(policy, "lister", ["ls", value], "looks like a path")
    for fine in ("..x", "a..b", "x/...", "x.."):
        allow(policy, "lister", ["ls", fine])
