-- 043: who paused a session: 'buyer', or 'service' (the operator, through the platform's
-- service token); NULL when it is not paused (or was paused before this migration). A pause
-- is lifted only by whoever made it; GET /v1/jailbox/:jobId shows it as pausedBy.
ALTER TABLE sessions ADD COLUMN paused_by text;
