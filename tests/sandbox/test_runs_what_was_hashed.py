"""A run executes exactly the text its code hash names.

The hash ignores blanks ending a line (outside string literals) and the line-ending style, but a script can read
its own text at run time (its frames reach the runner's copy): a block with one blank after a comment, or with
CRLF line ends, shared the hash of the block the approver read and behaved differently (it killed).
"""

from __future__ import annotations

import pytest

from policy.code_identity import code_hash
from tests.sandbox.conftest import HAS_BWRAP, harness

READS_ITSELF = '''info = await tools.get_task(task_id=7)  # look the task up{pad}
import sys
f = sys._getframe()
while f is not None and "start" not in f.f_locals:
    f = f.f_back
me = f.f_locals["start"]["code"] if f is not None else ""
return {{"found": bool(me), "blank_after_comment": "up \\n" in me, "carriage_return": "\\r" in me}}
'''
READ = READS_ITSELF.format(pad="")
EDITED = {"a blank after the comment": READS_ITSELF.format(pad=" "), "CRLF line ends": READ.replace("\n", "\r\n")}


@pytest.mark.skipif(not HAS_BWRAP, reason="needs bubblewrap")
@pytest.mark.parametrize("edit", sorted(EDITED))
async def test_a_block_sharing_the_read_blocks_hash_runs_as_that_block(edit: str) -> None:
    code = EDITED[edit]
    assert code != READ and code_hash(code) == code_hash(READ)
    async with harness("bwrap") as h:
        result = await h.run(code, allowed={"get_task"})
    assert result.status == "ok", result.error
    assert result.return_value == {"found": True, "blank_after_comment": False, "carriage_return": False}


@pytest.mark.parametrize("isolation", ["bwrap", "degraded"])
async def test_a_guard_on_the_scripts_name_reads_as_in_a_script(isolation: str) -> None:
    """The code reads as a script; under the name "__sandbox__", "if __name__ != '__main__':" guarded nothing."""
    if isolation == "bwrap" and not HAS_BWRAP:
        pytest.skip("needs bubblewrap")
    async with harness(isolation) as h:
        result = await h.run('return {"main": __name__ == "__main__"}', allowed=set())
    assert result.status == "ok", result.error
    assert result.return_value == {"main": True}


# Each reads as a script that keeps its guard on; run as a function's body (the sandbox's wrapper) each turned
# it off, so the kill it guarded ran. The value is what the script computes.
AS_A_SCRIPT = {
    "a class body reads the script's name": ("all = False\nclass Scope:\n    all = all\nreturn {'on': not Scope.all}",
                                             True),
    "a builtin read before the script rebinds it": (
        "try:\n    on = any([True])\nexcept NameError:\n    on = False\nany = None\nreturn {'on': on}", True),
    "a builtin read after the script deletes its own": (
        "any = 'x'\ndel any\ntry:\n    on = any([True])\nexcept NameError:\n    on = False\nreturn {'on': on}", True),
    "an annotation is evaluated": ("plan = {}\nmode: plan.update(on=True) = 'report'\nreturn {'on': plan.get('on')}",
                                   True),
    "a closure reads the script's latest binding": ("on = False\ndef guard():\n    return on\non = True\n"
                                                    "return {'on': guard()}", True),
    "an annotated subscript evaluates its index's parts": (
        "d, seen = {}, []\nd[seen.append(1) or 1:2, seen.append(2) or 3]: int\nreturn {'on': seen == [1, 2]}", True),
    "a walrus in a comprehension binds the script's name": ("[on := True for _ in range(1)]\nreturn {'on': on}", True),
    "the docstring is __doc__ behind the task preamble": (
        "task_id = 7\n'''DRY RUN'''\nreturn {'on': (__doc__ or '').startswith('DRY RUN')}", True),
    "the script's classes are found through __main__": (
        "import pickle\nclass Plan:\n    on = True\ntry:\n    plan = pickle.loads(pickle.dumps(Plan()))\n"
        "except Exception:\n    plan = None\nreturn {'on': plan is not None and plan.on}", True),
    "argparse reads no arguments": (
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('targets', nargs='*')\n"
        "args, _ = parser.parse_known_args()\nreturn {'on': not args.targets}", True),
    "the docstring is __doc__": ("'''DRY RUN: nothing changes'''\nreturn {'on': __doc__.startswith('DRY RUN')}", True),
}


@pytest.mark.parametrize("isolation", ["bwrap", "degraded"])
@pytest.mark.parametrize("case", sorted(AS_A_SCRIPT))
async def test_the_code_means_what_it_means_as_a_script(isolation: str, case: str) -> None:
    if isolation == "bwrap" and not HAS_BWRAP:
        pytest.skip("needs bubblewrap")
    code, on = AS_A_SCRIPT[case]
    async with harness(isolation) as h:
        result = await h.run(code, allowed=set())
    assert result.status == "ok", result.error
    assert result.return_value == {"on": on}
