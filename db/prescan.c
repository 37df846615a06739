/* prescan.c — SQL for the buyer's pre-scan exclusions (see prescan.h). */
#include "db/prescan.h"

#include <stdio.h>

#include "db/db.h"
#include "db/sessions.h"

int jb_db_session_add_exclusions(PGconn *c, const char *job_id, const char *exclude_json,
                                 char state[20], jb_error *err) {
  const char *p[2] = {job_id, exclude_json};
  PGresult *r = jb_db_exec(
      c,
      "UPDATE sessions s SET exclude = (SELECT coalesce(jsonb_agg(g ORDER BY first), '[]'::jsonb)"
      "   FROM (SELECT g, min(n) AS first FROM"
      "     (SELECT g, n FROM jsonb_array_elements(s.exclude) WITH ORDINALITY AS a(g, n)"
      "      UNION ALL SELECT g, n + 1000000 FROM jsonb_array_elements($2::jsonb)"
      "      WITH ORDINALITY AS b(g, n)) u GROUP BY g) d),"
      "   updated_at = now()"
      " WHERE s.job_id = $1 AND s.state IN ('prescanning', 'awaiting_agent') RETURNING s.state",
      2, p, PGRES_TUPLES_OK, NULL, err, "add exclusions");
  if (!r) return JB_ERR_FAIL;
  int n = PQntuples(r);
  PQclear(r);
  if (n == 1) return JB_OK;
  int rc = jb_db_session_state(c, job_id, state, err);
  return rc == JB_OK ? JB_ERR_CONFLICT : rc;
}
