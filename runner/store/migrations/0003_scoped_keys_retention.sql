-- CodeSpace store schema, version 2: scoped, expiring operation keys; workspace registrations;
-- sealed patch journals; indexes for retention pruning.
-- Runs with foreign keys off (see migrate.rs): `operations` is rebuilt.

-- One row per (workspace id, root): a workspace id bound to another root (device:inode of the
-- root directory) gets a new registration, so keys and journals of the old tree do not apply.
CREATE TABLE workspace_registrations (
    registration_id TEXT    PRIMARY KEY NOT NULL,
    workspace       TEXT    NOT NULL,
    root_id         TEXT    NOT NULL,  -- "<st_dev>:<st_ino>" of the root directory
    created_ms      INTEGER NOT NULL,
    last_seen_ms    INTEGER NOT NULL,
    UNIQUE (workspace, root_id)
);

-- `operations` without UNIQUE (workspace, tool, operation_key): keys live in operation_keys now.
-- operation_key stays as the label operation_status shows.
CREATE TABLE operations_v2 (
    operation_id  TEXT    PRIMARY KEY NOT NULL,
    operation_key TEXT,
    fingerprint   TEXT    NOT NULL,
    tool          TEXT    NOT NULL,
    workspace     TEXT    NOT NULL,
    client        TEXT,
    status        TEXT    NOT NULL,
    created_ms    INTEGER NOT NULL,
    finished_ms   INTEGER,
    result        TEXT  -- JSON value
);
INSERT INTO operations_v2 (operation_id, operation_key, fingerprint, tool, workspace, client,
                           status, created_ms, finished_ms, result)
    SELECT operation_id, operation_key, fingerprint, tool, workspace, client,
           status, created_ms, finished_ms, result
    FROM operations;
DROP TABLE operations;
ALTER TABLE operations_v2 RENAME TO operations;
CREATE INDEX operations_created ON operations (created_ms);
CREATE INDEX operations_unfinished ON operations (created_ms) WHERE finished_ms IS NULL;

-- An idempotency key: scoped to (client, workspace registration, tool), valid until expires_ms.
-- Keys written before version 2 had no scope; they are not carried over (a retry with one runs
-- as a new call).
CREATE TABLE operation_keys (
    client        TEXT    NOT NULL,
    registration  TEXT    NOT NULL,
    tool          TEXT    NOT NULL,
    operation_key TEXT    NOT NULL,
    operation_id  TEXT    NOT NULL REFERENCES operations (operation_id) ON DELETE CASCADE,
    created_ms    INTEGER NOT NULL,
    expires_ms    INTEGER NOT NULL,
    PRIMARY KEY (client, registration, tool, operation_key)
);
CREATE INDEX operation_keys_lookup ON operation_keys (client, operation_key);
CREATE INDEX operation_keys_expiry ON operation_keys (expires_ms);
CREATE INDEX operation_keys_op ON operation_keys (operation_id);

-- A journal is applied at start-up only when its seal (HMAC-SHA256 under the key file next to
-- the store) verifies and its registration is the workspace's current one.
ALTER TABLE patch_journals ADD COLUMN registration TEXT;
ALTER TABLE patch_journals ADD COLUMN seal TEXT;

-- Retention pruning walks these in time order.
CREATE INDEX events_at ON events (at_ms);
CREATE INDEX processes_started ON processes (started_ms);
CREATE INDEX processes_operation ON processes (operation_id);
