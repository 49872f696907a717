-- The audit log is append-only for everyone, the table's owner included: UPDATE, DELETE and TRUNCATE
-- raise. An owner (or superuser) can still disable the trigger, which is why the app should connect
-- as a role that is not the owner (then its grants refuse the same statements) and why the chain's
-- head is also signed outside the database (bamboo.store.audit_checkpoint).
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % on audit is refused', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'audit rows are never changed or removed; bamboo audit verify reports any that were';
END
$$;

CREATE TRIGGER audit_append_only_rows BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_append_only_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();

REVOKE UPDATE, DELETE, TRUNCATE ON audit FROM PUBLIC;

-- Names this database's chain in its signed checkpoints, so a checkpoint is never held against
-- another database's chain.
INSERT INTO store_meta (key, value) VALUES ('audit_chain_id', gen_random_uuid()::text) ON CONFLICT (key) DO NOTHING;
