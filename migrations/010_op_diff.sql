-- 010: the diff preview of a supervised write (issue 7): a unified diff of the file as it was
-- when the write was requested against the proposed content, made in jailboxd with libgit2
-- ({format, text, truncated, bytes}); NULL for binary content, new-file-less stats and ops
-- that are no supervised writes.
ALTER TABLE ops ADD COLUMN diff jsonb;

-- compressed like an op's arguments and result (migration 009): lz4 where the server has it
DO $$
BEGIN
  ALTER TABLE ops ALTER COLUMN diff SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
  NULL;
END $$;
