/* reply.h — what a decision of the core came to, whatever door asked: an HTTP-style status,
 * an error (code, message, and the state that refused it) or an answer object. REST renders
 * it as the status and body, Socket.IO as the ack ({ok: true, …} or {error: {…}}); nothing
 * here knows either transport. The one mapping of a database result (db/db.h JB_OK, JB_ERR_*)
 * to an answer is jb_reply_db. */
#ifndef JB_API_CORE_REPLY_H
#define JB_API_CORE_REPLY_H

#include <jansson.h>

#include "lib/err.h"

struct jb_reply {
  int status; /* 200, 201, 202 on success; 400, 401, 403, 404, 409, 410, 500, 503 on failure;
                 0: unset */
  const char *code; /* failure: the error code (static): bad_request, unauthorized, forbidden,
                       not_found, invalid_state, conflict, exists, internal, key_retired,
                       database_unavailable; a rollback's no_such_op, not_paused, ops_running,
                       rollback_running, not_restorable, preimages_gone */
  char msg[512]; /* failure: for a person */
  char state[20]; /* invalid_state: the state that refused the request; else "" */
  json_t *body; /* success: the answer (owned by the reply; NULL: none) */
  const char *wrap; /* in a Socket.IO ack the body goes under this field ({ok, wrap: body});
                       NULL: its fields go beside `ok` (static) */
  json_t *extra; /* fields that go with the body (owned; NULL: none): REST adds them to the
                    body, Socket.IO to the ack beside the body; on failure both add them to
                    the error object beside code and message */
};

/* Success: `status` with `body` (stolen; NULL is taken as out of memory: 500 internal).
 * Returns 0, or -1 for the 500. */
int jb_reply_ok(struct jb_reply *r, int status, json_t *body);

/* Failure `status` with error `code` (static) and a printf message. Returns -1. */
int jb_reply_fail(struct jb_reply *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* 409 invalid_state: "<what> in state <state>", with `state` given back. Returns -1. */
int jb_reply_invalid_state(struct jb_reply *r, const char *what, const char *state);

/* The one mapping of a database result `rc` to an answer. JB_OK: nothing set, returns 0.
 * JB_ERR_NOT_FOUND: 404 not_found with `not_found` as the message. JB_ERR_CONFLICT: with a
 * `state` (the session's or op's), 409 invalid_state "<conflict> in state <state>"; without,
 * 409 conflict with `conflict` as the message. JB_ERR_EXISTS: 409 exists with `conflict`.
 * Anything else: 503 — key_retired with the reason when the signing key is retired (every
 * append is refused), else database_unavailable; the detail in `err` (which may name hosts
 * or SQL) goes to the log only. Returns -1 for every failure. */
int jb_reply_db(struct jb_reply *r, int rc, const jb_error *err, const char *not_found,
                const char *conflict, const char *state);

/* Releases the body and extra fields (the struct itself is the caller's). */
void jb_reply_release(struct jb_reply *r);

#endif
