"""Load the command tools file (TOML): tools, their rules, and credential families by variable *name*.

Executables are resolved to absolute paths once, here, against the fixed safe ``PATH`` (never the caller's),
and roots to real directories, so a later change of ``PATH`` or a swapped symlink does not change what runs.
Every problem is one line naming the file and the field.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from bamboo.commands.credentials import SAFE_PATH, CredentialFamily
from bamboo.settings import Settings
from policy.command_models import CommandTool, dialect_problem, program_dialect, tool_problem
from policy.commands import CommandPolicy

TOP_LEVEL = frozenset({"tools", "rules", "credentials"})


class CommandConfigError(ValueError):
    """A command tools file that cannot be used; the message is one line naming the file and field."""


class CommandConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    policy: CommandPolicy
    credentials: dict[str, CredentialFamily]


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    loc = tuple(err.get("loc", ()))
    return f"{_where(loc)}: {msg}" if loc else msg


def _resolve_executable(file: Path, index: int, value: Any) -> str:
    where = f"{file}: tools[{index}].executable"
    if not isinstance(value, str) or not value:
        raise CommandConfigError(f"{where}: give the program name or its absolute path")
    found = value if os.path.isabs(value) else shutil.which(value, path=SAFE_PATH)
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise CommandConfigError(f"{where}: {value!r} is not an executable file (searched {SAFE_PATH}); install it "
                                 "or give its absolute path")
    return os.path.abspath(found)


def _resolve_root(file: Path, index: int, value: Any) -> str | None:
    if value is None:
        return None
    where = f"{file}: tools[{index}].root"
    if not isinstance(value, str) or not os.path.isabs(value):
        raise CommandConfigError(f"{where}: give an absolute directory")
    real = os.path.realpath(value)
    if not os.path.isdir(real):
        raise CommandConfigError(f"{where}: {value!r} is not a directory; create it or fix the path")
    return real


def _dialect(file: Path, index: int, tool: dict[str, Any], real: str) -> Any:
    """The tool's dialect: as declared, else the one its program calls for (curl, git; through a symlink too),
    else generic. curl or git declared as another dialect (generic included) is a load error."""
    declared = tool.get("dialect")
    programs = {d for d in (program_dialect(tool["executable"]), program_dialect(real)) if d is not None}
    if len(programs) > 1:
        raise CommandConfigError(f"{file}: tools[{index}].executable: {tool['executable']} resolves to {real}, "
                                 "another program; name the program itself")
    if not programs:
        return "generic" if declared is None else declared
    program = programs.pop()
    if declared is not None and declared != program:
        raise CommandConfigError(f"{file}: tools[{index}].dialect: {dialect_problem(real, str(declared), program)}")
    return program


def load_command_config(path: str | Path) -> CommandConfig:
    """Parse and check the tools file; raises ``CommandConfigError`` with one line on any problem."""
    file = Path(path)
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CommandConfigError(f"{file}: no such file; set BAMBOO_COMMAND_TOOLS_FILE to the tools file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandConfigError(f"{file}: cannot read it: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CommandConfigError(f"{file}: not valid TOML: {exc}") from None
    unknown = sorted(set(raw) - TOP_LEVEL)
    if unknown:
        raise CommandConfigError(f"{file}: {unknown[0]}: unknown section; use tools, rules and credentials")
    tools = raw.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise CommandConfigError(f"{file}: tools: write each tool as a [[tools]] table")
    resolved: list[Any] = []  # tool tables as dicts; CommandPolicy validates them into CommandTool
    for i, tool in enumerate(tools):
        tool = dict(tool)
        tool["executable"] = _resolve_executable(file, i, tool.get("executable"))
        tool["root"] = _resolve_root(file, i, tool.get("root"))
        real = os.path.realpath(tool["executable"])
        problem = tool_problem(CommandTool(name="resolved", executable=real))  # a symlink to a shell is a shell
        if problem:
            raise CommandConfigError(f"{file}: tools[{i}].executable: {problem}")
        tool["dialect"] = _dialect(file, i, tool, real)
        resolved.append(tool)
    families_raw = raw.get("credentials", {})
    if not isinstance(families_raw, dict):
        raise CommandConfigError(f"{file}: credentials: write each family as a [credentials.<name>] table")
    families: dict[str, CredentialFamily] = {}
    for name, body in families_raw.items():
        if not isinstance(body, dict):
            raise CommandConfigError(f"{file}: credentials.{name}: give env = {{ CHILD_VAR = \"EXECUTOR_VAR\" }}")
        try:
            families[name] = CredentialFamily(name=name, **body)
        except ValidationError as exc:
            raise CommandConfigError(f"{file}: credentials.{name}.{_first_error(exc)}") from None
        except TypeError as exc:
            raise CommandConfigError(f"{file}: credentials.{name}: {exc}") from None
    try:
        policy = CommandPolicy(tools=resolved, rules=raw.get("rules", []),
                               credentials={n: sorted(f.env) for n, f in families.items()})
    except ValidationError as exc:
        raise CommandConfigError(f"{file}: {_first_error(exc)}") from None
    for i, rule in enumerate(policy.rules):
        if rule.credential is not None and rule.credential not in families:
            raise CommandConfigError(f"{file}: rules[{i}].credential: family {rule.credential!r} is not declared "
                                     "under [credentials]")
    return CommandConfig(policy=policy, credentials=families)


def configured_command_tools(settings: Settings) -> CommandConfig | None:
    """The tools file named by ``BAMBOO_COMMAND_TOOLS_FILE``, loaded; None when no file is configured."""
    if settings.command_tools_file is None:
        return None
    return load_command_config(settings.command_tools_file)
