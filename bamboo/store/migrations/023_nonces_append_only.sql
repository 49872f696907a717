-- An accepted nonce must never be free again: a deleted row would let a captured envelope and its approval
-- run a second time within their expiry. Insert-only for everyone, as the audit log (the app role also
-- loses UPDATE and DELETE through bamboo.store.roles).
CREATE FUNCTION executor_nonces_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'accepted nonces are never changed or removed: % is refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER executor_nonces_append_only_rows BEFORE UPDATE OR DELETE ON executor_nonces
    FOR EACH ROW EXECUTE FUNCTION executor_nonces_append_only();
CREATE TRIGGER executor_nonces_append_only_truncate BEFORE TRUNCATE ON executor_nonces
    FOR EACH STATEMENT EXECUTE FUNCTION executor_nonces_append_only();
