-- 043: who made a session's current state: 'service' (the operator, through the platform's
-- service token: the session's opening, its pause or abort), 'buyer', 'agent' or 'system'
-- (jailboxd or its worker). A pause is lifted only by the actor who made it; GET
-- /v1/jailbox/:jobId shows it as stateActor. NULL for the states of sessions made before.
ALTER TABLE sessions ADD COLUMN state_actor text;
