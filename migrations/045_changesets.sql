-- 045: changesets. A supervised writable command runs on an overlay of the workspace; what it
-- left in the overlay's upper becomes one op of tool 'changeset' (parent_op_id: the exec op),
-- pending for the buyer, with one changeset_files row per path. The buyer approves all, some
-- (decision per row, bound to args.changesetSha256) or none; the worker applies the approved
-- rows on the host, each checked against the path as it was (old_*), and records per row its
-- outcome. The new contents wait as blobs in the session's pre-image store (new_sha256).
ALTER TABLE ops DROP CONSTRAINT ops_tool_check;
ALTER TABLE ops ADD CONSTRAINT ops_tool_check
  CHECK (tool IN ('read', 'write', 'list', 'done', 'stat', 'read_many', 'edit', 'find', 'search',
                  'mkdir', 'move', 'delete', 'exec', 'changeset'));
ALTER TABLE ops ADD COLUMN parent_op_id bigint;

CREATE TABLE changeset_files (
  job_id      text NOT NULL REFERENCES sessions(job_id),
  op_id       bigint NOT NULL,  -- the changeset op
  idx         integer NOT NULL CHECK (idx >= 0), -- order of the canonical manifest (by path)
  path        text NOT NULL,    -- relative to the workspace root
  change      text NOT NULL CHECK (change IN ('added', 'modified', 'deleted', 'mode', 'type')),
  old_type    text CHECK (old_type IN ('file', 'dir', 'link', 'absent', 'special')),
  new_type    text CHECK (new_type IN ('file', 'dir', 'link', 'absent', 'special')),
  old_sha256  text CHECK (old_sha256 IS NULL OR old_sha256 ~ '^[0-9a-f]{64}$'),
  new_sha256  text CHECK (new_sha256 IS NULL OR new_sha256 ~ '^[0-9a-f]{64}$'),
  old_mode    integer,
  new_mode    integer,          -- as the command left it (set-ID bits are never applied)
  old_target  text,
  new_target  text,             -- links: the link's text
  size        bigint NOT NULL DEFAULT 0,  -- bytes of the new content
  old_size    bigint NOT NULL DEFAULT 0,
  "binary"    boolean NOT NULL DEFAULT false,
  diff        jsonb,            -- lib/diff.h preview {format, text, truncated, bytes} or null
  approvable  boolean NOT NULL,
  why         text,             -- why not approvable
  flags       jsonb,            -- scanner findings [{rule, ...}]
  decision    text CHECK (decision IN ('approved', 'rejected')),
  outcome     text CHECK (outcome IN ('applied', 'conflict', 'failed')),
  detail      text,
  PRIMARY KEY (op_id, idx)
);
CREATE INDEX changeset_files_job ON changeset_files (job_id, op_id);
