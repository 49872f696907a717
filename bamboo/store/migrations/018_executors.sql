-- Remote executors: every decision-envelope and approval nonce an executor accepted (a replay is refused
-- by the primary key; rows outlive the envelope's expiry, so an expired nonce is never free again), and the
-- capability grants production writes run under, with each use recorded.
CREATE TABLE executor_nonces (
    nonce        text PRIMARY KEY,
    kind         text NOT NULL,            -- 'envelope' or 'approval'
    key_id       text NOT NULL,
    run_id       text NOT NULL,
    tool_call_id text NOT NULL,
    environment  text NOT NULL,
    channel      text NOT NULL,
    expires_at   timestamptz NOT NULL,
    seen_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE capability_grants (
    grant_id        text PRIMARY KEY,
    environment     text NOT NULL,
    tool            text NOT NULL,
    rule            text NOT NULL,
    targets         text[] NOT NULL,       -- sorted, unique: the exact set the grant covers
    max_executions  integer NOT NULL CHECK (max_executions >= 1),
    max_repetitions integer NOT NULL CHECK (max_repetitions >= 1 AND max_repetitions <= max_executions),
    executions_used integer NOT NULL DEFAULT 0 CHECK (executions_used >= 0 AND executions_used <= max_executions),
    expires_at      timestamptz NOT NULL,
    granted_by      text NOT NULL,
    granted_at      timestamptz NOT NULL DEFAULT now(),
    revoked_at      timestamptz
);
CREATE INDEX capability_grants_lookup ON capability_grants (environment, tool, rule);

CREATE TABLE capability_grant_uses (
    grant_id     text NOT NULL REFERENCES capability_grants (grant_id),
    argv_digest  text NOT NULL,
    nonce        text NOT NULL UNIQUE,
    run_id       text NOT NULL,
    tool_call_id text NOT NULL,
    used_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX capability_grant_uses_repetitions ON capability_grant_uses (grant_id, argv_digest);
