-- 003: a queryable copy of each audit entry's details. Verification never reads it back
-- into the signed bytes: those stay in audit_entries.canonical, verbatim. The export shows
-- this column, and the verifier compares it with the canonical bytes as JSON values, so a
-- key order changed by jsonb is no tampering while a changed value is.
ALTER TABLE audit_entries ADD COLUMN details jsonb NOT NULL DEFAULT '{}'::jsonb;
