-- 044: pre-images and rollback. Before the worker lets an op change a path of the workspace it
-- keeps what was there (content-addressed blobs under JAILBOX_PREIMAGE_DIR/<job>/objects, on
-- the workspace's host) and records one row per path here, in the op's settle transaction. A
-- rollback (a launch job of kind 'rollback', payload {to?, force?, by, reason?}) restores rows
-- newest first and marks them rolled_back_by; its outcome is the job's result.
CREATE TABLE preimages (
  job_id         text NOT NULL REFERENCES sessions(job_id),
  seq            bigserial,
  op_id          bigint,          -- the op that changed the path (NULL for a rollback's own)
  rollback_id    bigint,          -- the rollback job that overwrote the path (forced rollbacks)
  path           text NOT NULL,   -- relative to the workspace root, as ops.path
  kind           text NOT NULL CHECK (kind IN ('file', 'dir', 'link', 'absent', 'rename')),
  sha256         text CHECK (sha256 IS NULL OR sha256 ~ '^[0-9a-f]{64}$'), -- blob (kind file)
  mode           integer,         -- st_mode & 07777 of what was there
  target         text,            -- a link's text (kind link)
  from_path      text,            -- kind rename: the path the op moved to `path` from
  bytes          bigint NOT NULL DEFAULT 0, -- bytes this row added to the session's blobs
  after_kind     text CHECK (after_kind IS NULL OR after_kind IN ('file', 'dir', 'link', 'absent')),
  after_sha256   text CHECK (after_sha256 IS NULL OR after_sha256 ~ '^[0-9a-f]{64}$'),
  after_mode     integer,
  rolled_back_by bigint,          -- launch_jobs.id of the rollback that restored it
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job_id, seq)
);
CREATE INDEX preimages_op ON preimages (job_id, op_id);

-- Sum of `bytes` of the session's rows (the budget JAILBOX_PREIMAGE_MAX_BYTES is checked under
-- the session row lock), and when the blobs were dropped (accepted, or after the retention).
ALTER TABLE sessions ADD COLUMN preimage_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN preimages_gone_at timestamptz;

ALTER TABLE launch_jobs DROP CONSTRAINT launch_jobs_kind_check;
ALTER TABLE launch_jobs ADD CONSTRAINT launch_jobs_kind_check
  CHECK (kind IN ('launch', 'teardown', 'rollback'));
ALTER TABLE launch_jobs ADD COLUMN result jsonb;
