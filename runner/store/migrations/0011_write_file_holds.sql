-- CodeSpace store schema, step 11: a hold may pause a `write_file` (issue 31's whole-file write,
-- held like the patch it is). SQLite cannot change a CHECK constraint in place, so the table is
-- rebuilt (SQLite's ALTER TABLE procedure) with the same columns and indexes.
CREATE TABLE approvals_new (
    approval_id     TEXT    PRIMARY KEY NOT NULL,
    fingerprint     TEXT    NOT NULL,
    tool            TEXT    NOT NULL CHECK (tool IN ('apply_patch', 'exec_command', 'write_file')),
    workspace       TEXT    NOT NULL,
    registration    TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN
                        ('pending', 'granted', 'denied', 'consumed', 'expired', 'resuming')),
    arguments       TEXT,
    summary         TEXT    NOT NULL,
    facts           TEXT,
    requested_by    TEXT    NOT NULL,
    transport       TEXT    NOT NULL,
    channel         TEXT,
    resolved_by     TEXT,
    result          TEXT,
    created_ms      INTEGER NOT NULL,
    expires_ms      INTEGER NOT NULL,
    resolved_ms     INTEGER,
    resumed_ms      INTEGER,
    finished_ms     INTEGER
);
INSERT INTO approvals_new SELECT approval_id, fingerprint, tool, workspace, registration, state,
    arguments, summary, facts, requested_by, transport, channel, resolved_by, result, created_ms,
    expires_ms, resolved_ms, resumed_ms, finished_ms FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_new RENAME TO approvals;
CREATE INDEX approvals_fingerprint ON approvals (fingerprint, state);
CREATE INDEX approvals_created ON approvals (created_ms);
CREATE INDEX approvals_expiry ON approvals (state, expires_ms);
