"""The console's own configuration (``BAMBOO_CONSOLE_*``); where Temporal and the store live comes from the
project's settings. The console decides nothing about who may approve: that is the deployment's registry."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from bamboo.settings import Settings


class ConsoleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BAMBOO_CONSOLE_", env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8240, ge=0, le=65535)
    public_url: str | None = Field(default=None, description="the URL users reach the console at (OIDC redirects)")
    identity: str = Field(default="bamboo-console",
                          description="the console's own identity: its key signs for the person signed in")
    users_file: Path | None = Field(default=None, description="local accounts; empty = <data_dir>/console-users.json")
    secret_key: SecretStr | None = Field(default=None,
                                         description="signs session cookies; empty = a key kept under the data dir")
    session_ttl_s: int = Field(default=8 * 3600, ge=1, description="a sign-in lasts this long, then expires")
    refresh_s: int = Field(default=3, ge=1, le=300, description="live pages reload this often")
    login_failure_window_s: int = Field(default=300, ge=1, description="failed sign-ins are counted over this long")
    login_failures_per_name: int = Field(
        default=5, ge=1, description="failed sign-ins for one account name within the window before it is refused")
    login_failures_per_address: int = Field(
        default=20, ge=1, description="failed sign-ins from one client address within the window before it is refused")
    secure_cookies: bool | None = Field(
        default=None, description="send the session cookie over HTTPS only; empty = when public_url is https")
    oidc_discovery_url: str | None = Field(default=None, description="the issuer's /.well-known/openid-configuration")
    oidc_client_id: str | None = None
    oidc_client_secret: SecretStr | None = None
    oidc_scope: str = "openid profile email"
    oidc_identity_claim: str | None = Field(
        default=None, description="the ID-token claim that names the person's registered identity; required with "
                                  "single sign-on: a claim the identity provider never lets a person change or reuse "
                                  "(sub, or a login name it fixes). No default: OpenID Connect does not promise "
                                  "that preferred_username is unique, and where people may edit it, whoever names "
                                  "themselves after an approver signs in as that approver")
    oidc_label: str = "single sign-on"

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_discovery_url and self.oidc_client_id)

    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    def cookies_https_only(self) -> bool:
        """Whether the session cookie goes over HTTPS only: as set, else when people reach the console over https
        (off by default, a console behind an https proxy sent its sign-in cookie over plain http too)."""
        if self.secure_cookies is not None:
            return self.secure_cookies
        return self.base_url().lower().startswith("https://")

    def resolved_users_file(self, settings: Settings) -> Path:
        return (self.users_file or settings.resolved_data_dir() / "console-users.json").expanduser()

    def cookie_secret(self, settings: Settings) -> str:
        """The configured secret, or one made once and kept (mode 0600) beside the embedded stack's data."""
        if self.secret_key is not None:
            return self.secret_key.get_secret_value()
        path = settings.resolved_data_dir() / "console-secret"
        if path.is_file():
            return path.read_text().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        value = secrets.token_urlsafe(48)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(value)
        return value
