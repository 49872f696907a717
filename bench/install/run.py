"""A newcomer's install, measured: `pip install '.[offline]'` into a fresh venv, then, with no network but
loopback, the embedded stack, a populate of the bundled incidents and one `bamboo analyze` of a task the
knowledge base has never seen. Times and sizes.

"No network" is enforced, not assumed: every step after the install runs with HTTP(S)_PROXY and ALL_PROXY
pointing at a closed loopback port (only 127.0.0.1 and localhost bypass it), pip with PIP_NO_INDEX, and
Hugging Face libraries with HF_HUB_OFFLINE, so anything that tried to download would fail the run.

    .venv/bin/python -m bench.install.run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "ALL_PROXY": "http://127.0.0.1:9",
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost",
           "no_proxy": "127.0.0.1,localhost", "PIP_NO_INDEX": "1", "HF_HUB_OFFLINE": "1"}


def step(name: str, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 1800) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    took = time.perf_counter() - started
    print(f"{name}: {took:.1f} s (exit {done.returncode})", file=sys.stderr, flush=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return took, done.stdout


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def largest_packages(site: Path, n: int = 6) -> list[tuple[str, float]]:
    sizes = [(p.name, size_mb(p)) for p in site.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))]
    return sorted(sizes, key=lambda s: -s[1])[:n]


def main(python: str, keep: bool, use_cache: bool) -> str:
    base = Path(tempfile.mkdtemp(prefix="bamboo-install-bench-"))
    venv, work = base / "venv", base / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BAMBOO_", "VIRTUAL_ENV", "PYTHON"))}
    bin_ = venv / "bin"
    try:
        t_venv, _ = step("venv", [python, "-m", "venv", str(venv)], cwd=work, env=env)
        pip = [str(bin_ / "pip"), "install", "-q"] + ([] if use_cache else ["--no-cache-dir"])
        t_pip_up, _ = step("pip upgrade", pip + ["--upgrade", "pip"], cwd=work, env=env)
        t_install, _ = step("pip install .[offline]", pip + [f"{ROOT}[offline]"], cwd=work, env=env)
        site = next((venv / "lib").glob("python3*/site-packages"))
        venv_mb = size_mb(venv)
        offline = {**env, **OFFLINE, "PATH": f"{bin_}:{env.get('PATH', '/usr/bin:/bin')}"}
        bamboo = str(bin_ / "bamboo")
        task_file = work / "new-task.json"
        step("sample task", [str(bin_ / "python"), "-c",
                             "import json,sys; from bamboo.samples import generate_incidents; "
                             "json.dump(dict(generate_incidents(1, seed=4242)[0].task_data), open(sys.argv[1], 'w'))",
                             str(task_file)], cwd=work, env=offline)
        t_up, _ = step("bamboo dev up", [bamboo, "dev", "up"], cwd=work, env=offline)
        try:
            t_populate, _ = step("bamboo populate", [bamboo, "populate", str(ROOT / "examples" / "incidents")],
                                 cwd=work, env=offline)
            t_analyze, out = step("bamboo analyze", [bamboo, "analyze", "--task-data", str(task_file), "--json"],
                                  cwd=work, env=offline)
        finally:
            subprocess.run([bamboo, "dev", "down"], cwd=work, env=offline, capture_output=True, timeout=120)
        result = json.loads(out[out.index("{"):])
        data_mb = size_mb(work / ".bamboo")
        top = ", ".join(f"{name} {mb:.0f}" for name, mb in largest_packages(site))
    finally:
        if keep:
            print(f"kept: {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    lines = [
        f"Command: `.venv/bin/python -m bench.install.run{' --use-cache' if use_cache else ''}` "
        f"({Path(python).name}; pip {'with' if use_cache else 'without'} its download cache; one run, this machine: "
        f"{os.cpu_count()} cores)",
        "",
        "| step | seconds |",
        "|---|---:|",
        f"| `python -m venv` | {t_venv:.1f} |",
        f"| `pip install --upgrade pip` | {t_pip_up:.1f} |",
        f"| `pip install '.[offline]'` | {t_install:.1f} |",
        f"| `bamboo dev up` (offline from here on) | {t_up:.1f} |",
        f"| `bamboo populate examples/incidents` (36 incidents, local model) | {t_populate:.1f} |",
        f"| `bamboo analyze --task-data` (a task never learned) | {t_analyze:.1f} |",
        "",
        f"Sizes: the venv {venv_mb:.0f} MB (largest: {top} MB); the data directory after the run {data_mb:.0f} MB "
        "(Temporal's and Postgres's state, the assembled model file).",
        "",
        f"The analysis named \"{result.get('root_cause')}\" ({result.get('cause_source')}), "
        f"{len(result.get('candidates') or [])} candidates, email from {result.get('email_source')}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=shutil.which("python3.11") or sys.executable, help="the interpreter a newcomer has")
    ap.add_argument("--keep", action="store_true", help="keep the venv and data directory (their path is printed)")
    ap.add_argument("--use-cache", action="store_true", help="let pip use its download cache")
    a = ap.parse_args()
    print(main(a.python, a.keep, a.use_cache))
