"""Start the bot: the user mapping, the bot's front-end key (checked against the registry), Temporal, the
audit log, Mattermost; then listen until stopped."""

from __future__ import annotations

from bamboo.approvals.keys import KeyStore, SigningKeyError
from bamboo.app import Process, open_app
from bamboo.approvals.admin import embedded_admin
from bamboo.frontends.mattermost.bot import MattermostBot
from bamboo.frontends.mattermost.chat import MattermostChat
from bamboo.frontends.mattermost.settings import MattermostSettings
from bamboo.frontends.mattermost.users import UserMap
from bamboo.settings import Settings
from bamboo.temporal_client import connect
from policy.approvers import DeploymentPolicy, Role


class BotStartError(RuntimeError):
    """The bot cannot start as configured; the message says what to do."""


async def serve(settings: Settings, mm: MattermostSettings, echo=print) -> None:
    if mm.token is None:
        raise BotStartError("no bot token: set BAMBOO_MATTERMOST_TOKEN to the bot account's personal access token")
    users = UserMap.load(mm.resolved_users_file(settings))
    opened = await open_app(settings, Process.BOT)
    store = opened.store
    try:
        registry = opened.registry()
        keys = KeyStore(settings.resolved_keys_dir())
        if settings.embedded_database and not keys.exists(mm.identity):
            keys.create(mm.identity)  # the embedded stack registers its own bot, as the demo registers its people
        try:
            key = keys.load(mm.identity)
        except SigningKeyError as exc:
            raise BotStartError(str(exc)) from None
        mapped = sorted(set(users.users.values()))
        if settings.embedded_database:
            await registry.ensure(embedded_admin(settings), key.identity, key.public_key, {Role.FRONT_END},
                                  speaks_for=mapped)
        entry = next((e for e in await registry.active() if e.identity == key.identity), None)
        if entry is None or entry.public_key != key.public_key or Role.FRONT_END not in entry.roles:
            raise BotStartError(
                f"the bot's key {key.identity} ({key.key_id}) is not registered with the front_end role, so sessions "
                f"would refuse everything it signs; an administrator registers it: bamboo keys register "
                f"{key.identity} --public-key {key.public_key} --role front_end --speaks-for IDENTITY --admin ADMIN")
        policy = DeploymentPolicy(approvers=await registry.active())
        outside = [i for i in mapped if not policy.may_speak_for(key.identity, i)]
        if outside:
            echo(f"warning: the bot may not speak for {', '.join(outside)} (not in its registered scope); their "
                 f"requests will be refused until an administrator adds them (--speaks-for on the bot, or "
                 f"--front-end {key.identity} on the person)")
        client = await connect(settings)
        chat = MattermostChat(mm.driver_options())
        bot = MattermostBot(chat, client, settings, users, key, store.audit, poll_s=mm.poll_s)
        echo(f"Mattermost bot on {mm.url}, signing as {key.identity} for {len(users.users)} mapped people")
        await bot.run()
    finally:
        await opened.close()
