"""Hash chaining for the append-only audit log.

Each row's hash covers its own canonical body and the previous row's hash, so altering, deleting or
reordering any row breaks every later link. A local chain proves structure, not authenticity.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

GENESIS = "0" * 64


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def row_hash(prev_hash: str, seq: int, at: str, actor: str, run_id: str | None, kind: str, body: Any) -> str:
    material = canonical_json(
        {"prev": prev_hash, "seq": seq, "at": at, "actor": actor, "run_id": run_id, "kind": kind, "body": body}
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
