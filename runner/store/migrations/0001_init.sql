-- CodeSpace store schema, version 1.
-- Times are unix milliseconds (INTEGER). JSON columns hold UTF-8 JSON text.

-- Audit log: one row per Cedar sub-request. Never file contents, patches or stdin.
CREATE TABLE decisions (
    id                INTEGER PRIMARY KEY,
    decision_id       TEXT    NOT NULL,
    at_ms             INTEGER NOT NULL,
    policy_set_sha256 TEXT    NOT NULL,
    profile           TEXT    NOT NULL,
    workspace         TEXT    NOT NULL,
    tool              TEXT    NOT NULL,
    action            TEXT    NOT NULL,
    sub_index         INTEGER NOT NULL,
    subject           TEXT    NOT NULL,
    client            TEXT,
    transport         TEXT,
    decision          TEXT    NOT NULL CHECK (decision IN ('allow', 'deny')),
    policy_ids        TEXT    NOT NULL,  -- JSON array of strings
    errors            TEXT    NOT NULL,  -- JSON array of strings
    default_deny      INTEGER NOT NULL CHECK (default_deny IN (0, 1)),
    duration_us       INTEGER NOT NULL,
    UNIQUE (decision_id, sub_index)
);
CREATE INDEX decisions_at ON decisions (at_ms, sub_index);
CREATE INDEX decisions_workspace_at ON decisions (workspace, at_ms);

-- Server events: start-up probe, policy reloads, and similar.
CREATE TABLE events (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms  INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    detail TEXT    NOT NULL  -- JSON value
);
CREATE INDEX events_kind ON events (kind, id);

-- Every mutating call. operation_key is optional; when present it is unique per (workspace, tool).
CREATE TABLE operations (
    operation_id  TEXT    PRIMARY KEY NOT NULL,
    operation_key TEXT,
    fingerprint   TEXT    NOT NULL,
    tool          TEXT    NOT NULL,
    workspace     TEXT    NOT NULL,
    client        TEXT,
    status        TEXT    NOT NULL,
    created_ms    INTEGER NOT NULL,
    finished_ms   INTEGER,
    result        TEXT,  -- JSON value
    UNIQUE (workspace, tool, operation_key)
);
CREATE INDEX operations_key ON operations (operation_key) WHERE operation_key IS NOT NULL;
CREATE INDEX operations_unfinished ON operations (created_ms) WHERE finished_ms IS NULL;

-- Timeline of one operation.
CREATE TABLE operation_events (
    id           INTEGER PRIMARY KEY,
    operation_id TEXT    NOT NULL REFERENCES operations (operation_id) ON DELETE CASCADE,
    at_ms        INTEGER NOT NULL,
    name         TEXT    NOT NULL,
    status       TEXT,
    reason       TEXT
);
CREATE INDEX operation_events_op ON operation_events (operation_id, id);

-- Processes started by exec_command.
CREATE TABLE processes (
    process_id   TEXT    PRIMARY KEY NOT NULL,
    workspace    TEXT    NOT NULL,
    operation_id TEXT    NOT NULL REFERENCES operations (operation_id),
    argv_sha256  TEXT    NOT NULL,
    program      TEXT    NOT NULL,
    tty          INTEGER NOT NULL CHECK (tty IN (0, 1)),
    pid          INTEGER,
    state        TEXT    NOT NULL,
    exit_code    INTEGER,
    termination  TEXT,
    started_ms   INTEGER NOT NULL,
    ended_ms     INTEGER
);
CREATE INDEX processes_state ON processes (state);

-- Rollback journal of an apply_patch, written before its first rename and cleared after.
CREATE TABLE patch_journals (
    operation_id TEXT    PRIMARY KEY NOT NULL REFERENCES operations (operation_id),
    workspace    TEXT    NOT NULL,
    created_ms   INTEGER NOT NULL
);

CREATE TABLE patch_journal_entries (
    operation_id TEXT    NOT NULL REFERENCES patch_journals (operation_id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    path         TEXT    NOT NULL,
    before       BLOB,              -- NULL: the file did not exist
    mode         INTEGER,
    created_dirs TEXT    NOT NULL,  -- JSON array of workspace-relative directories
    PRIMARY KEY (operation_id, seq)
);
