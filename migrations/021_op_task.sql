-- 021: an op an agent's tools/call left running as an MCP task (the Tasks extension,
-- io.modelcontextprotocol/tasks, of revision 2026-07-28): the task's id, unguessable, which the
-- agent polls with tasks/get. NULL for ops answered in their call.
ALTER TABLE ops ADD COLUMN task_id text;
CREATE UNIQUE INDEX ops_task_id ON ops (task_id) WHERE task_id IS NOT NULL;
