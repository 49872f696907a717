-- Knowledge graph, vectors, claim-check blobs and the hash-chained audit log.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE store_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE graphs (
    graph_id    text PRIMARY KEY,
    incident_id text NOT NULL,
    task_id     bigint,
    summary     text NOT NULL DEFAULT '',
    warnings    jsonb NOT NULL DEFAULT '[]',
    stored_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE nodes (
    id          bigserial PRIMARY KEY,
    kind        text NOT NULL,
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    props       jsonb NOT NULL DEFAULT '{}',
    embedding   vector({{EMBEDDING_DIM}}),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kind, name)
);
CREATE INDEX nodes_kind ON nodes (kind);

CREATE TABLE edges (
    id         bigserial PRIMARY KEY,
    src        bigint NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    kind       text NOT NULL,
    dst        bigint NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    confidence real NOT NULL DEFAULT 1.0,
    frequency  integer NOT NULL DEFAULT 0,
    UNIQUE (src, kind, dst)
);
CREATE INDEX edges_dst ON edges (dst, kind);

CREATE TABLE edge_provenance (
    edge_id    bigint NOT NULL REFERENCES edges(id) ON DELETE CASCADE,
    graph_id   text NOT NULL,
    confidence real NOT NULL DEFAULT 1.0,
    params     jsonb NOT NULL DEFAULT '{}',
    meta       jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (edge_id, graph_id)
);
CREATE INDEX edge_provenance_graph ON edge_provenance (graph_id);

CREATE TABLE passages (
    id        uuid PRIMARY KEY,
    graph_id  text NOT NULL,
    section   text NOT NULL,
    node_id   bigint REFERENCES nodes(id) ON DELETE SET NULL,
    content   text NOT NULL,
    embedding vector({{EMBEDDING_DIM}}) NOT NULL,
    meta      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX passages_section ON passages (section);
CREATE INDEX passages_graph ON passages (graph_id);
CREATE INDEX passages_embedding ON passages USING hnsw (embedding vector_cosine_ops);

CREATE TABLE vector_items (
    namespace text NOT NULL,
    section   text NOT NULL,
    id        text NOT NULL,
    content   text NOT NULL,
    embedding vector({{EMBEDDING_DIM}}) NOT NULL,
    meta      jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (namespace, section, id)
);
CREATE INDEX vector_items_embedding ON vector_items USING hnsw (embedding vector_cosine_ops);

CREATE TABLE procedures (
    id                  bigserial PRIMARY KEY,
    signature           text NOT NULL UNIQUE,
    code                text NOT NULL,
    code_hash           text NOT NULL,
    status              text NOT NULL DEFAULT 'approved',
    auto_run_granted_by text,
    auto_run_granted_at timestamptz,
    auto_run_code_hash  text,
    meta                jsonb NOT NULL DEFAULT '{}',
    created_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE human_requests (
    graph_id   text NOT NULL,
    request    text NOT NULL,
    answer     text,
    answered_by text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (graph_id, request)
);

CREATE TABLE blobs (
    sha256     text PRIMARY KEY,
    size       integer NOT NULL,
    bytes      bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE audit (
    seq       bigint PRIMARY KEY,
    at        timestamptz NOT NULL,
    actor     text NOT NULL,
    run_id    text,
    kind      text NOT NULL,
    body      jsonb NOT NULL,
    dedup_key text UNIQUE,
    prev_hash text NOT NULL,
    hash      text NOT NULL
);
