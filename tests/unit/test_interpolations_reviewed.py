"""Every value put into text the terminal shows is inert or reviewed as the operator's own.

Model-written text, tool output and a remote service's errors are hostile to a renderer: interpolated into a
rich markup string they can open links or restyle the screen, echoed to a terminal they carry escape sequences
(docs/trust-model.md). The front ends pass such text through `bamboo.frontends.inert_text`. This test keeps it so by
structure: it reads every module under `bamboo/` and finds each value interpolated (an f-string's field) into
what reaches a terminal — `print`, `log`, `rule`, `status`, `add_row`, `echo`, `secho`, `Panel` — and each bare
variable given to a table cell. A value passes when it cannot carry text: a constant, an UPPER_CASE name, a
number formatted as one (`{x:.2f}`), `len(...)` and the like; or when it is made inert (`inert_markup`,
`inert_rich`, `inert_terminal`, `rich.text.Text`; not rich's `escape`, which neutralises markup but passes escape
sequences, C1 controls and bidi overrides through). Anything else must be listed below, by module, as
a value the operator or the project wrote (ids, counts, paths, configured names, enums). A new interpolation of
anything else fails here: make it inert, or list it with the reason it is the operator's.

A static check sees f-strings, not text assembled earlier and passed in a variable; those stay the reviewer's job.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "bamboo"

# Calls whose result holds no markup and no terminal control: the inert helpers, Text (it never parses markup and
# strips control codes), and numbers. Not rich's `escape`: it escapes markup only, and `bamboo keys list` printed a
# stored row's escape sequences through it, redrawing the warning above them.
INERT_CALLS = frozenset({"inert_markup", "inert_rich", "inert_terminal", "_inert", "Text", "assemble",
                         "len", "sum", "int", "float", "round"})
SINK_METHODS = frozenset({"print", "log", "rule", "status", "add_row", "echo", "secho"})
SINK_FUNCTIONS = frozenset({"print", "echo", "secho", "Panel"})
NUMERIC_FORMATS = frozenset("bcdeEfFgGnoxX%")

# Values reviewed as written by the operator or the project, never by a model, a tool or a remote service.
OPERATOR_SIDE: dict[str, set[str]] = {
    # Batch and workflow ids the CLI made, counts, the output path the operator gave, a colour chosen by code.
    "cli/analyze_cmd.py": {"batch.id", "bid", "colour", "out", "recovered", "result.done", "result.failed",
                           "result.skipped", "result.task_id", "result.total", "written"},
    "cli/batch_progress.py": {"no_worker_hint(self.queue)", "reattach_hint", "self.queue"},
    # Accounts and signing identities from the deployment's pinned keys and accounts file.
    "cli/console_cmd.py": {"account", "accounts.path", "signer.identity", "who"},
    # The demo's own batch, counts, configured namespace and URLs; the sample task's id.
    "cli/demo_cmd.py": {"batch.id", "settings.temporal_namespace", "stats.audit_rows", "stats.graphs",
                        "stats.passages", "task['jediTaskID']", "ui", "workflow_id"},
    "cli/demo_loop.py": {"', '.join(stored)", "kind", "me", "session_id", "settings.panda_api_url",
                         "settings.resolved_keys_dir()", "settings.temporal_namespace", "sim.api_url", "task_id",
                         "turn", "ui"},
    # Executor names from the deployment's rules, a hex digest, a JSON dump (control characters escaped), an
    # exit code.
    "cli/exec_cmd.py": {"channel", "claims.argv_digest[:16]", "environment",
                        "json.dumps(claims.targets and list(claims.targets))", "result.channel",
                        "result.environment", "result.outcome.exit_code", "result.rule", "result.tool"},
    # cause_shown is inert_markup's result; the rest are counts, ids, an enum and a literal.
    "cli/feedback_cmd.py": {"cause_shown", "known", "receipt.cause_confirmations", "receipt.cause_frequency",
                            "receipt.clues", "receipt.task_id", "receipt.verdict", "task_id"},
    # The operator's $EDITOR and its OSError, enums, session ids, turn numbers, hex hashes, pinned identities.
    "cli/investigate_cmd.py": {"editor", "effect", "exc", "inv.workflow_id(session_id)", "keys",
                               "policy.policy.value", "session_id", "settings.resolved_keys_dir()",
                               "short_hash(view.code_hash)", "speaker.identity", "view.turn"},
    # Key ids and public keys the operator made, paths, statement kinds, times, a count of keys retired.
    "cli/keys_cmd.py": {"b.front_end", "b.identity", "count", "k.identity", "k.key_id", "key.key_id", "key.public_key",
                        "path", "st.issued_at.isoformat()", "st.key_id", "st.kind.value", "st.signer",
                        "st.statement_id[:12]", "store.path(who)", "who"},
    # Setting names, audit sequence numbers and counts, the stack's own services and URLs, a stored time.
    "cli/main.py": {"k", "k.upper()", "kept", "s.name", "s.note", "s.where", "seq",
                    "state.ui_url", "view['stored_at']", "who"},
    "cli/populate_cmd.py": {"batch.id", "bid", "count", "len(result.failures) - 20", "result.batch_id",
                            "result.done", "result.escalated", "result.failed", "result.skipped", "result.total"},
    # Flags and options the operator gave, the simulator's own URLs, a count.
    "cli/tools_cmd.py": {"access", "host", "incidents", "port", "redactions", "sim.api_url",
                         "sim.base_url", "sim.monitor_url", "sim.url", "state"},
    "devstack/stack.py": {"pid", "proc.pid", "settings.temporal_address", "state.temporal.pid", "state.ui_url",
                          "state.worker.pid", "worker.log", "worker.pid", "where.checkpoint_file",
                          "where.signing_key"},
    "frontends/console/serve.py": {"console.base_url()", "key.identity"},
    "frontends/mattermost/serve.py": {"', '.join(outside)", "key.identity", "mm.url"},
    "llm/local_server_process.py": {"args.alias", "args.model", "server.listening_address"},
}


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def inert(node: ast.expr) -> bool:
    """A value that cannot carry markup or terminal controls, or was made inert."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Call):
        return _called(node) in INERT_CALLS
    if isinstance(node, ast.IfExp):
        return inert(node.body) and inert(node.orelse)
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.Attribute):
        return node.attr.isupper()
    if isinstance(node, ast.Subscript):
        return inert(node.value)
    return False


def formatted_as_number(field: ast.FormattedValue) -> bool:
    spec = field.format_spec
    text = "".join(p.value for p in spec.values if isinstance(p, ast.Constant)) if isinstance(spec, ast.JoinedStr) else ""
    return bool(text) and text[-1] in NUMERIC_FORMATS


def not_inert(node: ast.AST) -> Iterator[ast.AST]:
    """`node` and what it contains, leaving out whatever an inert call already covers."""
    if isinstance(node, ast.expr) and inert(node):
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from not_inert(child)


def shown_values(tree: ast.AST) -> Iterator[ast.expr]:
    """Every value interpolated into what reaches a terminal, and every bare variable given as a table cell."""
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        name = _called(call)
        if not (isinstance(call.func, ast.Attribute) and name in SINK_METHODS
                or isinstance(call.func, ast.Name) and name in SINK_FUNCTIONS):
            continue
        for arg in [*call.args, *(k.value for k in call.keywords if k.arg in ("title", "subtitle"))]:
            if name == "add_row" and isinstance(arg, (ast.Name, ast.Attribute)) and not inert(arg):
                yield arg
            for node in not_inert(arg):
                if isinstance(node, ast.JoinedStr):
                    for field in node.values:
                        if (isinstance(field, ast.FormattedValue) and not formatted_as_number(field)
                                and not inert(field.value)):
                            yield field.value


def unreviewed() -> tuple[list[str], dict[str, set[str]]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        for value in shown_values(ast.parse(path.read_text(encoding="utf-8"))):
            found[module].add(ast.unparse(value))
    new = [f"bamboo/{module}: {value}" for module, values in sorted(found.items())
           for value in sorted(values - OPERATOR_SIDE.get(module, set()))]
    return new, found


def test_every_value_shown_on_a_terminal_is_inert_or_reviewed_as_the_operators():
    new, _ = unreviewed()
    assert not new, ("interpolated into terminal output without being made inert (wrap it in inert_markup / "
                     "inert_terminal, or list it in OPERATOR_SIDE with why it is the operator's): " + "; ".join(new))


def test_the_reviewed_list_names_only_values_still_shown():
    _, found = unreviewed()
    stale = [f"bamboo/{module}: {value}" for module, values in sorted(OPERATOR_SIDE.items())
             for value in sorted(values - found.get(module, set()))]
    assert not stale, "OPERATOR_SIDE lists values no longer shown; remove them: " + "; ".join(stale)


def test_the_check_finds_a_model_written_value_put_into_markup():
    """The scan is not blind: the pattern that mattered (a cause a model may have written, put into markup) is
    found, and the inert spelling of it is not."""
    raw = ast.parse('console.print(f"Root cause: [bold]{result.root_cause}[/] at {result.confidence:.2f}")')
    made_inert = ast.parse('console.print(f"Root cause: [bold]{inert_markup(result.root_cause)}[/]")')
    cell = ast.parse("table.add_row(candidate.name, str(candidate.breadth))")
    echoed = ast.parse('typer.echo(f"note: {note}", err=True)')
    assert [ast.unparse(v) for v in shown_values(raw)] == ["result.root_cause"]
    assert list(shown_values(made_inert)) == []
    assert [ast.unparse(v) for v in shown_values(cell)] == ["candidate.name"]
    assert [ast.unparse(v) for v in shown_values(echoed)] == ["note"]


def test_json_printed_to_a_terminal_escapes_every_character_a_terminal_acts_on():
    """rich's print_json parses the JSON and writes it again with ensure_ascii off: a right-to-left override,
    a zero-width space or the one-character CSI (U+009B) reached the terminal raw from `analyze --json`."""
    raw = []
    for path in sorted(ROOT.rglob("*.py")):
        for call in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "print_json"
                    and not any(k.arg == "ensure_ascii" and isinstance(k.value, ast.Constant) and k.value.value is True
                                for k in call.keywords)):
                raw.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert not raw, f"print_json without ensure_ascii=True: {raw}"


def model_json_printed(tree: ast.AST) -> list[int]:
    """Lines that ``print(...)`` a pydantic model's ``model_dump_json(...)``: pydantic writes C1 controls, bidi
    overrides and zero-width characters raw (`exec run --json` printed a server's U+009B, the one-character CSI)."""
    return [call.lineno for call in ast.walk(tree)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print"
            and any(isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                    and inner.func.attr == "model_dump_json" for arg in call.args for inner in ast.walk(arg))]


# Modules allowed to print a model's JSON raw, each with how many times (none).
RAW_JSON_PENDING: dict[str, int] = {}


def test_no_command_prints_a_models_json_with_characters_a_terminal_acts_on():
    """A command's JSON goes out ASCII-escaped (``json.dumps(..., ensure_ascii=True)``, or rich's print_json with
    ``ensure_ascii=True``), never as ``print(model.model_dump_json())``."""
    found = {str(path.relative_to(ROOT)): len(model_json_printed(ast.parse(path.read_text(encoding="utf-8"))))
             for path in sorted((ROOT / "cli").rglob("*.py"))}
    raw = {module: count for module, count in found.items() if count}
    assert raw == RAW_JSON_PENDING, (f"print(...model_dump_json(...)) writes C1 and bidi characters raw: {raw} "
                                     f"(pending, listed: {RAW_JSON_PENDING})")


def test_the_json_check_finds_a_model_printed_raw():
    assert model_json_printed(ast.parse("print(result.model_dump_json())")) == [1]
    assert model_json_printed(ast.parse("print(r.model_dump_json(include={'keys'}), file=sys.stderr)")) == [1]
    assert model_json_printed(ast.parse("print(json.dumps(r.model_dump(mode='json'), ensure_ascii=True))")) == []
