-- Every time a signed checkpoint of this database's audit chain was started: by the process that wrote the
-- chain's first row, or by `bamboo audit checkpoint --start-new` (itself audited). A checkpoint file that
-- goes missing is then a verification failure, not a fresh start, even once every audit row is gone.
CREATE TABLE audit_checkpoint_starts (
    id         bigserial PRIMARY KEY,
    chain      text NOT NULL,
    key_id     text NOT NULL,               -- the signing key's public half, hashed
    head_seq   bigint NOT NULL,             -- the row the first checkpoint signs
    reason     text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now()
);

CREATE TRIGGER audit_checkpoint_starts_append_only_rows BEFORE UPDATE OR DELETE ON audit_checkpoint_starts
    FOR EACH ROW EXECUTE FUNCTION insert_only('a new start is recorded by bamboo audit checkpoint --start-new');
CREATE TRIGGER audit_checkpoint_starts_append_only_truncate BEFORE TRUNCATE ON audit_checkpoint_starts
    FOR EACH STATEMENT EXECUTE FUNCTION insert_only('a new start is recorded by bamboo audit checkpoint --start-new');
