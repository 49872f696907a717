-- A durable auto-run grant is a row of `procedures`, which the app role (every worker's, and a requester's on
-- the embedded stack) may write: a requester stored a procedure with a grant "by nobody" and her next turn ran
-- it unprompted. A grant now keeps the approver's signed auto-run answer that names it, and the session it was
-- given in; the worker counts it only when that signature checks against the registry (policy.grants).
ALTER TABLE procedures ADD COLUMN auto_run_session text;
ALTER TABLE procedures ADD COLUMN auto_run_decision jsonb;
