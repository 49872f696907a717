-- Operator verdicts on analyses. Kept apart from edge_provenance: a confirmation is a judgement about a
-- diagnosis, not evidence extracted from an incident, and the ranking adds it on top of the stored counts.
-- One verdict per task: giving feedback again replaces it, so repeating a command cannot inflate counts.
CREATE TABLE analysis_feedback (
    task_id        bigint PRIMARY KEY,
    verdict        text NOT NULL CHECK (verdict IN ('correct', 'wrong')),
    cause          text NOT NULL,
    proposed_cause text,
    operator       text,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX analysis_feedback_cause ON analysis_feedback (lower(cause));
CREATE INDEX analysis_feedback_proposed ON analysis_feedback (lower(proposed_cause));
