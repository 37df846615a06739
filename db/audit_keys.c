/* audit_keys.c — SQL of the published signing keys (audit_signing_keys): loading them,
 * publishing one, adopting the active key at start, rotation and a key's state (see
 * audit_store.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/audit_sql.h"
#include "db/audit_store.h"
#include "db/db.h"
#include "lib/keyring.h"
#include "lib/log.h"

/* Waits into the next millisecond of the real-time clock and gives its time in *t1: entries
 * are stamped in ms, so an append that took its lock before the caller's may carry the very
 * millisecond the caller read. */
static void next_ms(struct timespec *t1) {
  struct timespec t0;
  clock_gettime(CLOCK_REALTIME, &t0);
  do {
    struct timespec nap = {0, 200000};
    nanosleep(&nap, NULL);
    clock_gettime(CLOCK_REALTIME, t1);
  } while (t1->tv_sec == t0.tv_sec && t1->tv_nsec / 1000000 == t0.tv_nsec / 1000000);
}

/* Publishes key `key_id` (`pk`) created at `created` (ISO 8601), or finds it published: ON
 * CONFLICT DO UPDATE (a no-op) locks and returns an existing row. One row: whether its public
 * key is `pk` ('t'/'f'), and its retirement time ("" when none). NULL with `err`. */
static PGresult *insert_key(PGconn *c, const char *key_id, const unsigned char pk[JB_AUDIT_PK_LEN],
                            const char *created, jb_error *err) {
  const char *vals[3] = {key_id, (const char *)pk, created};
  const int lens[3] = {0, JB_AUDIT_PK_LEN, 0}, fmts[3] = {0, 1, 0};
  return jb_audit_sql(c,
                      "INSERT INTO audit_signing_keys (key_id, public_key, created_at)"
                      " VALUES ($1, $2, $3::timestamptz)"
                      " ON CONFLICT (key_id) DO UPDATE SET key_id = excluded.key_id"
                      " RETURNING public_key = $2, coalesce(jb_ts(retired_at), '')",
                      3, vals, lens, fmts, PGRES_TUPLES_OK, err, "publish key");
}

/* --- keys ------------------------------------------------------------------------------------ */

int jb_audit_keys_load(PGconn *c, struct jb_audit_key_row **out, size_t *n, jb_error *err) {
  PGresult *r = jb_audit_sql(c,
                             "SELECT key_id, encode(public_key, 'hex'), jb_ts(created_at),"
                             "       coalesce(jb_ts(retired_at), '')"
                             "  FROM audit_signing_keys ORDER BY created_at, key_id",
                             0, NULL, NULL, NULL, PGRES_TUPLES_OK, err, "audit keys");
  if (!r) return JB_ERR_FAIL;
  int rows = PQntuples(r);
  struct jb_audit_key_row *v = calloc(rows ? (size_t)rows : 1, sizeof *v);
  if (!v) {
    PQclear(r);
    jb_fail(err, ENOMEM, "out of memory");
    return JB_ERR_FAIL;
  }
  int k = 0;
  for (int i = 0; i < rows; i++) {
    char id[JB_AUDIT_KEY_ID_LEN + 1];
    if (PQgetlength(r, i, 0) != JB_AUDIT_KEY_ID_LEN ||
        jb_audit_col_hex(r, i, 1, v[k].key.public_key, JB_AUDIT_PK_LEN) < 0)
      continue; /* cannot be a key of ours; never publish it */
    jb_audit_key_id(v[k].key.public_key, id);
    if (strcmp(id, PQgetvalue(r, i, 0)) != 0) continue; /* id and key disagree: a forged row */
    memcpy(v[k].key.key_id, PQgetvalue(r, i, 0), JB_AUDIT_KEY_ID_LEN + 1);
    snprintf(v[k].created_at, sizeof v[k].created_at, "%s", PQgetvalue(r, i, 2));
    snprintf(v[k].retired_at, sizeof v[k].retired_at, "%s", PQgetvalue(r, i, 3));
    snprintf(v[k].key.retired_at, sizeof v[k].key.retired_at, "%s", PQgetvalue(r, i, 3));
    k++;
  }
  PQclear(r);
  *out = v;
  *n = (size_t)k;
  return JB_OK;
}

int jb_audit_key_publish(PGconn *c, const char *key_id, const unsigned char pk[JB_AUDIT_PK_LEN],
                         bool retire_others, jb_error *err) {
  bool own = false;
  if (jb_audit_enter_tx(c, "BEGIN ISOLATION LEVEL READ COMMITTED", &own, err) < 0)
    return JB_ERR_FAIL;
  if (retire_others) {
    /* Appends read this table (sql_append), holding ACCESS SHARE until they commit: the
     * exclusive lock waits for the appends under way and holds back new ones until the
     * retirement commits, and the retirement time is read only once it is held. So an append
     * stamped before it stays valid, and one stamped at or after it runs after the commit,
     * sees the key retired and is refused: none slips between. */
    PGresult *l = jb_audit_sql(c, "LOCK TABLE audit_signing_keys IN ACCESS EXCLUSIVE MODE", 0, NULL,
                               NULL, NULL, PGRES_COMMAND_OK, err, "lock keys");
    PQclear(l);
    if (!l) {
      if (own) jb_db_rollback(c);
      return JB_ERR_FAIL;
    }
  }
  char now[JB_AUDIT_TS_LEN + 8];
  if (retire_others) {
    /* An append that took its lock before ours may be stamped with this very millisecond
     * (entries are stamped in ms): the retirement starts at the next one, so that every entry
     * committed before it is stamped before it. */
    struct timespec t1;
    next_ms(&t1);
    jb_iso8601_at(&t1, now, sizeof now);
  } else {
    jb_iso8601_now(now, sizeof now);
  }
  PGresult *r = insert_key(c, key_id, pk, now, err);
  int rc = JB_ERR_FAIL;
  if (r && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't' && PQgetvalue(r, 0, 1)[0]) {
    jb_fail(err, EKEYREVOKED,
            "key %s was retired at %s and never signs again: rotate to a new "
            "key (jailboxctl keys rotate)",
            key_id, PQgetvalue(r, 0, 1));
  } else if (r && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't' && !retire_others) {
    rc = JB_OK;
  } else if (r && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't') {
    PQclear(r);
    const char *rv[2] = {key_id, now};
    /* Not before the newest entry stored: the entries committed before the lock are stamped
     * by the clocks of the processes that made them, which may be ahead of this one or this
     * one may have been stepped back. Each session's newest entry is its head row's. */
    r = jb_audit_sql(
        c,
        "UPDATE audit_signing_keys SET retired_at = greatest($2::timestamptz,"
        "   (SELECT max(e.created_at) + interval '1 millisecond' FROM audit_heads h"
        "      JOIN audit_entries e ON e.job_id = h.job_id AND e.seq = h.seq WHERE e.key_id <> $1))"
        " WHERE key_id <> $1 AND retired_at IS NULL",
        2, rv, NULL, NULL, PGRES_COMMAND_OK, err, "retire keys");
    if (r) rc = JB_OK;
  } else if (r) {
    jb_fail(err, EEXIST, "key id %s is published with another public key", key_id);
  }
  PQclear(r);
  return jb_audit_leave_tx(c, own, rc, err);
}

/* --- adoption at start, rotation, a key's state --------------------------------------------- */

/* Every key that may sign now (retired_at unset or later than now), oldest first, into `out`
 * ("a, b"; "" when none). */
static int active_ids(PGconn *c, char *out, size_t len, jb_error *err) {
  PGresult *r =
      jb_audit_sql(c,
                   "SELECT coalesce(string_agg(key_id, ', ' ORDER BY created_at, key_id), '')"
                   "  FROM audit_signing_keys WHERE retired_at IS NULL",
                   0, NULL, NULL, NULL, PGRES_TUPLES_OK, err, "active keys");
  if (!r) return -1;
  snprintf(out, len, "%s", PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "");
  PQclear(r);
  return 0;
}

int jb_audit_key_adopt(PGconn *c, const char *key_id, const unsigned char pk[JB_AUDIT_PK_LEN],
                       char *active, size_t active_len, jb_error *err) {
  if (active_len) active[0] = '\0';
  bool own = false;
  if (jb_audit_enter_tx(c, "BEGIN ISOLATION LEVEL READ COMMITTED", &own, err) < 0)
    return JB_ERR_FAIL;
  /* SHARE ROW EXCLUSIVE conflicts with itself and with a rotation, not with the appends'
   * ACCESS SHARE: two instances starting on an empty table publish one key, not two */
  PGresult *r = jb_audit_sql(c, "LOCK TABLE audit_signing_keys IN SHARE ROW EXCLUSIVE MODE", 0,
                             NULL, NULL, NULL, PGRES_COMMAND_OK, err, "lock keys");
  if (!r) return jb_audit_leave_tx(c, own, JB_ERR_FAIL, err);
  PQclear(r);
  const char *v1[2] = {key_id, (const char *)pk};
  const int l1[2] = {0, JB_AUDIT_PK_LEN}, f1[2] = {0, 1};
  r = jb_audit_sql(c,
                   "SELECT public_key = $2, coalesce(jb_ts(retired_at), ''),"
                   "       (SELECT count(*) FROM audit_signing_keys)"
                   "  FROM (SELECT 1) one LEFT JOIN audit_signing_keys k ON k.key_id = $1",
                   2, v1, l1, f1, PGRES_TUPLES_OK, err, "key state");
  if (!r || PQntuples(r) != 1) {
    if (r) jb_fail(err, EIO, "key state: no row");
    PQclear(r);
    return jb_audit_leave_tx(c, own, JB_ERR_FAIL, err);
  }
  bool published = !PQgetisnull(r, 0, 0), same = PQgetvalue(r, 0, 0)[0] == 't';
  char retired[40];
  snprintf(retired, sizeof retired, "%s", PQgetvalue(r, 0, 1));
  long long total = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
  PQclear(r);
  int rc = JB_OK;
  if (published && !same) {
    rc = jb_fail(err, EEXIST, "key id %s is published with another public key", key_id);
  } else if (published && retired[0]) {
    if (active_ids(c, active, active_len, err) < 0)
      return jb_audit_leave_tx(c, own, JB_ERR_FAIL, err);
    rc = jb_fail(err, EKEYREVOKED, "key %s is retired as of %s and never signs again (active: %s)",
                 key_id, retired, active_len && active[0] ? active : "none");
  } else if (!published && total > 0) {
    if (active_ids(c, active, active_len, err) < 0)
      return jb_audit_leave_tx(c, own, JB_ERR_FAIL, err);
    jb_fail(err, EKEYREJECTED, "key %s is not published (active: %s)", key_id,
            active_len && active[0] ? active : "none");
    rc = JB_ERR_CONFLICT;
  } else if (!published) { /* the first key of this database */
    char now[JB_AUDIT_TS_LEN + 8];
    jb_iso8601_now(now, sizeof now);
    const char *v2[3] = {key_id, (const char *)pk, now};
    const int l2[3] = {0, JB_AUDIT_PK_LEN, 0}, f2[3] = {0, 1, 0};
    r = jb_audit_sql(c,
                     "INSERT INTO audit_signing_keys (key_id, public_key, created_at)"
                     " VALUES ($1, $2, $3::timestamptz)",
                     3, v2, l2, f2, PGRES_COMMAND_OK, err, "publish key");
    rc = r ? JB_OK : JB_ERR_FAIL;
    PQclear(r);
  }
  return jb_audit_leave_tx(c, own, rc, err);
}

int jb_audit_key_rotate(PGconn *c, const char *key_id, const unsigned char pk[JB_AUDIT_PK_LEN],
                        long long grace_ms, char *retired, size_t retired_len, char retire_at[32],
                        jb_error *err) {
  if (retired_len) retired[0] = '\0';
  retire_at[0] = '\0';
  if (grace_ms < 0 || grace_ms > 7LL * 24 * 3600 * 1000)
    return jb_fail(err, ERANGE, "grace %lld ms is outside 0 .. 7 days", grace_ms);
  bool own = false;
  if (jb_audit_enter_tx(c, "BEGIN ISOLATION LEVEL READ COMMITTED", &own, err) < 0)
    return JB_ERR_FAIL;
  /* as jb_audit_key_publish: appends under way finish first, later ones see the change */
  PGresult *r = jb_audit_sql(c, "LOCK TABLE audit_signing_keys IN ACCESS EXCLUSIVE MODE", 0, NULL,
                             NULL, NULL, PGRES_COMMAND_OK, err, "lock keys");
  if (!r) return jb_audit_leave_tx(c, own, JB_ERR_FAIL, err);
  PQclear(r);
  /* the next millisecond after the lock (see jb_audit_key_publish), plus the grace */
  struct timespec t1;
  next_ms(&t1);
  char now[JB_AUDIT_TS_LEN + 8], at[JB_AUDIT_TS_LEN + 8];
  jb_iso8601_at(&t1, now, sizeof now);
  struct timespec t2 = {t1.tv_sec + grace_ms / 1000, t1.tv_nsec + (grace_ms % 1000) * 1000000};
  if (t2.tv_nsec >= 1000000000) t2.tv_sec++, t2.tv_nsec -= 1000000000;
  jb_iso8601_at(&t2, at, sizeof at);
  r = insert_key(c, key_id, pk, now, err);
  int rc = JB_ERR_FAIL;
  if (r && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] != 't') {
    jb_fail(err, EEXIST, "key id %s is published with another public key", key_id);
  } else if (r && PQntuples(r) == 1 && PQgetvalue(r, 0, 1)[0]) {
    jb_fail(err, EKEYREVOKED,
            "key %s is retired as of %s and never signs again: rotate to a new key", key_id,
            PQgetvalue(r, 0, 1));
  } else if (r && PQntuples(r) == 1) {
    rc = JB_OK;
  }
  PQclear(r);
  if (rc != JB_OK) return jb_audit_leave_tx(c, own, rc, err);
  /* every other key that may sign: not before the newest stored head entry (the clocks of
   * the processes that stamped them may be ahead of this one) */
  const char *rv[2] = {key_id, at};
  r = jb_audit_sql(c,
                   "WITH t AS (SELECT greatest($2::timestamptz,"
                   "   (SELECT max(e.created_at) + interval '1 millisecond' FROM audit_heads h"
                   "      JOIN audit_entries e ON e.job_id = h.job_id AND e.seq = h.seq"
                   "     WHERE e.key_id <> $1)) AS at),"
                   " r AS (UPDATE audit_signing_keys SET retired_at = (SELECT at FROM t)"
                   "        WHERE key_id <> $1 AND retired_at IS NULL RETURNING key_id)"
                   " SELECT coalesce((SELECT string_agg(key_id, ', ' ORDER BY key_id) FROM r), ''),"
                   "        (SELECT jb_ts(at) FROM t), pg_notify('jb_key', $1)",
                   2, rv, NULL, NULL, PGRES_TUPLES_OK, err, "retire keys");
  if (r && PQntuples(r) == 1) {
    if (retired_len) snprintf(retired, retired_len, "%s", PQgetvalue(r, 0, 0));
    snprintf(retire_at, 32, "%s", PQgetvalue(r, 0, 1));
  } else {
    rc = JB_ERR_FAIL;
    if (r) jb_fail(err, EIO, "retire keys: no row");
  }
  PQclear(r);
  return jb_audit_leave_tx(c, own, rc, err);
}

int jb_audit_key_status(PGconn *c, const char *key_id, const unsigned char pk[JB_AUDIT_PK_LEN],
                        struct jb_audit_key_status *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  out->retired_ms = INT64_MAX;
  const char *v[2] = {key_id, (const char *)pk};
  const int l[2] = {0, JB_AUDIT_PK_LEN}, f[2] = {0, 1};
  PGresult *r =
      jb_audit_sql(c,
                   "SELECT public_key = $2,"
                   "       coalesce(floor(extract(epoch FROM retired_at) * 1000)::bigint, -1),"
                   "       coalesce(jb_ts(retired_at), ''),"
                   "       (SELECT coalesce(string_agg(key_id, ', ' ORDER BY created_at, key_id),"
                   "                        '')"
                   "          FROM audit_signing_keys WHERE retired_at IS NULL)"
                   "  FROM (SELECT 1) one LEFT JOIN audit_signing_keys k ON k.key_id = $1",
                   2, v, l, f, PGRES_TUPLES_OK, err, "key status");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 1) {
    out->published = !PQgetisnull(r, 0, 0) && PQgetvalue(r, 0, 0)[0] == 't';
    long long ms = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    if (out->published && ms >= 0) out->retired_ms = ms;
    snprintf(out->retired_at, sizeof out->retired_at, "%s", PQgetvalue(r, 0, 2));
    snprintf(out->active, sizeof out->active, "%s", PQgetvalue(r, 0, 3));
  }
  PQclear(r);
  return JB_OK;
}
