-- CodeSpace store schema, version 9: a workspace's path index, saved at a clean shutdown so a
-- restarted server need not walk the tree again. The engine validates a saved index against the
-- disk before using it (directory stamps) and takes the row when it reads it, so a row is used at
-- most once and only a clean shutdown writes one again.
CREATE TABLE path_indexes (
    registration_id TEXT    PRIMARY KEY NOT NULL
        REFERENCES workspace_registrations (registration_id) ON DELETE CASCADE,
    saved_ms        INTEGER NOT NULL,
    data            BLOB    NOT NULL
);
