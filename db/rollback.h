/* rollback.h — SQL of a rollback request (the jailboxd side; the worker runs it): the facts a
 * rollback is decided on, read under the session row lock, the launch job of kind 'rollback'
 * that queues it, the dry run's plan from the session's pre-images (migration 044), and a
 * rollback job's state. Which facts refuse a rollback is decided by the caller (api/core). */
#ifndef JB_DB_ROLLBACK_H
#define JB_DB_ROLLBACK_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "lib/err.h"

/* What a rollback of session `job` back to op `to` (0: the state at open) is decided on. */
struct jb_rollback_facts {
  char state[20]; /* the session's state */
  bool preimages_gone; /* sessions.preimages_gone_at is set: the blobs were dropped */
  long long ops_running; /* its ops `approved` or `running` */
  long long rollback_running; /* the id of its rollback job `queued` or `claimed`; 0: none */
  bool to_found; /* `to` is an op of the session (true when `to` is 0) */
  char *not_restorable; /* JSON array text (new; jb_rollback_facts_free): the op ids over `to`
                           of writable commands whose result lists changes and that have no
                           pre-images, oldest first */
  long long would_undo; /* ops over `to` with a pre-image not yet rolled back */
  bool sealed; /* its audit chain is sealed, or its seal is pending (an escape's abort) */
};

void jb_rollback_facts_free(struct jb_rollback_facts *f);

/* Decides on `f`: 0 to go on, anything else refuses (the callback keeps why in `ctx`). */
typedef int (*jb_rollback_decide_fn)(const struct jb_rollback_facts *f, void *ctx);

/* The facts of a rollback of `job_id` back to `to` (>= 0), read in one statement without a
 * lock (a view: GET …/changes, a dry run). JB_OK with `out` filled (free it with
 * jb_rollback_facts_free), JB_ERR_NOT_FOUND (no session), JB_ERR_FAIL. */
int jb_db_rollback_facts(PGconn *c, const char *job_id, long long to, struct jb_rollback_facts *out,
                         jb_error *err);

/* In one transaction holding the session row lock (SELECT … FOR UPDATE): reads the facts as
 * jb_db_rollback_facts, asks `decide` (with `ctx`), and when it says 0 queues a launch job of
 * kind 'rollback' with `payload_json` (a JSON object as text: {to, force, by, reason?}) and
 * wakes the workers (NOTIFY jb_change with the job id, as a session change does), then
 * commits. So no op is approved, no resume lands and no second rollback is queued between
 * the check and the queueing (each takes the same lock). JB_OK with *id the launch job's id;
 * JB_ERR_CONFLICT when `decide` refused (nothing queued); JB_ERR_NOT_FOUND (no session);
 * JB_ERR_FAIL. */
int jb_db_rollback_queue(PGconn *c, const char *job_id, long long to, const char *payload_json,
                         jb_rollback_decide_fn decide, void *ctx, long long *id, jb_error *err);

/* The plan of a rollback of `job_id` back to `to` (>= 0), as JSON text (new): {"wouldUndo":
 * [{opId, tool, path}] (ops newest first), "files": [{path, kind, sha256?, opId}] (pre-image
 * rows newest first: seq descending), "count": rows in all, "truncated": bool} from the rows
 * not yet rolled back over `to`; at most 1,000 ops and 1,000 files are listed. JB_OK,
 * JB_ERR_FAIL. */
int jb_db_rollback_plan(PGconn *c, const char *job_id, long long to, char **json_out,
                        jb_error *err);

/* Rollback job `id` of session `job_id`, as JSON text (new): {"rollbackId", "state" (queued,
 * claimed, done, failed), "to" (op id or null), "force", "by", "reason"?, "createdAt",
 * "finishedAt"?, "result"?, "error"?}. JB_OK, JB_ERR_NOT_FOUND (no rollback `id` of that
 * session), JB_ERR_FAIL. */
int jb_db_rollback_get(PGconn *c, const char *job_id, long long id, char **json_out, jb_error *err);

#endif
