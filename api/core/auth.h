/* auth.h — tokens and roles. Three roles: service (the platform dashboard), buyer and agent
 * (one of each minted per session). A token is 32 random bytes (libsodium), given out once as
 * "jbt_" + base64url, and stored only as its SHA-256. How a door finds the token of a request
 * (a bearer header, the console's cookie, a Socket.IO CONNECT) is the door's; what the token
 * may do is decided here. */
#ifndef JB_AUTH_H
#define JB_AUTH_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "api/core/reply.h"
#include "lib/compiler.h"
#include "lib/token.h"
#include "server/app.h"

enum jb_role { JB_ROLE_SERVICE = 1u, JB_ROLE_BUYER = 2u, JB_ROLE_AGENT = 4u };

/* Added to the `roles` of jb_auth_check by a control (a request that changes the session):
 * the session must be live. */
#define JB_AUTH_CONTROL 8u

struct jb_principal {
  enum jb_role role;
  char job_id[129]; /* the token's session; "" for service tokens */
  bool ended; /* a buyer token of a session that ended: it may only read */
  bool live_checked; /* the session was found live just now for this request (JB_AUTH_CONTROL
                        with a session): a control need not ask again */
};

/* "service", "buyer" or "agent". Static. */
const char *jb_role_name(enum jb_role r);

/* Checks `token` (its text; `cookie`: it came from the console's sign-in cookie, which the
 * messages then name) against the tokens table on `conn`. `roles` is a mask of the accepted
 * jb_role values; when `job_id` is non-NULL a buyer or agent token must belong to that session
 * (service tokens reach every session). Returns 0 and fills *who; or -1 with `out`: 401 for a
 * malformed, unknown or revoked token, 403 for a valid token of the wrong role or another
 * session, 404 when `job_id` is not a well-formed job id (checked before any SQL), 503 when
 * the database fails.
 * A buyer token outlives its session's end for reading (who->ended set) until
 * JAILBOX_BUYER_READ_RETENTION_S has passed since the end, then 401 like a revoked token.
 * With JB_AUTH_CONTROL in `roles`, the session must be live: a valid token (buyer or service)
 * on an ended session gets 409 invalid_state with the session's state (never 401 while the
 * buyer's read access lasts). */
JB_MUST_USE int jb_auth_check(struct jb_app *app, PGconn *conn, const char *token, bool cookie,
                              const char *job_id, unsigned roles, struct jb_principal *who,
                              struct jb_reply *out);

/* As jb_auth_check, for the token whose SHA-256 (lib/token.h jb_token_hash) is `hash`: a
 * Socket.IO connection keeps it from its CONNECT and checks it again on every control, so
 * that a token revoked or expired since (a console sign-out) controls nothing. */
int jb_auth_check_hash(struct jb_app *app, PGconn *conn, const unsigned char hash[32], bool cookie,
                       const char *job_id, unsigned roles, struct jb_principal *who,
                       struct jb_reply *out);

/* Job ids: 1-128 bytes of [A-Za-z0-9._-], not starting with '.'. */
bool jb_valid_job_id(const char *s);

/* Agent ids: 1-200 bytes of [A-Za-z0-9._:@+-], not starting with '.'. */
bool jb_valid_agent_id(const char *s);

/* Registers the bootstrap service token: read from `path` when it exists, else (only when
 * `create` is true) minted and written there (mode 0600, never overwritten). Returns 0, or -1
 * with `err` set. */
int jb_service_token_bootstrap(PGconn *conn, const char *path, bool create, jb_error *err);

#endif
