"""Single sign-on for deployments: OpenID Connect's authorization-code flow through Authlib.

Authlib fetches the issuer's discovery document, keeps the state and nonce in the console's session,
exchanges the code at the token endpoint with the client secret, and verifies the ID token (signature from
the issuer's JWKS, issuer, audience, expiry, nonce). The console then takes the configured claim as the
person's identity; whether that identity may do anything is the registry's answer, as for everyone.
"""

from __future__ import annotations

from authlib.integrations.starlette_client import OAuth

from bamboo.frontends.console.settings import ConsoleSettings


def oidc_client(settings: ConsoleSettings) -> OAuth | None:
    if not settings.oidc_enabled:
        return None
    oauth = OAuth()
    oauth.register(
        "sso", server_metadata_url=settings.oidc_discovery_url, client_id=settings.oidc_client_id,
        client_secret=settings.oidc_client_secret.get_secret_value() if settings.oidc_client_secret else None,
        client_kwargs={"scope": settings.oidc_scope},
    )
    return oauth
