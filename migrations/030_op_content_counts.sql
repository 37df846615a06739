-- 030: an op's content is kept only while the op waits to run. A write's or an edit's
-- content (args.content) and an exec's standard input (args.stdin) are what the worker
-- hands the shim and what the buyer reviews while the op is pending; once the op has an
-- outcome (done, failed, rejected) only their size and SHA-256 remain. The audit entry
-- already holds only those. A trigger does it in the statement that stores the outcome, so
-- every path to an outcome (the worker's commit, a direct op stored done, a rejection, a
-- timeout, a kill, a session's end failing its queued ops) drops it in the same
-- transaction, and an op stored already done never writes its content at all.
--
-- What remains of a dropped field:
--   write / edit: size, sha256 (already there), encoding, and contentDropped = true
--   exec:         stdinBytes, stdinSha256 (of the UTF-8 bytes), and contentDropped = true
-- An older row without size or sha256 gets them from the content before it is dropped
-- (base64 decoded when its encoding says so, text as UTF-8 otherwise).
CREATE FUNCTION jb_op_args_without_content(a jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  bytes bytea;
BEGIN
  IF a IS NULL OR jsonb_typeof(a) <> 'object' THEN
    RETURN a;
  END IF;
  IF jsonb_typeof(a->'content') = 'string' THEN
    IF NOT (a ? 'size' AND a ? 'sha256') THEN
      BEGIN
        bytes := CASE WHEN a->>'encoding' = 'base64' THEN decode(a->>'content', 'base64')
                      ELSE convert_to(a->>'content', 'UTF8') END;
      EXCEPTION WHEN others THEN
        bytes := convert_to(a->>'content', 'UTF8');
      END;
      a := a || jsonb_build_object('size', coalesce(a->'size', to_jsonb(length(bytes))),
                                   'sha256', coalesce(a->'sha256',
                                                      to_jsonb(encode(sha256(bytes), 'hex'))));
    END IF;
  END IF;
  IF a ? 'content' THEN
    a := (a - 'content') || '{"contentDropped": true}'::jsonb;
  END IF;
  IF a ? 'stdin' THEN
    IF jsonb_typeof(a->'stdin') = 'string' THEN
      bytes := convert_to(a->>'stdin', 'UTF8');
      a := a || jsonb_build_object('stdinBytes', length(bytes),
                                   'stdinSha256', encode(sha256(bytes), 'hex'));
    END IF;
    a := (a - 'stdin') || '{"contentDropped": true}'::jsonb;
  END IF;
  RETURN a;
END $$;

CREATE FUNCTION jb_ops_drop_content() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.args := jb_op_args_without_content(NEW.args);
  RETURN NEW;
END $$;

-- only rows that have an outcome and still carry content: the trigger costs nothing else
CREATE TRIGGER ops_drop_content BEFORE INSERT OR UPDATE ON ops
  FOR EACH ROW WHEN (NEW.state IN ('done', 'failed', 'rejected')
                     AND (NEW.args ? 'content' OR NEW.args ? 'stdin'))
  EXECUTE FUNCTION jb_ops_drop_content();

-- the rows stored before: the trigger above rewrites them as they are touched
UPDATE ops SET args = args
 WHERE state IN ('done', 'failed', 'rejected') AND (args ? 'content' OR args ? 'stdin');

-- Counters of ops for /metrics, kept as ops change instead of counted at each scrape (a
-- scrape read every op row). Each op's change appends one row to op_count_changes in the
-- transaction that makes it (no row is updated in place, so concurrent op commits never
-- wait on a shared counter row, and no two transactions can deadlock on them); a scrape
-- reads op_counts plus the changes not folded yet, in one snapshot, and folds them into
-- op_counts (one scrape at a time, under an advisory lock) so the table of changes stays
-- as small as the ops made between two scrapes.
--   op_counts:      ops by tool and state (a gauge: what is in each state now)
--   op_wait_counts: ops decided, by bucket of decided_at − created_at (seconds), with the
--                   bounds of jb_approval_wait_bounds() (index 1..n, n + 1 for +Inf), and
--                   the sum of the waits of each bucket
CREATE TABLE op_counts (
  tool text NOT NULL,
  state text NOT NULL,
  n bigint NOT NULL,
  PRIMARY KEY (tool, state)
);
CREATE TABLE op_wait_counts (
  bucket int PRIMARY KEY,
  n bigint NOT NULL,
  sum_s float8 NOT NULL
);
CREATE TABLE op_count_changes (
  tool text NOT NULL,
  from_state text,      -- NULL: the op was inserted
  to_state text,        -- NULL: the op was deleted
  wait_s float8         -- set when the op was decided by this change
);

-- the approval wait histogram's upper bounds, seconds; db/metrics.c checks its own against
-- these at every scrape
CREATE FUNCTION jb_approval_wait_bounds() RETURNS float8[] LANGUAGE sql IMMUTABLE AS
  $$ SELECT '{0.1,0.5,1,2.5,5,15,30,60,300,900,3600}'::float8[] $$;

-- the bucket (1-based; n + 1: +Inf) of a wait of `t` seconds
CREATE FUNCTION jb_approval_wait_bucket(t float8) RETURNS int LANGUAGE sql IMMUTABLE AS
  $$ SELECT coalesce((SELECT min(i)::int FROM unnest(jb_approval_wait_bounds())
                        WITH ORDINALITY AS b(b, i) WHERE t <= b.b),
                     cardinality(jb_approval_wait_bounds()) + 1) $$;

CREATE FUNCTION jb_ops_count_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO op_count_changes VALUES (OLD.tool, OLD.state, NULL, NULL);
    RETURN NULL;
  END IF;
  INSERT INTO op_count_changes VALUES (
    NEW.tool,
    CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END,
    NEW.state,
    CASE WHEN NEW.decided_at IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.decided_at IS NULL)
      THEN extract(epoch FROM NEW.decided_at - NEW.created_at)::float8 END);
  RETURN NULL;
END $$;

CREATE TRIGGER ops_count_insert_delete AFTER INSERT OR DELETE ON ops
  FOR EACH ROW EXECUTE FUNCTION jb_ops_count_change();
CREATE TRIGGER ops_count_update AFTER UPDATE OF state, decided_at ON ops
  FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                     OR (OLD.decided_at IS NULL AND NEW.decided_at IS NOT NULL))
  EXECUTE FUNCTION jb_ops_count_change();

-- Folds the changes made so far into the counters; a no-op when another transaction is
-- folding (the reader then adds the changes itself). Returns the changes folded.
CREATE FUNCTION jb_op_counts_fold() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  folded bigint;
BEGIN
  IF NOT pg_try_advisory_xact_lock(7665523954990151714) THEN
    RETURN 0;
  END IF;
  WITH d AS (DELETE FROM op_count_changes RETURNING *),
   c AS (INSERT INTO op_counts AS c (tool, state, n)
     SELECT tool, state, sum(delta) FROM (
       SELECT tool, to_state AS state, 1 AS delta FROM d WHERE to_state IS NOT NULL
       UNION ALL
       SELECT tool, from_state, -1 FROM d WHERE from_state IS NOT NULL) x
     GROUP BY tool, state
     ON CONFLICT (tool, state) DO UPDATE SET n = c.n + excluded.n),
   w AS (INSERT INTO op_wait_counts AS w (bucket, n, sum_s)
     SELECT jb_approval_wait_bucket(wait_s), count(*), sum(wait_s)
       FROM d WHERE wait_s IS NOT NULL GROUP BY 1
     ON CONFLICT (bucket) DO UPDATE SET n = w.n + excluded.n, sum_s = w.sum_s + excluded.sum_s)
  SELECT count(*) INTO folded FROM d;
  RETURN folded;
END $$;

-- the counts of the ops stored before: made in this transaction, which holds the lock that
-- CREATE TRIGGER took on ops, so that no op changes between the count and the trigger
INSERT INTO op_counts (tool, state, n) SELECT tool, state, count(*) FROM ops GROUP BY 1, 2;
INSERT INTO op_wait_counts (bucket, n, sum_s)
  SELECT jb_approval_wait_bucket(t), count(*), sum(t)
    FROM (SELECT extract(epoch FROM decided_at - created_at)::float8 AS t FROM ops
           WHERE decided_at IS NOT NULL) s
   GROUP BY 1;

-- The diff previews kept for the buyer (ops.diff, at most JAILBOX_DIFF_PREVIEW_MAX bytes of
-- text each) are cleared once their session has been over for the retention period
-- (jailboxd's sweeper, db/ops.h jb_db_ops_forget_previews); this index finds the ops that
-- still have one without reading the others.
CREATE INDEX ops_with_diff ON ops (job_id) WHERE diff IS NOT NULL;
