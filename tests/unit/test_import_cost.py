"""The model SDK takes about a second to import: a process that only opens the store (every CLI command that
reads it) must not pay for it, whether the embedder is the bundled one or an endpoint."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
from bamboo.app import Process, open_app  # noqa: F401 — what every process imports to open the store
from bamboo.embeddings.factory import build_embedder
from bamboo.settings import Settings
build_embedder(Settings(_env_file=None, embedding_base_url="http://127.0.0.1:9/v1", embedding_model="any",
                        embedding_dim=384))
print("openai" in sys.modules)
"""


def test_opening_the_store_with_an_embedding_endpoint_does_not_import_the_model_sdk() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_the_endpoint_embedder_builds_its_client_when_it_first_embeds() -> None:
    from bamboo.embeddings.remote import OpenAIEmbedder

    embedder = OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", model="any", dim=4)
    assert embedder._client is None
    assert embedder._openai() is embedder._openai()
