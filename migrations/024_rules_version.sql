-- 024: the version of a session's approval rules. Every change of which rules are live (a rule
-- added, revoked or expired) adds one to sessions.rules_version in the transaction that writes
-- its audit entry. A jailboxd instance keeps the rules it decided on with the version it read
-- them at; an op's insert holds the session row (FOR KEY SHARE, which a rule change's FOR
-- UPDATE waits for and makes wait) and is refused when the version moved, so that every op is
-- decided by the rules that stand when it is recorded, on whatever instance it arrived.
ALTER TABLE sessions ADD COLUMN rules_version bigint NOT NULL DEFAULT 0;
