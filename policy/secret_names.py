"""Which names label a secret: the vocabulary the structural scrubber keys on.

A value is treated as a secret because of what it is called (``password=``, ``"apiKey": ...``,
``{"name": "AWS_SECRET_ACCESS_KEY", "value": ...}``), whatever it looks like: short passwords and keys
with unusual alphabets have no recognisable shape. The price is that the name vocabulary decides the
false positives, so names are judged word by word (``SecretAccessKey`` -> secret, access, key) rather
than by substring, and a name that describes a secret rather than holding one (``token_type``,
``password_file``, ``max_tokens``, ``auth_host``) is not a secret name.

Pure: stdlib only, no I/O, no project imports.
"""

from __future__ import annotations

import re
from functools import lru_cache

# A word that contains one of these is a secret word: catches run-together environment names
# (PGPASSWORD, CLIENTSECRET, DBPASSPHRASE, GOOGLECREDENTIALS).
_CONTAINED = ("password", "passwd", "passphrase", "secret", "credential", "apikey", "accesskey", "privatekey")

# Whole words that are secret words on their own.
_WHOLE = frozenset({"pwd", "auth", "authorization", "cookie", "creds", "otp", "passcode", "signature", "psk"})

# Words that are secret words only inside a longer name (``db_pass``, ``smtp_pw``), never alone:
# ``pass: 120`` is a test count.
_IN_COMPOUND = frozenset({"pass", "pw"})

# ``key`` is a secret word after one of these (``api_key``, ``AccountKey``, ``x-api-key``); alone it is
# far too common (``key=AOD``, ``{"Key": "Name"}``).
_KEY_QUALIFIERS = frozenset({
    "api", "access", "secret", "private", "account", "encryption", "signing", "master", "client", "app", "auth",
    "storage", "shared", "service", "session", "ssh", "deploy", "consumer", "subscription", "hmac", "gpg", "pgp",
    "root", "admin", "license", "webhook", "decryption", "sign", "crypt", "cipher", "aes", "jwt",
})

# A word after the secret word that makes the name describe or locate the secret instead of holding it:
# ``token_type``, ``password_file``, ``auth_host``, ``client_secret_expires_at``.
_DESCRIBES_AFTER = frozenset({
    "type", "types", "kind", "file", "files", "path", "paths", "dir", "directory", "folder", "url", "urls", "uri",
    "endpoint", "host", "hostname", "server", "port", "domain", "length", "len", "size", "count", "max", "min",
    "num", "limit", "limits", "policy", "policies", "method", "methods", "mode", "scheme", "schemes", "provider",
    "providers", "backend", "plugin", "strategy", "enabled", "enable", "disabled", "disable", "required", "require",
    "optional", "expiry", "expires", "expiration", "expire", "expired", "expiring", "exp", "ttl", "lifetime",
    "age", "timeout", "time", "timestamp", "date", "created", "updated", "rotated", "changed", "at", "since",
    "until", "version", "format", "encoding", "algorithm", "alg", "hint", "prompt", "label", "name", "names",
    "prefix", "suffix", "status", "state", "valid", "validity", "error", "errors", "scope", "scopes", "issuer",
    "audience", "user", "username", "login", "realm", "field", "fields", "header", "strength", "complexity",
    "regex", "pattern", "env", "var", "variable", "ref", "reference", "source", "store", "manager", "flow",
    "grant", "uses", "use", "usage", "rotation", "description", "desc", "help", "doc", "docs", "placeholder",
    "tokenizer", "tokens", "reset", "request", "requests", "response", "check", "test",
})

# Run-together names of storage space tokens (PanDA's lower-case ``destinationdblocktoken``): no credential.
_STORAGE_TOKENS = ("blocktoken", "spacetoken")

# A word before the secret word that makes the name a setting about secrets (``max_tokens``,
# ``enable_auth``, ``require_password``) or a token that is no credential: a storage space token
# (``space_token``, PanDA's ``destinationDBlockToken``) names where data goes.
_DESCRIBES_BEFORE = frozenset({
    "space", "block",
    "max", "min", "num", "count", "total", "enable", "enabled", "disable", "disabled", "require", "required",
    "use", "allow", "has", "is", "no", "skip", "verify", "validate", "check", "show", "hide", "mask", "print",
    "log", "prompt", "ask", "need", "needs", "with", "without", "get", "set", "fetch", "load",
})

# Last words of a field that names a variable in a name/value pair ({"name": "X", "value": "..."},
# AWS tags {"Key": ..., "Value": ...}, CloudFormation ParameterKey/ParameterValue).
_NAME_FIELD_WORDS = frozenset({
    "name", "key", "variable", "var", "param", "parameter", "field", "header", "option", "setting", "attribute",
    "attr", "property", "prop", "label", "id",
})

# Last words of the field that holds the variable's value in such a pair.
_VALUE_FIELD_WORDS = frozenset({"value", "val", "values", "data", "content", "contents", "plaintext"})

_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def name_words(name: str) -> tuple[str, ...]:
    """Lower-case words of an identifier: ``AWS_SECRET_ACCESS_KEY``, ``SecretAccessKey``, ``x-api-key``,
    ``spring.datasource.password`` and ``/prod/db/password`` all split where a reader would split them."""
    words: list[str] = []
    for part in _SPLIT.split(name):
        if part:
            words.extend(w.lower() for w in _CAMEL.findall(part))
    return tuple(words)


def _is_secret_word(words: tuple[str, ...], i: int) -> bool:
    word = words[i]
    if word in _WHOLE or any(stem in word for stem in _CONTAINED):
        return True
    if word == "token" or (word.endswith("token") and not word.endswith(_STORAGE_TOKENS)):
        return True
    if word in ("key", "keys") and i > 0 and words[i - 1] in _KEY_QUALIFIERS:
        return True
    return len(words) > 1 and word in _IN_COMPOUND


def _secret_words(name: str) -> tuple[str, ...]:
    """The words that make ``name`` a secret name (none if it is not one)."""
    if len(name) > 128:
        return ()
    words = name_words(name)
    return tuple(
        words[i]
        for i in range(len(words))
        if _is_secret_word(words, i)
        and not any(w in _DESCRIBES_AFTER for w in words[i + 1 :])
        and not any(w in _DESCRIBES_BEFORE for w in words[:i])
    )


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """True when a value called ``name`` is itself a secret (``password``, ``AWS_SECRET_ACCESS_KEY``,
    ``X-Api-Key``, ``user_password``), False for names that describe one (``token_type``,
    ``password_file``, ``max_tokens``)."""
    return bool(_secret_words(name))


# Names that hold a secret where a value is configured (a URL's query, a settings mapping) though they are
# too common to be secret names in free text: ``?key=`` is how several HTTP APIs take an API key, ``sig`` a
# signed URL's signature, ``code`` a function key or an OAuth code, ``session`` a session id.
_CONFIG_SECRET_WORDS = frozenset({"key", "keys", "sig", "code", "session", "sessionid", "sid"})


@lru_cache(maxsize=1024)
def is_secret_parameter(name: str) -> bool:
    """True when a configured value called ``name`` (a URL query parameter, a key of a settings mapping) is a
    secret: every secret name, and also a bare ``key``, ``sig`` or ``code``, which ``is_secret_name`` leaves
    alone because in logs and code ``key=AOD`` is rarely one."""
    return is_secret_name(name) or name_words(name) in {(w,) for w in _CONFIG_SECRET_WORDS}


# Secret words that name a credential when they hold a scalar (docker's ``"auth": "<base64>"``) but a
# settings section when they hold a mapping or a list (``auth: {type: x509, lifetime: 3600}``).
_SECTION_ONLY_WORDS = frozenset({"auth", "authorization"})


@lru_cache(maxsize=1024)
def is_secret_section(name: str) -> bool:
    """True when everything under ``name`` is secret (``credentials``, ``passwords``, ``secrets``,
    ``api_keys``); a section named only ``auth`` is judged key by key instead."""
    return any(w not in _SECTION_ONLY_WORDS for w in _secret_words(name))


@lru_cache(maxsize=1024)
def is_name_field(field: str) -> bool:
    """A field that names a variable in a name/value pair (``name``, ``Key``, ``ParameterKey``)."""
    words = name_words(field)
    return bool(words) and words[-1] in _NAME_FIELD_WORDS and not is_secret_name(field)


@lru_cache(maxsize=1024)
def is_value_field(field: str) -> bool:
    """A field that holds the named variable's value in a name/value pair (``value``, ``ParameterValue``)."""
    words = name_words(field)
    return bool(words) and words[-1] in _VALUE_FIELD_WORDS


# Values that say there is no value: left visible wherever they stand.
_NO_VALUE = frozenset({"none", "null", "nil", "true", "false", "empty", "unset", "notset", "n/a", "redacted",
                       "hidden", "masked"})

# What follows ``token:`` or ``password:`` in a sentence rather than a secret: ``invalid password: too
# short``, ``token: expired``. Only after a colon (an ``=`` assignment or a quoted value is never prose),
# so a secret equal to one of these words stays visible only there; that trade keeps error messages
# readable.
_PROSE_WORDS = frozenset({
    "yes", "no", "on", "off", "missing", "required", "invalid", "incorrect", "wrong", "expired", "revoked",
    "denied", "refused", "rejected", "failed", "failure", "error", "ok", "success", "unknown", "unavailable",
    "undefined", "na", "not", "is", "was", "has", "for", "the", "a", "an", "must", "should", "cannot", "could",
    "does", "did", "too", "mismatch", "changed", "updated", "accepted", "provided", "supplied", "found", "present",
    "absent", "given", "needed", "of", "to", "in", "and", "or", "with", "without", "from", "via", "set",
    "unauthorized", "forbidden", "timeout", "valid", "malformed", "rotated", "saved", "stored", "reset",
})

_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}|\{\{\s*secret:[A-Za-z0-9_.\-]+\s*\}\}")


def is_placeholder(value: str, *, prose: bool = False) -> bool:
    """A value that stands for no secret: empty, ``null``-like, an already-redacted marker, a ``${VAR}``
    or ``{{secret:NAME}}`` reference (it names a secret without carrying it), or, where a colon may
    start a sentence (``prose``), a status word such as ``expired``."""
    v = value.strip()
    if not v:
        return True
    lowered = v.lower().rstrip(".,;")
    if lowered in _NO_VALUE or (prose and lowered in _PROSE_WORDS):
        return True
    if v.startswith("[REDACTED:") and v.endswith("]") and "]" not in v[:-1]:
        return True
    return bool(_REFERENCE.fullmatch(v))
