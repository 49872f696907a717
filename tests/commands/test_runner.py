"""Matched commands run for real: curl against the PanDA simulator on loopback, git on a bare repository in
the root, a deadline that kills, an output cap, ~/.curlrc never loading, and a symlink planted after the
policy decision refused before the exec."""

from __future__ import annotations

import json
import signal
import os

import pytest

from bamboo.commands.config import CommandConfig
from bamboo.commands.credentials import clean_environment
from bamboo.commands.runner import run_command
from policy.commands import CommandDenied
from tests.panda.incidents import MEMORY_TASK

from .helpers import allow

SOURCE = {"TEST_PANDA_RO_TOKEN": "ro-token-value", "TEST_PANDA_RW_TOKEN": "rw-token-value"}


async def _run(config: CommandConfig, match, *, timeout_s: float = 20, output_limit: int = 256 * 1024, env=None):
    env = env if env is not None else clean_environment(match, config.credentials, SOURCE)
    return await run_command(match, env, timeout_s=timeout_s, output_limit=output_limit)


async def test_curl_get_against_the_panda_simulator(config: CommandConfig, simulator):
    url = f"http://127.0.0.1:{simulator.port}/api/v1/task/get_status?task_id={MEMORY_TASK}"
    match = allow(config.policy, "panda_curl", ["curl", "-sS", "-H", "Accept: application/json", url])
    outcome = await _run(config, match)
    assert outcome.exit_code == 0, outcome.stderr
    assert json.loads(outcome.stdout) == {"success": True, "message": "", "data": "failed"}
    assert match.targets == [f"panda:task:{MEMORY_TASK}"]


async def test_a_curlrc_in_the_childs_home_never_loads(config: CommandConfig, simulator, tmp_path):
    """--disable comes first: a ~/.curlrc that redirects output to a file (and so hides the answer) is ignored."""
    url = f"http://127.0.0.1:{simulator.port}/api/v1/task/get_status?task_id={MEMORY_TASK}"
    match = allow(config.policy, "panda_curl", ["curl", "-sS", url])
    env = clean_environment(match, config.credentials, SOURCE)
    stolen = tmp_path / "written-by-curlrc"
    with open(os.path.join(env["HOME"], ".curlrc"), "w") as rc:
        rc.write(f'output = "{stolen}"\n')
    outcome = await _run(config, match, env=env)
    assert "'success': True" in outcome.stdout
    assert not stolen.exists()


async def test_git_log_and_ls_remote_on_the_bare_repository(config: CommandConfig, root):
    log = allow(config.policy, "config_git", ["git", "-C", "config.git", "log", "--format=%s"])
    outcome = await _run(config, log)
    assert outcome.exit_code == 0, outcome.stderr
    assert outcome.stdout.split("\n")[:2] == ["change 1", "change 0"]
    refs = allow(config.policy, "config_git", ["git", "ls-remote", "--heads", "config.git"])
    outcome = await _run(config, refs)
    assert outcome.exit_code == 0, outcome.stderr
    assert "refs/heads/main" in outcome.stdout.split()
    assert refs.targets == [f"git:{root}/config.git"]


async def test_a_symlink_planted_after_the_decision_is_refused_before_exec(config: CommandConfig, root):
    match = allow(config.policy, "file_probe", ["cat", "later/hostname"])  # no resolver: '..' only
    link = root / "later"
    link.symlink_to("/etc")
    try:
        with pytest.raises(CommandDenied, match="symlink"):
            await _run(config, match)
    finally:
        link.unlink()


async def test_the_deadline_kills_the_child(config: CommandConfig):
    match = allow(config.policy, "sleeper", ["sleep", "30"])
    outcome = await _run(config, match, timeout_s=0.5)
    assert outcome.timed_out and outcome.exit_code == -signal.SIGKILL


async def test_output_past_the_cap_is_cut_and_the_child_stopped(config: CommandConfig):
    match = allow(config.policy, "chatter", ["yes", "spam"])
    outcome = await _run(config, match, timeout_s=20, output_limit=10_000)
    assert outcome.truncated and not outcome.timed_out
    assert len(outcome.stdout.encode()) <= 10_000 and outcome.stdout.startswith("spam\nspam\n")


async def test_argv_is_executed_without_a_shell(config: CommandConfig, root):
    (root / "semi;colon $(id).txt").write_text("plain file\n")
    # the policy refuses '$(' in text, but a path is a path: cat gets the name as one argument
    match = allow(config.policy, "file_probe", ["cat", "semi;colon $(id).txt"])
    outcome = await _run(config, match)
    assert outcome.stdout == "plain file\n"


async def test_a_match_that_was_altered_does_not_run(config: CommandConfig):
    match = allow(config.policy, "sleeper", ["sleep", "1"])
    forged = match.model_copy(update={"argv": ["/bin/sh", "-c", "id"]})
    with pytest.raises(CommandDenied, match="argv\\[0\\] must be"):
        await _run(config, forged)


async def test_a_repositorys_fsmonitor_program_never_runs(config: CommandConfig, root, tmp_path):
    """Repository-local configuration is content too: a work tree whose config names an fsmonitor program
    (git status would run it) runs nothing under the dialect's fixed hardening."""
    import shutil
    import subprocess

    evil = root / "evil"
    shutil.copytree(root / "config", evil)
    marker = tmp_path / "ran"
    script = tmp_path / "fsmon.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    subprocess.run(["git", "-C", str(evil), "config", "core.fsmonitor", str(script)], check=True,
                   env={"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    try:
        match = allow(config.policy, "config_git", ["git", "-C", "evil", "status", "-s"])
        outcome = await _run(config, match)
        assert outcome.exit_code == 0, outcome.stderr
        assert not marker.exists()
    finally:
        shutil.rmtree(evil)


def test_a_credential_cut_by_the_cap_is_still_scrubbed():
    from bamboo.commands.runner import scrub_output
    text, hits = scrub_output("answer: hunter2-pan", ["hunter2-panda-ro"])
    assert "hunter2" not in text and hits == 1


async def test_a_kill_post_on_the_rw_rule_reaches_the_simulator_once(config: CommandConfig, simulator):
    """The write rule's shape runs for real: one POST, with the target the policy extracted, counted by the server."""
    import httpx

    from tests.panda.incidents import RUNNING_TASK

    before = [c for c in httpx.get(f"{simulator.base_url}/sim/calls").json() if c["endpoint"] == "task/kill"]
    url = f"http://127.0.0.1:{simulator.port}/api/v1/task/kill"
    # the API takes typed JSON (a form's task_id would arrive as a string and be refused)
    match = allow(config.policy, "panda_curl", ["curl", "-sS", "--json", f'{{"task_id": {RUNNING_TASK}}}', url],
                  channel="rw")
    assert '{"task_id":%d}' % RUNNING_TASK in match.argv
    assert match.targets == [f"panda:task:{RUNNING_TASK}"] and match.credential == "panda_rw"
    outcome = await _run(config, match)
    assert outcome.exit_code == 0, outcome.stderr
    after = [c for c in httpx.get(f"{simulator.base_url}/sim/calls").json() if c["endpoint"] == "task/kill"]
    assert len(after) == len(before) + 1 and after[-1]["task_id"] == RUNNING_TASK and after[-1]["accepted"]


async def test_the_dry_run_argv_changes_nothing_and_the_real_one_does(config: CommandConfig, root):
    """A write rule with a server-side dry run: the dry-run argv runs for real and leaves the bare repository as
    it was; the argv itself then pushes the branch."""
    import subprocess

    git = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(root), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "-C", str(root / "config"), "branch", "-f", "feature-x"], check=True, env=git)
    heads = lambda: subprocess.run(["git", "--git-dir", str(root / "config.git"), "branch", "--list"],  # noqa: E731
                                   check=True, env=git, capture_output=True, text=True).stdout
    match = allow(config.policy, "config_git", ["git", "-C", "config", "push", "config.git", "feature-x"],
                  channel="rw")
    assert match.access == "write" and match.targets == [f"git:{root}/config.git"]
    assert match.dry_run_argv == [*match.argv, "--dry-run"]
    dry = await _run(config, match.model_copy(update={"argv": match.dry_run_argv}))
    assert dry.exit_code == 0, dry.stderr
    assert "feature-x" in dry.stderr and "feature-x" not in heads()
    real = await _run(config, match)
    assert real.exit_code == 0, real.stderr
    assert "feature-x" in heads()


def test_the_dry_run_flag_stays_in_front_of_double_dash(config: CommandConfig):
    match = allow(config.policy, "config_git", ["git", "-C", "config", "push", "--", "config.git", "main"],
                  channel="rw")
    assert match.dry_run_argv is not None
    assert match.dry_run_argv.index("--dry-run") < match.dry_run_argv.index("--")


async def test_a_root_replaced_by_a_symlink_after_load_is_refused(tmp_path):
    """The root is resolved once at load; if the directory is later swapped for a link elsewhere, nothing runs."""
    from bamboo.commands.config import load_command_config

    root = tmp_path / "root"
    root.mkdir()
    (root / "hostname").write_text("inside\n")
    path = tmp_path / "tools.toml"
    path.write_text(f'[[tools]]\nname = "c"\nexecutable = "cat"\nroot = "{root}"\n'
                    '[[rules]]\nname = "r"\ntool = "c"\naccess = "read"\nenvironments = ["staging"]\nchannel = "ro"\n'
                    'positionals = [{ name = "file", value = "path" }]\n')
    config = load_command_config(path)
    match = allow(config.policy, "c", ["cat", "hostname"])
    root.rename(tmp_path / "moved")
    root.symlink_to("/etc")
    with pytest.raises(CommandDenied, match="was replaced"):
        await _run(config, match)


def _running(argv: list[str]) -> list[int]:
    """The pids whose command line is exactly ``argv``."""
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if fh.read() == wanted:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_command_dies_with_the_executor_that_started_it(tools_file, tmp_path):
    """The command runs in its own session, so a SIGKILLed executor (no chance to kill its group) left it
    running, unwatched and unrecorded; the parent-death signal ends it with its parent."""
    import subprocess
    import sys
    import time

    seconds = str(3000 + os.getpid() % 1000)  # a command line no other test runs
    script = tmp_path / "executor.py"
    script.write_text(
        "import asyncio, sys\n"
        "from bamboo.commands.config import load_command_config\n"
        "from bamboo.commands.credentials import clean_environment\n"
        "from bamboo.commands.runner import run_command\n"
        "from tests.commands.helpers import allow\n"
        f"config = load_command_config({str(tools_file)!r})\n"
        f"match = allow(config.policy, 'sleeper', ['sleep', {seconds!r}])\n"
        "env = clean_environment(match, config.credentials, {})\n"
        "asyncio.run(run_command(match, env, timeout_s=600, output_limit=1024))\n")
    executor = subprocess.Popen([sys.executable, str(script)], cwd=os.getcwd(),
                                env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 30
        while not _running(["/usr/bin/sleep", seconds]) and not _running(["/bin/sleep", seconds]):
            assert executor.poll() is None and time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
    finally:
        executor.kill()
        executor.wait()
    deadline = time.monotonic() + 10
    while (_running(["/usr/bin/sleep", seconds]) or _running(["/bin/sleep", seconds])) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _running(["/usr/bin/sleep", seconds]) + _running(["/bin/sleep", seconds])
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "the command outlived the executor that started it"


async def test_git_status_leaves_the_index_alone(tmp_path):
    """`git status` refreshes stale stat data and rewrites .git/index under index.lock: the template's read rule
    wrote the repository (and could make a concurrent write fail on the lock). GIT_OPTIONAL_LOCKS=0 keeps it a read."""
    import subprocess

    from bamboo.commands.config import load_command_config

    root = (tmp_path / "root").resolve()
    work = root / "config"
    work.mkdir(parents=True)
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q", "-b", "main"], ["add", "queues.yaml"],
                 ["-c", "user.name=o", "-c", "user.email=o@example.org", "commit", "-q", "-m", "c"]):
        (work / "queues.yaml").write_text("queues: {}\n")
        subprocess.run(["git", *args], cwd=work, env=env, check=True, capture_output=True)
    os.utime(work / "queues.yaml", (1_000_000_000, 1_000_000_000))  # same content, other stat: the index is stale
    path = tmp_path / "tools.toml"
    path.write_text(f'[[tools]]\nname = "config_git"\nexecutable = "git"\nroot = "{root}"\n'
                    '[[rules]]\nname = "git_status"\ntool = "config_git"\naccess = "read"\nenvironments = ["staging"]\n'
                    'channel = "ro"\nsubcommand = ["status"]\nglobal_options = [{ name = "-C", value = "path" }]\n'
                    'options = [{ name = "--short", aliases = ["-s"] }]\n')
    config = load_command_config(path)
    match = allow(config.policy, "config_git", ["git", "-C", "config", "status", "-s"])
    index = work / ".git" / "index"
    before = (index.stat().st_mtime_ns, index.read_bytes())
    outcome = await _run(config, match)
    assert outcome.exit_code == 0, outcome.stderr
    assert (index.stat().st_mtime_ns, index.read_bytes()) == before, "a read rewrote .git/index"
    assert match.environment["GIT_OPTIONAL_LOCKS"] == "0"


@pytest.mark.parametrize("shown", [
    "https://h/x?q=ro%20token%3Dvalue%2Fpart&y=1", "https://h/x?q=ro%20token%3dvalue%2fpart",
    "q=ro+token%3Dvalue%2Fpart", "path ro%20token%3Dvalue/part",
])
def test_a_percent_encoded_credential_is_scrubbed(shown):
    """curl's %{url_effective} printed a value percent-encoded (TOKEN%3dvalue), which the literal redaction and
    the token patterns both missed: the literal redaction covers the encoded forms too."""
    from bamboo.commands.runner import CREDENTIAL_REDACTION, scrub_output

    text, hits = scrub_output(shown, ["ro token=value/part"])
    assert "value" not in text and CREDENTIAL_REDACTION in text and hits >= 1, text
