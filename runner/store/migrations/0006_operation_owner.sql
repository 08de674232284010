-- CodeSpace store schema, version 6: the server instance that owns an operation.

-- Several servers may share one store (each MCP host starts its own `codespace serve`). The
-- instance that created an operation owns it, its patch journal and its processes: a starting
-- server recovers only what dead instances (and servers before this version) left unfinished,
-- never the live work of another running server.
ALTER TABLE operations ADD COLUMN instance_id TEXT;  -- server_instances.instance_id; NULL before version 6
