-- Capability grants become statements signed by a pinned administrator (policy.trust_root, kind
-- grant_capability, subject the grant id). A row carries the statement; the executor judges the grant from its
-- signed body and ignores a row whose signature does not verify against the keys it pins, or whose columns
-- differ from that body (the columns stay for lookups and for people reading the table).
--
-- Nothing here is updated any more: executions are counted from capability_grant_uses (no counter to reset),
-- and a revocation is a signed revoke_capability statement in capability_grant_revocations. Grants written
-- before they were signed authorised nothing anyone can check; they are dropped, with their uses (each run is
-- still an executor_ran row in the audit log).
DELETE FROM capability_grant_uses;
DELETE FROM capability_grants;

ALTER TABLE capability_grants
    DROP COLUMN executions_used,
    DROP COLUMN revoked_at,
    ADD COLUMN statement jsonb NOT NULL,   -- policy.trust_root.TrustStatement, as signed
    ADD COLUMN signature text NOT NULL;    -- base64 Ed25519 by the administrator's key the statement names

CREATE TABLE capability_grant_revocations (
    statement_id text PRIMARY KEY,
    grant_id     text NOT NULL REFERENCES capability_grants (grant_id),
    statement    jsonb NOT NULL,            -- a revoke_capability TrustStatement, as signed
    signature    text NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX capability_grant_revocations_grant ON capability_grant_revocations (grant_id);

-- Insert-only for everyone, as the audit log and the trust statements: a use deleted would refill a grant, a
-- revocation deleted would bring it back. The app role also gets only SELECT and INSERT (bamboo.store.roles).
CREATE TRIGGER capability_grants_append_only_rows BEFORE UPDATE OR DELETE ON capability_grants
    FOR EACH ROW EXECUTE FUNCTION insert_only('a grant is ended by a signed revocation (bamboo exec revoke), never by changing rows');
CREATE TRIGGER capability_grants_append_only_truncate BEFORE TRUNCATE ON capability_grants
    FOR EACH STATEMENT EXECUTE FUNCTION insert_only('a grant is ended by a signed revocation (bamboo exec revoke), never by changing rows');
CREATE TRIGGER capability_grant_uses_append_only_rows BEFORE UPDATE OR DELETE ON capability_grant_uses
    FOR EACH ROW EXECUTE FUNCTION insert_only('a grant is ended by a signed revocation (bamboo exec revoke), never by changing rows');
CREATE TRIGGER capability_grant_uses_append_only_truncate BEFORE TRUNCATE ON capability_grant_uses
    FOR EACH STATEMENT EXECUTE FUNCTION insert_only('a grant is ended by a signed revocation (bamboo exec revoke), never by changing rows');
CREATE TRIGGER capability_grant_revocations_append_only_rows BEFORE UPDATE OR DELETE ON capability_grant_revocations
    FOR EACH ROW EXECUTE FUNCTION insert_only('a grant is ended by a signed revocation (bamboo exec revoke), never by changing rows');
CREATE TRIGGER capability_grant_revocations_append_only_truncate BEFORE TRUNCATE ON capability_grant_revocations
    FOR EACH STATEMENT EXECUTE FUNCTION insert_only('a grant is ended by a signed revocation (bamboo exec revoke), never by changing rows');
