-- 007: a 'stat' op — the current state and SHA-256 of a file, taken through the shim when a
-- supervised write is requested, so that the write is refused if the file changes before the
-- buyer's approval is carried out (issue 7).
ALTER TABLE ops DROP CONSTRAINT ops_tool_check;
ALTER TABLE ops ADD CONSTRAINT ops_tool_check
  CHECK (tool IN ('read', 'write', 'list', 'done', 'stat'));
