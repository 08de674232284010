-- CodeSpace store schema, version 9: the operation ledger (issue 31).

-- File contents, content-addressed: `hash` is the file's version (`sha256:<hex>` of its bytes),
-- so one content is stored once however many operations name it. A blob no ledger row names is
-- pruned by retention (`ledger_blobs`).
CREATE TABLE ledger_blobs (
    hash TEXT    PRIMARY KEY NOT NULL,
    size INTEGER NOT NULL,
    data BLOB    NOT NULL
);

-- One row per file an operation changed. An `apply_patch` row names its before/after blobs; a
-- withheld file (one the client may not `read`, or whose content holds a redaction pattern)
-- has `withheld = 1` and no versions: its content and hashes are never stored. A command's rows
-- (`process_id` set) are best effort: paths the watcher saw change while it ran, no contents.
CREATE TABLE ledger_files (
    id             INTEGER PRIMARY KEY,
    operation_id   TEXT    NOT NULL REFERENCES operations (operation_id) ON DELETE CASCADE,
    path           TEXT    NOT NULL,
    from_path      TEXT,
    kind           TEXT    NOT NULL,  -- add / update / delete / move / changed
    before_version TEXT,
    after_version  TEXT,
    mode           INTEGER,
    withheld       INTEGER NOT NULL DEFAULT 0,
    process_id     TEXT,
    best_effort    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX ledger_files_op ON ledger_files (operation_id, id);
CREATE INDEX ledger_files_before ON ledger_files (before_version) WHERE before_version IS NOT NULL;
CREATE INDEX ledger_files_after ON ledger_files (after_version) WHERE after_version IS NOT NULL;
