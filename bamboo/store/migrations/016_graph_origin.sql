-- Which batch stored a graph, from which file: within one batch (the scope) a graph id belongs to one
-- source, so a second file with the same id is refused instead of silently replacing the first, and
-- an incident the batch already stored is recognised by its source when it comes round again (after
-- a crash or an outage) instead of being learned and audited twice.
ALTER TABLE graphs ADD COLUMN scope text, ADD COLUMN source text;
CREATE INDEX graphs_scope_source ON graphs (scope, source);
