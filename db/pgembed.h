/* pgembed.h — the embedded PostgreSQL cluster: a private cluster under the state directory,
 * created on first start, reused later, reachable over a Unix socket only, run by an
 * unprivileged user when jailboxd runs as root, stopped when jailboxd stops. */
#ifndef JB_PGEMBED_H
#define JB_PGEMBED_H

#include <stdbool.h>

#include "lib/err.h"
#include "lib/proc.h"

struct jb_pgembed {
  char bindir[1024]; /* where initdb/pg_ctl/postgres live */
  char root[1024]; /* <state>/pg, owned by the cluster's user, mode 0700 */
  char datadir[1100]; /* <root>/data */
  char sockdir[1100]; /* <root>/run: the Unix socket */
  char logfile[1100]; /* <root>/postgres.log */
  char conninfo[2400]; /* libpq key=value string reaching database "jailbox" */
  struct jb_run_as who; /* the cluster's OS user (switch_user false when not root) */
  bool running; /* started or adopted by us; jb_pgembed_stop stops it */
};

/* Prepares and starts the cluster under `state_dir` (created 0711 when missing).
 * `bindir` may be "" to search (newest /usr/lib/postgresql/<N>/bin, then PATH); `db_user` is
 * the OS user used when running as root. A cluster already running on that data directory
 * (left by a crash) is adopted. On success pg->conninfo reaches database "jailbox", created
 * when missing. Returns 0, or -1 with `err` set (the cluster is stopped again). */
int jb_pgembed_start(struct jb_pgembed *pg, const char *state_dir, const char *bindir,
                     const char *db_user, jb_error *err);

/* Stops the cluster with a fast shutdown (sessions rolled back, data flushed) and waits.
 * Does nothing when it is not running. Returns 0 or -1 with `err` set. */
int jb_pgembed_stop(struct jb_pgembed *pg, jb_error *err);

/* Quotes `in` as a libpq conninfo value ('...' with \ and ' escaped) into `out` (`len`
 * bytes). Returns 0, or -1 when it does not fit. */
int jb_conninfo_quote(const char *in, char *out, size_t len);

#endif
