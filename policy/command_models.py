"""The declared shape of command tools and the rules that allow them, as data.

A command tool is one executable an operator's fix may run (a PanDA CLI, ``curl`` against an API, ``git`` on
a configuration repository). Nothing about a request is trusted: the model writes the argv, so the rules say
exactly which argv shapes may run, and anything they do not describe is refused. These models are the rule
format; ``policy.commands.evaluate`` is the judge.

The grammar a rule accepts lives in the rule (its options with their value kinds, its positionals), not in a
tool-wide vocabulary: a flag that no rule names is unknown, and unknown means denied. Options must be declared
with the arity the real binary gives them, because a switch the binary reads as taking a value would swallow
the next argument unseen; ``docs/command-tools.md`` lists this as a reviewed-surface risk.

Pure: pydantic and stdlib only.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from policy.command_dialects import (
    COMMAND_BUILDERS, CURL_LONG_NAMES, CURL_VALUE_KINDS, DIALECT_PROGRAMS, GIT_PATH_OPTIONS, PANDA_LEGACY_METHODS,
    PANDA_LEGACY_SEGMENTS, RUNTIME_VARIABLES, denied_environment, denied_option, is_model_provider_variable,
)
from policy.scrub import find_secrets

Access = Literal["read", "write"]
Dialect = Literal["generic", "curl", "git"]

# How an option's value or a positional is checked and canonicalised:
# switch: no value; url: http(s) URL whose host:port is allow-listed by the rule; path: resolved against the
# tool's root and refused when it leaves it; integer: decimal digits; enum: one of ``choices``; text: free text
# that does not start with ``@`` and carries no control or command-substitution characters (optionally
# ``pattern``); form: ``name=value`` pairs joined by ``&`` (curl ``-d``), no ``@`` or ``<`` file references;
# json: a JSON object of scalars or lists of scalars (curl ``--json``), re-encoded canonically so the server
# reads exactly what was checked.
ValueKind = Literal["switch", "url", "path", "integer", "enum", "text", "form", "json"]

_OPTION_NAME = re.compile(r"^(-[A-Za-z0-9]|--[A-Za-z0-9][A-Za-z0-9-]*)\Z")
_FAMILY_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*\Z")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OptionSpec(_Strict):
    """One flag a rule allows: its canonical spelling, the other spellings the binary accepts, and its value."""

    name: str = Field(description="canonical spelling, emitted in the executed argv: '--request' or '-s'")
    aliases: list[str] = Field(default_factory=list, description="other exact spellings: '-X' for '--request'")
    value: ValueKind = "switch"
    choices: list[str] = Field(default_factory=list, description="allowed values of an enum option")
    pattern: str | None = Field(default=None, description="a text value must match this regular expression whole")
    max_count: int = Field(default=1, ge=1, description="how often the option may appear")
    joined: bool = Field(default=False, description="emit '--name=value' (options whose value is optional)")

    @field_validator("name", "aliases")
    @classmethod
    def _spelling(cls, value: str | list[str]) -> str | list[str]:
        for spelling in [value] if isinstance(value, str) else value:
            if not _OPTION_NAME.fullmatch(spelling):
                raise ValueError(f"option spelling {spelling!r} must be -x or --long-name in ASCII")
        return value

    @model_validator(mode="after")
    def _value_fields(self) -> OptionSpec:
        if self.value == "enum" and not self.choices:
            raise ValueError(f"enum option {self.name} needs choices")
        if self.pattern is not None:
            re.compile(self.pattern)
        if self.joined and self.value == "switch":
            raise ValueError(f"switch {self.name} has no value to join")
        if self.joined and not self.name.startswith("--"):
            raise ValueError(f"only a long option can be emitted joined; {self.name} is short")
        return self

    @property
    def spellings(self) -> list[str]:
        return [self.name, *self.aliases]


class PositionalSpec(_Strict):
    """One positional argument (after the sub-command words), checked like an option value."""

    name: str = Field(description="what the argument is, for messages: 'url', 'repository'")
    value: ValueKind = "text"
    choices: list[str] = Field(default_factory=list)
    pattern: str | None = None
    optional: bool = False
    repeat: bool = Field(default=False, description="the last positional may repeat")

    @model_validator(mode="after")
    def _value_fields(self) -> PositionalSpec:
        if self.value == "switch":
            raise ValueError(f"positional {self.name} cannot be a switch")
        if self.value == "enum" and not self.choices:
            raise ValueError(f"enum positional {self.name} needs choices")
        if self.pattern is not None:
            re.compile(self.pattern)
        return self


class TargetSpec(_Strict):
    """Where the canonical target of a command comes from, so grants and envelopes can name it.

    ``form``: a field of a form body (curl ``-d task_id=123``); ``json``: a top-level field of a JSON body
    (curl ``--json '{"task_id": 123}'``); ``query``: a URL query parameter;
    ``url_path``: a regex group over the URL path; ``option``: the value of an option (git ``-C <repo>``);
    ``positional``: the positional at ``index``. The extracted value must match ``value_pattern`` whole and is
    put into ``template`` at ``{value}``: ``panda:task:{value}``, ``git:{value}``.
    """

    source: Literal["form", "json", "query", "url_path", "option", "positional"]
    field: str = Field(default="", description="form/query field name, option name, or url_path regex")
    index: int = Field(default=0, ge=0, description="positional index for source=positional")
    template: str = "{value}"
    value_pattern: str = Field(default=r"[A-Za-z0-9_./:@+-]+", description="the extracted value must match whole")
    required: bool = True

    @model_validator(mode="after")
    def _fields(self) -> TargetSpec:
        if "{value}" not in self.template:
            raise ValueError(f"target template {self.template!r} must contain {{value}}")
        re.compile(self.value_pattern)
        if self.source == "url_path":
            if re.compile(self.field).groups < 1:
                raise ValueError(f"url_path target regex {self.field!r} needs a capture group")
        elif self.source in ("form", "json", "query", "option") and not self.field:
            raise ValueError(f"a {self.source} target needs a field")
        return self


class CommandTool(_Strict):
    """One declared command tool (``kind: command``)."""

    name: str
    executable: str = Field(description="absolute path, resolved once when the configuration loads")
    description: str = ""
    root: str | None = Field(default=None, description="the only directory path arguments may resolve into")
    dialect: Dialect = Field(default="generic", description="built-in hardening for curl or git; when not given, "
                                                            "taken from the executable's name (curl, git)")
    leading_args: list[str] = Field(
        default_factory=list, description="fixed arguments placed right after the executable, before the request's")
    environment: dict[str, str] = Field(
        default_factory=dict, description="fixed, non-secret variables this tool's children see")

    @field_validator("executable")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"executable {value!r} must be an absolute path")
        return value

    @field_validator("root")
    @classmethod
    def _root_absolute(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value == "/" or not value.startswith("/") or value.endswith("/"):
            raise ValueError(f"root {value!r} must be an absolute directory below / without a trailing slash; "
                             "'/' would leave paths unbounded")
        return value

    @field_validator("environment")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"environment name {name!r} is not a variable name")
        return value

    @model_validator(mode="after")
    def _dialect_of_the_program(self) -> CommandTool:
        """Without a ``dialect``, the executable's name decides it: curl and git are never generic."""
        if "dialect" not in self.model_fields_set:
            program = program_dialect(self.executable)
            if program is not None:
                object.__setattr__(self, "dialect", program)
        return self


class CommandRule(_Strict):
    """A fail-closed allow rule for one command shape."""

    name: str
    tool: str
    access: Access
    environments: list[str] = Field(min_length=1)
    channel: Literal["ro", "rw"]
    credential: str | None = Field(default=None, description="credential family name, never a value")
    supports_dry_run: bool = False
    dry_run_flag: str | None = Field(default=None, description="appended for the mandatory server-side dry run")
    description: str = ""
    subcommand: list[str] = Field(
        default_factory=list, description="the leading words after the global options: ['log'], ['ls-remote']")
    method: str | None = Field(default=None, description="curl: the one HTTP method this rule allows")
    global_options: list[OptionSpec] = Field(
        default_factory=list, description="options allowed before the sub-command (git -C, --git-dir)")
    options: list[OptionSpec] = Field(default_factory=list, description="options allowed after the sub-command")
    positionals: list[PositionalSpec] = Field(default_factory=list)
    allowed_hosts: list[str] = Field(
        default_factory=list, description="host or host:port every URL argument must name exactly")
    url_paths: list[str] = Field(
        default_factory=list, description="regular expressions one of which each URL path must match whole")
    targets: list[TargetSpec] = Field(default_factory=list)

    @field_validator("credential")
    @classmethod
    def _family(cls, value: str | None) -> str | None:
        if value is not None and not _FAMILY_NAME.fullmatch(value):
            raise ValueError(f"credential family {value!r} must be a plain name")
        return value

    @field_validator("url_paths")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        for pattern in value:
            re.compile(pattern)
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return [host.lower() for host in value]

    @model_validator(mode="after")
    def _shape(self) -> CommandRule:
        if self.supports_dry_run and not self.dry_run_flag:
            raise ValueError(f"rule {self.name} supports a dry run but names no dry_run_flag")
        if self.access == "write" and not self.targets:
            raise ValueError(f"write rule {self.name} must say how its targets are extracted")
        if self.channel == "ro" and self.access == "write":
            raise ValueError(f"write rule {self.name} cannot be on the ro channel")
        if self.method is not None:
            object.__setattr__(self, "method", self.method.upper())
        if self.access == "read" and (self.method or "GET") not in ("GET", "HEAD"):
            raise ValueError(f"read rule {self.name} allows {self.method}: a read rule is judged read-only and runs "
                             "in automatic steps, so it allows GET or HEAD only; make it a write rule")
        for group in (self.global_options, self.options):
            seen: set[str] = set()
            for option in group:
                for spelling in option.spellings:
                    if spelling in seen:
                        raise ValueError(f"rule {self.name} declares option {spelling} twice")
                    seen.add(spelling)
        return self


class CommandPolicy(_Strict):
    """All declared tools and rules, plus the variable names each credential family injects (names only)."""

    tools: list[CommandTool]
    rules: list[CommandRule]
    credentials: dict[str, list[str]] = Field(
        default_factory=dict, description="family name -> the variable names its children see")

    @model_validator(mode="after")
    def _consistent(self) -> CommandPolicy:
        tools = {t.name: t for t in self.tools}
        if len(tools) != len(self.tools):
            raise ValueError("two command tools share a name")
        names = [r.name for r in self.rules]
        if len(set(names)) != len(names):
            raise ValueError("two command rules share a name")
        for tool in self.tools:
            problem = tool_problem(tool)
            if problem:
                raise ValueError(f"tool {tool.name}: {problem}")
        for rule in self.rules:
            ruled = tools.get(rule.tool)
            if ruled is None:
                raise ValueError(f"rule {rule.name} names unknown tool {rule.tool!r}")
            if self.credentials and rule.credential is not None and rule.credential not in self.credentials:
                raise ValueError(f"rule {rule.name} names unknown credential family {rule.credential!r}")
            problem = rule_problem(ruled, rule)
            if problem:
                raise ValueError(f"rule {rule.name}: {problem}")
        return self


class CommandMatch(BaseModel):
    """What ``evaluate`` returns when a rule allows the request: the exact argv that will run and why."""

    model_config = ConfigDict(frozen=True)

    tool: str
    rule: str
    access: Access
    executable: str
    argv: list[str] = Field(description="normalised argv that will be executed (argv[0] is the executable)")
    credential: str | None
    targets: list[str]
    dry_run_argv: list[str] | None
    root: str | None = None
    paths: list[str] = Field(default_factory=list, description="every root-bounded path argument, resolved")
    secrets: list[str] = Field(default_factory=list, description="variable names declared with {{secret:NAME}}")
    environment: dict[str, str] = Field(default_factory=dict, description="the tool's fixed, non-secret variables")
    cwd: str | None = Field(default=None, description="working directory: the tool's root when it has one")


class CommandDenied(Exception):
    """A refused command request; ``reason`` is one line saying what was refused and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def program_dialect(executable: str) -> Dialect | None:
    """The dialect a program's basename calls for (``/usr/bin/curl`` -> curl), or None for any other program."""
    found = DIALECT_PROGRAMS.get(executable.rsplit("/", 1)[-1])
    return "curl" if found == "curl" else "git" if found == "git" else None


def dialect_problem(executable: str, dialect: str, program: Dialect | None = None) -> str | None:
    """Why ``dialect`` is wrong for ``executable`` (whose program is ``program``, by default the one its name
    says): curl runs only as dialect curl, git only as git."""
    program = program or program_dialect(executable)
    if program is not None and dialect != program:
        return (f"executable {executable} is {program}, which runs only with its dialect's bans and fixed hardening; "
                f'write dialect = "{program}" or leave dialect out')
    return None


def tool_problem(tool: CommandTool) -> str | None:
    """Why a tool declaration is unsafe, or None: a shell or command builder is never a command tool, and curl or
    git never runs without its dialect."""
    base = tool.executable.rsplit("/", 1)[-1]
    if base in COMMAND_BUILDERS:
        return f"{base} is a shell or command builder and cannot be a command tool"
    mismatch = dialect_problem(tool.executable, tool.dialect)
    if mismatch:
        return mismatch
    for arg in tool.leading_args:
        why = denied_option(tool.dialect, arg.split("=", 1)[0])
        if why:
            return f"leading argument {arg} {why} and is never allowed for {tool.dialect}"
    for name, value in tool.environment.items():
        why = denied_environment(tool.dialect, name)
        if why:
            return f"environment variable {name} {why}"
        if name in RUNTIME_VARIABLES or is_model_provider_variable(name):
            return f"environment sets {name}, which only the executor sets (and provider keys never reach a command)"
        if find_secrets(value):
            return (f"environment value of {name} looks like a secret; the file names credentials, it never holds "
                    "them: declare a credential family")
    return None


# URL paths a read rule's url_paths may not match: PanDA's legacy methods (every one writes on a GET) and a few
# names of other shapes, so a pattern such as '/server/panda/get[A-Za-z]+' is caught too. Evaluation refuses
# every /server/panda/ path for a read whatever the patterns say; this is the early, load-time error.
_LEGACY_PROBES = tuple("/" + "/".join(PANDA_LEGACY_SEGMENTS) + suffix for suffix in (
    "", "/", *(f"/{m}" for m in PANDA_LEGACY_METHODS), "/getJobStatus", "/getTaskStatus", "/get_status",
    "/getStatus", "/killTask", "/x", "/X", "/0", "/a-b.c_d"))


def legacy_path_pattern(url_paths: list[str]) -> str | None:
    """The first of ``url_paths`` that matches a path of PanDA's legacy API, or None."""
    return next((p for p in url_paths if any(re.fullmatch(p, probe) for probe in _LEGACY_PROBES)), None)


def rule_problem(tool: CommandTool, rule: CommandRule) -> str | None:
    """Why a rule cannot be loaded for its tool, or None (never-allowed flags, unbounded paths, loose URLs)."""
    if tool.dialect == "git" and not rule.subcommand:
        return ('a git rule names its sub-command (subcommand = ["log"]); without one, its first positional could '
                "be any sub-command, those that run programs included")
    for option in [*rule.global_options, *rule.options]:
        for spelling in option.spellings:
            why = denied_option(tool.dialect, spelling, tuple(rule.subcommand))
            if why:
                return f"option {spelling} {why} and is never allowed for {tool.dialect}"
        if option.value == "path" and tool.root is None:
            return f"option {option.name} takes a path but tool {tool.name} declares no root"
        if tool.dialect == "curl":
            for spelling in option.spellings:
                allowed = CURL_VALUE_KINDS.get(CURL_LONG_NAMES.get(spelling, spelling))
                if allowed is not None and option.value not in allowed:
                    why = "" if allowed == ("url",) else " (curl reads a local file named after '@' in its value)"
                    return f"option {option.name} must be declared with value kind {' or '.join(allowed)}{why}"
        if tool.dialect == "git" and set(option.spellings) & GIT_PATH_OPTIONS and option.value != "path":
            return f"option {option.name} must be declared with value kind path"
    for positional in rule.positionals:
        if positional.value == "path" and tool.root is None:
            return f"positional {positional.name} is a path but tool {tool.name} declares no root"
        if tool.dialect == "curl" and positional.value != "url":
            return f"curl positional {positional.name} is a URL and must be declared with value kind url"
    kinds = [o.value for o in [*rule.global_options, *rule.options]] + [p.value for p in rule.positionals]
    if "url" in kinds and not rule.allowed_hosts:
        return "URL arguments need allowed_hosts"
    legacy = legacy_path_pattern(rule.url_paths) if rule.access == "read" else None
    if legacy is not None:
        return (f"url_paths pattern {legacy!r} matches PanDA's legacy /server/panda/<method> paths, whose methods "
                "write on a GET; a read rule never covers them: narrow the pattern (e.g. '/api/v1/task/[a-z_]+')")
    return None
