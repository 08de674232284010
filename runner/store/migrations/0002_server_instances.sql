-- CodeSpace store schema, version 2: server instances.

-- One row per server start. The instance id names the server's temporary files
-- (`.codespace-tmp-<instance_id>-<n>`): only the names of instances recorded here are the server's
-- (hidden from listings, swept at start-up after a crash).
CREATE TABLE server_instances (
    instance_id   TEXT    PRIMARY KEY NOT NULL,  -- 16 lowercase hex digits
    started_ms    INTEGER NOT NULL,
    pid           INTEGER NOT NULL,
    process_start TEXT    NOT NULL,  -- boot id and start time of the process: tells a live instance from a dead one
    ended_ms      INTEGER,           -- set by a shutdown that left no temporary file behind
    swept_ms      INTEGER            -- set once a later start swept its temporary files
);
