-- An accepted nonce must never be free again: a deleted row would let a captured envelope and its approval
-- run a second time within their expiry. Insert-only for everyone, as the audit log (the app role also
-- loses UPDATE and DELETE through bamboo.store.roles).
CREATE TRIGGER executor_nonces_append_only_rows BEFORE UPDATE OR DELETE ON executor_nonces
    FOR EACH ROW EXECUTE FUNCTION insert_only('an accepted nonce is never free again');
CREATE TRIGGER executor_nonces_append_only_truncate BEFORE TRUNCATE ON executor_nonces
    FOR EACH STATEMENT EXECUTE FUNCTION insert_only('an accepted nonce is never free again');
