"""An OpenID Connect issuer on loopback with the authorization-code flow, for the console's single sign-on.

It does what an issuer does for a confidential client: a discovery document, a sign-in page at the
authorization endpoint that sends the browser back with a one-time code and the client's ``state``, a token
endpoint that checks the client's secret (HTTP Basic or form), the code and the redirect URI, and answers
with an RS256 ID token carrying the ``nonce``, and its JWKS. ``forge`` makes it sign ID tokens with a key its
JWKS does not publish, as an impostor would. PKCE as RFC 7636 has it: a code asked for with an S256 challenge is
exchanged only with the verifier that hashes to it; ``require_pkce`` refuses a code asked for without one.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlparse

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CLIENT_ID = "bamboo-console-tests"
CLIENT_SECRET = "console-client-secret-" + "s" * 16
KEY_ID = "console-sso-1"


class OidcProvider:
    def __init__(self, forge: bool = False, require_pkce: bool = False) -> None:
        self.require_pkce = require_pkce
        self.challenges: list[tuple[str | None, str | None]] = []  # (code_challenge, method) of each code asked for
        self.verified: list[bool] = []  # each token request's PKCE verifier, checked against its code's challenge
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._signing = rsa.generate_private_key(public_exponent=65537, key_size=2048) if forge else self._key
        self._codes: dict[str, dict] = {}
        self.issued: list[dict] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, name="oidc-provider", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def discovery_url(self) -> str:
        return f"{self.url}/.well-known/openid-configuration"

    def console_env(self) -> dict[str, str]:
        return {"BAMBOO_CONSOLE_OIDC_DISCOVERY_URL": self.discovery_url, "BAMBOO_CONSOLE_OIDC_CLIENT_ID": CLIENT_ID,
                "BAMBOO_CONSOLE_OIDC_CLIENT_SECRET": CLIENT_SECRET, "BAMBOO_CONSOLE_OIDC_LABEL": "the test issuer",
                # this issuer fixes the login name (people cannot edit it), as the claim's setting requires
                "BAMBOO_CONSOLE_OIDC_IDENTITY_CLAIM": "preferred_username"}

    def _id_token(self, grant: dict) -> str:
        now = int(time.time())
        claims = {"iss": self.url, "sub": f"sub-{grant['username']}", "aud": CLIENT_ID, "iat": now, "exp": now + 300,
                  "auth_time": now, "nonce": grant["nonce"], "preferred_username": grant["username"],
                  "name": grant["username"].title()}
        self.issued.append(claims)
        return jwt.encode(claims, self._signing, algorithm="RS256", headers={"kid": KEY_ID})

    def _handler(self):
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: bytes, content_type: str = "application/json", headers=()) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, body: dict) -> None:
                self._send(status, json.dumps(body).encode())

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                url = urlparse(self.path)
                if url.path == "/.well-known/openid-configuration":
                    return self._json(200, {
                        "issuer": provider.url, "authorization_endpoint": f"{provider.url}/authorize",
                        "token_endpoint": f"{provider.url}/token", "jwks_uri": f"{provider.url}/jwks",
                        "response_types_supported": ["code"], "subject_types_supported": ["public"],
                        "id_token_signing_alg_values_supported": ["RS256"],
                        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                        "scopes_supported": ["openid", "profile", "email"]})
                if url.path == "/jwks":
                    jwk = json.loads(RSAAlgorithm.to_jwk(provider._key.public_key()))
                    return self._json(200, {"keys": [{**jwk, "kid": KEY_ID, "alg": "RS256", "use": "sig"}]})
                if url.path == "/authorize":
                    query = {k: v[0] for k, v in parse_qs(url.query).items()}
                    if query.get("client_id") != CLIENT_ID or query.get("response_type") != "code":
                        return self._send(400, b"unknown client or response type", "text/plain")
                    hidden = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                                     for k, v in query.items())
                    page = (f"<!doctype html><title>Test issuer</title><h1>Sign in to the test issuer</h1>"
                            f'<form method="post" action="/authorize">{hidden}<label>User '
                            f'<input id="issuer-username" name="username"></label>'
                            f'<button id="issuer-sign-in">Sign in</button></form>')
                    return self._send(200, page.encode(), "text/html; charset=utf-8")
                self._send(404, b"not found", "text/plain")

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if self.path == "/authorize":
                    code = secrets.token_urlsafe(24)
                    challenge, method = form.get("code_challenge"), form.get("code_challenge_method")
                    provider.challenges.append((challenge, method))
                    if challenge is None and provider.require_pkce or challenge is not None and method != "S256":
                        return self._send(400, b"this issuer requires PKCE with S256", "text/plain")
                    provider._codes[code] = {"username": form.get("username", ""), "nonce": form.get("nonce"),
                                             "redirect_uri": form.get("redirect_uri"), "code_challenge": challenge}
                    target = f"{form['redirect_uri']}?{urlencode({'code': code, 'state': form.get('state', '')})}"
                    return self._send(302, b"", "text/plain", headers=[("Location", target)])
                if self.path == "/token":
                    client_id, secret = form.get("client_id"), form.get("client_secret")
                    basic = self.headers.get("Authorization", "")
                    if basic.startswith("Basic "):
                        client_id, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
                    if client_id != CLIENT_ID or secret != CLIENT_SECRET:
                        return self._json(401, {"error": "invalid_client"})
                    grant = provider._codes.pop(form.get("code", ""), None)
                    if grant is None or grant["redirect_uri"] != form.get("redirect_uri"):
                        return self._json(400, {"error": "invalid_grant"})
                    if grant["code_challenge"] is not None:
                        verifier = form.get("code_verifier", "")
                        hashed = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
                        provider.verified.append(hashed.decode() == grant["code_challenge"])
                        if not provider.verified[-1]:
                            return self._json(400, {"error": "invalid_grant", "error_description": "PKCE verifier"})
                    return self._json(200, {"access_token": secrets.token_urlsafe(24), "token_type": "Bearer",
                                            "expires_in": 300, "scope": "openid profile email",
                                            "id_token": provider._id_token(grant)})
                self._send(404, b"not found", "text/plain")

            def log_message(self, *args) -> None:
                pass

        return Handler

    def __enter__(self) -> "OidcProvider":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
