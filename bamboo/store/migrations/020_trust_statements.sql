-- The approver registry becomes a log of statements signed by the deployment's pinned administrators
-- (policy.trust_root). The old table's rows were writable by anyone with the app role and authenticated
-- nobody; they are dropped, not carried over: every identity is registered again by an administrator.
DROP TABLE approvers;

CREATE TABLE trust_statements (
    statement_id text PRIMARY KEY,
    kind         text NOT NULL,
    subject      text NOT NULL,
    statement    jsonb NOT NULL,            -- policy.trust_root.TrustStatement, as signed
    signature    text NOT NULL,             -- base64 Ed25519 by the key the statement names
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX trust_statements_subject ON trust_statements (kind, subject);

-- Insert-only for everyone, as the audit log: a revocation cannot be deleted to bring a key back. One
-- trigger function for every insert-only table from here on; its argument is the hint a refusal gives.
CREATE FUNCTION insert_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% on % is refused: the table is insert-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege', HINT = TG_ARGV[0];
END
$$;
CREATE TRIGGER trust_statements_insert_only_rows BEFORE UPDATE OR DELETE ON trust_statements
    FOR EACH ROW EXECUTE FUNCTION insert_only('a change to the registry is a new statement signed by a pinned administrator');
CREATE TRIGGER trust_statements_insert_only_truncate BEFORE TRUNCATE ON trust_statements
    FOR EACH STATEMENT EXECUTE FUNCTION insert_only('a change to the registry is a new statement signed by a pinned administrator');
