/* audit_driver.c — drives the audit store against a real PostgreSQL for
 * tests/integration/audit_chain.sh: writes chains, runs the concurrency checks, and forges
 * entries the way an attacker with database access (or with the exported file) would.
 *
 *   audit_driver append CONNINFO KEYFILE JOB COUNT         appends COUNT entries; prints SEQ:HASH
 *   audit_driver seal CONNINFO KEYFILE JOB                 seals; prints SEQ:HASH
 *   audit_driver concurrent CONNINFO KEYFILE JOB CONNS PER CONNS connections × PER appends at once
 *   audit_driver grouped-errors CONNINFO KEYFILE JOB CONNS PER  the same with every fifth append
 *                                                          malformed (refused alone), then sealed
 *   audit_driver noblock CONNINFO KEYFILE JOB_A JOB_B      a held append on A blocks A, not B
 *   audit_driver txn CONNINFO KEYFILE JOB                  appends inside a caller's transaction
 *   audit_driver verify CONNINFO JOB                       verifies as the server does; prints JSON
 *   audit_driver forge CONNINFO JOB SEQ                    alters entry SEQ in the database and
 *                                                          re-signs it with a fresh, published key
 *   audit_driver forge-line FILE SEQ                       the same on an exported file (stdout)
 *   audit_driver resign CONNINFO KEYFILE JOB SEQ           re-signs entry SEQ, content untouched,
 *                                                          with KEYFILE's key (e.g. a retired one)
 *   audit_driver resign-line KEYFILE FILE SEQ              the same on an exported file (stdout)
 * Exit status 0 on success, 1 when a check fails, 2 on usage or setup errors. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "server/keys.h"
#include "server/metrics.h"

static const char *conninfo;
static struct jb_keyring *keys;
static struct jb_db *pool;  /* connections as jailboxd has them (prepared statements kept) */

static PGconn *connect_or_die(void) {
  jb_error err = {0};
  if (!pool && jb_db_open(&pool, conninfo, 64, 10, &err) < 0) {
    fprintf(stderr, "connect: %s\n", err.msg);
    exit(2);
  }
  PGconn *c = jb_db_acquire(pool, &err);
  if (!c) {
    fprintf(stderr, "connect: %s\n", err.msg);
    exit(2);
  }
  return c;
}

static void done_with(PGconn *c) { jb_db_release(pool, c); }

static void load_keys(const char *file) {
  jb_error err = {0};
  if (jb_keyring_load(&keys, NULL, file, &err) < 0) {
    fprintf(stderr, "key: %s\n", err.msg);
    exit(2);
  }
}

static void print_head(const struct jb_audit_head *h) {
  char hex[65];
  jb_audit_hex(h->hash, 32, hex);
  printf("%lld:%s\n", h->seq, hex);
}

/* A plausible entry number i: the operations a session records. */
static int append_one(PGconn *c, const char *job, long i, struct jb_audit_head *h, jb_error *err) {
  static const char *const ops[] = {"read", "write", "list", "write", "state", "pause", "resume"};
  const char *op = ops[i % 7];
  char path[64];
  snprintf(path, sizeof path, "/workspace/src/file%ld.c", i);
  json_t *d;
  if (strcmp(op, "write") == 0)
    d = json_pack("{s:I,s:s,s:s,s:b}", "size", (json_int_t)(100 + i), "sha256",
                  "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "decision",
                  i % 2 ? "approved" : "auto", "ok", 1);
  else if (strcmp(op, "read") == 0)
    d = json_pack("{s:I,s:b}", "size", (json_int_t)i, "ok", 1);
  else if (strcmp(op, "list") == 0)
    d = json_pack("{s:I}", "entries", (json_int_t)(i % 13));
  else if (strcmp(op, "state") == 0)
    d = json_pack("{s:s,s:s,s:s}", "from", "active", "to", "active", "actor", "system");
  else
    d = json_pack("{s:s}", "actor", "buyer");
  bool has_path = strcmp(op, "read") == 0 || strcmp(op, "write") == 0 || strcmp(op, "list") == 0;
  int rc = jb_audit_append(c, keys, job, op, has_path ? path : NULL, d, h, err);
  json_decref(d);
  return rc;
}

static int cmd_append(const char *job, long count) {
  PGconn *c = connect_or_die();
  struct jb_audit_head h = {0};
  jb_error err = {0};
  for (long i = 0; i < count; i++) {
    int rc = append_one(c, job, i, &h, &err);
    if (rc != JB_OK) {
      fprintf(stderr, "append: %d %s\n", rc, err.msg);
      done_with(c);
      return 1;
    }
  }
  print_head(&h);
  done_with(c);
  return 0;
}

static int cmd_seal(const char *job) {
  PGconn *c = connect_or_die();
  struct jb_audit_head h = {0};
  jb_error err = {0};
  int rc = jb_audit_seal(c, keys, job, &h, &err);
  if (rc == JB_OK) print_head(&h);
  else fprintf(stderr, "seal: %d %s\n", rc, err.msg);
  done_with(c);
  return rc == JB_OK ? 0 : 1;
}

struct worker {
  pthread_t t;
  const char *job;
  long per;
  long done;
  char error[600];
};

static pthread_barrier_t start_line;

static void *work(void *arg) {
  struct worker *w = arg;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(pool, &err);
  pthread_barrier_wait(&start_line);
  if (!c) {
    snprintf(w->error, sizeof w->error, "connect: %s", err.msg);
    return NULL;
  }
  for (long i = 0; i < w->per; i++) {
    int rc = append_one(c, w->job, i, NULL, &err);
    if (rc != JB_OK) {
      snprintf(w->error, sizeof w->error, "append: %d %s", rc, err.msg);
      break;
    }
    w->done++;
  }
  done_with(c);
  return NULL;
}

static int verify_db(PGconn *c, const char *job, struct jb_audit_result *res) {
  struct jb_audit_chain ch;
  jb_error err = {0};
  if (jb_audit_chain_load(c, job, &ch, &err) != JB_OK) {
    fprintf(stderr, "load: %s\n", err.msg);
    return -1;
  }
  struct jb_audit_key_row *rows = NULL;
  size_t nk = 0;
  if (jb_audit_keys_load(c, &rows, &nk, &err) != JB_OK) {
    fprintf(stderr, "keys: %s\n", err.msg);
    jb_audit_chain_free(&ch);
    return -1;
  }
  struct jb_audit_pubkey *pk = calloc(nk + 1, sizeof *pk);
  for (size_t i = 0; i < nk; i++) pk[i] = rows[i].key;
  free(rows);
  struct jb_audit_verify_opts o = {.session = job, .stored_head = &ch.stored,
                                   .require_seal = ch.ended};
  int rc = jb_audit_verify(ch.entries, ch.n, pk, nk, &o, res);
  free(pk);
  jb_audit_chain_free(&ch);
  return rc;
}

static int cmd_concurrent(const char *job, int conns, long per) {
  PGconn *c = connect_or_die();
  struct jb_audit_result before;
  if (verify_db(c, job, &before) != 0) {
    fprintf(stderr, "chain not intact before the run\n");
    return 1;
  }
  struct worker *w = calloc((size_t)conns, sizeof *w);
  pthread_barrier_init(&start_line, NULL, (unsigned)conns);
  for (int i = 0; i < conns; i++) {
    w[i].job = job;
    w[i].per = per;
    pthread_create(&w[i].t, NULL, work, &w[i]);
  }
  long total = 0;
  int failed = 0;
  for (int i = 0; i < conns; i++) {
    pthread_join(w[i].t, NULL);
    total += w[i].done;
    if (w[i].error[0]) {
      fprintf(stderr, "worker %d: %s\n", i, w[i].error);
      failed = 1;
    }
  }
  pthread_barrier_destroy(&start_line);
  free(w);
  struct jb_audit_result after;
  int rc = verify_db(c, job, &after);
  done_with(c);
  printf("appended %ld, chain %lld -> %lld entries, verify %s%s%s; %lu group commits of %lu entries\n",
         total, before.entries, after.entries, rc == 0 ? "ok" : "FAILED ",
         rc == 0 ? "" : jb_audit_reason_name(after.reason), rc == 0 ? "" : after.detail,
         atomic_load(&jb_metric_audit_batches), atomic_load(&jb_metric_audit_batched));
  if (failed || rc != 0 || total != conns * per || after.entries != before.entries + total)
    return 1;
  return 0;
}

/* Group commit with bad requests in it: CONNS threads × PER appends to JOB at once, every
 * fifth with an operation name the entry format refuses. Each bad append must fail alone
 * (EINVAL, nothing stored) while the good ones around it are stored, grouped (at least one
 * group commit happened) and the chain verifies; then, with the chain sealed, CONNS appends
 * at once must all get JB_ERR_CONFLICT and store nothing. */
struct bad_worker {
  pthread_t t;
  const char *job;
  long per, ok, refused, wrong;
  int seal_rc;
  bool after_seal;
};

static void *bad_work(void *arg) {
  struct bad_worker *w = arg;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(pool, &err);
  pthread_barrier_wait(&start_line);
  if (!c) {
    w->wrong++;
    return NULL;
  }
  for (long i = 0; i < w->per; i++) {
    bool bad = !w->after_seal && i % 5 == 4;
    memset(&err, 0, sizeof err);
    int rc = jb_audit_append(c, keys, w->job, bad ? "Bad-Op" : "write", "/workspace/x", NULL, NULL, &err);
    if (w->after_seal) w->seal_rc = rc;
    else if (bad && rc == JB_ERR_FAIL && err.code == EINVAL) w->refused++;
    else if (!bad && rc == JB_OK) w->ok++;
    else {
      fprintf(stderr, "append %ld (%s): %d %s\n", i, bad ? "bad" : "good", rc, err.msg);
      w->wrong++;
    }
  }
  done_with(c);
  return NULL;
}

static int run_bad_workers(const char *job, int conns, long per, bool after_seal, long *ok,
                           long *refused, long *wrong, int *conflicts) {
  struct bad_worker *w = calloc((size_t)conns, sizeof *w);
  pthread_barrier_init(&start_line, NULL, (unsigned)conns);
  for (int i = 0; i < conns; i++) {
    w[i] = (struct bad_worker){.job = job, .per = per, .after_seal = after_seal};
    pthread_create(&w[i].t, NULL, bad_work, &w[i]);
  }
  *ok = *refused = *wrong = 0, *conflicts = 0;
  for (int i = 0; i < conns; i++) {
    pthread_join(w[i].t, NULL);
    *ok += w[i].ok, *refused += w[i].refused, *wrong += w[i].wrong;
    *conflicts += w[i].seal_rc == JB_ERR_CONFLICT;
  }
  pthread_barrier_destroy(&start_line);
  free(w);
  return 0;
}

static int cmd_grouped_errors(const char *job, int conns, long per) {
  PGconn *c = connect_or_die();
  struct jb_audit_result before, after;
  if (verify_db(c, job, &before) != 0) return fprintf(stderr, "chain not intact before\n"), 1;
  unsigned long b0 = atomic_load(&jb_metric_audit_batches);
  long ok, refused, wrong;
  int conflicts;
  run_bad_workers(job, conns, per, false, &ok, &refused, &wrong, &conflicts);
  unsigned long groups = atomic_load(&jb_metric_audit_batches) - b0;
  int vrc = verify_db(c, job, &after);
  long bad_each = per / 5;
  bool first = wrong == 0 && ok == conns * (per - bad_each) && refused == conns * bad_each &&
               vrc == 0 && after.entries == before.entries + ok && groups > 0;
  printf("good stored %ld, bad refused alone %ld, wrong %ld, group commits %lu, chain %lld -> %lld %s\n",
         ok, refused, wrong, groups, before.entries, after.entries, vrc == 0 ? "verifies" : "BROKEN");
  jb_error err = {0};
  if (jb_audit_seal(c, keys, job, NULL, &err) != JB_OK) {
    fprintf(stderr, "seal: %s\n", err.msg);
    done_with(c);
    return 1;
  }
  run_bad_workers(job, conns, 1, true, &ok, &refused, &wrong, &conflicts);
  struct jb_audit_result sealed;
  int src = verify_db(c, job, &sealed);
  done_with(c);
  printf("after the seal: %d of %d concurrent appends refused as sealed, chain %lld entries %s\n",
         conflicts, conns, sealed.entries, src == 0 ? "verifies" : "BROKEN");
  return first && conflicts == conns && src == 0 && sealed.entries == after.entries + 1 ? 0 : 1;
}

/* Holds the lock of JOB_A (an append inside an open transaction), then: an append to JOB_B
 * from another connection must finish at once; one to JOB_A must wait (lock_timeout hits). */
static int cmd_noblock(const char *a, const char *b) {
  PGconn *holder = connect_or_die(), *other = connect_or_die();
  jb_error err = {0};
  PQclear(PQexec(holder, "BEGIN"));
  if (jb_audit_append(holder, keys, a, "pause", NULL, NULL, NULL, &err) != JB_OK) {
    fprintf(stderr, "held append: %s\n", err.msg);
    return 2;
  }
  PQclear(PQexec(other, "SET lock_timeout = '2s'"));
  int rc_b = jb_audit_append(other, keys, b, "resume", NULL, NULL, NULL, &err);
  if (rc_b != JB_OK) fprintf(stderr, "append to the other session blocked or failed: %s\n", err.msg);
  PQclear(PQexec(other, "SET lock_timeout = '300ms'"));
  int rc_a = jb_audit_append(other, keys, a, "resume", NULL, NULL, NULL, &err);
  bool waited = rc_a == JB_ERR_FAIL && strstr(err.msg, "55P03");
  if (!waited) fprintf(stderr, "append to the locked session did not wait: %d %s\n", rc_a, err.msg);
  PQclear(PQexec(holder, "COMMIT"));
  done_with(holder);
  done_with(other);
  printf("other session not blocked: %s; same session serialized: %s\n",
         rc_b == JB_OK ? "yes" : "NO", waited ? "yes" : "NO");
  return rc_b == JB_OK && waited ? 0 : 1;
}

static long long head_seq(PGconn *c, const char *job) {
  const char *p[1] = {job};
  PGresult *r = PQexecParams(c, "SELECT seq FROM audit_heads WHERE job_id = $1", 1, NULL,
                             p, NULL, NULL, 0);
  long long s = PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
  PQclear(r);
  return s;
}

/* Inside a caller's transaction: rolled back with it, committed with it. */
static int cmd_txn(const char *job) {
  PGconn *c = connect_or_die();
  jb_error err = {0};
  long long s0 = head_seq(c, job);
  PQclear(PQexec(c, "BEGIN"));
  struct jb_audit_head h;
  int rc = jb_audit_append(c, keys, job, "pause", NULL, NULL, &h, &err);
  bool in_tx = PQtransactionStatus(c) == PQTRANS_INTRANS;
  PQclear(PQexec(c, "ROLLBACK"));
  long long s1 = head_seq(c, job);
  PQclear(PQexec(c, "BEGIN"));
  int rc2 = jb_audit_append(c, keys, job, "pause", NULL, NULL, &h, &err);
  PQclear(PQexec(c, "COMMIT"));
  long long s2 = head_seq(c, job);
  /* an append outside any transaction commits by itself */
  int rc3 = jb_audit_append(c, keys, job, "resume", NULL, NULL, &h, &err);
  bool idle = PQtransactionStatus(c) == PQTRANS_IDLE;
  long long s3 = head_seq(c, job);
  /* bad input never reaches the database */
  json_t *bad = json_pack("{s:f}", "x", 0.5);
  int rc4 = jb_audit_append(c, keys, job, "read", "/x", bad, NULL, &err);
  json_decref(bad);
  int rc5 = jb_audit_append(c, keys, "no-such-session", "read", "/x", NULL, NULL, &err);
  done_with(c);
  bool ok = rc == JB_OK && in_tx && s1 == s0 && rc2 == JB_OK && s2 == s0 + 1 && rc3 == JB_OK &&
            idle && s3 == s0 + 2 && rc4 == JB_ERR_FAIL && rc5 == JB_ERR_NOT_FOUND;
  printf("rollback keeps head %lld: %s; commit moves it: %s; own transaction: %s; "
         "refusals: %s\n", s0, s1 == s0 ? "yes" : "NO", s2 == s0 + 1 ? "yes" : "NO",
         s3 == s0 + 2 && idle ? "yes" : "NO", rc4 == JB_ERR_FAIL && rc5 == JB_ERR_NOT_FOUND ? "yes" : "NO");
  return ok ? 0 : 1;
}

static int cmd_verify(const char *job) {
  PGconn *c = connect_or_die();
  struct jb_audit_result res;
  int rc = verify_db(c, job, &res);
  done_with(c);
  if (rc < 0) return 2;
  json_t *j = jb_audit_result_json(&res);
  char *s = json_dumps(j, JSON_COMPACT);
  puts(s);
  free(s);
  json_decref(j);
  return rc;
}

/* Re-makes entry `e` with its details altered, signed with a fresh random key. */
static int forge_entry(const struct jb_audit_entry *e, struct jb_keyring **fresh,
                       struct jb_audit_entry *out) {
  json_t *canon = json_loadb((const char *)e->canonical, e->canonical_len, 0, NULL);
  if (!canon) return -1;
  json_t *d = json_deep_copy(json_object_get(canon, "details"));
  json_object_set_new(d, "forged", json_true());
  unsigned char seed[32];
  randombytes_buf(seed, sizeof seed);
  *fresh = jb_keyring_from_seed(seed);
  json_t *path = json_object_get(canon, "path");
  jb_error err = {0};
  int rc = jb_audit_entry_make(out, json_integer_value(json_object_get(canon, "seq")),
                               json_string_value(json_object_get(canon, "session")),
                               json_string_value(json_object_get(canon, "operation")),
                               json_is_string(path) ? json_string_value(path) : NULL,
                               json_string_value(json_object_get(canon, "timestamp")), d,
                               e->prev_hash, (*fresh)->sk, (*fresh)->pk, &err);
  json_decref(d);
  json_decref(canon);
  if (rc < 0) fprintf(stderr, "forge: %s\n", err.msg);
  return rc;
}

static int cmd_forge(const char *job, long long seq) {
  PGconn *c = connect_or_die();
  struct jb_audit_chain ch;
  jb_error err = {0};
  if (jb_audit_chain_load(c, job, &ch, &err) != JB_OK || seq < 1 || (size_t)seq > ch.n) {
    fprintf(stderr, "forge: no entry %lld (%s)\n", seq, err.msg);
    return 2;
  }
  struct jb_keyring *fresh = NULL;
  struct jb_audit_entry f;
  if (forge_entry(&ch.entries[seq - 1], &fresh, &f) < 0) return 2;
  char seqs[24];
  snprintf(seqs, sizeof seqs, "%lld", seq);
  const char *kv[2] = {fresh->key_id, (const char *)fresh->pk};
  const int kl[2] = {0, 32}, kf[2] = {0, 1};
  PGresult *r = PQexecParams(c, "INSERT INTO audit_signing_keys (key_id, public_key) VALUES ($1, $2)",
                             2, NULL, kv, kl, kf, 0);
  int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  PQclear(r);
  const char *v[6] = {job, seqs, (const char *)f.canonical, (const char *)f.hash,
                      (const char *)f.signature, fresh->key_id};
  const int l[6] = {0, 0, (int)f.canonical_len, 32, 64, 0}, fm[6] = {0, 0, 1, 1, 1, 0};
  r = PQexecParams(c,
                   "UPDATE audit_entries SET canonical = $3, hash = $4, signature = $5,"
                   " key_id = $6 WHERE job_id = $1 AND seq = $2",
                   6, NULL, v, l, fm, 0);
  ok = ok && PQresultStatus(r) == PGRES_COMMAND_OK && strcmp(PQcmdTuples(r), "1") == 0;
  if (!ok) fprintf(stderr, "forge: %s", PQerrorMessage(c));
  PQclear(r);
  printf("%s\n", fresh->key_id);
  jb_audit_entry_clear(&f);
  jb_keyring_free(fresh);
  jb_audit_chain_free(&ch);
  done_with(c);
  return ok ? 0 : 2;
}

static int cmd_forge_line(const char *file, long long seq) {
  FILE *in = fopen(file, "re");
  if (!in) {
    perror(file);
    return 2;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  long long n = 0;
  int rc = 0;
  while ((len = getline(&line, &cap, in)) > 0) {
    if (++n != seq) {
      fputs(line, stdout);
      continue;
    }
    struct jb_audit_entry e, f;
    struct jb_keyring *fresh = NULL;
    if (jb_audit_entry_parse_line(&e, line, (size_t)len, NULL) < 0 || forge_entry(&e, &fresh, &f) < 0) {
      rc = 2;
      break;
    }
    char *out = jb_audit_entry_line(&f);
    fputs(out, stdout);
    free(out);
    jb_audit_entry_clear(&e);
    jb_audit_entry_clear(&f);
    jb_keyring_free(fresh);
  }
  free(line);
  fclose(in);
  return rc;
}

/* Signs e's hash (unchanged, so every link still holds) with the loaded key instead. */
static void resign(struct jb_audit_entry *e) {
  jb_keyring_sign(keys, e->hash, e->signature);
  memcpy(e->key_id, keys->key_id, sizeof e->key_id);
}

static int cmd_resign(const char *job, long long seq) {
  PGconn *c = connect_or_die();
  struct jb_audit_chain ch;
  jb_error err = {0};
  if (jb_audit_chain_load(c, job, &ch, &err) != JB_OK || seq < 1 || (size_t)seq > ch.n) {
    fprintf(stderr, "resign: no entry %lld (%s)\n", seq, err.msg);
    return 2;
  }
  resign(&ch.entries[seq - 1]);
  char seqs[24];
  snprintf(seqs, sizeof seqs, "%lld", seq);
  const char *v[4] = {job, seqs, (const char *)ch.entries[seq - 1].signature, keys->key_id};
  const int l[4] = {0, 0, 64, 0}, fm[4] = {0, 0, 1, 0};
  PGresult *r = PQexecParams(c,
                             "UPDATE audit_entries SET signature = $3, key_id = $4"
                             " WHERE job_id = $1 AND seq = $2",
                             4, NULL, v, l, fm, 0);
  int ok = PQresultStatus(r) == PGRES_COMMAND_OK && strcmp(PQcmdTuples(r), "1") == 0;
  if (!ok) fprintf(stderr, "resign: %s", PQerrorMessage(c));
  PQclear(r);
  jb_audit_chain_free(&ch);
  done_with(c);
  return ok ? 0 : 2;
}

static int cmd_resign_line(const char *file, long long seq) {
  FILE *in = fopen(file, "re");
  if (!in) {
    perror(file);
    return 2;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  long long n = 0;
  int rc = 0;
  while ((len = getline(&line, &cap, in)) > 0) {
    if (++n != seq) {
      fputs(line, stdout);
      continue;
    }
    struct jb_audit_entry e;
    if (jb_audit_entry_parse_line(&e, line, (size_t)len, NULL) < 0) {
      rc = 2;
      break;
    }
    resign(&e);
    char *out = jb_audit_entry_line(&e);
    fputs(out, stdout);
    free(out);
    jb_audit_entry_clear(&e);
  }
  free(line);
  fclose(in);
  return rc;
}

/* ---- jb_db_pipeline (db/db.h) ---- */

static long long pl_count(PGconn *c) {
  jb_error err = {0};
  PGresult *r = jb_db_exec(c, "SELECT count(*) FROM pl_t", 0, NULL, PGRES_TUPLES_OK, NULL, &err, "count");
  long long n = r ? atoll(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  return n;
}

/* Whether `c` is as the pool expects it: out of pipeline mode, no transaction, and able to
 * run a prepared statement and another pipeline. */
static bool pl_usable(PGconn *c) {
  jb_error err = {0};
  if (PQpipelineStatus(c) != PQ_PIPELINE_OFF || PQtransactionStatus(c) != PQTRANS_IDLE) return false;
  PGresult *r = jb_db_exec(c, "SELECT 1", 0, NULL, PGRES_TUPLES_OK, NULL, &err, "select");
  bool ok = r != NULL;
  PQclear(r);
  const struct jb_db_step st[2] = {JB_DB_STEP("SELECT 2", 0, NULL, PGRES_TUPLES_OK, "two"),
                                   JB_DB_STEP("SELECT 3", 0, NULL, PGRES_TUPLES_OK, "three")};
  r = jb_db_pipeline(c, st, 2, &err);
  ok = ok && r && !strcmp(PQgetvalue(r, 0, 0), "3");
  PQclear(r);
  return ok;
}

static int cmd_pipeline(void) {
  PGconn *c = connect_or_die();
  jb_error err = {0};
  PGresult *r = jb_db_exec(c, "CREATE TEMP TABLE pl_t (x int)", 0, NULL, PGRES_COMMAND_OK, NULL, &err, "create");
  if (!r) {
    fprintf(stderr, "%s\n", err.msg);
    return 2;
  }
  PQclear(r);
  int bad = 0;
  /* 1. the third step fails in the server: the COMMIT after it is skipped */
  const struct jb_db_step fail_mid[4] = {
      JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
      JB_DB_STEP("INSERT INTO pl_t VALUES (1) RETURNING x", 0, NULL, PGRES_TUPLES_OK, "insert"),
      JB_DB_STEP("SELECT 1 / 0", 0, NULL, PGRES_TUPLES_OK, "divide"),
      JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
  err = (jb_error){0};
  r = jb_db_pipeline(c, fail_mid, 4, &err);
  bool named = strstr(err.msg, "divide") != NULL;
  jb_db_rollback(c);
  long long n = pl_count(c);
  printf("failed step: %s, named: %s, committed rows %lld, connection usable: %s\n", r ? "NOT REPORTED" : "reported",
         named ? "yes" : "NO", n, pl_usable(c) ? "yes" : "NO");
  bad += r != NULL || !named || n != 0 || !pl_usable(c);
  PQclear(r);
  /* 2. a step ending with another status than its `want`, without an error: reported, and
   *    the COMMIT after it must not have committed what it guards */
  const struct jb_db_step mismatch[3] = {
      JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
      JB_DB_STEP("INSERT INTO pl_t VALUES (2) RETURNING x", 0, NULL, PGRES_COMMAND_OK, "insert"),
      JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
  err = (jb_error){0};
  r = jb_db_pipeline(c, mismatch, 3, &err);
  named = strstr(err.msg, "insert") != NULL;
  jb_db_rollback(c);
  n = pl_count(c);
  printf("unexpected status: %s, named: %s, committed rows %lld, connection usable: %s\n",
         r ? "NOT REPORTED" : "reported", named ? "yes" : "NO", n, pl_usable(c) ? "yes" : "NO");
  bad += r != NULL || !named || n != 0 || !pl_usable(c);
  PQclear(r);
  /* 3. all steps succeed: the last one's result, committed */
  const struct jb_db_step good[3] = {
      JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
      JB_DB_STEP("INSERT INTO pl_t VALUES (3) RETURNING x", 0, NULL, PGRES_TUPLES_OK, "insert"),
      JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
  r = jb_db_pipeline(c, good, 3, &err);
  n = pl_count(c);
  printf("all steps: %s, committed rows %lld, connection usable: %s\n", r ? "ok" : err.msg, n,
         pl_usable(c) ? "yes" : "NO");
  bad += r == NULL || n != 1 || !pl_usable(c);
  PQclear(r);
  /* 3b. a kept step's result and binary parameters: bytea 00 ff 0a and an int8 in network
   *     order reach the server as those bytes; a later failure keeps nothing */
  {
    const unsigned char bytes[3] = {0x00, 0xff, 0x0a};
    const unsigned char i8[8] = {0, 0, 0, 0, 0, 0, 0x01, 0x02}; /* 258 */
    const char *bp[2] = {(const char *)bytes, (const char *)i8};
    const int bl[2] = {3, 8}, bf[2] = {1, 1};
    PGresult *kept = NULL;
    const struct jb_db_step keep[2] = {
        {.sql = "SELECT encode($1::bytea, 'hex') || ' ' || ($2::bigint)::text", .n = 2, .params = bp,
         .want = PGRES_TUPLES_OK, .what = "binary", .lengths = bl, .formats = bf, .keep = &kept},
        JB_DB_STEP("SELECT 4", 0, NULL, PGRES_TUPLES_OK, "four")};
    r = jb_db_pipeline(c, keep, 2, &err);
    const char *got = kept && PQntuples(kept) == 1 ? PQgetvalue(kept, 0, 0) : "(nothing kept)";
    bool good_keep = r && !strcmp(PQgetvalue(r, 0, 0), "4") && !strcmp(got, "00ff0a 258");
    printf("kept step: %s\n", got);
    bad += !good_keep;
    PQclear(r);
    PQclear(kept);
    kept = (PGresult *)&kept; /* must be reset to NULL by a failed pipeline */
    const struct jb_db_step keep_fail[2] = {
        {.sql = "SELECT 5", .n = 0, .want = PGRES_TUPLES_OK, .what = "five", .keep = &kept},
        JB_DB_STEP("SELECT 1 / 0", 0, NULL, PGRES_TUPLES_OK, "divide")};
    err = (jb_error){0};
    r = jb_db_pipeline(c, keep_fail, 2, &err);
    printf("kept step of a failed pipeline: %s\n", kept ? "KEPT" : "none");
    bad += r != NULL || kept != NULL;
    PQclear(r);
  }
  /* 4. the connection dropped under a pipeline: an error, not a hang; not given back as usable */
  PGresult *pid = jb_db_exec(c, "SELECT pg_backend_pid()::text", 0, NULL, PGRES_TUPLES_OK, NULL, &err, "pid");
  const char *pp[1] = {pid ? PQgetvalue(pid, 0, 0) : "0"};
  const struct jb_db_step killed[3] = {
      JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
      JB_DB_STEP("SELECT pg_terminate_backend($1::int)", 1, pp, PGRES_TUPLES_OK, "terminate"),
      JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
  err = (jb_error){0};
  r = jb_db_pipeline(c, killed, 3, &err);
  jb_db_rollback(c);
  bool dropped = PQstatus(c) != CONNECTION_OK;
  printf("connection dropped: %s, %s\n", r ? "NOT REPORTED" : "reported", dropped ? "closed" : "still open");
  bad += r != NULL;
  PQclear(r);
  PQclear(pid);
  done_with(c);
  /* the pool hands out a working connection afterwards */
  c = connect_or_die();
  bool after = pl_usable(c);
  printf("pool afterwards: %s\n", after ? "usable" : "NOT USABLE");
  bad += !after;
  done_with(c);
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  if (sodium_init() < 0) return 2;
  const char *cmd = argc > 1 ? argv[1] : "";
  if (strcmp(cmd, "forge-line") == 0 && argc == 4) return cmd_forge_line(argv[2], atoll(argv[3]));
  if (strcmp(cmd, "resign-line") == 0 && argc == 5) {
    load_keys(argv[2]);
    int rc = cmd_resign_line(argv[3], atoll(argv[4]));
    jb_keyring_free(keys);
    return rc;
  }
  if (strcmp(cmd, "pipeline") == 0 && argc == 3) {
    conninfo = argv[2];
    int rc = cmd_pipeline();
    jb_db_close(pool);
    return rc;
  }
  if (argc < 4) goto usage;
  conninfo = argv[2];
  if ((strcmp(cmd, "verify") == 0 && argc == 4) || (strcmp(cmd, "forge") == 0 && argc == 5)) {
    int rc = argc == 4 ? cmd_verify(argv[3]) : cmd_forge(argv[3], atoll(argv[4]));
    jb_db_close(pool);
    return rc;
  }
  if (argc < 5) goto usage;
  load_keys(argv[3]);
  int rc = 2;
  if (strcmp(cmd, "append") == 0 && argc == 6) rc = cmd_append(argv[4], atol(argv[5]));
  else if (strcmp(cmd, "seal") == 0 && argc == 5) rc = cmd_seal(argv[4]);
  else if (strcmp(cmd, "concurrent") == 0 && argc == 7)
    rc = cmd_concurrent(argv[4], atoi(argv[5]), atol(argv[6]));
  else if (strcmp(cmd, "grouped-errors") == 0 && argc == 7)
    rc = cmd_grouped_errors(argv[4], atoi(argv[5]), atol(argv[6]));
  else if (strcmp(cmd, "noblock") == 0 && argc == 6) rc = cmd_noblock(argv[4], argv[5]);
  else if (strcmp(cmd, "txn") == 0 && argc == 5) rc = cmd_txn(argv[4]);
  else if (strcmp(cmd, "resign") == 0 && argc == 6) rc = cmd_resign(argv[4], atoll(argv[5]));
  else fprintf(stderr, "audit_driver: bad arguments (see the comment at the top)\n");
  jb_keyring_free(keys);
  jb_db_close(pool);
  return rc;
usage:
  fprintf(stderr, "audit_driver: bad arguments (see the comment at the top)\n");
  return 2;
}
