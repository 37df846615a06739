-- 015: a session's audit head (seq, hash, sealed) moves from its sessions row into
-- audit_heads, a narrow table that only appends update. Every append updates the head; on
-- sessions that UPDATE paid for what the row carries besides: PostgreSQL reads each CHECK
-- constraint and each trigger WHEN clause of the table back from its stored text on every
-- statement (perf: pg_strtok / parseNodeString), sessions has three CHECKs and the WHEN of
-- sessions_change_update, and six foreign keys reference it. audit_heads has no CHECK and no
-- WHEN, and none of its triggers fires on such an UPDATE (the append statement alone under
-- pgbench, 16 clients: 6583/s with the head on sessions, 9971/s on a table like this one).
--
-- What the head guaranteed on sessions stays true:
-- - every session has one head row, made by the INSERT of the session (trigger below), so the
--   append's compare-and-set finds it and the slow path can lock it;
-- - the head row references its session (ON DELETE / ON UPDATE CASCADE: a session without
--   audit entries may still be deleted or renamed; one with entries may not, 012 / 014).
--   An append's UPDATE never changes job_id, so the reference costs it no check;
-- - the head row itself is never deleted, renamed or truncated while its session has audit
--   entries (triggers on DELETE, UPDATE OF job_id and TRUNCATE: none fires on an append). The
--   one on UPDATE OF job_id runs AFTER the row changes: any BEFORE UPDATE row trigger, even
--   one that never fires for the columns set, makes PostgreSQL lock the old row first (one
--   more WAL record per append); an AFTER one refuses the same way;
-- - moving the head still announces no change on jb_change (006): audit_heads has no
--   notify trigger, and sessions_change_update loses its WHEN clause since no UPDATE of
--   sessions moves the head any more.
CREATE TABLE audit_heads (
  job_id  text PRIMARY KEY REFERENCES sessions(job_id) ON DELETE CASCADE ON UPDATE CASCADE,
  seq     bigint NOT NULL DEFAULT 0,
  hash    bytea,
  sealed  boolean NOT NULL DEFAULT false
) WITH (fillfactor = 50);  -- room on the page for the next version: HOT updates

INSERT INTO audit_heads (job_id, seq, hash, sealed)
  SELECT job_id, audit_head_seq, audit_head_hash, audit_sealed FROM sessions;

CREATE FUNCTION jb_audit_head_create() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit_heads (job_id) VALUES (NEW.job_id);
  RETURN NULL;
END $$;

CREATE TRIGGER sessions_audit_head AFTER INSERT ON sessions
  FOR EACH ROW EXECUTE FUNCTION jb_audit_head_create();

-- Refuses to delete or rename the head of a session that has audit entries.
CREATE FUNCTION jb_audit_head_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (TG_OP = 'DELETE' OR OLD.job_id IS DISTINCT FROM NEW.job_id)
     AND EXISTS (SELECT 1 FROM audit_entries WHERE job_id = OLD.job_id) THEN
    RAISE EXCEPTION 'session % has audit entries; its audit head is never deleted or moved',
      OLD.job_id USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN OLD;  -- a BEFORE DELETE goes on; an AFTER UPDATE's result is ignored
END $$;

CREATE TRIGGER audit_heads_kept BEFORE DELETE ON audit_heads
  FOR EACH ROW EXECUTE FUNCTION jb_audit_head_kept();
CREATE TRIGGER audit_heads_id_kept AFTER UPDATE OF job_id ON audit_heads
  FOR EACH ROW EXECUTE FUNCTION jb_audit_head_kept();

CREATE FUNCTION jb_audit_heads_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_entries) THEN
    RAISE EXCEPTION 'sessions have audit entries; their audit heads are never deleted'
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER audit_heads_kept_truncate BEFORE TRUNCATE ON audit_heads
  FOR EACH STATEMENT EXECUTE FUNCTION jb_audit_heads_truncated();

DROP TRIGGER sessions_change_update ON sessions;
CREATE TRIGGER sessions_change_update AFTER UPDATE ON sessions
  FOR EACH ROW EXECUTE FUNCTION jb_notify_change();

ALTER TABLE sessions
  DROP COLUMN audit_head_seq,
  DROP COLUMN audit_head_hash,
  DROP COLUMN audit_sealed;
