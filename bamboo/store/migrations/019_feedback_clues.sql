-- The clues of the task a verdict was given on ("Kind/name", as routing names the knowledge base's nodes),
-- so a confirmed or corrected cause counts as evidence for the tasks that share those clues, not only
-- for the same task's next analysis. Empty when the verdict was given without the task's data.
ALTER TABLE analysis_feedback ADD COLUMN clues text[] NOT NULL DEFAULT '{}';
CREATE INDEX analysis_feedback_clues ON analysis_feedback USING gin (clues);
