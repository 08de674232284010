-- CodeSpace store schema, step 5: approval holds (issue #14). A hold pauses one apply_patch or
-- exec_command until a human (or a policy-chosen caller) grants or denies it; it survives a
-- restart. Wire states: pending | granted | denied | consumed | expired; `resuming` is internal
-- (a resume has started and not finished: an interrupted exec resume is never respawned).
CREATE TABLE approvals (
    approval_id     TEXT    PRIMARY KEY NOT NULL,   -- "appr-<uuid>"
    fingerprint     TEXT    NOT NULL,               -- client + registration + tool + canonical arguments
    tool            TEXT    NOT NULL CHECK (tool IN ('apply_patch', 'exec_command')),
    workspace       TEXT    NOT NULL,
    registration    TEXT    NOT NULL,               -- the workspace identity it is bound to
    state           TEXT    NOT NULL CHECK (state IN
                        ('pending', 'granted', 'denied', 'consumed', 'expired', 'resuming')),
    arguments       TEXT,                           -- JSON of the held call; NULL once denied (scrubbed)
    summary         TEXT    NOT NULL,               -- what a human is shown (command line or files), redacted
    facts           TEXT,                           -- JSON: workspace facts and pinned file versions at hold time
    requested_by    TEXT    NOT NULL,               -- client name
    transport       TEXT    NOT NULL,
    channel         TEXT,                           -- how it was resolved: tool | elicitation | cli
    resolved_by     TEXT,
    result          TEXT,                           -- JSON outcome of the resume ({ok}|{error})
    created_ms      INTEGER NOT NULL,
    expires_ms      INTEGER NOT NULL,
    resolved_ms     INTEGER,
    resumed_ms      INTEGER,
    finished_ms     INTEGER
);
CREATE INDEX approvals_fingerprint ON approvals (fingerprint, state);
CREATE INDEX approvals_created ON approvals (created_ms);
CREATE INDEX approvals_expiry ON approvals (state, expires_ms);
