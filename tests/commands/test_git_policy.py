"""git requests the policy must refuse: configuration on the command line, program-naming flags, paths
outside the root, remote-helper transports, core.*/alias keys and sub-commands that run programs."""

from __future__ import annotations

import pytest

from .helpers import allow, deny


def test_an_allowed_log_is_hardened_and_bounded(policy, root):
    match = allow(policy, "config_git", ["git", "-C", "config.git", "log", "--oneline", "-n", "5"])
    assert match.argv[1:14] == ["--no-pager", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
                                "-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never",
                                "-c", "core.sshCommand=false", "-c", "gpg.program=false"]
    assert match.argv[14:] == ["-C", f"{root}/config.git", "log", "--oneline", "--max-count", "5"]
    assert match.targets == [f"git:{root}/config.git"]
    assert match.paths == [f"{root}/config.git"] and match.cwd == str(root)
    assert match.environment["GIT_CONFIG_NOSYSTEM"] == "1" and match.environment["GIT_CONFIG_GLOBAL"] == "/dev/null"


@pytest.mark.parametrize("argv", [
    ["git", "-c", "core.pager=touch /tmp/x", "log"], ["git", "-ccore.sshCommand=x", "log"],
    ["git", "-c", "alias.log=!sh -c id", "log"], ["git", "--config-env=core.pager=EVIL", "log"],
])
def test_configuration_on_the_command_line(policy, argv):
    deny(policy, "config_git", argv, "sets configuration")


@pytest.mark.parametrize("argv, because", [
    (["git", "--exec-path=/tmp/evil", "log"], "names a program"),
    (["git", "--exec-path", "/tmp/evil", "log"], "names a program"),
    (["git", "ls-remote", "--upload-pack=touch /tmp/x", "config.git"], "names a program"),
    (["git", "ls-remote", "--upload-pack", "touch /tmp/x", "config.git"], "names a program"),
    (["git", "ls-remote", "-u", "touch /tmp/x", "config.git"], "names a program"),
    (["git", "ls-remote", "--receive-pack=x", "config.git"], "names a program"),
    (["git", "log", "--output=/tmp/x"], "writes outside"),
])
def test_flags_that_run_programs_or_write(policy, argv, because):
    deny(policy, "config_git", argv, because)


@pytest.mark.parametrize("argv", [
    ["git", "-C", "/etc", "log"], ["git", "-C", "..", "log"], ["git", "-C", "config/../../", "log"],
    ["git", "-C/etc", "log"], ["git", "--git-dir=/etc/.git", "log"], ["git", "--git-dir", "../x", "log"],
    ["git", "--work-tree=/", "log"], ["git", "ls-remote", "/tmp"], ["git", "ls-remote", "../../tmp/x.git"],
])
def test_paths_outside_the_root(policy, argv):
    deny(policy, "config_git", argv, "outside the allowed root")


def test_dotdot_that_stays_inside_is_resolved(policy, root):
    match = allow(policy, "config_git", ["git", "-C", "config/../config.git/.", "log"])
    assert f"{root}/config.git" in match.argv and match.paths == [f"{root}/config.git"]


@pytest.mark.parametrize("repository", ["ext::sh -c touch% /tmp/pwned", "ext::sh", "fd::17", "x::y"])
def test_remote_helper_transports(policy, repository):
    deny(policy, "config_git", ["git", "ls-remote", repository], "remote-helper transport")


def test_core_and_alias_keys_are_refused(policy):
    allow(policy, "config_git", ["git", "-C", "config.git", "config", "--get", "user.name"])
    for key in ["core.fsmonitor", "core.sshCommand", "alias.st", "CORE.PAGER", "include.path", "credential.helper"]:
        deny(policy, "config_git", ["git", "-C", "config.git", "config", "--get", key], "sets configuration")


@pytest.mark.parametrize("subcommand", ["submodule", "difftool", "filter-branch", "bisect", "daemon", "help"])
def test_subcommands_that_run_programs(policy, subcommand):
    deny(policy, "config_git", ["git", subcommand, "foreach", "id"], "never allowed")


def test_subcommands_without_a_rule(policy):
    deny(policy, "config_git", ["git", "push", "origin", "main"], "no rule allows")
    deny(policy, "config_git", ["git", "-C", "config", "commit", "-m", "x"], "no rule allows")


def test_a_git_rule_without_a_sub_command_allows_nothing(policy):
    """Load refuses such a rule; one built without validation matches nothing either. Its positional took any
    sub-command: `git submodule foreach touch` passed, `submodule` refused only where it was declared."""
    from policy.commands import CommandPolicy, CommandRule, PositionalSpec

    status = next(r for r in policy.rules if r.name == "git_status")
    rule = CommandRule.model_construct(**{**dict(status), "name": "words", "subcommand": [], "global_options": [],
                                          "options": [], "positionals": [
                                              PositionalSpec(name="word", pattern="[a-z-]+", repeat=True)]})
    loose = CommandPolicy.model_construct(tools=policy.tools, rules=[rule], credentials=policy.credentials)
    deny(loose, "config_git", ["git", "submodule", "foreach", "touch"], "must name its sub-command")
    deny(loose, "config_git", ["git", "status"], "must name its sub-command")
