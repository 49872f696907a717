-- What a graph was learned from: the fingerprint of the incident's file. A later batch reading the
-- same content skips the incident before any model call instead of learning it again.
ALTER TABLE graphs ADD COLUMN content_hash text;
CREATE INDEX graphs_content_hash ON graphs (content_hash);
