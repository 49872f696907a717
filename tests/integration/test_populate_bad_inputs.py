"""Every kind of bad input fails its own item with a reason that says what is wrong; the batch completes."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from bamboo.models.accumulate import PopulateProgress, PopulateResult
from tests.conftest import EXAMPLES
from tests.integration.helpers import populate

pytestmark = pytest.mark.integration


async def test_bad_inputs_fail_alone_with_clear_reasons(client, running_worker, services, tmp_path):
    good = sorted(EXAMPLES.glob("*.json"))[:3]
    for f in good:
        shutil.copy(f, tmp_path / f.name)
    base = json.loads(good[0].read_text())
    (tmp_path / "x_missing.json").write_text(json.dumps(base))
    (tmp_path / "x_invalid.json").write_text('{"incident_id": "broken", "task_data": {')
    wrong = dict(base, incident_id="wrong-types", task_data={**base["task_data"], "jediTaskID": "forty"})
    (tmp_path / "x_wrong_types.json").write_text(json.dumps(wrong))
    huge = dict(base, incident_id="huge", email_text="x" * (5 * 1024 * 1024))
    (tmp_path / "x_huge_email.json").write_text(json.dumps(huge))
    (tmp_path / "x_latin1.json").write_bytes(json.dumps(dict(base, incident_id="latin")).replace("reco", "r\u00e9co").encode("latin-1"))

    handle = await populate(client, tmp_path, paused=True, wait=False)
    for _ in range(100):  # wait for the listing, then make one listed file disappear
        p = await handle.query("progress", result_type=PopulateProgress)
        if p.total:
            break
        await asyncio.sleep(0.1)
    assert p.total == 8
    (tmp_path / "x_missing.json").unlink()
    await handle.signal("resume")
    result: PopulateResult = await handle.result()

    assert result.done == 3 and result.failed == 5
    reasons = {f.source.rsplit("/", 1)[-1]: f.reason for f in result.failures}
    assert "file not found" in reasons["x_missing.json"]
    assert "invalid JSON at line 1" in reasons["x_invalid.json"]
    assert "jediTaskID must be an integer" in reasons["x_wrong_types.json"]
    assert "email_text is 5.2 MB, over the 1 MiB limit" in reasons["x_huge_email.json"]
    assert "not valid UTF-8" in reasons["x_latin1.json"] and "re-encode" in reasons["x_latin1.json"]
    assert (await services.store.knowledge.row_counts())["graphs"] == 3
