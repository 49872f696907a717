"""Single sign-on for deployments: OpenID Connect's authorization-code flow through Authlib.

Authlib fetches the issuer's discovery document, keeps the state, nonce and PKCE verifier in the console's
session, sends the S256 challenge with the authorization request and the verifier with the code to the token
endpoint (with the client secret), so a code intercepted on its way back to the console is worthless without the
session it was asked for, and verifies the ID token (signature from the issuer's JWKS, issuer, audience, expiry,
nonce). The console then takes the configured claim as the person's identity, exactly as spelled
(``app._claimed_identity``); whether that identity may do anything is the registry's answer, as for everyone.
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
        client_kwargs={"scope": settings.oidc_scope, "code_challenge_method": "S256"},
    )
    return oauth
