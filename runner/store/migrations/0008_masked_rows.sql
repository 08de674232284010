-- CodeSpace store schema, version 8: a decision row may record a path masked from a command.

-- A command's masked paths were `deny` rows, which look like refused calls (deny alerts fired
-- on every CI run). They are `masked` now. SQLite cannot change a CHECK constraint in place, so
-- the table is rebuilt with the same columns, rows (ids kept, so `seq` cursors hold) and
-- indexes.
CREATE TABLE decisions_v8 (
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
    decision          TEXT    NOT NULL CHECK (decision IN ('allow', 'deny', 'masked')),
    policy_ids        TEXT    NOT NULL,  -- JSON array of strings
    errors            TEXT    NOT NULL,  -- JSON array of strings
    default_deny      INTEGER NOT NULL CHECK (default_deny IN (0, 1)),
    duration_us       INTEGER NOT NULL,
    request           TEXT,
    path              TEXT,
    kind              TEXT,
    reason            TEXT,
    shadow_decision   TEXT CHECK (shadow_decision IN ('allow', 'deny')),
    shadow_policy_ids TEXT,  -- JSON array of strings
    trace_parent      TEXT,
    UNIQUE (decision_id, sub_index)
);
INSERT INTO decisions_v8 (id, decision_id, at_ms, policy_set_sha256, profile, workspace, tool,
    action, sub_index, subject, client, transport, decision, policy_ids, errors, default_deny,
    duration_us, request, path, kind, reason, shadow_decision, shadow_policy_ids, trace_parent)
SELECT id, decision_id, at_ms, policy_set_sha256, profile, workspace, tool, action, sub_index,
    subject, client, transport, decision, policy_ids, errors, default_deny, duration_us, request,
    path, kind, reason, shadow_decision, shadow_policy_ids, trace_parent
FROM decisions;
DROP TABLE decisions;
ALTER TABLE decisions_v8 RENAME TO decisions;
CREATE INDEX decisions_at ON decisions (at_ms, sub_index);
CREATE INDEX decisions_workspace_at ON decisions (workspace, at_ms);
CREATE INDEX decisions_client_at ON decisions (client, at_ms);
