-- 019: the agent's whole toolset as ops — read_many, edit (stored as the write it amounts
-- to), find, search, mkdir, move and delete besides read, write, list, stat and done.
ALTER TABLE ops DROP CONSTRAINT ops_tool_check;
ALTER TABLE ops ADD CONSTRAINT ops_tool_check
  CHECK (tool IN ('read', 'write', 'list', 'done', 'stat', 'read_many', 'edit', 'find', 'search',
                  'mkdir', 'move', 'delete'));
