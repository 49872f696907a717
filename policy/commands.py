"""The command policy engine: normalise an argv request, then find the one rule that allows it, or refuse.

A request is ``argv: list[str]`` written by an untrusted model, run later with ``shell=False``. ``evaluate``
works on normalised arguments, never on a string a shell would read:

1. every element is checked on its own: ASCII look-alikes are refused (NFKC must not change it, option names
   and the program name must be strict ASCII), ``{{secret:NAME}}`` is taken out as a declaration when it is a
   whole element and refused anywhere inside one, a shell or command builder is refused wherever it appears;
2. the program name must be the tool's executable (a shell or ``env``/``xargs``/``sudo`` never is);
3. for each rule of the tool, environment and channel, the arguments are tokenised with that rule's grammar:
   ``--flag=value`` is split, ``-abc`` clusters are unpacked, aliases become the canonical spelling, everything
   after ``--`` is positional; each value is checked by its kind (paths resolved against the tool's root,
   URLs against the rule's hosts); the dialect's fixed bans (curl ``--config``, git ``--upload-pack``, ...)
   hold even if a rule names them;
4. the first rule that accepts the whole request wins; none means no run.

The result carries the exact argv that will execute (the dialect's hardening first: curl's ``--disable`` so
``~/.curlrc`` never loads), the credential family of the winning rule, and the canonical targets.

Pure: pydantic and stdlib only; the file system is reached only through the optional ``resolve_path``.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import unicodedata
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from policy.command_dialects import (
    COMMAND_BUILDERS, CURL_BODY_OPTIONS, CURL_LEADING, CURL_LONG_NAMES, CURL_NO_AT_OPTIONS, CURL_WRITE_OUT_FILE,
    GIT_CONFIG_SECTIONS, GIT_DENIED_SUBCOMMANDS, GIT_ENVIRONMENT, GIT_LEADING, denied_option,
)
from policy.command_models import (
    Access, CommandDenied, CommandMatch, CommandPolicy, CommandRule, CommandTool, OptionSpec, PositionalSpec,
    TargetSpec, ValueKind,
)
from policy.command_values import Resolver, check_value, is_panda_legacy_path, parse_url

__all__ = [
    "Access", "CommandDenied", "CommandMatch", "CommandPolicy", "CommandRule", "CommandTool", "OptionSpec",
    "PositionalSpec", "TargetSpec", "ValueKind", "argv_digest", "evaluate", "parse_secret_declaration",
]

MAX_ARGS = 256
MAX_ARG_CHARS = 8192
_SECRET_DECLARATION = re.compile(r"\{\{secret:([A-Za-z_][A-Za-z0-9_]*)\}\}")
_SECRET_MENTION = re.compile(r"\{\{\s*secret\s*:", re.IGNORECASE)


def argv_digest(argv: list[str]) -> str:
    """sha256 hex over the canonical JSON encoding of the argv list (what an envelope signs)."""
    encoded = json.dumps(list(argv), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()


def parse_secret_declaration(arg: str) -> str | None:
    """The variable name when ``arg`` is exactly ``{{secret:NAME}}``; None when it is an ordinary argument."""
    m = _SECRET_DECLARATION.fullmatch(arg)
    return m.group(1) if m else None


def evaluate(policy: CommandPolicy, tool: str, argv: list[str], *, environment: str, channel: str,
             resolve_path: Resolver | None = None) -> CommandMatch:
    """The match of the first rule that allows ``argv`` for ``tool`` in this environment and channel.

    ``argv[0]`` is the program name as the request wrote it (``curl`` or the tool's absolute path).
    ``resolve_path`` (``os.path.realpath`` on the executor) resolves symlinks so a link out of the root is
    refused here too; without it, only ``..`` is resolved and the runner checks symlinks before it executes.
    Raises ``CommandDenied`` with one line.
    """
    declared = _find_tool(policy, tool)
    args, secrets = _screen(declared, argv)
    candidates = [r for r in policy.rules if r.tool == tool]
    if not candidates:
        raise CommandDenied(f"no rule allows tool {tool!r}; declare a rule for it")
    placed = [r for r in candidates if environment in r.environments and r.channel == channel]
    if not placed:
        raise CommandDenied(f"no rule allows tool {tool!r} in environment {environment!r} on channel {channel!r}")
    reasons: list[tuple[int, str, str]] = []
    for rule in placed:
        try:
            return _match(policy, declared, rule, args, secrets, resolve_path)
        except _Mismatch as miss:
            reasons.append((miss.depth, rule.name, miss.reason))
    _, name, reason = max(reasons, key=lambda r: r[0])
    raise CommandDenied(f"no rule allows this {tool} command (closest rule {name!r}: {reason})")


# --- step 1-2: element screening --------------------------------------------------------------------------


def _find_tool(policy: CommandPolicy, tool: str) -> CommandTool:
    for t in policy.tools:
        if t.name == tool:
            return t
    raise CommandDenied(f"unknown command tool {tool!r}; declare it in the command tools file")


def _screen(tool: CommandTool, argv: list[str]) -> tuple[list[str], list[str]]:
    """The arguments after the program name, with secret declarations taken out, and the declared names."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise CommandDenied("argv must be a non-empty list of strings with the program name first")
    if len(argv) > MAX_ARGS:
        raise CommandDenied(f"argv has {len(argv)} elements, over the limit of {MAX_ARGS}")
    for i, arg in enumerate(argv):
        if len(arg) > MAX_ARG_CHARS:
            raise CommandDenied(f"argument {i} is {len(arg)} characters, over the limit of {MAX_ARG_CHARS}")
        if "\x00" in arg:
            raise CommandDenied(f"argument {i} contains a NUL byte")
        normal = unicodedata.normalize("NFKC", arg)
        if normal != arg:
            raise CommandDenied(f"argument {i} {arg!r} contains look-alike characters (it normalises to "
                                f"{normal!r}); write it in plain ASCII")
        if not arg.isascii() and (arg[:1] == "-" or _dash_like(arg[0])):
            raise CommandDenied(f"argument {i} {arg!r} is an option written with non-ASCII characters; "
                                "option names must be plain ASCII")
    _check_program(tool, argv[0])
    args: list[str] = []
    secrets: list[str] = []
    for i, arg in enumerate(argv[1:], start=1):
        name = parse_secret_declaration(arg)
        if name is not None:
            if name not in secrets:
                secrets.append(name)
            continue
        if _SECRET_MENTION.search(arg):
            raise CommandDenied(f"argument {i} embeds a {{{{secret:...}}}} reference; secrets may only be declared "
                                "as a whole argument, which injects an environment variable")
        if arg.startswith("@"):
            raise CommandDenied(f"argument {i} {arg!r} starts with '@', which programs read as a response file; "
                                "pass the arguments themselves")
        _check_not_builder(f"argument {i}", arg)
        args.append(arg)
    return args, secrets


def _dash_like(char: str) -> bool:
    """A character a reader takes for the hyphen that starts an option: dashes, minus signs, hyphens."""
    if unicodedata.category(char) == "Pd":
        return True
    name = unicodedata.name(char, "")
    return any(word in name for word in ("HYPHEN", "DASH", "MINUS"))


def _check_program(tool: CommandTool, program: str) -> None:
    if not program.isascii() or not re.fullmatch(r"[A-Za-z0-9_./+-]+", program):
        raise CommandDenied(f"program name {program!r} must be plain ASCII")
    base = posixpath.basename(program)
    if base in COMMAND_BUILDERS or posixpath.basename(tool.executable) in COMMAND_BUILDERS:
        raise CommandDenied(f"{base!r} is a shell or command builder and never runs as a command tool")
    if program not in (tool.executable, posixpath.basename(tool.executable)):
        raise CommandDenied(f"program {program!r} is not tool {tool.name!r} ({tool.executable})")


def _check_not_builder(what: str, value: str) -> None:
    """Refuse a shell or command builder anywhere a program could take it as a command to run."""
    candidates = [value]
    if "=" in value:
        candidates.append(value.split("=", 1)[1])
    for candidate in candidates:
        first = candidate.strip().split(" ", 1)[0]
        if posixpath.basename(first) in COMMAND_BUILDERS and first:
            raise CommandDenied(f"{what} {value!r} names the shell or command builder {first!r}; it is never allowed")


# --- step 3: per-rule tokenising ----------------------------------------------------------------------------


class _Mismatch(Exception):
    """This rule does not describe the request; ``depth`` says how far it got (for the closest-rule message)."""

    def __init__(self, reason: str, depth: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.depth = depth


@dataclass
class _Parsed:
    words: list[str] = field(default_factory=list)
    options: list[tuple[OptionSpec, str | None]] = field(default_factory=list)  # in request order, canonical values
    positionals: list[str] = field(default_factory=list)
    out: list[str] = field(default_factory=list)  # canonical argv after the leading arguments
    slots: list[int] = field(default_factory=list)  # where in ``out`` each positional stands
    paths: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)


def _match(policy: CommandPolicy, tool: CommandTool, rule: CommandRule, args: list[str], secrets: list[str],
           resolve: Resolver | None) -> CommandMatch:
    _check_secrets(policy, rule, secrets)
    if tool.dialect == "git" and not rule.subcommand:  # load refuses such a rule; one built without validation
        raise _Mismatch("a git rule must name its sub-command; this one names none", 0)
    parsed = _tokenise(tool, rule, args, resolve)
    if tool.dialect == "curl":
        _check_curl(rule, parsed)
    elif tool.dialect == "git":
        _check_git(parsed)
    if rule.access == "read":
        for url in parsed.urls:
            if is_panda_legacy_path(parse_url(url)[3]):
                raise _Mismatch(f"URL {url!r} is on PanDA's legacy API (/server/panda/), whose methods write on a "
                                "GET; it is never a read", 5)
    targets = _targets(rule, parsed)
    if rule.access == "write" and not targets:
        raise _Mismatch("a write must name its target; the request names none this rule can extract", 3)
    leading = _leading(tool)
    argv = [tool.executable, *leading, *parsed.out]
    dry = _dry_run_argv(argv, len(argv) - len(parsed.out), parsed.out, rule)
    env = dict(GIT_ENVIRONMENT) if tool.dialect == "git" else {}
    env.update(tool.environment)
    return CommandMatch(
        tool=tool.name, rule=rule.name, access=rule.access, executable=tool.executable, argv=argv,
        credential=rule.credential, targets=targets, dry_run_argv=dry, root=tool.root, paths=parsed.paths,
        secrets=secrets, environment=env, cwd=tool.root,
    )


def _dry_run_argv(argv: list[str], start: int, out: list[str], rule: CommandRule) -> list[str] | None:
    """The argv of the server-side dry run: the rule's flag added among the options, never behind '--'."""
    if not (rule.supports_dry_run and rule.dry_run_flag):
        return None
    flag = rule.dry_run_flag.split()
    if "--" in out:
        at = start + out.index("--")
        return [*argv[:at], *flag, *argv[at:]]
    return [*argv, *flag]


def _leading(tool: CommandTool) -> list[str]:
    fixed = list(CURL_LEADING) if tool.dialect == "curl" else list(GIT_LEADING) if tool.dialect == "git" else []
    return [*fixed, *tool.leading_args]


def _check_secrets(policy: CommandPolicy, rule: CommandRule, secrets: list[str]) -> None:
    """Every declared ``{{secret:NAME}}`` must be a variable of this rule's one family (another rule may differ)."""
    own = set(policy.credentials.get(rule.credential, [])) if rule.credential else set()
    for name in secrets:
        if name in own:
            continue
        other = [family for family, names in policy.credentials.items() if name in names]
        if other:
            raise _Mismatch(f"{{{{secret:{name}}}}} belongs to credential family {other[0]!r}, but the rule runs "
                            f"with {rule.credential or 'no credential'}; one family per command", 6)
        raise _Mismatch(f"{{{{secret:{name}}}}} is not a variable of credential family "
                        f"{rule.credential or '(none)'}", 6)


def _lookup(specs: list[OptionSpec], spelling: str) -> OptionSpec | None:
    for spec in specs:
        if spelling in spec.spellings:
            return spec
    return None


def _tokenise(tool: CommandTool, rule: CommandRule, args: list[str], resolve: Resolver | None) -> _Parsed:
    parsed = _Parsed()
    counts: dict[str, int] = {}
    in_global = bool(rule.subcommand)
    after_dashdash = False
    i = 0

    def specs() -> list[OptionSpec]:
        return rule.global_options if in_global else rule.options

    def take(spec: OptionSpec, value: str | None) -> None:
        counts[spec.name] = counts.get(spec.name, 0) + 1
        if counts[spec.name] > spec.max_count:
            raise _Mismatch(f"option {spec.name} may appear at most {spec.max_count} time(s)", 3)
        for spelling in spec.spellings:  # a rule cannot lift a fixed ban, even one built without validation
            why = denied_option(tool.dialect, spelling, tuple(parsed.words))
            if why:
                raise CommandDenied(f"{tool.dialect} option {spelling} {why}; it is never allowed")
        if spec.value == "switch":
            parsed.options.append((spec, None))
            parsed.out.append(spec.name)
            return
        assert value is not None
        canonical = _value(tool, rule, spec.value, f"value of {spec.name}", value, spec.choices, spec.pattern,
                           resolve, parsed)
        parsed.options.append((spec, canonical))
        parsed.out.extend([f"{spec.name}={canonical}"] if spec.joined else [spec.name, canonical])

    def unknown(spelling: str) -> None:
        why = denied_option(tool.dialect, spelling, tuple(parsed.words))
        if why:
            raise CommandDenied(f"{tool.dialect} option {spelling} {why}; it is never allowed")
        if not spelling.isascii():
            raise CommandDenied(f"option {spelling!r} is not plain ASCII")
        raise _Mismatch(f"option {spelling} is not allowed here", 2)

    while i < len(args):
        arg = args[i]
        i += 1
        if after_dashdash or arg == "-" or not arg.startswith("-"):
            if in_global:  # the first positional is the sub-command
                if after_dashdash:
                    raise _Mismatch("the sub-command must come before '--'; after it every word is positional", 5)
                _subcommand(tool, rule, parsed, arg)
                if len(parsed.words) == len(rule.subcommand):
                    in_global = False
                continue
            parsed.positionals.append(arg)
            parsed.slots.append(len(parsed.out))
            parsed.out.append(arg)
            continue
        if arg == "--":
            after_dashdash = True
            parsed.out.append("--")
            continue
        if arg.startswith("--"):
            name, eq, inline = arg.partition("=")
            spec = _lookup(specs(), name)
            if spec is None:
                unknown(name)
                continue
            if spec.value == "switch":
                if eq:
                    raise _Mismatch(f"switch {name} takes no value", 3)
                take(spec, None)
                continue
            if eq:
                take(spec, inline)
            else:
                if i >= len(args):
                    raise _Mismatch(f"option {name} needs a value", 3)
                take(spec, args[i])
                i += 1
            continue
        # a short option or a cluster of them: -s, -sS, -XPOST, -X POST, -o- ...
        j = 1
        while j < len(arg):
            spelling = "-" + arg[j]
            spec = _lookup(specs(), spelling)
            if spec is None:
                unknown(spelling)
            assert spec is not None
            j += 1
            if spec.value == "switch":
                take(spec, None)
                continue
            rest = arg[j:]
            if rest.startswith("=") and tool.dialect == "git":
                rest = rest[1:]
            if rest:
                take(spec, rest)
            else:
                if i >= len(args):
                    raise _Mismatch(f"option {spelling} needs a value", 3)
                take(spec, args[i])
                i += 1
            break
    if in_global:
        raise _Mismatch(f"the sub-command {' '.join(rule.subcommand)!r} is missing", 0)
    _positionals(tool, rule, parsed, resolve)
    return parsed


def _subcommand(tool: CommandTool, rule: CommandRule, parsed: _Parsed, word: str) -> None:
    if tool.dialect == "git" and not parsed.words and word in GIT_DENIED_SUBCOMMANDS:
        raise CommandDenied(f"git {word} runs programs or serves repositories; it is never allowed")
    expected = rule.subcommand[len(parsed.words)]
    if word != expected:
        raise _Mismatch(f"sub-command {word!r} is not {expected!r}", len(parsed.words))
    parsed.words.append(word)
    parsed.out.append(word)


def _positionals(tool: CommandTool, rule: CommandRule, parsed: _Parsed, resolve: Resolver | None) -> None:
    specs = rule.positionals
    values = parsed.positionals
    required = sum(1 for s in specs if not s.optional)
    if len(values) < required:
        raise _Mismatch(f"expected at least {required} positional argument(s), got {len(values)}", 3)
    if len(values) > len(specs) and not (specs and specs[-1].repeat):
        raise _Mismatch(f"expected at most {len(specs)} positional argument(s), got {len(values)}", 3)
    canonical: list[str] = []
    for index, value in enumerate(values):
        spec = specs[min(index, len(specs) - 1)]
        canonical.append(_value(tool, rule, spec.value, f"positional {spec.name}", value, spec.choices, spec.pattern,
                                resolve, parsed))
    parsed.positionals = canonical
    for slot, value in zip(parsed.slots, canonical):
        parsed.out[slot] = value


def _value(tool: CommandTool, rule: CommandRule, kind: ValueKind, what: str, value: str, choices: list[str],
           pattern: str | None, resolve: Resolver | None, parsed: _Parsed) -> str:
    _check_not_builder(what, value)
    try:
        canonical = check_value(kind, what, value, choices=choices, pattern=pattern, root=tool.root,
                                allowed_hosts=rule.allowed_hosts, url_paths=rule.url_paths, resolve=resolve)
    except CommandDenied as denied:
        raise _Mismatch(denied.reason, 4) from None
    if kind == "path":
        parsed.paths.append(canonical)
    if kind == "url":
        parsed.urls.append(canonical)
    return canonical


# --- dialect checks over the whole request ------------------------------------------------------------------


def _check_curl(rule: CommandRule, parsed: _Parsed) -> None:
    # What curl makes of each option as emitted (its canonical spelling may be the short one).
    names = [CURL_LONG_NAMES.get(spec.name, spec.name) for spec, _ in parsed.options]
    for name, (_, value) in zip(names, parsed.options):
        if value is None:
            continue
        if name in CURL_NO_AT_OPTIONS and "@" in value:  # whatever the rule declared: '@file', 'name@file'
            raise CommandDenied(f"curl {name} value {value!r} contains '@', with which curl reads a local file "
                                "(@file, name@file); pass the content without '@'")
        if CURL_WRITE_OUT_FILE in value.lower():
            raise CommandDenied(f"curl {name} value {value!r} contains {CURL_WRITE_OUT_FILE}...}}, with which "
                                "--write-out writes a file (curl 8.3+); remove it")
    # curl sends the last --request it is given; the first was judged once, and "-X GET -X POST" read as GET
    method = next((v for name, (_, v) in reversed(list(zip(names, parsed.options))) if name == "--request"), None)
    if method is None:
        if "--head" in names:
            method = "HEAD"
        elif "--get" in names:
            method = "GET"
        elif any(n in CURL_BODY_OPTIONS for n in names):
            method = "POST"
        else:
            method = "GET"
    allowed = rule.method or "GET"
    if method.upper() != allowed:
        raise _Mismatch(f"HTTP method {method} is not {allowed}", 1)
    if not parsed.urls:
        raise _Mismatch("the request names no URL", 3)


def _check_git(parsed: _Parsed) -> None:
    values = [v for _, v in parsed.options if v is not None] + parsed.positionals
    for value in values:
        lowered = value.lower()
        if "::" in value or lowered.startswith(("ext:", "fd:")):
            raise CommandDenied(f"git argument {value!r} names a remote-helper transport (ext::/fd::); "
                                "it is never allowed")
        if lowered.startswith(GIT_CONFIG_SECTIONS) and ("=" in value or parsed.words[:1] == ["config"]):
            raise CommandDenied(f"git argument {value!r} sets configuration that can run programs; "
                                "it is never allowed")


# --- targets ------------------------------------------------------------------------------------------------


def _targets(rule: CommandRule, parsed: _Parsed) -> list[str]:
    found: list[str] = []
    for spec in rule.targets:
        values = _target_values(spec, parsed)
        if not values and spec.required:
            raise _Mismatch(f"the request names no {spec.source} target {spec.field or spec.index}", 3)
        for value in values:
            if not re.fullmatch(spec.value_pattern, value):
                raise _Mismatch(f"target value {value!r} does not match {spec.value_pattern!r}", 4)
            target = spec.template.replace("{value}", value)
            if target not in found:
                found.append(target)
    return found


def _target_values(spec: TargetSpec, parsed: _Parsed) -> list[str]:
    if spec.source == "form":
        out = []
        for option, value in parsed.options:
            if option.value == "form" and value is not None:
                out += [v for k, v in parse_qsl(value, keep_blank_values=True) if k == spec.field]
        return out
    if spec.source == "json":
        out = []
        for option, value in parsed.options:
            if option.value == "json" and value is not None:
                body = json.loads(value)
                if not isinstance(body, dict) or spec.field not in body:
                    continue
                item = body[spec.field]
                # Every value the field holds is a target, or the command is refused: skipped, a float or a
                # boolean in a list of ids was run but missing from the target set a grant and an approval show.
                for one in item if isinstance(item, list) else [item]:
                    if not isinstance(one, (str, int)) or isinstance(one, bool):
                        raise _Mismatch(f"target field {spec.field!r} holds {json.dumps(one)[:40]}, which is not a "
                                        "string or an integer", 4)
                    out.append(str(one))
        return out
    if spec.source == "query":
        return [v for url in parsed.urls for k, v in parse_qsl(parse_url(url)[4], keep_blank_values=True)
                if k == spec.field]
    if spec.source == "url_path":
        out = []
        for url in parsed.urls:
            m = re.fullmatch(spec.field, parse_url(url)[3])
            if m:
                out.append(m.group(1))
        return out
    if spec.source == "option":
        return [v for option, v in parsed.options if option.name == spec.field and v is not None]
    return [parsed.positionals[spec.index]] if spec.index < len(parsed.positionals) else []
