-- CodeSpace store schema, version 7: the W3C trace context of the request a decision answered.

-- The `traceparent` the MCP request carried (HTTP header, or `_meta.traceparent`), so a
-- decision row can be found from the host's or gateway's trace. NULL when the request had none
-- (and for every row before version 7).
ALTER TABLE decisions ADD COLUMN trace_parent TEXT;
