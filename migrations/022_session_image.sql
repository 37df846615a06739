-- 022: the sandbox image a session runs in, named at open from the operator's allowlist
-- (JAILBOX_SANDBOX_IMAGES) or JAILBOX_SANDBOX_IMAGE; the worker launches it. NULL for
-- sessions opened before: their worker used its own JAILBOX_SANDBOX_IMAGE.
ALTER TABLE sessions ADD COLUMN image text CHECK (length(image) BETWEEN 1 AND 300);
