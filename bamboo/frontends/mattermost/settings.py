"""The bot's configuration (``BAMBOO_MATTERMOST_*``): where Mattermost is, the bot's token, the deployment's
mapping of Mattermost user ids to registered identities, and the front-end identity whose key signs."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from bamboo.settings import Settings


class MattermostSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BAMBOO_MATTERMOST_", env_file=".env", extra="ignore")

    url: str = Field(default="http://127.0.0.1:8065", description="the Mattermost server, scheme://host[:port]")
    token: SecretStr | None = Field(default=None, description="the bot account's personal access token")
    users_file: Path | None = Field(default=None, description="Mattermost user id -> identity; empty = "
                                                              "<data_dir>/mattermost-users.json")
    identity: str = Field(default="mattermost-bot", description="the bot's front-end identity (its key signs)")
    poll_s: float = Field(default=1.0, gt=0, le=60, description="how often threads follow their sessions")
    verify_tls: bool = True

    def resolved_users_file(self, settings: Settings) -> Path:
        return (self.users_file or settings.resolved_data_dir() / "mattermost-users.json").expanduser()

    def driver_options(self) -> dict:
        """``mattermostdriver.Driver`` options for ``url`` and the token (reconnecting websocket)."""
        parsed = urlparse(self.url)
        scheme = parsed.scheme or "https"
        return {
            "url": parsed.hostname or "localhost", "scheme": scheme,
            "port": parsed.port or (443 if scheme == "https" else 80),
            "basepath": (parsed.path.rstrip("/") or "") + "/api/v4",
            "token": self.token.get_secret_value() if self.token else None, "verify": self.verify_tls,
            "keepalive": True, "keepalive_delay": 5, "timeout": 30,
        }
