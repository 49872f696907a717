"""Scrub benchmark: the previous and the structural scrubber side by side in one run.

    .venv/bin/python -m bench.scrub.run --write

Measures, for each scrubber, what it leaves alone (false positives on the job-log corpus and on
ordinary structured text), what it removes (planted secrets in the shapes issue 15 names, each
classified as removed whole, cut leaving a head or tail, or leaked), and how fast it runs. When the
``detect-secrets`` package is importable its plugins run on the same text as a third column (it is not
a project dependency; install it into the venv to include it): the evidence for not adopting it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.sandbox.joblog_corpus import job_log_lines
from bench.scrub import previous_scrubber
from bench.scrub.ordinary_corpus import ordinary_items, ordinary_values
from policy import scrub as structural_scrubber

RESULTS = Path(__file__).with_name("results.md")
ALNUM = string.ascii_letters + string.digits
AWS_ALPHABET = ALNUM + "/+"
PASSWORD_ALPHABET = ALNUM + "!#$%&*+-./:;<=>?@^_~"
AWS_EXAMPLE_SECRET = "wJalrXUtnFEMI" + "/K7MDENG/" + "bPxRfiCY" + "EXAMPLEKEY"


@dataclass(frozen=True)
class Scrubber:
    """One contender: text in, text out; values in, values out (via JSON text where it has no walk)."""

    name: str
    text: Callable[[list[str]], list[str]]
    value: Callable[[list[Any]], list[str]]


def _module_scrubber(name: str, module: Any) -> Scrubber:
    return Scrubber(
        name,
        lambda texts: [module.scrub_text(t).text for t in texts],
        lambda values: [json.dumps(module.scrub_value(v)[0]) for v in values],
    )


def _detect_secrets_scrubber() -> Scrubber | None:
    """detect-secrets' default plugins and filters, as its scanner applies them to a file."""
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        return None

    def redact(texts: list[str]) -> list[str]:
        lines: list[str] = []
        owners: list[int] = []
        for i, text in enumerate(texts):
            for line in text.split("\n"):
                lines.append(line)
                owners.append(i)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "scan.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            found = SecretsCollection()
            with default_settings():
                found.scan_file(path)
        for _, secret in found:
            if secret.secret_value and 0 < secret.line_number <= len(lines):
                n = secret.line_number - 1
                lines[n] = lines[n].replace(secret.secret_value, "[REDACTED:detect_secrets]")
        out: list[list[str]] = [[] for _ in texts]
        for line, owner in zip(lines, owners):
            out[owner].append(line)
        return ["\n".join(parts) for parts in out]

    return Scrubber("detect-secrets", redact, lambda values: redact([json.dumps(v) for v in values]))


# --- planted secrets ---------------------------------------------------------------------------


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


@dataclass(frozen=True)
class Plant:
    """Texts or values each holding one known secret."""

    label: str
    secrets: list[str]
    texts: list[str] | None = None
    values: list[Any] | None = None


def plants(count: int, seed: int = 15) -> list[Plant]:
    rng = random.Random(seed)
    aws = [_rand(rng, AWS_ALPHABET, 40) for _ in range(count)]
    short = [_rand(rng, PASSWORD_ALPHABET, rng.randint(4, 12)) for _ in range(count)]
    amp = [_rand(rng, ALNUM, rng.randint(5, 10)) + "&" + _rand(rng, ALNUM, rng.randint(1, 3)) for _ in range(count)]
    shapes_of_example = [
        '{"name": "AWS_SECRET_ACCESS_KEY", "value": "%s"}', '{"Key": "SecretAccessKey", "Value": "%s"}',
        "{'Name': 'AWS_SECRET_ACCESS_KEY', 'Value': '%s'}", "export AWS_SECRET_ACCESS_KEY=%s",
        'env: ["PATH=/usr/bin", "AWS_SECRET_ACCESS_KEY=%s"]', "the key is %s (rotate it)",
        'tool failed: HTTP 403 {"request": {"name": "AWS_SECRET_ACCESS_KEY", "value": "%s"}}',
    ]
    tokens = (
        ["AKIA" + _rand(rng, string.ascii_uppercase + string.digits, 16) for _ in range(count // 5)]
        + ["ghp_" + _rand(rng, ALNUM, 36) for _ in range(count // 5)]
        + ["glpat-" + _rand(rng, ALNUM + "-_", 20) for _ in range(count // 5)]
        + ["xoxb-" + _rand(rng, string.digits, 12) + "-" + _rand(rng, ALNUM, 24) for _ in range(count // 5)]
        + [_rand(rng, ALNUM, 40) for _ in range(count // 5)]
    )
    return [
        Plant("token shapes (AKIA, ghp_, glpat-, xoxb-, random 40)", tokens, texts=[f"cloning with {t} now" for t in tokens]),
        Plant("AWS secret key, bare in text", aws, texts=[f"credentials rotated, new one {k} issued" for k in aws]),
        Plant("AWS secret key, `{name, value}` value", aws,
              values=[{"name": "AWS_SECRET_ACCESS_KEY", "value": k} for k in aws]),
        Plant("AWS documented example key, 7 shapes", [AWS_EXAMPLE_SECRET] * len(shapes_of_example),
              texts=[s % AWS_EXAMPLE_SECRET for s in shapes_of_example]),
        Plant("`password=` short value", short, texts=[f"connect password={p} host=db" for p in short]),
        Plant("`pwd=` short value", short, texts=[f"mysql -u panda pwd={p} -h db" for p in short]),
        Plant('`"password": "..&.."` (the `&3` tail)', amp, texts=[json.dumps({"user": "panda", "password": p}) for p in amp]),
        Plant("name/value pair in a tool error", short,
              texts=[f'tool get_task failed: HTTP 400: {{"name": "DB_PASSWORD", "value": {json.dumps(p)}}}' for p in short]),
        Plant("env list value", short, values=[{"env": ["PATH=/usr/bin", f"DB_PASSWORD={p}"]} for p in short]),
        Plant("argv in a command repr", short,
              texts=[f"Command '['psql', '--password', {p!r}]' returned non-zero exit status 1" for p in short]),
    ]


def classify(secret: str, out: str) -> str:
    """removed (nothing of it left), cut (a head or tail of 2+ characters beside a marker), leaked."""
    if secret in out:
        return "leaked"
    for i in range(1, len(secret) - 1):
        if "]" + secret[i:] in out or secret[: len(secret) - i] + "[" in out:
            return "cut"
    return "removed"


# --- measurements ------------------------------------------------------------------------------


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def false_positives(scrubbers: list[Scrubber]) -> list[str]:
    lines = job_log_lines(5000)
    items = ordinary_items(1200)
    values = ordinary_values(1200)
    rows = ["| corpus | " + " | ".join(s.name for s in scrubbers) + " |", "|---|" + "---:|" * len(scrubbers)]
    for label, data, run in [
        ("job-log lines changed (of 5000)", lines, lambda s, d: s.text(d)),
        ("structured items changed, as text (of 1200)", items, lambda s, d: s.text(d)),
        ("structured items changed, as values (of 1200)", values, lambda s, d: s.value(d)),
    ]:
        cells = []
        for s in scrubbers:
            out = run(s, data)
            before = data if data is not values else [json.dumps(v) for v in values]
            cells.append(str(sum(1 for a, b in zip(before, out) if a != b)))
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def recall(scrubbers: list[Scrubber], count: int) -> list[str]:
    header = "| planted secret | n | " + " | ".join(f"{s.name} removed / cut / leaked" for s in scrubbers) + " |"
    rows = [header, "|---|---:|" + "---|" * len(scrubbers)]
    for plant in plants(count):
        cells = []
        for s in scrubbers:
            out = s.text(plant.texts) if plant.texts is not None else s.value(plant.values or [])
            kinds = [classify(secret, o) for secret, o in zip(plant.secrets, out)]
            cells.append(" / ".join(str(kinds.count(k)) for k in ("removed", "cut", "leaked")))
        rows.append(f"| {plant.label} | {len(plant.secrets)} | " + " | ".join(cells) + " |")
    return rows


def throughput(scrubbers: list[Scrubber], repeat: int) -> list[str]:
    lines = job_log_lines(5000)
    block = ["\n".join(lines)]
    items = ordinary_items(1200)
    values = ordinary_values(1200)
    log_mb = len(block[0].encode()) / 1e6
    items_mb = sum(len(t.encode()) for t in items) / 1e6
    names = [s.name for s in scrubbers]
    rows = ["| measure | " + " | ".join(names) + " | " + " | ".join(f"{n} ÷ {names[0]}" for n in names[1:]) + " |",
            "|---|" + "---:|" * (2 * len(scrubbers) - 1)]
    measures: list[tuple[str, float, Callable[[Scrubber], Any]]] = [
        ("job-log lines, one call per line (MB/s)", log_mb, lambda s: s.text(lines)),
        ("job-log block, one call (MB/s)", log_mb, lambda s: s.text(block)),
        ("structured items as text (MB/s)", items_mb, lambda s: s.text(items)),
        ("structured items as values (items/s)", float(len(values)), lambda s: s.value(values)),
    ]
    for label, amount, run in measures:
        seconds = _best_interleaved([lambda s=s: run(s) for s in scrubbers], repeat)
        figures = [amount / t for t in seconds]
        ratios = [f / figures[0] for f in figures[1:]]
        rows.append(f"| {label} | " + " | ".join(f"{f:,.1f}" for f in figures) + " | "
                    + " | ".join(f"{r:.2f}×" for r in ratios) + " |")
    return rows


def _best_interleaved(runs: list[Callable[[], Any]], repeat: int) -> list[float]:
    """Fastest of ``repeat`` rounds, the contenders taking turns in each round: the machine is shared,
    so load changes between rounds hit every contender alike and the minimum is the signal."""
    best = [float("inf")] * len(runs)
    for _ in range(repeat):
        for i, run in enumerate(runs):
            best[i] = min(best[i], _timed(run)[1])
    return best


def main_report(count: int, repeat: int) -> str:
    scrubbers = [_module_scrubber("previous", previous_scrubber), _module_scrubber("structural", structural_scrubber)]
    third = _detect_secrets_scrubber()
    if third is not None:
        scrubbers.append(third)
    library = ("detect-secrets " + _detect_secrets_version() + " (default plugins and filters, scanning a file)"
               if third is not None else "detect-secrets not installed: column omitted")
    return "\n".join([
        f"Scrubbers: `previous` (the scrubber before issue 15), `structural` (policy.scrub now); {library}.",
        "",
        "## False positives: ordinary text changed",
        *false_positives(scrubbers),
        "",
        "## Planted secrets: removed whole, cut (a head or tail of 2+ characters survives), leaked",
        *recall(scrubbers, count),
        "",
        f"## Throughput (best of {repeat} interleaved rounds)",
        *throughput(scrubbers, repeat),
    ])


def _detect_secrets_version() -> str:
    try:
        from importlib.metadata import version

        return version("detect-secrets")
    except Exception:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500, help="planted secrets per shape")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="store the output in bench/scrub/results.md")
    args = parser.parse_args()
    report = main_report(args.count, args.repeat)
    print(report)
    if args.write:
        command = f".venv/bin/python -m bench.scrub.run --count {args.count} --repeat {args.repeat} --write"
        if _detect_secrets_scrubber() is not None:
            command = f".venv/bin/pip install detect-secrets=={_detect_secrets_version()}\n    {command}"
        RESULTS.write_text(
            f"# Scrubbing — latest results\n\nCommands (from the repository root):\n\n    {command}\n\n"
            f"Run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n{report}\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
