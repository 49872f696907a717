-- A revoked grant stays revoked: the signed answer behind it is still valid, so a requester who wrote the row
-- back would have revived it. Revocations are kept by the answer's nonce and the grant's term, insert-only.
CREATE TABLE revoked_grants (
    nonce       text NOT NULL,
    term        text NOT NULL,               -- procedure@code_hash
    revoked_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (nonce, term)
);
CREATE TRIGGER revoked_grants_append_only_rows BEFORE UPDATE OR DELETE ON revoked_grants
    FOR EACH ROW EXECUTE FUNCTION insert_only('a revoked grant is never granted again by its old answer');
CREATE TRIGGER revoked_grants_append_only_truncate BEFORE TRUNCATE ON revoked_grants
    FOR EACH STATEMENT EXECUTE FUNCTION insert_only('a revoked grant is never granted again by its old answer');
