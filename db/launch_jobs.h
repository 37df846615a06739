/* launch_jobs.h — SQL of jailbox-worker: claiming launch and teardown jobs from the queue
 * (SELECT … FOR UPDATE SKIP LOCKED, so any number of workers on any number of hosts share
 * one database), finishing them, and writing a session's walls (the session contract).
 * State changes of sessions themselves go through jb_db_session_transition (sessions.h). */
#ifndef JB_DB_LAUNCH_JOBS_H
#define JB_DB_LAUNCH_JOBS_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "db/sessions.h" /* jb_db_session_state */
#include "lib/err.h"

struct jb_launch_job {
  long long id;
  char job_id[129]; /* the session */
  char kind[16]; /* "launch", "teardown" or "rollback" */
  int attempts; /* including this claim */
  /* the session, read in the same transaction */
  char state[20];
  char *workspace; /* new allocation (jb_launch_job_free) */
  char *limits_json; /* new allocation: {"memoryMiB":…,"cpus":…,"pids":…,"timeoutSec":…} */
  char *image; /* new allocation: the session's sandbox image; "" when it names none */
  char *payload_json; /* new allocation: the job's payload (a rollback's {to, force, by, …}) */
};

void jb_launch_job_free(struct jb_launch_job *j);

/* Claims the oldest queued job this worker may take: any launch job, a rollback job once its
 * session has no teardown job queued or claimed (its sandbox is gone first) and no other
 * rollback job claimed (one at a time), and a teardown
 * job unless another worker holds that session's launch. Marks it claimed by `worker_id`.
 * JB_OK with `out` filled; JB_ERR_NOT_FOUND when the queue has nothing for us; JB_ERR_FAIL. */
int jb_db_job_claim(PGconn *c, const char *worker_id, struct jb_launch_job *out, jb_error *err);

/* Ends job `id` as "done" or "failed" with `error` (nullable) and merges `result_json` (a
 * JSON object as text, nullable) into its payload. JB_OK or JB_ERR_FAIL. */
int jb_db_job_finish(PGconn *c, long long id, bool ok, const char *error, const char *result_json,
                     jb_error *err);

/* Stores the session contract `walls_json` (JSON text) of `job_id`. JB_OK, JB_ERR_NOT_FOUND,
 * JB_ERR_FAIL. */
int jb_db_session_set_walls(PGconn *c, const char *job_id, const char *walls_json, jb_error *err);

/* At worker start: fails the jobs `worker_id` had claimed but not finished (it died in the
 * middle), with `reason` — except rollback jobs, queued again (each restore is atomic and
 * restored rows are marked: the next claim finishes it). The job ids of those that were launches are returned as a new
 * JSON array text in *launch_sessions (free it). JB_OK or JB_ERR_FAIL. */
int jb_db_jobs_abandon(PGconn *c, const char *worker_id, const char *reason, char **launch_sessions,
                       jb_error *err);

/* At worker start, for session `job_id` whose container this worker id left running: the
 * session (state, workspace, limits, image) and its launch job (out->id) — only when that
 * launch was claimed by `worker_id` —, and its contract as JSON text in *walls_json (new; ""
 * when none is stored). JB_OK, JB_ERR_NOT_FOUND (not ours, or no such session), JB_ERR_FAIL. */
int jb_db_session_adopt_info(PGconn *c, const char *job_id, const char *worker_id,
                             struct jb_launch_job *out, char **walls_json, jb_error *err);

/* Takes (or renews) the lease of `worker_id` on session `job_id` until now + `lease_s` s —
 * only when no other worker's lease on it still runs (migration 035). JB_OK; JB_ERR_CONFLICT
 * (another worker drives it); JB_ERR_FAIL. */
int jb_db_session_lease(PGconn *c, const char *job_id, const char *worker_id, long lease_s,
                        jb_error *err);

/* Renews every lease `worker_id` holds on a live session, until now + `lease_s` s (a lease
 * that ran out is not renewed: its session is failed or taken by the sweeper). JB_OK or
 * JB_ERR_FAIL. */
int jb_db_leases_renew(PGconn *c, const char *worker_id, long lease_s, jb_error *err);

/* A name for the database this worker serves, stable across restarts: the cluster's system
 * identifier and the database name (or, where pg_control_system() is not allowed, the
 * server's address and the database name), as text into `out` (`len` bytes). Containers are
 * labelled with it, so that workers of different deployments sharing one Docker daemon never
 * touch each other's. JB_OK or JB_ERR_FAIL. */
int jb_db_deployment_name(PGconn *c, char *out, size_t len, jb_error *err);

#endif
