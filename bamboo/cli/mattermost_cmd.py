"""`bamboo serve-mattermost`: run the Mattermost bot in the foreground."""

from __future__ import annotations

import logging

import typer

from bamboo.cli.common import console as out
from bamboo.cli.common import fail, run
from bamboo.settings import get_settings


def serve_mattermost(
    verbose: bool = typer.Option(False, "-v", "--verbose",
                                 help="log everything at DEBUG on this process's console (visibility only)"),
) -> None:
    """Serve investigations and analyses in Mattermost (BAMBOO_MATTERMOST_URL, _TOKEN, _USERS_FILE)."""
    from mattermostdriver.exceptions import NoAccessTokenProvided
    from requests import RequestException

    from bamboo.frontends.mattermost.serve import BotStartError, serve
    from bamboo.frontends.mattermost.settings import MattermostSettings
    from bamboo.frontends.mattermost.users import UserMapError
    from bamboo.store import StoreNotConfigured
    from bamboo.temporal_client import TemporalUnavailable

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = MattermostSettings()
    try:
        run(serve(get_settings(), settings, echo=out.print))
    except (BotStartError, UserMapError, StoreNotConfigured, ConnectionError, TemporalUnavailable) as exc:
        fail(str(exc))
    except NoAccessTokenProvided:
        fail(f"Mattermost at {settings.url} refused the bot's token; create a personal access token for the bot "
             "account and set BAMBOO_MATTERMOST_TOKEN")
    except RequestException as exc:
        fail(f"cannot reach Mattermost at {settings.url}: {exc}; check BAMBOO_MATTERMOST_URL")


def register(app: typer.Typer) -> None:
    app.command("serve-mattermost")(serve_mattermost)
