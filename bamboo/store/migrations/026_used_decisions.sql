-- A signed decision runs its code in one workflow run, ever. A session keeps the nonces it used in its own
-- state, which a Temporal reset rolls back while re-sending the signals that came after the reset point, so
-- one signed approval of a kill ran it twice. The sandbox activity records the nonce of the decision that
-- authorises a run here first; insert-only, as the executors' nonces.
CREATE TABLE used_decisions (
    nonce         text PRIMARY KEY,
    session_id    text NOT NULL,
    workflow_run  text NOT NULL,             -- the Temporal run whose code the decision authorised
    used_at       timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER used_decisions_append_only_rows BEFORE UPDATE OR DELETE ON used_decisions
    FOR EACH ROW EXECUTE FUNCTION insert_only('a used decision is never free again');
CREATE TRIGGER used_decisions_append_only_truncate BEFORE TRUNCATE ON used_decisions
    FOR EACH STATEMENT EXECUTE FUNCTION insert_only('a used decision is never free again');
