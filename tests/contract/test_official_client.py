"""The official client (panda-client 2.2.0) against ``bamboo panda-sim``, call by call, compared with the real server.

The real server's answers to the 20 calls are recorded in ``official_client_answers.json``; where the real
server runs, a test checks that it still answers exactly that (so the record cannot drift from the
server), and everywhere the simulator's answers are compared with the record. The comparison is the table
in the README's PanDA section: the test renders it and fails when the README's copy differs (set
``BAMBOO_WRITE_README_TABLE=1`` to write it, ``BAMBOO_RECORD_PANDA_ANSWERS=1`` to re-record the real
server's answers).
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys

import pytest

from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.simulator.contract_seed import contract_world
from tests.contract.conftest import ROOT, Target, official_client_env
from tests.contract.official_client_calls import CALLS

pytest.importorskip("pandaclient", reason="panda-client is a test dependency: pip install -e '.[dev]'")

RECORD = ROOT / "tests" / "contract" / "official_client_answers.json"
README = ROOT / "README.md"
BEGIN, END = "<!-- official-client-table:begin -->", "<!-- official-client-table:end -->"
REQUIRED_MATCHES = 18


def run_official_client(target: Target) -> dict:
    env = official_client_env(target, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "tests.contract.official_client_calls"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _target_of(sim: PandaSimulator, token: str) -> Target:
    return Target("simulator", sim.base_url, token, lambda: sim.state.reset(contract_world()),
                  lambda tid: [], lambda tid, status: None)


def render_table(simulator: dict, reference: dict) -> tuple[str, int]:
    rows = ["| official client call | method, path | answers as the real server |", "|---|---|---|"]
    matches = 0
    for name, route, _ in CALLS:
        same = simulator.get(name) == reference.get(name)
        matches += same
        rows.append(f"| `{name}` | {route} | {'yes' if same else 'no'} |")
    rows.append(f"| **total** | | **{matches} of {len(CALLS)}** |")
    return "\n".join(rows), matches


def _diff(a: dict, b: dict) -> str:
    left = json.dumps(a, indent=1, sort_keys=True).splitlines()
    right = json.dumps(b, indent=1, sort_keys=True).splitlines()
    return "\n".join(list(difflib.unified_diff(left, right, "recorded", "now", lineterm=""))[:80])


def test_the_real_server_still_answers_as_recorded(target: Target) -> None:
    if not target.is_real:
        pytest.skip("checks the record against the real server")
    answers = run_official_client(target)
    if os.environ.get("BAMBOO_RECORD_PANDA_ANSWERS") == "1":
        RECORD.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(RECORD.read_text())
    assert answers == recorded, "the real server's answers changed:\n" + _diff(recorded, answers)


def test_official_client_against_the_simulator_answers_as_the_real_server(sim_server: PandaSimulator,
                                                                          test_token: str) -> None:
    target = _target_of(sim_server, test_token)
    target.reset()
    answers = run_official_client(target)
    reference = json.loads(RECORD.read_text())
    table, matches = render_table(answers, reference)
    readme = README.read_text()
    block = f"{BEGIN}\n{table}\n{END}"
    if os.environ.get("BAMBOO_WRITE_README_TABLE") == "1":
        start, end = readme.index(BEGIN), readme.index(END) + len(END)
        README.write_text(readme[:start] + block + readme[end:])
        readme = README.read_text()
    assert block in readme, "the README's official-client table is out of date; run this test with " \
                            "BAMBOO_WRITE_README_TABLE=1 and commit README.md"
    differing = {name: (answers.get(name), reference.get(name)) for name, _, _ in CALLS
                 if answers.get(name) != reference.get(name)}
    assert matches >= REQUIRED_MATCHES, f"only {matches} of {len(CALLS)} calls answer as the real server: {differing}"
