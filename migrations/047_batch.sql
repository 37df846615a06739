-- 047: an agent's batch. A write, edit, mkdir, move or delete called with `changeset: NAME`
-- is checked as any op and then held as 'staged' (args.changeset the name): not announced, not
-- claimed by a worker, not subject to the approval timeout. commit_changeset makes one op of
-- tool 'changeset' (args.batch NAME, args.members) with a changeset_files row per path a
-- member changes (member_op_id the member; a move's two rows share it) and sets each member's
-- parent_op_id to it. The buyer's decision moves each member to 'approved' (the worker then
-- runs it as any op) or 'rejected'; staged ops of a batch never committed are rejected at
-- `done` and at the session's end.
ALTER TABLE ops DROP CONSTRAINT ops_state_check;
ALTER TABLE ops ADD CONSTRAINT ops_state_check
  CHECK (state IN ('pending', 'approved', 'running', 'rejected', 'done', 'failed', 'staged'));
ALTER TABLE changeset_files ADD COLUMN member_op_id bigint;
CREATE INDEX ops_staged ON ops (job_id, (args->>'changeset')) WHERE state = 'staged';
