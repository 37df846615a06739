-- 042: an exec's environment values leave ops.args once the op has an outcome, as its
-- standard input does (030); a writable command's full change list is kept beside its op;
-- the time a command was started is kept, so that a running op past its time can be found.
--
-- env: {NAME: value} becomes {NAME: {"bytes": n, "sha256": hex}} (n and the SHA-256 of the
-- value's UTF-8 bytes), plus envDropped = true: the names stay (the buyer's view of the op,
-- the rules made from it), the values do not. A value that is not a string becomes
-- {"bytes": null, "sha256": null}. envShown (the values as the buyer was shown them while the op
-- was pending, secret-looking ones masked) goes too.
CREATE FUNCTION jb_op_args_without_env(a jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN a IS NULL OR jsonb_typeof(a) <> 'object' THEN a
    WHEN coalesce(jsonb_typeof(a->'env'), '') <> 'object' OR a ? 'envDropped' THEN a - 'envShown'
    ELSE (a - 'envShown') || jsonb_build_object('envDropped', true, 'env', coalesce((
      SELECT jsonb_object_agg(k, CASE WHEN jsonb_typeof(v) = 'string' THEN jsonb_build_object(
               'bytes', octet_length(convert_to(v #>> '{}', 'UTF8')),
               'sha256', encode(sha256(convert_to(v #>> '{}', 'UTF8')), 'hex'))
             ELSE '{"bytes": null, "sha256": null}'::jsonb END)
        FROM jsonb_each(a->'env') AS e(k, v)), '{}'::jsonb)) END
$$;

CREATE FUNCTION jb_ops_drop_env() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.args := jb_op_args_without_env(NEW.args);
  RETURN NEW;
END $$;

-- as 030's: only rows that have an outcome and still carry values (trigger names order
-- BEFORE triggers alphabetically: ops_drop_content runs first, then this one)
CREATE TRIGGER ops_drop_env BEFORE INSERT OR UPDATE ON ops
  FOR EACH ROW WHEN (NEW.state IN ('done', 'failed', 'rejected')
                     AND ((NEW.args ? 'env' AND NOT NEW.args ? 'envDropped')
                          OR NEW.args ? 'envShown'))
  EXECUTE FUNCTION jb_ops_drop_env();

UPDATE ops SET args = args
 WHERE state IN ('done', 'failed', 'rejected')
   AND ((args ? 'env' AND NOT args ? 'envDropped') OR args ? 'envShown');

-- changes: a writable command's change list, kept beside its op (sandbox/worker/exec_op.c,
-- api/audit.md "exec changes"): {"total", "listed", "truncated", "sha256", "counts",
-- "list": [...]} — the list bounded in entries and bytes; its audit entry holds the summary
-- (all but the list), whose sha256 is of the list's canonical bytes. NULL: not a writable
-- exec, or one stored before.
-- started_at: when the worker marked the op running (jb_db_op_mark_running); a running op
-- past started_at + its timeoutMs + a grace is reaped (db/ops.h jb_db_ops_overdue).
ALTER TABLE ops ADD COLUMN changes jsonb, ADD COLUMN started_at timestamptz;
CREATE INDEX ops_running ON ops (job_id) WHERE state = 'running';
