"""Which Mattermost accounts speak for which registered people: a mapping the deployment owns.

Channel membership grants nothing. A Mattermost user id (not a user name, which its owner can change)
maps to one identity of the approver registry; the bot signs for that identity with its front-end key, and
the session decides, against the registry, whether that person may do what they asked. An account that is
not in the mapping is refused by the bot itself, and the refusal is audited.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, field_validator

from policy.identity import Identity


class UserMapError(ValueError):
    """The mapping file cannot be read; the message says what to fix."""


class UserMap(BaseModel):
    users: dict[str, Identity] = Field(default_factory=dict, description="Mattermost user id -> identity")

    @field_validator("users")
    @classmethod
    def _ids(cls, value: dict[str, str]) -> dict[str, str]:
        for user_id in value:
            if len(user_id) != 26 or not user_id.isalnum() or user_id.lower() != user_id:
                raise ValueError(f"{user_id!r} is not a Mattermost user id (26 lowercase letters and digits)")
        return value

    @classmethod
    def load(cls, path: Path) -> "UserMap":
        if not path.is_file():
            raise UserMapError(f"no Mattermost user mapping at {path}; write {{\"users\": {{\"<user id>\": "
                               "\"<identity>\"}} there (or set BAMBOO_MATTERMOST_USERS_FILE)")
        try:
            return cls.model_validate_json(path.read_text())
        except ValidationError as exc:
            raise UserMapError(f"{path}: {exc.errors()[0]['msg']}") from None

    def identity(self, user_id: str) -> str | None:
        return self.users.get(user_id)
