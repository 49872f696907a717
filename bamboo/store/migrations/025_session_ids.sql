-- An investigation session's id names one session, ever: the first run that asked for its policy context holds
-- it. Decisions are signed over the session id, turn and code hash, so a new run under a closed session's id
-- (Temporal lets a workflow id be used again) would have accepted the old session's signed decisions again.
-- Insert-only for everyone, as the executors' nonces: a claim deleted would free the id for that replay.
CREATE TABLE session_ids (
    session_id  text PRIMARY KEY,
    first_run   text NOT NULL,             -- the Temporal run that started the session (its continue-as-new chain)
    claimed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER session_ids_append_only_rows BEFORE UPDATE OR DELETE ON session_ids
    FOR EACH ROW EXECUTE FUNCTION insert_only('a session id names one session, ever');
CREATE TRIGGER session_ids_append_only_truncate BEFORE TRUNCATE ON session_ids
    FOR EACH STATEMENT EXECUTE FUNCTION insert_only('a session id names one session, ever');
