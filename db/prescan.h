/* prescan.h — storage side of the buyer's pre-scan confirmation: extra exclusions added to a
 * session while it waits in `prescanning`. The state change itself goes through
 * jb_db_session_transition (db/sessions.h), the one state machine. */
#ifndef JB_DB_PRESCAN_H
#define JB_DB_PRESCAN_H

#include <libpq-fe.h>

#include "lib/err.h"

/* Appends the globs of `exclude_json` (JSON array text of strings) to the exclusions of
 * `job_id`, keeping each glob once, while the session is in `prescanning` or `awaiting_agent` (before the agent connects).
 * JB_OK; JB_ERR_NOT_FOUND; JB_ERR_CONFLICT with `state` (20 bytes) = the current state;
 * JB_ERR_FAIL with `err`. */
int jb_db_session_add_exclusions(PGconn *c, const char *job_id, const char *exclude_json,
                                 char state[20], jb_error *err);

#endif
