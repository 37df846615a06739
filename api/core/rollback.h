/* rollback.h — what jailboxd decides of a rollback (the worker runs it; db/rollback.h): whether
 * a session may be rolled back now, the request (queued, or a dry run's plan), a rollback's
 * state, and the rollback summary of GET …/changes. The contract is api/openapi.yaml
 * (POST /v1/jailbox/{jobId}/rollback) and api/events.md (jailbox:rollback). */
#ifndef JB_API_CORE_ROLLBACK_H
#define JB_API_CORE_ROLLBACK_H

#include <libpq-fe.h>

#include "api/core/controls.h"
#include "api/core/reply.h"
#include "db/rollback.h"
#include "server/app.h"

/* Decides on the facts `f` of a rollback back to op `to` (0: the state at open): 0 when it
 * may go, else -1 with `out` filled, checked in this order: 404 no_such_op (`to` is not an op
 * of the session); 410 preimages_gone (accepted, or the pre-images were dropped); 409
 * not_paused with the state (a session neither paused nor ended: pause first); 409
 * rollback_running (another rollback queued or claimed); 409 ops_running (an op approved or
 * running); 409 not_restorable with extra {opIds} (writable commands over `to` that changed
 * files, or may have, and ops whose pre-images were lost to a worker restart: never a partial,
 * silent undo). No database access. */
int jb_rollback_decide(const struct jb_rollback_facts *f, long long to, struct jb_reply *out);

/* The rollback control of session `job` (its arguments checked: controls.h) by `actor`
 * ("buyer" or "service", with `reason` for the service), on connection `c`: with dryRun, 200
 * {wouldUndo, files, count, truncated} after the same checks; else the checks and the launch
 * job in one transaction under the session row lock (db/rollback.h jb_db_rollback_queue),
 * 202 {rollbackId, state: "queued"}, and jailbox:rollback {jobId, rollbackId, state:
 * "queued", to, force, actor} published on app->bus. Failures as jb_rollback_decide, 404
 * not_found (no session), 503. */
void jb_rollback_request(struct jb_app *app, PGconn *c, const char *job, const char *actor,
                         const struct jb_control_args *a, struct jb_reply *out);

/* GET …/rollbacks/:rollbackId: rollback `id_text` (the URL's segment) of session `job`: 200
 * {rollbackId, state, to, force, by, reason?, createdAt, finishedAt?, result?, error?}; 404
 * not_found (no such rollback of the session, or an id that is not a positive integer); 503. */
void jb_rollback_get(PGconn *c, const char *job, const char *id_text, struct jb_reply *out);

/* GET …/changes: the change summary (db/changes.h) with `rollback: {available, why?,
 * wouldUndo}` — whether a rollback to the state at open would be taken now (why: the code
 * jb_rollback_decide would refuse it with), and how many ops it would undo. 200, 404
 * not_found, 503. */
void jb_rollback_changes(PGconn *c, const char *job, struct jb_reply *out);

#endif
