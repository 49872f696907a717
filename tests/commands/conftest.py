"""Command tools under test: the tools file filled in for this run, the PanDA simulator, a git repository root."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bamboo.commands.config import CommandConfig, load_command_config
from bamboo.panda.simulator import PandaSimulator
from policy.commands import CommandPolicy
from tests.panda.incidents import write_incidents

TEMPLATE = Path(__file__).with_name("tools_template.toml")

for program in ("curl", "git", "printenv", "cat", "sleep", "yes"):
    if shutil.which(program) is None:  # the tests exercise the real binaries; nothing is installed for them
        raise RuntimeError(f"the command tool tests need {program} on PATH")


@pytest.fixture(scope="session")
def simulator(tmp_path_factory: pytest.TempPathFactory):
    with PandaSimulator(write_incidents(tmp_path_factory.mktemp("cmd-incidents"))) as sim:
        yield sim


@pytest.fixture(scope="session")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The git tool's root: a bare repository with two commits and a work tree, both created here."""
    base = tmp_path_factory.mktemp("cmd-root").resolve()
    work, bare = base / "config", base / "config.git"
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(base), "PATH": "/usr/bin:/bin"}
    run = lambda *args, cwd=base: subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True)  # noqa: E731
    run("git", "init", "-q", "-b", "main", str(work))
    for n, text in enumerate(["queues: {}\n", "queues: {SIM-SITE-A: online}\n"]):
        (work / "queues.yaml").write_text(text)
        run("git", "add", "queues.yaml", cwd=work)
        run("git", "-c", "user.name=ops", "-c", "user.email=ops@example.org", "commit", "-q", "-m", f"change {n}",
            cwd=work)
    run("git", "clone", "-q", "--bare", str(work), str(bare))
    (base / "notes.txt").write_text("inside the root\n")
    return base


@pytest.fixture(scope="session")
def tools_file(tmp_path_factory: pytest.TempPathFactory, simulator: PandaSimulator, root: Path) -> Path:
    text = TEMPLATE.read_text().replace("{api_host}", f"127.0.0.1:{simulator.port}").replace("{root}", str(root))
    path = tmp_path_factory.mktemp("cmd-config") / "tools.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="session")
def config(tools_file: Path) -> CommandConfig:
    return load_command_config(tools_file)


@pytest.fixture(scope="session")
def policy(config: CommandConfig) -> CommandPolicy:
    return config.policy


@pytest.fixture(scope="session")
def api(simulator: PandaSimulator) -> str:
    """The simulator's task API, as the declared curl rules allow it."""
    return f"http://127.0.0.1:{simulator.port}/api/v1/task"
