"""Ordered SQL migrations applied once, under an advisory lock, so concurrent workers starting
together never race each other into a half-built schema."""

from __future__ import annotations

import re
from importlib import resources

import psycopg

from bamboo.store.roles import grant_app_role

MIGRATION_LOCK = 0x6A6D_B00  # any constant unique to this project
_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql\Z")


class EmbeddingDimensionMismatch(RuntimeError):
    pass


class MigrationNotPermitted(RuntimeError):
    pass


def _migrations() -> list[tuple[int, str, str]]:
    folder = resources.files("bamboo.store") / "migrations"
    found = []
    for entry in folder.iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append((int(m.group(1)), entry.name, entry.read_text()))
    return sorted(found)


async def migrate(conn: psycopg.AsyncConnection, embedding_dim: int, embedding_model: str,
                  app_role: str | None = None) -> list[str]:
    """Apply pending migrations; record and check the embedding dimension; with `app_role` (a role
    other than the one migrating), grant it the app's privileges, under the same lock so workers
    starting together do not race their grants either. Returns the names applied."""
    applied: list[str] = []
    await conn.set_autocommit(True)
    await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        # An app role may not create tables: nothing is created (not even IF NOT EXISTS, which still
        # needs the privilege) unless something is pending.
        row = await (await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")).fetchone()
        assert row is not None  # a bare SELECT always returns a row
        exists = row[0]
        if not exists:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
        done = {r[0] for r in await (await conn.execute("SELECT version FROM schema_migrations")).fetchall()}
        for version, name, sql in _migrations():
            if version in done:
                continue
            try:
                async with conn.transaction():
                    await conn.execute(sql.replace("{{EMBEDDING_DIM}}", str(int(embedding_dim))))
                    await conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
                    await conn.execute(
                        "INSERT INTO store_meta (key, value) VALUES ('embedding_dim', %s), ('embedding_model', %s) "
                        "ON CONFLICT (key) DO NOTHING",
                        (str(embedding_dim), embedding_model),
                    )
            except psycopg.errors.InsufficientPrivilege as exc:
                raise MigrationNotPermitted(
                    f"migration {name} is pending, but the role this connection uses may not change the schema "
                    f"({exc}); set BAMBOO_DATABASE_OWNER_URL to the schema owner's URL so migrations run as the owner"
                ) from None
            applied.append(name)
        row = await (await conn.execute("SELECT value FROM store_meta WHERE key = 'embedding_dim'")).fetchone()
        recorded = int(row[0]) if row else embedding_dim
        if recorded != embedding_dim:
            model = await (await conn.execute("SELECT value FROM store_meta WHERE key = 'embedding_model'")).fetchone()
            raise EmbeddingDimensionMismatch(
                f"The knowledge store holds {recorded}-dimensional vectors (model {model[0] if model else '?'}), "
                f"but the configured embedder produces {embedding_dim}. Configure the same embedding model "
                f"(BAMBOO_EMBEDDING_*), or start a fresh database."
            )
        if app_role:
            await grant_app_role(conn, app_role)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return applied
