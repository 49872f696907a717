"""A minimal OIDC issuer on loopback, so the real PanDA server can verify bearer tokens in the contract tier.

The server checks a token the way it does in production: it reads the client id from the token's ``aud``,
finds that client's ``oidc_config_url`` in its auth config, fetches the discovery document and the JWKS
from it, verifies the RS256 signature and the issuer, and takes the VO from the ``Origin`` header. This
issuer serves those two documents from an RSA key made per test session and mints the tokens.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CLIENT_ID = "bamboo-contract-tests"
KEY_ID = "contract-key-1"


class OidcIssuer:
    def __init__(self) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, name="oidc-issuer", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def discovery_url(self) -> str:
        return f"{self.url}/.well-known/openid-configuration"

    def auth_config(self, vo: str) -> dict:
        """The server's ``<vo>_auth_config.json`` for this issuer's client."""
        return {"client_id": CLIENT_ID, "audience": CLIENT_ID, "oidc_config_url": self.discovery_url, "vo": vo}

    def mint(self, name: str, groups: list[str], lifetime_s: int = 3600) -> str:
        now = int(time.time())
        claims = {"iss": self.url, "aud": CLIENT_ID, "sub": name.replace(" ", "-"), "name": name, "groups": groups,
                  "iat": now, "exp": now + lifetime_s}
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": KEY_ID})

    def _handler(self):
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks"}
                elif self.path == "/jwks":
                    jwk = json.loads(RSAAlgorithm.to_jwk(issuer._key.public_key()))
                    body = {"keys": [{**jwk, "kid": KEY_ID, "alg": "RS256", "use": "sig"}]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        return Handler

    def __enter__(self) -> "OidcIssuer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
