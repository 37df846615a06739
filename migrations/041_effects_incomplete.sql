-- 041: a writable command whose effects could not be checked whole (the walk around it stopped
-- at its entry, depth, time or hashing bound, or the pre-image of the covered entries was over
-- its bound) leaves the reason here, set by the worker that ran it; while it is set, the
-- session's writable commands are refused (jailboxd when asked, the worker when it would run
-- one) until the buyer clears it (POST /v1/jailbox/:jobId/effects/clear, jailbox:effects_clear).
-- NULL: nothing to decide. Setting or clearing it wakes the op path's session copies with a
-- "0 effects <job id>" notice on jb_op (009), which workers ignore.
ALTER TABLE sessions ADD COLUMN effects_incomplete text;
