-- CodeSpace store schema, step 4: replayable, SIEM-ready decision rows.
-- Every new column is nullable: rows written before this step keep NULL.

-- The Cedar request the row decided, as JSON (principal and its ancestors, action, resource
-- facts, workspace facts, context), redacted; never file contents, patch text or stdin.
ALTER TABLE decisions ADD COLUMN request TEXT;
-- The sub-request's workspace-relative path and apply_patch kind.
ALTER TABLE decisions ADD COLUMN path TEXT;
ALTER TABLE decisions ADD COLUMN kind TEXT;
-- Why: the determining policies with their @reason, or the default deny, or the errors.
ALTER TABLE decisions ADD COLUMN reason TEXT;
-- The decision of the shadow set (policies/shadow/), never enforced.
ALTER TABLE decisions ADD COLUMN shadow_decision TEXT CHECK (shadow_decision IN ('allow', 'deny'));
ALTER TABLE decisions ADD COLUMN shadow_policy_ids TEXT;  -- JSON array of strings
CREATE INDEX decisions_client_at ON decisions (client, at_ms);
