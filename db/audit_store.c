/* audit_store.c — SQL of the audit chain: append under a per-session head-row lock, seal,
 * load (see audit_store.h); the published keys are audit_keys.c's. */
#include "db/audit_store.h"

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/audit_sql.h"
#include "db/db.h"
#include "lib/keyring.h"
#include "lib/log.h"
#include "lib/metrics.h"

PGresult *jb_audit_sql(PGconn *c, const char *sql, int n, const char *const *vals, const int *lens,
                       const int *fmts, ExecStatusType want, jb_error *err, const char *what) {
  PGresult *r = jb_db_prepared(c, sql, n, vals, lens, fmts, 0, NULL, err, what);
  if (!r || PQresultStatus(r) == want) return r;
  jb_fail(err, EIO, "%s: unexpected result %s", what, PQresStatus(PQresultStatus(r)));
  PQclear(r);
  return NULL;
}

int jb_audit_col_hex(const PGresult *r, int row, int col, unsigned char *out, size_t n) {
  size_t got = 0;
  const char *end = NULL;
  if (PQgetisnull(r, row, col) || (size_t)PQgetlength(r, row, col) != 2 * n) return -1;
  if (sodium_hex2bin(out, n, PQgetvalue(r, row, col), 2 * n, NULL, &got, &end) != 0 || got != n)
    return -1;
  return 0;
}

int jb_audit_enter_tx(PGconn *c, const char *begin_sql, bool *own, jb_error *err) {
  switch (PQtransactionStatus(c)) {
    case PQTRANS_IDLE: {
      *own = true;
      PGresult *r = jb_audit_sql(c, begin_sql, 0, NULL, NULL, NULL, PGRES_COMMAND_OK, err, "begin");
      PQclear(r);
      return r ? 0 : -1;
    }
    case PQTRANS_INTRANS:
      *own = false;
      return 0;
    case PQTRANS_INERROR:
      return jb_fail(err, EINVAL, "the caller's transaction has already failed");
    default:
      return jb_fail(err, EIO, "database connection is busy or broken");
  }
}

/* --- append ---------------------------------------------------------------------------------- */

/* Locks the session's head row (audit_heads, migration 015: one per session, made with the
 * session) and reads it: the slow path, when this process does not know the head (first
 * append here, another writer was faster, another instance wrote). Nothing else is read in
 * this statement: under READ COMMITTED a row updated meanwhile is re-read at its newest
 * version, but other tables would still be seen at the statement's older snapshot. */
static const char sql_lock_head[] =
    "SELECT seq, encode(hash, 'hex'), sealed FROM audit_heads WHERE job_id = $1 FOR UPDATE";

/* Appends entry $2 if and only if the head is still entry $2 - 1 with hash $7, the chain is
 * not sealed, and the signing key $10 is published and was not retired at the entry's
 * timestamp $5 (the verifier's rule, api/audit.md: an entry signed at or after its key's
 * retiredAt fails as "retired key") nor at the database's clock when the statement began (so
 * a signer whose clock is behind cannot go on past the retirement), read at this statement's
 * snapshot — which is why the
 * transaction must be READ COMMITTED (a REPEATABLE READ snapshot taken before a retirement
 * would still see the key active). The UPDATE of the head row is the compare-and-set (under
 * READ COMMITTED a concurrent append to the session makes it wait for the row, then re-check
 * the condition on the moved head and update nothing), and the entry is inserted only FROM
 * the updated row: so the session exists (the head row references it) and its head stays
 * locked (migrations 012, 015). Everything else it checks is on that row (sealed, set by the
 * seal's own UPDATE), except the key: one primary-key probe of audit_signing_keys. One
 * statement, so that with a known head an append outside a caller's transaction costs one
 * round trip and one commit. Changes no row
 * when the head moved, the chain is sealed or the key is retired. seq ($2) and the timestamp
 * ($5) go in binary (int8, timestamptz), as do the bytea parameters: the server parses no
 * text for them. */
#define APPEND_MOVED                                                                              \
  "WITH moved AS ("                                                                               \
  "  UPDATE audit_heads SET seq = $2::bigint, hash = $8, sealed = $3 = 'seal'"                    \
  "   WHERE job_id = $1 AND seq = $2::bigint - 1 AND (seq = 0 OR hash = $7) AND NOT sealed"       \
  "     AND current_setting('transaction_isolation') = 'read committed'"                          \
  "     AND EXISTS (SELECT 1 FROM audit_signing_keys k WHERE k.key_id = $10"                      \
  "                    AND (k.retired_at IS NULL"                                                 \
  "                         OR k.retired_at > greatest($5::timestamptz, statement_timestamp())))" \
  "  RETURNING job_id)"
#define APPEND_INSERT                                                                           \
  " INSERT INTO audit_entries (job_id, seq, operation, path, created_at, canonical, prev_hash," \
  "                            hash, signature, key_id)"                                        \
  " SELECT job_id, $2::bigint, $3, $4, $5::timestamptz, $6, $7, $8, $9, $10 FROM moved"
static const char sql_append[] = APPEND_MOVED APPEND_INSERT;
/* The same append as a step of a pipeline (jb_audit_append_step): an error (migration 018)
 * when it changes no row, so that nothing after it in the transaction commits. */
static const char sql_append_or_refuse[] =
    APPEND_MOVED ", ins AS (" APPEND_INSERT
                 " RETURNING 1)"
                 " SELECT 1 WHERE jb_refuse_unless(EXISTS (SELECT 1 FROM ins), 'the audit head "
                 "moved, the chain is sealed or the key may not sign')";

/* Why the locked head took no append: the key ($1) retired at or before $2, or unpublished. */
static const char sql_key_state[] =
    "SELECT coalesce(jb_ts(retired_at), 'now') FROM audit_signing_keys WHERE key_id = $1";

/* The heads this process wrote last, by session: a direct-mapped table (a collision evicts).
 * A stale head costs one statement that changes nothing, then the slow path. */
#define HEAD_CACHE_SLOTS 1024
static struct {
  pthread_mutex_t lock;
  struct {
    char job_id[JB_AUDIT_MAX_SESSION + 1];
    long long seq;
    unsigned char hash[JB_AUDIT_HASH_LEN];
  } slot[HEAD_CACHE_SLOTS];
} heads = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t head_slot(const char *job_id) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)job_id; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return (size_t)(h % HEAD_CACHE_SLOTS);
}

static bool head_get(const char *job_id, long long *seq, unsigned char hash[JB_AUDIT_HASH_LEN]) {
  size_t i = head_slot(job_id);
  pthread_mutex_lock(&heads.lock);
  bool hit = strcmp(heads.slot[i].job_id, job_id) == 0;
  if (hit) {
    *seq = heads.slot[i].seq;
    memcpy(hash, heads.slot[i].hash, JB_AUDIT_HASH_LEN);
  }
  pthread_mutex_unlock(&heads.lock);
  return hit;
}

static void head_put(const char *job_id, long long seq,
                     const unsigned char hash[JB_AUDIT_HASH_LEN]) {
  size_t i = head_slot(job_id);
  pthread_mutex_lock(&heads.lock);
  if (hash) {
    snprintf(heads.slot[i].job_id, sizeof heads.slot[i].job_id, "%s", job_id);
    heads.slot[i].seq = seq;
    memcpy(heads.slot[i].hash, hash, JB_AUDIT_HASH_LEN);
  } else if (strcmp(heads.slot[i].job_id, job_id) == 0) {
    heads.slot[i].job_id[0] = '\0';
  }
  pthread_mutex_unlock(&heads.lock);
}

bool jb_audit_head_peek(const char *job_id, long long *seq, unsigned char hash[JB_AUDIT_HASH_LEN]) {
  return head_get(job_id, seq, hash);
}

/* jb_audit_append_step; `refuse`: the step errs when it changes no row (else it just
 * changes none). */
static int append_step(const struct jb_keyring *keys, const char *job_id, const char *operation,
                       const char *path, json_t *details, long long head,
                       const unsigned char prev[JB_AUDIT_HASH_LEN], bool refuse,
                       struct jb_audit_pending *p, struct jb_db_step *step, jb_error *err) {
  memset(p, 0, sizeof *p);
  bool seal = operation && strcmp(operation, "seal") == 0;
  json_t *seal_details = NULL;
  if (seal) {
    char hex[2 * JB_AUDIT_HASH_LEN + 1];
    jb_audit_hex(prev, JB_AUDIT_HASH_LEN, hex);
    seal_details = json_pack("{s:I,s:s}", "entries", (json_int_t)head, "head", hex);
    if (!seal_details) return jb_fail(err, ENOMEM, "out of memory");
    details = seal_details;
  }
  if (head < 0 || head >= INT64_MAX - 1) {
    json_decref(seal_details);
    return jb_fail(err, ERANGE, "session %s has a corrupt audit head (%lld)", job_id, head);
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  char ts[JB_AUDIT_TS_LEN + 8];
  jb_iso8601_at(&now, ts, sizeof ts);
  int rc = jb_audit_entry_sign(&p->sig, head + 1, job_id, operation, path, ts, details, prev,
                               keys->sk, err);
  json_decref(seal_details);
  if (rc < 0) return -1;
  p->head.seq = head + 1;
  memcpy(p->head.hash, p->sig.hash, JB_AUDIT_HASH_LEN);
  memcpy(p->head.signature, p->sig.signature, JB_AUDIT_SIG_LEN);
  snprintf(p->head.key_id, sizeof p->head.key_id, "%s", keys->key_id);
  memcpy(p->prev, prev, JB_AUDIT_HASH_LEN);
  /* binary int8 and timestamptz (microseconds since 2000-01-01 UTC, the ms that ts states) */
  p->seq_be = htobe64((uint64_t)(head + 1));
  int64_t us = ((int64_t)now.tv_sec - 946684800) * 1000000 + (now.tv_nsec / 1000000) * 1000;
  p->ts_be = htobe64((uint64_t)us);
  const char *vals[10] = {job_id,
                          (const char *)&p->seq_be,
                          operation,
                          path,
                          (const char *)&p->ts_be,
                          (const char *)p->sig.canonical,
                          (const char *)p->prev,
                          (const char *)p->sig.hash,
                          (const char *)p->sig.signature,
                          p->head.key_id};
  const int lens[10] = {0,
                        8,
                        0,
                        0,
                        8,
                        (int)p->sig.canonical_len,
                        JB_AUDIT_HASH_LEN,
                        JB_AUDIT_HASH_LEN,
                        JB_AUDIT_SIG_LEN,
                        0};
  const int fmts[10] = {0, 1, 0, 0, 1, 1, 1, 1, 1, 0};
  memcpy(p->vals, vals, sizeof vals);
  memcpy(p->lens, lens, sizeof lens);
  memcpy(p->fmts, fmts, sizeof fmts);
  *step = (struct jb_db_step){.sql = refuse ? sql_append_or_refuse : sql_append,
                              .n = 10,
                              .params = p->vals,
                              .want = refuse ? PGRES_TUPLES_OK : PGRES_COMMAND_OK,
                              .what = "audit append",
                              .lengths = p->lens,
                              .formats = p->fmts};
  return 0;
}

int jb_audit_append_step(const struct jb_keyring *keys, const char *job_id, const char *operation,
                         const char *path, json_t *details, long long head,
                         const unsigned char prev[JB_AUDIT_HASH_LEN], struct jb_audit_pending *p,
                         struct jb_db_step *step, jb_error *err) {
  return append_step(keys, job_id, operation, path, details, head, prev, true, p, step, err);
}

void jb_audit_append_settle(const char *job_id, struct jb_audit_pending *p, bool appended,
                            struct jb_audit_head *out) {
  if (appended) {
    head_put(job_id, p->head.seq, p->head.hash);
    if (out) *out = p->head;
  } else {
    head_put(job_id, 0, NULL);
  }
  free(p->sig.canonical);
  p->sig.canonical = NULL;
}

/* Builds entry head+1 on `prev` and runs sql_append. Returns JB_OK with `out` filled, 1 when
 * no row changed (head moved, or sealed), JB_ERR_FAIL with `err`. The head cache is left to
 * the caller. */
static int try_append(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                      const char *operation, const char *path, json_t *details, bool seal,
                      long long head, const unsigned char prev[JB_AUDIT_HASH_LEN],
                      struct jb_audit_head *out, jb_error *err) {
  (void)seal; /* told by `operation` */
  struct jb_audit_pending p;
  struct jb_db_step step;
  if (append_step(keys, job_id, operation, path, details, head, prev, false, &p, &step, err) < 0)
    return JB_ERR_FAIL;
  PGresult *r = jb_audit_sql(c, step.sql, step.n, step.params, step.lengths, step.formats,
                             PGRES_COMMAND_OK, err, step.what);
  int rc = !r ? JB_ERR_FAIL : strcmp(PQcmdTuples(r), "1") == 0 ? JB_OK : 1;
  PQclear(r);
  if (rc == JB_OK && out) *out = p.head;
  free(p.sig.canonical);
  return rc;
}

/* Why an append on a locked, unsealed head row changed nothing: the key may not sign. Sets
 * `err` (EKEYREVOKED with the retirement time, or ENOKEY) and returns JB_ERR_FAIL. */
static int key_refusal(PGconn *c, const struct jb_keyring *keys, jb_error *err) {
  PGresult *r = jb_audit_sql(c, "SELECT current_setting('transaction_isolation')", 0, NULL, NULL,
                             NULL, PGRES_TUPLES_OK, err, "audit isolation");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "read committed") != 0) {
    jb_fail(err, EINVAL,
            "an audit append runs only in a READ COMMITTED transaction (this one is %s): "
            "a key's retirement must be seen by every statement",
            PQgetvalue(r, 0, 0));
    PQclear(r);
    return JB_ERR_FAIL;
  }
  PQclear(r);
  const char *p2[1] = {keys->key_id};
  r = jb_audit_sql(c, sql_key_state, 1, p2, NULL, NULL, PGRES_TUPLES_OK, err, "audit key state");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) == 1)
    jb_fail(err, EKEYREVOKED,
            "signing key %s was retired at %s: a retired key signs no more "
            "entries (put the active key in the key file: it is read again when it changes)",
            keys->key_id, PQgetvalue(r, 0, 0));
  else
    jb_fail(err, ENOKEY, "signing key %s is not published in audit_signing_keys", keys->key_id);
  PQclear(r);
  return JB_ERR_FAIL;
}

/* Locks the head row of `job_id` and reads the head (*head; `prev` its hash, zeros at 0).
 * JB_OK; JB_ERR_NOT_FOUND (no session), JB_ERR_CONFLICT (sealed), JB_ERR_FAIL, with `err`. */
static int lock_head(PGconn *c, const char *job_id, long long *head,
                     unsigned char prev[JB_AUDIT_HASH_LEN], jb_error *err) {
  const char *p1[1] = {job_id};
  PGresult *r =
      jb_audit_sql(c, sql_lock_head, 1, p1, NULL, NULL, PGRES_TUPLES_OK, err, "audit head");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_OK;
  memset(prev, 0, JB_AUDIT_HASH_LEN);
  if (PQntuples(r) != 1) {
    jb_fail(err, ENOENT, "no session %.128s", job_id);
    rc = JB_ERR_NOT_FOUND;
  } else if ((*head = strtoll(PQgetvalue(r, 0, 0), NULL, 10)) > 0 &&
             jb_audit_col_hex(r, 0, 1, prev, JB_AUDIT_HASH_LEN) < 0) {
    jb_fail(err, EIO, "session %.128s: stored audit head %lld has no valid hash", job_id, *head);
    rc = JB_ERR_FAIL;
  } else if (PQgetvalue(r, 0, 2)[0] == 't') {
    jb_fail(err, EPERM, "the audit chain of session %.128s is sealed", job_id);
    rc = JB_ERR_CONFLICT;
  }
  PQclear(r);
  return rc;
}

int jb_audit_leave_tx(PGconn *c, bool own, int rc, jb_error *err) {
  if (!own) return rc;
  if (rc != JB_OK) {
    jb_db_rollback(c);
    return rc;
  }
  PGresult *r =
      jb_audit_sql(c, "COMMIT", 0, NULL, NULL, NULL, PGRES_COMMAND_OK, err, "audit commit");
  PQclear(r);
  return r ? JB_OK : JB_ERR_FAIL;
}

/* The slow path, inside a transaction: lock the head row, read the head, append. */
static int append_locked(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                         const char *operation, const char *path, json_t *details, bool seal,
                         struct jb_audit_head *out, jb_error *err) {
  long long head = 0;
  unsigned char prev[JB_AUDIT_HASH_LEN];
  int lrc = lock_head(c, job_id, &head, prev, err);
  if (lrc != JB_OK) return lrc;
  /* the row is locked and not sealed: no row changed means the key may not sign */
  int rc = try_append(c, keys, job_id, operation, path, details, seal, head, prev, out, err);
  if (rc != 1) return rc;
  return key_refusal(c, keys, err);
}

/* One append, alone; `details` already checked (jb_audit_details_check) by the caller. */
static int append(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                  const char *operation, const char *path, json_t *details, bool seal,
                  struct jb_audit_head *out, jb_error *err) {
  if (!keys) return jb_fail(err, EINVAL, "no signing key loaded");
  PGTransactionStatusType ts = PQtransactionStatus(c);
  if (ts == PQTRANS_INERROR)
    return jb_fail(err, EINVAL, "the caller's transaction has already failed");
  if (ts != PQTRANS_IDLE && ts != PQTRANS_INTRANS)
    return jb_fail(err, EIO, "database connection is busy or broken");
  struct jb_audit_head h;
  struct jb_audit_head *res = out ? out : &h;

  /* fast path: the head this process wrote last is still the head */
  long long head;
  unsigned char prev[JB_AUDIT_HASH_LEN];
  if (head_get(job_id, &head, prev)) {
    int rc = try_append(c, keys, job_id, operation, path, details, seal, head, prev, res, err);
    if (rc == JB_OK) {
      head_put(job_id, res->seq, res->hash);
      return JB_OK;
    }
    head_put(job_id, 0, NULL);
    if (rc != 1) return rc;
  }

  bool own = false;
  if (jb_audit_enter_tx(c, "BEGIN ISOLATION LEVEL READ COMMITTED", &own, err) < 0)
    return JB_ERR_FAIL;
  int rc = jb_audit_leave_tx(
      c, own, append_locked(c, keys, job_id, operation, path, details, seal, res, err), err);
  if (rc == JB_OK) head_put(job_id, res->seq, res->hash);
  return rc;
}

/* --- group commit ------------------------------------------------------------------------ */

/* Appends of one session that arrive while another append of it, outside any caller's
 * transaction, is on its way to the database wait for it and then go together: the first
 * of them (the leader) signs them in their order of arrival, chained, and stores them with
 * one statement and one commit — the way PostgreSQL itself gathers concurrent commits into one
 * WAL flush (commit_delay). An append that finds nobody ahead of it goes alone at once, so a
 * lone writer waits for nothing. Each call still returns only once its own entry is committed
 * (or with the error that kept it out). A batch built on a head that moved is made again on
 * the head read under its row lock; one that then fails (the chain is sealed, the key may not
 * sign, a database error) fails every call of it with the same result, as each would alone. */
#define GC_MAX 32 /* entries per batch statement */
#define GC_SLOTS 256 /* sessions batched at once (direct-mapped; a collision goes alone) */

struct gc_req {
  const struct jb_keyring *keys; /* a batch is signed with one keyring: its leader's */
  const char *operation, *path;
  json_t *details;
  struct jb_audit_head head; /* the entry's head, on JB_OK */
  jb_error err;
  int rc;
  bool done, lead;
  bool refused; /* its entry could not be made (bad arguments): rc, err set */
  struct gc_req *next;
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t moved; /* a batch ended or a request was made leader */
  struct {
    char job_id[JB_AUDIT_MAX_SESSION + 1]; /* the session, while busy or first */
    bool busy; /* a leader is at the database (free: neither) */
    struct gc_req *first, *last; /* waiting, in arrival order */
  } slot[GC_SLOTS];
} gc = {.lock = PTHREAD_MUTEX_INITIALIZER, .moved = PTHREAD_COND_INITIALIZER};

/* The batch statement for k (1..GC_MAX) entries: sql_append's compare-and-set moving the head
 * by k, then k rows. $1 session, $2 key id, $3 head (int8), $4 its hash, $5 the hash of the
 * last entry, $6 the latest entry timestamp (timestamptz; before the key's retirement means
 * every entry is), then per entry i (from 0) eight parameters from $(7 + 8i): seq (int8), operation,
 * path, timestamp (timestamptz), canonical, prev_hash, hash, signature. */
static char *gc_sql[GC_MAX + 1];
static pthread_once_t gc_sql_once = PTHREAD_ONCE_INIT;

static void gc_sql_build(void) {
  for (int k = 1; k <= GC_MAX; k++) {
    size_t cap = 1024 + (size_t)k * 160;
    char *s = malloc(cap);
    if (!s) continue; /* batches of k then go one by one */
    int n = snprintf(
        s, cap,
        "WITH moved AS ("
        "  UPDATE audit_heads SET seq = $3::bigint + %d, hash = $5"
        "   WHERE job_id = $1 AND seq = $3::bigint AND (seq = 0 OR hash = $4) AND NOT sealed"
        "     AND current_setting('transaction_isolation') = 'read committed'"
        "     AND EXISTS (SELECT 1 FROM audit_signing_keys k WHERE k.key_id = $2"
        "                    AND (k.retired_at IS NULL"
        "                         OR k.retired_at > greatest($6::timestamptz, "
        "statement_timestamp())))"
        "  RETURNING job_id)"
        " INSERT INTO audit_entries (job_id, seq, operation, path, created_at, canonical,"
        "                            prev_hash, hash, signature, key_id)"
        " SELECT m.job_id, v.seq, v.op, v.path, v.ts, v.canonical, v.prev, v.hash, v.sig, $2"
        "   FROM moved m, (VALUES",
        k);
    for (int i = 0; i < k; i++) {
      int b = 6 + 8 * i;
      n += snprintf(s + n, cap - (size_t)n,
                    "%s($%d::bigint, $%d::text, $%d::text, $%d::timestamptz, $%d::bytea,"
                    " $%d::bytea, $%d::bytea, $%d::bytea)",
                    i ? ", " : " ", b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8);
    }
    snprintf(s + n, cap - (size_t)n, ") v(seq, op, path, ts, canonical, prev, hash, sig)");
    gc_sql[k] = s;
  }
}

/* Builds and runs the batch `reqs` (k of them) of `job_id` on head `head`/`prev`: a request
 * whose entry cannot be made is refused alone (refused, rc, err) and the others chained
 * without it. Returns JB_OK (each stored request's head filled), 1 when no row changed,
 * JB_ERR_FAIL with `err`. */
static int gc_try(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                  struct gc_req **reqs, int k, long long head,
                  const unsigned char prev[JB_AUDIT_HASH_LEN], jb_error *err) {
  struct jb_audit_pending *p = calloc((size_t)k, sizeof *p);
  struct gc_req **made = calloc((size_t)k, sizeof *made);
  const char **vals = calloc(6 + 8 * (size_t)k, sizeof *vals);
  int *lens = calloc(6 + 8 * (size_t)k, sizeof *lens),
      *fmts = calloc(6 + 8 * (size_t)k, sizeof *fmts);
  int rc = JB_ERR_FAIL, n = 0;
  if (!p || !made || !vals || !lens || !fmts) {
    jb_fail(err, ENOMEM, "out of memory");
    goto out;
  }
  const unsigned char *link = prev;
  struct jb_db_step step;
  for (int i = 0; i < k; i++) {
    if (reqs[i]->refused) continue;
    jb_error e1 = {0};
    if (append_step(keys, job_id, reqs[i]->operation, reqs[i]->path, reqs[i]->details, head + n,
                    link, false, &p[n], &step, &e1) < 0) {
      reqs[i]->refused = true, reqs[i]->rc = JB_ERR_FAIL, reqs[i]->err = e1;
      continue;
    }
    made[n] = reqs[i];
    link = p[n].sig.hash;
    for (int j = 0; j < 8; j++) { /* seq, operation, path, ts, canonical, prev, hash, signature */
      vals[6 + 8 * n + j] = p[n].vals[1 + j];
      lens[6 + 8 * n + j] = p[n].lens[1 + j];
      fmts[6 + 8 * n + j] = p[n].fmts[1 + j];
    }
    n++;
  }
  if (n == 0) {
    rc = JB_OK;
    goto out;
  }
  uint64_t head_be = htobe64((uint64_t)head), ts_max = p[0].ts_be;
  for (int i = 1; i < n; i++)
    if (be64toh(p[i].ts_be) > be64toh(ts_max)) ts_max = p[i].ts_be;
  vals[0] = job_id;
  vals[1] = p[0].head.key_id;
  vals[2] = (const char *)&head_be, lens[2] = 8, fmts[2] = 1;
  vals[3] = (const char *)prev, lens[3] = JB_AUDIT_HASH_LEN, fmts[3] = 1;
  vals[4] = (const char *)p[n - 1].sig.hash, lens[4] = JB_AUDIT_HASH_LEN, fmts[4] = 1;
  vals[5] = (const char *)&ts_max, lens[5] = 8, fmts[5] = 1;
  if (!gc_sql[n]) {
    jb_fail(err, ENOMEM, "out of memory");
    goto out;
  }
  PGresult *r = jb_audit_sql(c, gc_sql[n], 6 + 8 * n, vals, lens, fmts, PGRES_COMMAND_OK, err,
                             "audit append (batch)");
  if (!r) goto out;
  long long changed = strtoll(PQcmdTuples(r), NULL, 10);
  PQclear(r);
  if (changed == n) {
    for (int i = 0; i < n; i++) made[i]->head = p[i].head;
    rc = JB_OK;
    if (n > 1) {
      atomic_fetch_add(&jb_metric_audit_batches, 1);
      atomic_fetch_add(&jb_metric_audit_batched, (unsigned long)n);
    }
  } else if (changed == 0) {
    rc = 1;
  } else {
    jb_fail(err, EIO, "audit append (batch): %lld of %d rows", changed, n);
  }
out:
  for (int i = 0; p && i < n; i++) free(p[i].sig.canonical);
  free(p);
  free(made);
  free(vals);
  free(lens);
  free(fmts);
  return rc;
}

/* The head cache moves to the last entry the batch stored. */
static void gc_cache_last(const char *job_id, struct gc_req **reqs, int k) {
  for (int i = k - 1; i >= 0; i--)
    if (!reqs[i]->refused) {
      head_put(job_id, reqs[i]->head.seq, reqs[i]->head.hash);
      return;
    }
}

/* Stores the batch `reqs` (k >= 2) of `job_id` on the idle connection `c`: on the cached head
 * in one statement, else under the head row's lock in a transaction of its own. */
static int gc_store(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                    struct gc_req **reqs, int k, jb_error *err) {
  long long head;
  unsigned char prev[JB_AUDIT_HASH_LEN];
  if (head_get(job_id, &head, prev)) {
    int rc = gc_try(c, keys, job_id, reqs, k, head, prev, err);
    if (rc == JB_OK) {
      gc_cache_last(job_id, reqs, k);
      return JB_OK;
    }
    head_put(job_id, 0, NULL);
    if (rc != 1) return rc;
  }
  bool own = false;
  if (jb_audit_enter_tx(c, "BEGIN ISOLATION LEVEL READ COMMITTED", &own, err) < 0)
    return JB_ERR_FAIL;
  int rc = lock_head(c, job_id, &head, prev, err);
  if (rc == JB_OK) {
    rc = gc_try(c, keys, job_id, reqs, k, head, prev, err);
    if (rc == 1) rc = key_refusal(c, keys, err); /* the row is locked and not sealed */
  }
  rc = jb_audit_leave_tx(c, own, rc, err);
  if (rc == JB_OK) gc_cache_last(job_id, reqs, k);
  return rc;
}

/* jb_audit_append on an idle connection, batched with the session's concurrent appends. */
static int append_grouped(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          const char *operation, const char *path, json_t *details,
                          struct jb_audit_head *out, jb_error *err) {
  pthread_once(&gc_sql_once, gc_sql_build);
  size_t len = strnlen(job_id, JB_AUDIT_MAX_SESSION + 1);
  if (len == 0 || len > JB_AUDIT_MAX_SESSION) /* refused by the entry format: alone */
    return append(c, keys, job_id, operation, path, details, false, out, err);
  size_t si = head_slot(job_id) % GC_SLOTS;
  struct gc_req me = {.keys = keys, .operation = operation, .path = path, .details = details};
  pthread_mutex_lock(&gc.lock);
  bool in_use = gc.slot[si].busy || gc.slot[si].first;
  if (in_use && strcmp(gc.slot[si].job_id, job_id) != 0) {
    pthread_mutex_unlock(&gc.lock); /* another session holds the slot: go alone */
    return append(c, keys, job_id, operation, path, details, false, out, err);
  }
  if (!in_use) memcpy(gc.slot[si].job_id, job_id, len + 1);
  if (gc.slot[si].last)
    gc.slot[si].last->next = &me;
  else
    gc.slot[si].first = &me;
  gc.slot[si].last = &me;
  if (!gc.slot[si].busy) me.lead = true, gc.slot[si].busy = true;
  while (!me.done && !me.lead) pthread_cond_wait(&gc.moved, &gc.lock);
  if (me.done) {
    pthread_mutex_unlock(&gc.lock);
    if (me.rc == JB_OK && out) *out = me.head;
    if (me.rc != JB_OK && err) *err = me.err;
    return me.rc;
  }
  /* the leader: take what waits, in order, up to GC_MAX (this request is first), as long as it
   * is signed with this keyring (a request with another waits for the next batch) */
  struct gc_req *batch[GC_MAX];
  int k = 0;
  while (gc.slot[si].first && k < GC_MAX && gc.slot[si].first->keys == keys) {
    batch[k++] = gc.slot[si].first;
    gc.slot[si].first = gc.slot[si].first->next;
  }
  if (!gc.slot[si].first) gc.slot[si].last = NULL;
  pthread_mutex_unlock(&gc.lock);

  jb_error berr = {0};
  int rc;
  if (k == 1 || !gc_sql[k]) { /* alone (or no statement for k): the one-entry way */
    for (int i = 0; i < k; i++) {
      jb_error e1 = {0};
      batch[i]->rc = append(c, keys, job_id, batch[i]->operation, batch[i]->path, batch[i]->details,
                            false, &batch[i]->head, &e1);
      batch[i]->err = e1;
    }
  } else {
    rc = gc_store(c, keys, job_id, batch, k, &berr);
    for (int i = 0; i < k; i++) {
      if (batch[i]->refused) continue;
      batch[i]->rc = rc;
      if (rc != JB_OK) batch[i]->err = berr;
    }
  }

  pthread_mutex_lock(&gc.lock);
  for (int i = 0; i < k; i++) batch[i]->done = true;
  if (gc.slot[si].first) {
    gc.slot[si].first->lead = true; /* busy stays: the next batch is led by its first */
  } else {
    gc.slot[si].busy = false; /* free */
  }
  pthread_cond_broadcast(&gc.moved);
  pthread_mutex_unlock(&gc.lock);
  if (me.rc == JB_OK && out) *out = me.head;
  if (me.rc != JB_OK && err) *err = me.err;
  return me.rc;
}

int jb_audit_append(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                    const char *operation, const char *path, json_t *details,
                    struct jb_audit_head *out, jb_error *err) {
  if (operation && strcmp(operation, "seal") == 0)
    return jb_fail(err, EINVAL, "a seal is written with jb_audit_seal");
  if (details && jb_audit_details_check(details, err) < 0) return JB_ERR_FAIL;
  long long t0 = jb_metrics_now_ns();
  int rc;
  if (keys && PQtransactionStatus(c) == PQTRANS_IDLE)
    rc = append_grouped(c, keys, job_id, operation, path, details, out, err);
  else
    rc = append(c, keys, job_id, operation, path, details, false, out, err);
  jb_histogram_observe(&jb_metric_audit_append, jb_metrics_now_ns() - t0);
  return rc;
}

int jb_audit_seal(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                  struct jb_audit_head *out, jb_error *err) {
  long long t0 = jb_metrics_now_ns();
  int rc = append(c, keys, job_id, "seal", NULL, NULL, true, out, err);
  jb_histogram_observe(&jb_metric_audit_append, jb_metrics_now_ns() - t0);
  return rc;
}

/* --- load ---------------------------------------------------------------------------------- */

/* A session without a head row (only by tampering) reads as head 0: any entry is past it. */
static const char sql_session[] =
    "SELECT s.state, coalesce(h.seq, 0), encode(h.hash, 'hex')"
    "  FROM sessions s LEFT JOIN audit_heads h ON h.job_id = s.job_id WHERE s.job_id = $1";

static const char sql_entries[] =
    "SELECT seq, operation, path, jb_ts(created_at), encode(canonical, 'hex'),"
    "       encode(prev_hash, 'hex'), encode(hash, 'hex'), encode(signature, 'hex'), key_id"
    "  FROM audit_entries WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";

static void row_malformed(struct jb_audit_entry *e, const char *why) {
  long long seq = e->seq;
  jb_audit_entry_clear(e);
  e->seq = seq;
  e->malformed = true;
  snprintf(e->error, sizeof e->error, "stored entry: %s", why);
}

/* Fills `e` from row `i` of `r` (the columns of sql_entries) for session `job_id`. */
static int read_row(const PGresult *r, int i, const char *job_id, struct jb_audit_entry *e) {
  memset(e, 0, sizeof *e);
  e->seq = strtoll(PQgetvalue(r, i, 0), NULL, 10);
  e->session = strdup(job_id);
  e->operation = strdup(PQgetvalue(r, i, 1));
  e->path = PQgetisnull(r, i, 2) ? NULL : strdup(PQgetvalue(r, i, 2));
  e->timestamp = strdup(PQgetvalue(r, i, 3));
  if (!e->session || !e->operation || (!e->path && !PQgetisnull(r, i, 2)) || !e->timestamp)
    return -1;
  size_t clen = (size_t)PQgetlength(r, i, 4) / 2;
  if (clen > JB_AUDIT_MAX_CANONICAL) {
    row_malformed(e, "canonical bytes too long");
    return 0;
  }
  e->canonical = malloc(clen + 1);
  if (!e->canonical) return -1;
  e->canonical_len = clen;
  e->canonical[clen] = '\0';
  if (jb_audit_col_hex(r, i, 4, e->canonical, clen) < 0 ||
      jb_audit_col_hex(r, i, 5, e->prev_hash, JB_AUDIT_HASH_LEN) < 0 ||
      jb_audit_col_hex(r, i, 6, e->hash, JB_AUDIT_HASH_LEN) < 0 ||
      jb_audit_col_hex(r, i, 7, e->signature, JB_AUDIT_SIG_LEN) < 0 ||
      PQgetlength(r, i, 8) != JB_AUDIT_KEY_ID_LEN) {
    row_malformed(e, "a hash, signature or key id column has the wrong size");
    return 0;
  }
  /* the details are those of the canonical bytes: no other copy is stored (migration 017) */
  e->details = jb_audit_canonical_details(e->canonical, e->canonical_len);
  if (!e->details) return -1;
  memcpy(e->key_id, PQgetvalue(r, i, 8), JB_AUDIT_KEY_ID_LEN + 1);
  return 0;
}

int jb_audit_session_read(PGconn *c, const char *job_id, struct jb_audit_chain *out,
                          jb_error *err) {
  const char *p1[1] = {job_id};
  PGresult *r =
      jb_audit_sql(c, sql_session, 1, p1, NULL, NULL, PGRES_TUPLES_OK, err, "audit session");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    jb_fail(err, ENOENT, "no session %.128s", job_id);
    return JB_ERR_NOT_FOUND;
  }
  snprintf(out->state, sizeof out->state, "%s", PQgetvalue(r, 0, 0));
  out->ended = strcmp(out->state, "accepted") == 0 || strcmp(out->state, "aborted") == 0 ||
               strcmp(out->state, "failed") == 0;
  out->stored.seq = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
  if (out->stored.seq > 0 && jb_audit_col_hex(r, 0, 2, out->stored.hash, JB_AUDIT_HASH_LEN) < 0)
    memset(out->stored.hash, 0xff, JB_AUDIT_HASH_LEN); /* matches no entry: head mismatch */
  PQclear(r);
  return JB_OK;
}

int jb_audit_entries_page(PGconn *c, const char *job_id, long long after_seq, int limit,
                          struct jb_audit_entry **out, size_t *n, jb_error *err) {
  *out = NULL;
  *n = 0;
  char after[24], lim[16];
  snprintf(after, sizeof after, "%lld", after_seq);
  snprintf(lim, sizeof lim, "%d", limit);
  const char *p3[3] = {job_id, after, lim};
  PGresult *r =
      jb_audit_sql(c, sql_entries, 3, p3, NULL, NULL, PGRES_TUPLES_OK, err, "audit entries");
  if (!r) return JB_ERR_FAIL;
  int rows = PQntuples(r);
  struct jb_audit_entry *v = calloc(rows ? (size_t)rows : 1, sizeof *v);
  if (!v) {
    PQclear(r);
    jb_fail(err, ENOMEM, "out of memory");
    return JB_ERR_FAIL;
  }
  for (int i = 0; i < rows; i++) {
    if (read_row(r, i, job_id, &v[i]) < 0) {
      jb_audit_entries_free(v, (size_t)i + 1);
      PQclear(r);
      jb_fail(err, ENOMEM, "out of memory");
      return JB_ERR_FAIL;
    }
  }
  PQclear(r);
  *out = v;
  *n = (size_t)rows;
  return JB_OK;
}

#define LOAD_PAGE 4096 /* entries per statement when a whole chain is loaded */

static int load_locked(PGconn *c, const char *job_id, struct jb_audit_chain *out, jb_error *err) {
  int rc = jb_audit_session_read(c, job_id, out, err);
  if (rc != JB_OK) return rc;
  size_t cap = 0;
  for (;;) {
    struct jb_audit_entry *page = NULL;
    size_t got = 0;
    long long after = out->n ? out->entries[out->n - 1].seq : 0;
    if (jb_audit_entries_page(c, job_id, after, LOAD_PAGE, &page, &got, err) != JB_OK)
      return JB_ERR_FAIL;
    if (got == 0) {
      free(page);
      break;
    }
    if (out->n + got > cap) {
      size_t nc = cap ? cap * 2 : got;
      while (nc < out->n + got) nc *= 2;
      struct jb_audit_entry *nv = realloc(out->entries, nc * sizeof *nv);
      if (!nv) {
        jb_audit_entries_free(page, got);
        jb_fail(err, ENOMEM, "out of memory");
        return JB_ERR_FAIL;
      }
      out->entries = nv;
      cap = nc;
    }
    memcpy(out->entries + out->n, page, got * sizeof *page);
    out->n += got;
    free(page); /* the entries' contents moved to out->entries */
    if (got < LOAD_PAGE) break;
  }
  return JB_OK;
}

int jb_audit_snapshot_begin(PGconn *c, jb_error *err) {
  bool own = false;
  if (PQtransactionStatus(c) != PQTRANS_IDLE)
    return jb_fail(err, EINVAL, "a snapshot needs an idle connection");
  return jb_audit_enter_tx(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", &own, err) < 0
             ? JB_ERR_FAIL
             : JB_OK;
}

int jb_audit_chain_load(PGconn *c, const char *job_id, struct jb_audit_chain *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  bool own = false;
  if (jb_audit_enter_tx(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", &own, err) < 0)
    return JB_ERR_FAIL;
  int rc = load_locked(c, job_id, out, err);
  if (own) jb_db_rollback(c); /* read only: nothing to keep */
  if (rc != JB_OK) jb_audit_chain_free(out);
  return rc;
}

void jb_audit_chain_free(struct jb_audit_chain *ch) {
  if (!ch) return;
  jb_audit_entries_free(ch->entries, ch->n);
  memset(ch, 0, sizeof *ch);
}
