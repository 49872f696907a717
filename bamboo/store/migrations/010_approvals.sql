-- The deployment's approver registry, the approval policies it has judged decisions with, and every
-- version of procedure code ever stored (so a review can diff a procedure against the version a grant was
-- given on).
CREATE TABLE approvers (
    identity      text PRIMARY KEY,
    public_key    text NOT NULL,
    roles         text[] NOT NULL,
    registered_by text NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);

CREATE TABLE approval_policies (
    version       text PRIMARY KEY,
    body          jsonb NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE procedure_versions (
    code_hash     text PRIMARY KEY,
    signature     text NOT NULL,
    code          text NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO procedure_versions (code_hash, signature, code)
    SELECT code_hash, signature, code FROM procedures ON CONFLICT DO NOTHING;
