-- 020: the exec tool (a command run in its own jail in the session's sandbox). An exec op is
-- claimed like any queued op and then marked 'running' in its own commit, so that it holds
-- no session row while the command runs (a pause, an abort or a buyer's kill must get
-- through meanwhile); its outcome and audit entry are stored when it ends. The jb_exec
-- channel carries "<op id> kill|stop|cont <job id>" from jailboxd to the worker running it.
ALTER TABLE ops DROP CONSTRAINT ops_tool_check;
ALTER TABLE ops ADD CONSTRAINT ops_tool_check
  CHECK (tool IN ('read', 'write', 'list', 'done', 'stat', 'read_many', 'edit', 'find', 'search',
                  'mkdir', 'move', 'delete', 'exec'));
ALTER TABLE ops DROP CONSTRAINT ops_state_check;
ALTER TABLE ops ADD CONSTRAINT ops_state_check
  CHECK (state IN ('pending', 'approved', 'running', 'rejected', 'done', 'failed'));
