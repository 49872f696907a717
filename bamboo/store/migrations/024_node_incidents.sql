-- How many stored incidents (graphs) name each node: the graphs whose provenance holds an edge that
-- starts or ends at it. Kept by the graph write, in the same transaction, so analysis reads a clue's
-- specificity and a cause's incident count as one row instead of counting provenance at read time
-- (a feature such as vo=atlas is on nearly every incident: counting it joined every provenance row).
CREATE TABLE node_incidents (
    node_id   bigint PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
    incidents integer NOT NULL
);

INSERT INTO node_incidents (node_id, incidents)
SELECT v.node_id, count(DISTINCT p.graph_id)
FROM edge_provenance p JOIN edges e ON e.id = p.edge_id
CROSS JOIN LATERAL (VALUES (e.src), (e.dst)) AS v(node_id)
GROUP BY v.node_id;
