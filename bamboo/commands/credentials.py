"""The child's environment: basic runtime variables plus exactly one credential family, nothing inherited.

A command never inherits the executor's environment, where model-provider keys, other deployments'
credentials and proxy settings live. Configuration names the variables that hold a family's values in the
executor's own environment; the values are read here, at the last moment, and go nowhere else.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from policy.command_dialects import MODEL_PROVIDER_VARIABLES, RUNTIME_VARIABLES, is_model_provider_variable
from policy.commands import CommandDenied, CommandMatch

__all__ = ["MODEL_PROVIDER_VARIABLES", "RUNTIME_VARIABLES", "CredentialFamily", "clean_environment",
           "credential_values", "is_model_provider_variable", "private_home"]

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
HOME_PREFIX = "bamboo-cmd-home-"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SAFE_TZ = re.compile(r"[A-Za-z0-9_+\-/]{1,64}")


class CredentialFamily(BaseModel):
    """One credential family: the variables a child sees, each mapped to the executor variable holding its value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    env: dict[str, str] = Field(min_length=1, description="child variable name -> executor variable name")

    @field_validator("env")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for child, source in value.items():
            for name in (child, source):
                if not _ENV_NAME.fullmatch(name):
                    raise ValueError(f"{name!r} is not an environment variable name")
                if is_model_provider_variable(name):
                    raise ValueError(f"{name} is a model-provider key and never reaches a command")
            if child in RUNTIME_VARIABLES:
                raise ValueError(f"{child} is a runtime variable the executor sets itself")
        return value


def private_home() -> str:
    """A fresh, empty HOME only this child uses: no ``~/.curlrc``, ``~/.gitconfig`` or ``~/.netrc`` to find."""
    return tempfile.mkdtemp(prefix=HOME_PREFIX)


def clean_environment(match: CommandMatch, families: dict[str, CredentialFamily],
                      source: Mapping[str, str]) -> dict[str, str]:
    """Basic runtime variables, the tool's fixed variables, and exactly the one family the winning rule names.

    Raises ``CommandDenied`` when the family is unknown or one of its variables is unset in ``source``.
    """
    tz = source.get("TZ", "UTC")
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": tz if _SAFE_TZ.fullmatch(tz) else "UTC"}
    for name, value in match.environment.items():
        if name in RUNTIME_VARIABLES or is_model_provider_variable(name):
            raise CommandDenied(f"tool {match.tool} sets {name}, which only the executor may set")
        env[name] = value
    if match.credential is None:
        if match.secrets:
            raise CommandDenied(f"rule {match.rule} has no credential family, yet the request declares "
                                f"{', '.join(match.secrets)}")
        env["HOME"] = private_home()
        return env
    family = families.get(match.credential)
    if family is None:
        raise CommandDenied(f"rule {match.rule} names credential family {match.credential!r}, which is not declared")
    for name in match.secrets:
        if name not in family.env:
            raise CommandDenied(f"{{{{secret:{name}}}}} is not a variable of credential family {family.name}")
    for child, holder in family.env.items():
        given = source.get(holder)
        if not given:
            raise CommandDenied(f"credential family {family.name} needs {holder} in the executor's environment; set it")
        env[child] = given
    env["HOME"] = private_home()  # last: a refused environment leaves no directory behind
    return env


def credential_values(env: Mapping[str, str], match: CommandMatch) -> list[str]:
    """The values in ``env`` that came from a credential family (everything but runtime and tool variables)."""
    fixed = RUNTIME_VARIABLES | set(match.environment)
    return [value for name, value in env.items() if name not in fixed and value]
