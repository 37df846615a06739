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
 * Group-commit break-it commands (branch wip-gcbreak; tests/gcbreak.sh runs them all):
 *   audit_driver mixrace CONNINFO KEYFILE JOB SECONDS SEAL  grouped / bad-op / in-transaction /
 *                                                          pipeline appends at once; SEAL=1 seals
 *                                                          at SECONDS; every JB_OK head checked
 *   audit_driver slotmate CONNINFO KEYFILE JOB             a "gcN" id in JOB's group slot
 *   audit_driver collide CONNINFO KEYFILE JOB OTHER SECS   2 threads on JOB, 6 on OTHER at once
 *   audit_driver timeouts CONNINFO KEYFILE JOB             lock_timeout of leader vs follower
 *   audit_driver keyrace CONNINFO KEYFILE JOB ROUNDS       retirement racing appends (retires
 *                                                          every other key, the file's too)
 *   audit_driver twokeys CONNINFO KEYFILE JOB              a published and an unpublished keyring
 *   audit_driver killer CONNINFO KEYFILE JOB SECONDS       backends terminated under appends
 *   (GC_FRESH_KEY=1: sign with a new, published random key instead of KEYFILE's)
 * Exit status 0 on success, 1 when a check fails, 2 on usage or setup errors. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "lib/keyring.h"
#include "lib/metrics.h"

static const char *conninfo;
static struct jb_keyring *keys;
static struct jb_db *pool; /* connections as jailboxd has them (prepared statements kept) */

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
  if (rc == JB_OK)
    print_head(&h);
  else
    fprintf(stderr, "seal: %d %s\n", rc, err.msg);
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

/* A racing thread's start: a pooled connection (NULL with `err` when none), then the wait at
 * the start line, so that every thread begins at once whether it got one or not. */
static PGconn *conn_at_start_line(jb_error *err) {
  PGconn *c = jb_db_acquire(pool, err);
  pthread_barrier_wait(&start_line);
  return c;
}

static void *work(void *arg) {
  struct worker *w = arg;
  jb_error err = {0};
  PGconn *c = conn_at_start_line(&err);
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
  struct jb_audit_verify_opts o = {
      .session = job, .stored_head = &ch.stored, .require_seal = ch.ended};
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
  printf(
      "appended %ld, chain %lld -> %lld entries, verify %s%s%s; %lu group commits of %lu entries\n",
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
  PGconn *c = conn_at_start_line(&err);
  if (!c) {
    w->wrong++;
    return NULL;
  }
  for (long i = 0; i < w->per; i++) {
    bool bad = !w->after_seal && i % 5 == 4;
    memset(&err, 0, sizeof err);
    int rc = jb_audit_append(c, keys, w->job, bad ? "Bad-Op" : "write", "/workspace/x", NULL, NULL,
                             &err);
    if (w->after_seal)
      w->seal_rc = rc;
    else if (bad && rc == JB_ERR_FAIL && err.code == EINVAL)
      w->refused++;
    else if (!bad && rc == JB_OK)
      w->ok++;
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
  printf(
      "good stored %ld, bad refused alone %ld, wrong %ld, group commits %lu, chain %lld -> %lld "
      "%s\n",
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
  if (rc_b != JB_OK)
    fprintf(stderr, "append to the other session blocked or failed: %s\n", err.msg);
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
  PGresult *r =
      PQexecParams(c, "SELECT seq FROM audit_heads WHERE job_id = $1", 1, NULL, p, NULL, NULL, 0);
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
  printf(
      "rollback keeps head %lld: %s; commit moves it: %s; own transaction: %s; "
      "refusals: %s\n",
      s0, s1 == s0 ? "yes" : "NO", s2 == s0 + 1 ? "yes" : "NO", s3 == s0 + 2 && idle ? "yes" : "NO",
      rc4 == JB_ERR_FAIL && rc5 == JB_ERR_NOT_FOUND ? "yes" : "NO");
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
  PGresult *r =
      PQexecParams(c, "INSERT INTO audit_signing_keys (key_id, public_key) VALUES ($1, $2)", 2,
                   NULL, kv, kl, kf, 0);
  int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  PQclear(r);
  const char *v[6] = {job,
                      seqs,
                      (const char *)f.canonical,
                      (const char *)f.hash,
                      (const char *)f.signature,
                      fresh->key_id};
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
    if (jb_audit_line_read(&e, line, (size_t)len, NULL) != JB_AUDIT_LINE_ENTRY ||
        forge_entry(&e, &fresh, &f) < 0) {
      jb_audit_entry_clear(&e);
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
    if (jb_audit_line_read(&e, line, (size_t)len, NULL) != JB_AUDIT_LINE_ENTRY) {
      jb_audit_entry_clear(&e);
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
  PGresult *r =
      jb_db_exec(c, "SELECT count(*) FROM pl_t", 0, NULL, PGRES_TUPLES_OK, NULL, &err, "count");
  long long n = r ? atoll(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  return n;
}

/* Whether `c` is as the pool expects it: out of pipeline mode, no transaction, and able to
 * run a prepared statement and another pipeline. */
static bool pl_usable(PGconn *c) {
  jb_error err = {0};
  if (PQpipelineStatus(c) != PQ_PIPELINE_OFF || PQtransactionStatus(c) != PQTRANS_IDLE)
    return false;
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
  PGresult *r = jb_db_exec(c, "CREATE TEMP TABLE pl_t (x int)", 0, NULL, PGRES_COMMAND_OK, NULL,
                           &err, "create");
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
  printf("failed step: %s, named: %s, committed rows %lld, connection usable: %s\n",
         r ? "NOT REPORTED" : "reported", named ? "yes" : "NO", n, pl_usable(c) ? "yes" : "NO");
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
        {.sql = "SELECT encode($1::bytea, 'hex') || ' ' || ($2::bigint)::text",
         .n = 2,
         .params = bp,
         .want = PGRES_TUPLES_OK,
         .what = "binary",
         .lengths = bl,
         .formats = bf,
         .keep = &kept},
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
  PGresult *pid =
      jb_db_exec(c, "SELECT pg_backend_pid()::text", 0, NULL, PGRES_TUPLES_OK, NULL, &err, "pid");
  const char *pp[1] = {pid ? PQgetvalue(pid, 0, 0) : "0"};
  const struct jb_db_step killed[3] = {
      JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
      JB_DB_STEP("SELECT pg_terminate_backend($1::int)", 1, pp, PGRES_TUPLES_OK, "terminate"),
      JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
  err = (jb_error){0};
  r = jb_db_pipeline(c, killed, 3, &err);
  jb_db_rollback(c);
  bool dropped = PQstatus(c) != CONNECTION_OK;
  printf("connection dropped: %s, %s\n", r ? "NOT REPORTED" : "reported",
         dropped ? "closed" : "still open");
  bad += r != NULL;
  PQclear(r);
  PQclear(pid);
  done_with(c);
  /* the pool hands out a working connection afterwards */
  c = connect_or_die();
  bool after = pl_usable(c);
  printf("pool afterwards: %s\n", after ? "usable" : "NOT USABLE");
  bad += !after;
  /* 5. a connection given back while still in pipeline mode with a result unread (a pipeline
   *    cut short, its connection still CONNECTION_OK): the pool must not hand it out again */
  bool entered = PQenterPipelineMode(c) == 1 &&
                 PQsendQueryParams(c, "SELECT 6", 0, NULL, NULL, NULL, NULL, 0) == 1;
  PQsendFlushRequest(c);
  PQflush(c);
  done_with(c);
  c = connect_or_die();
  bool clean = pl_usable(c);
  printf("given back in pipeline mode (%s), next from the pool: %s\n",
         entered ? "entered" : "NOT ENTERED", clean ? "usable" : "NOT USABLE");
  bad += !entered || !clean;
  done_with(c);
  return bad ? 1 : 0;
}

/* --- group-commit break-it commands (wip-gcbreak) ------------------------------------------- */

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* audit_store.c's slot function, copied: FNV-1a % 1024, then % 256 for the group slots */
static size_t gc_slot_of(const char *job_id) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char *p = (const unsigned char *)job_id; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return (size_t)(h % 1024) % 256;
}

/* Heads returned with JB_OK, to be found in the stored chain afterwards. */
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static struct jb_audit_head *rec;
static size_t rec_n, rec_cap;
static void record_head(const struct jb_audit_head *h) {
  pthread_mutex_lock(&rec_lock);
  if (rec_n == rec_cap) {
    rec_cap = rec_cap ? rec_cap * 2 : 1024;
    rec = realloc(rec, rec_cap * sizeof *rec);
  }
  rec[rec_n++] = *h;
  pthread_mutex_unlock(&rec_lock);
}

/* Every recorded head is entry h.seq of the stored chain with that hash; no seq twice. */
static long check_recorded(PGconn *c, const char *job, long long *entries) {
  struct jb_audit_chain ch;
  jb_error err = {0};
  if (jb_audit_chain_load(c, job, &ch, &err) != JB_OK) {
    fprintf(stderr, "load: %s\n", err.msg);
    return -1;
  }
  long bad = 0;
  char *seen = calloc(ch.n + 2, 1);
  for (size_t i = 0; i < rec_n; i++) {
    long long s = rec[i].seq;
    if (s < 1 || (size_t)s > ch.n || ch.entries[s - 1].seq != s ||
        memcmp(ch.entries[s - 1].hash, rec[i].hash, 32) != 0) {
      fprintf(stderr, "returned head %lld is not the stored entry %lld\n", s, s);
      bad++;
    } else if (seen[s]++) {
      fprintf(stderr, "head %lld returned to two callers\n", s);
      bad++;
    }
  }
  free(seen);
  *entries = (long long)ch.n;
  jb_audit_chain_free(&ch);
  return bad;
}

/* mixrace JOB SECONDS SEAL(0/1): grouped appenders, bad-op appenders, appends inside a
 * caller's transaction (committed or rolled back), jb_audit_append_step pipelines, all on JOB;
 * with SEAL the chain is sealed at SECONDS while they run, and they go on for 300 ms more.
 * Prints "ok N" (entries this process got JB_OK for, committed) and every wrong result. */
enum { MIX_GROUPED, MIX_BAD, MIX_TXN, MIX_PIPE };
struct mixw {
  pthread_t t;
  int kind;
  const char *job;
  long ok, wrong, conflicts, refused, moved;
};
static volatile int mix_stop, mix_sealed;

static void *mix_work(void *arg) {
  struct mixw *w = arg;
  jb_error err = {0};
  PGconn *c = conn_at_start_line(&err);
  if (!c) {
    w->wrong++;
    return NULL;
  }
  unsigned seed = (unsigned)(uintptr_t)w;
  for (long i = 0; !mix_stop; i++) {
    int sealed_before = mix_sealed;
    struct jb_audit_head h = {0};
    memset(&err, 0, sizeof err);
    int rc;
    if (w->kind == MIX_GROUPED) {
      rc = append_one(c, w->job, i, &h, &err);
      if (rc == JB_OK)
        w->ok++, record_head(&h);
      else if (rc == JB_ERR_CONFLICT && mix_sealed)
        w->conflicts++;
      else
        w->wrong++, fprintf(stderr, "grouped: %d %s\n", rc, err.msg);
    } else if (w->kind == MIX_BAD) {
      bool bad = i % 2;
      rc = jb_audit_append(c, keys, w->job, bad ? "Bad-Op" : "resume", NULL, NULL, &h, &err);
      if (!bad && rc == JB_OK)
        w->ok++, record_head(&h);
      else if (bad && rc == JB_ERR_FAIL && err.code == EINVAL)
        w->refused++;
      else if (rc == JB_ERR_CONFLICT && mix_sealed)
        w->conflicts++;
      else
        w->wrong++, fprintf(stderr, "bad-mix %s: %d %s\n", bad ? "bad" : "good", rc, err.msg);
    } else if (w->kind == MIX_TXN) {
      PQclear(PQexec(c, "BEGIN"));
      rc = jb_audit_append(c, keys, w->job, "pause", NULL, NULL, &h, &err);
      bool commit = rand_r(&seed) % 2;
      if (rc == JB_OK && commit) {
        PGresult *r = PQexec(c, "COMMIT");
        bool committed = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (committed)
          w->ok++, record_head(&h);
        else
          w->wrong++, fprintf(stderr, "txn commit failed\n");
      } else {
        PQclear(PQexec(c, "ROLLBACK"));
        if (rc == JB_OK) continue;
        if (rc == JB_ERR_CONFLICT && mix_sealed)
          w->conflicts++;
        else
          w->wrong++, fprintf(stderr, "txn: %d %s\n", rc, err.msg);
      }
    } else { /* pipeline on the cached head, as db/ops.c's direct store */
      long long head;
      unsigned char prev[32];
      if (!jb_audit_head_peek(w->job, &head, prev)) {
        rc = jb_audit_append(c, keys, w->job, "list", "/p", NULL, &h, &err);
        if (rc == JB_OK)
          w->ok++, record_head(&h);
        else if (rc == JB_ERR_CONFLICT && mix_sealed)
          w->conflicts++;
        else
          w->wrong++, fprintf(stderr, "pipe-fallback: %d %s\n", rc, err.msg);
        continue;
      }
      struct jb_audit_pending pend;
      struct jb_db_step step;
      if (jb_audit_append_step(keys, w->job, "write", "/p", NULL, head, prev, &pend, &step, &err) <
          0) {
        w->wrong++, fprintf(stderr, "step: %s\n", err.msg);
        continue;
      }
      const char *p1[1] = {w->job};
      const struct jb_db_step steps[4] = {
          JB_DB_STEP("BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin"),
          JB_DB_STEP("SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p1, PGRES_TUPLES_OK,
                     "lock session"),
          step, JB_DB_STEP("COMMIT", 0, NULL, PGRES_COMMAND_OK, "commit")};
      PGresult *r = jb_db_pipeline(c, steps, 4, &err);
      if (!r) jb_db_rollback(c);
      PQclear(r);
      jb_audit_append_settle(w->job, &pend, r != NULL, &h);
      if (r)
        w->ok++, record_head(&h);
      else if (strstr(err.msg, "head moved"))
        w->moved++;
      else
        w->wrong++, fprintf(stderr, "pipe: %s\n", err.msg);
    }
    (void)sealed_before;
  }
  done_with(c);
  return NULL;
}

static int cmd_mixrace(const char *job, double seconds, int seal) {
  PGconn *c = connect_or_die();
  int kinds[] = {MIX_GROUPED, MIX_GROUPED, MIX_GROUPED, MIX_GROUPED, MIX_GROUPED,
                 MIX_GROUPED, MIX_GROUPED, MIX_GROUPED, MIX_BAD,     MIX_BAD,
                 MIX_TXN,     MIX_TXN,     MIX_PIPE,    MIX_PIPE};
  int n = (int)(sizeof kinds / sizeof *kinds);
  struct mixw w[16] = {0};
  pthread_barrier_init(&start_line, NULL, (unsigned)n + 1);
  for (int i = 0; i < n; i++) {
    w[i].kind = kinds[i], w[i].job = job;
    pthread_create(&w[i].t, NULL, mix_work, &w[i]);
  }
  pthread_barrier_wait(&start_line);
  usleep((useconds_t)(seconds * 1e6));
  int seal_rc = -1;
  if (seal) {
    jb_error err = {0};
    struct jb_audit_head sh;
    mix_sealed = 1;
    seal_rc = jb_audit_seal(c, keys, job, &sh, &err);
    if (seal_rc == JB_OK)
      record_head(&sh);
    else
      fprintf(stderr, "seal: %d %s\n", seal_rc, err.msg);
    usleep(300000);
  }
  mix_stop = 1;
  long ok = 0, wrong = 0, conf = 0, refused = 0, moved = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(w[i].t, NULL);
    ok += w[i].ok, wrong += w[i].wrong, conf += w[i].conflicts, refused += w[i].refused,
        moved += w[i].moved;
  }
  long long entries = 0;
  long bad = check_recorded(c, job, &entries);
  struct jb_audit_result res;
  int vrc = verify_db(c, job, &res);
  done_with(c);
  printf(
      "ok %ld (+seal %s) wrong %ld conflicts-after-seal %ld refused %ld pipeline-moved %ld; "
      "heads not in chain %ld; chain %lld entries, verify %s%s\n",
      ok, seal_rc == JB_OK ? "1" : "0", wrong, conf, refused, moved, bad, entries,
      vrc == 0 ? "ok" : jb_audit_reason_name(res.reason), vrc == 0 ? "" : res.detail);
  return wrong || bad || vrc ? 1 : 0;
}

/* slotmate JOB: prints the first "gcN" name in JOB's group-commit slot */
static int cmd_slotmate(const char *job) {
  for (int i = 0; i < 1000000; i++) {
    char n[32];
    snprintf(n, sizeof n, "gc%d", i);
    if (strcmp(n, job) && gc_slot_of(n) == gc_slot_of(job)) return puts(n), 0;
  }
  return 1;
}

/* collide JOB OTHER SECONDS: threads appending to JOB and to OTHER (another id, e.g. "" or a
 * session that does not exist) at once; JOB's appends must all succeed. */
struct colw {
  pthread_t t;
  const char *job;
  long ok, notfound, other;
  char last[300];
};
static void *col_work(void *arg) {
  struct colw *w = arg;
  jb_error err = {0};
  PGconn *c = conn_at_start_line(&err);
  for (long i = 0; c && !mix_stop; i++) {
    memset(&err, 0, sizeof err);
    int rc = jb_audit_append(c, keys, w->job, "resume", NULL, NULL, NULL, &err);
    if (rc == JB_OK)
      w->ok++;
    else if (rc == JB_ERR_NOT_FOUND)
      w->notfound++;
    else
      w->other++, snprintf(w->last, sizeof w->last, "%d %s", rc, err.msg);
  }
  if (c) done_with(c);
  return NULL;
}
static int cmd_collide(const char *job, const char *other, double seconds) {
  done_with(connect_or_die()); /* opens the pool */
  printf("slot of '%s' %zu, of '%s' %zu\n", job, gc_slot_of(job), other, gc_slot_of(other));
  struct colw w[8] = {0};
  pthread_barrier_init(&start_line, NULL, 9);
  for (int i = 0; i < 8; i++) {
    w[i].job = i % 4 == 1 ? job : other; /* 2 on JOB, 6 on OTHER */
    pthread_create(&w[i].t, NULL, col_work, &w[i]);
  }
  pthread_barrier_wait(&start_line);
  usleep((useconds_t)(seconds * 1e6));
  mix_stop = 1;
  long ok[2] = {0}, nf[2] = {0}, ot[2] = {0};
  for (int i = 0; i < 8; i++) {
    pthread_join(w[i].t, NULL);
    ok[i % 4 == 1] += w[i].ok, nf[i % 4 == 1] += w[i].notfound, ot[i % 4 == 1] += w[i].other;
    if (w[i].last[0]) fprintf(stderr, "%s: %s\n", w[i].job, w[i].last);
  }
  printf("'%s': ok %ld, not found %ld, other errors %ld\n", job, ok[1], nf[1], ot[1]);
  printf("'%s': ok %ld, not found %ld, other errors %ld\n", other, ok[0], nf[0], ot[0]);
  PGconn *c = connect_or_die();
  struct jb_audit_result res;
  int vrc = verify_db(c, job, &res);
  done_with(c);
  printf("chain of '%s': verify %s\n", job, vrc == 0 ? "ok" : jb_audit_reason_name(res.reason));
  return nf[1] || ot[1] || vrc ? 1 : 0;
}

/* timeouts JOB: a caller's transaction holds JOB's head (append inside it, not committed, 3 s);
 * L appends (no lock_timeout) and waits for it; F, whose connection has lock_timeout 300ms,
 * appends 200 ms later. Alone, F would fail with 55P03 after about 300 ms. Then the reverse:
 * L with lock_timeout 300ms, F without one. */
struct tow {
  pthread_t t;
  const char *job;
  const char *lock_timeout; /* NULL: none */
  int delay_ms;
  int rc;
  long long ms;
  char msg[300];
};
static void *to_work(void *arg) {
  struct tow *w = arg;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(pool, &err);
  char set[64];
  snprintf(set, sizeof set, "SET lock_timeout = '%s'", w->lock_timeout ? w->lock_timeout : "0");
  PQclear(PQexec(c, set));
  usleep((useconds_t)w->delay_ms * 1000);
  long long t0 = now_ms();
  /* a caller that needs its own lock_timeout to bound its append appends inside its own
   * transaction (audit_store.h: such an append is never grouped) */
  if (w->lock_timeout) PQclear(PQexec(c, "BEGIN"));
  w->rc = jb_audit_append(c, keys, w->job, "resume", NULL, NULL, NULL, &err);
  if (w->lock_timeout && w->rc == JB_OK) {
    PGresult *r = PQexec(c, "COMMIT");
    if (PQresultStatus(r) != PGRES_COMMAND_OK) w->rc = JB_ERR_FAIL;
    PQclear(r);
  } else if (w->lock_timeout) {
    PQclear(PQexec(c, "ROLLBACK"));
  }
  w->ms = now_ms() - t0;
  snprintf(w->msg, sizeof w->msg, "%s", err.msg);
  PQclear(PQexec(c, "SET lock_timeout = '0'"));
  done_with(c);
  return NULL;
}
static int timeouts_round(const char *job, const char *lt[3]) {
  PGconn *holder = connect_or_die(); /* opens the pool */
  jb_error err = {0};
  PQclear(PQexec(holder, "BEGIN"));
  if (jb_audit_append(holder, keys, job, "pause", NULL, NULL, NULL, &err) != JB_OK) {
    fprintf(stderr, "held append: %s\n", err.msg);
    return 2;
  }
  struct tow w[3];
  for (int i = 0; i < 3; i++) {
    w[i] = (struct tow){.job = job, .lock_timeout = lt[i], .delay_ms = 100 * i};
    pthread_create(&w[i].t, NULL, to_work, &w[i]);
  }
  usleep(3000000);
  PQclear(PQexec(holder, "COMMIT"));
  bool fine = true;
  for (int i = 0; i < 3; i++) {
    pthread_join(w[i].t, NULL);
    printf("  append %d at +%d ms (lock_timeout %-5s): rc %d after %4lld ms %s\n", i, w[i].delay_ms,
           lt[i] ? lt[i] : "none", w[i].rc, w[i].ms, w[i].rc ? w[i].msg : "");
    fine = fine && (lt[i] ? w[i].rc != JB_OK && w[i].ms < 1500 : w[i].rc == JB_OK);
  }
  done_with(holder);
  return fine ? 0 : 1;
}
/* timeouts JOB: a caller's transaction holds JOB's head for 3 s (an append inside it); three
 * appends to JOB start 0, 100, 200 ms later, with or without lock_timeout 300ms. One with a
 * timeout (made in its own transaction, as audit_store.h says) fails with 55P03 after ~300 ms
 * whatever appends wait beside it; one without succeeds once the holder commits. */
static int cmd_timeouts(const char *job) {
  const char *r1[3] = {NULL, "300ms", NULL};
  printf("a follower with lock_timeout behind a leader without:\n");
  int a = timeouts_round(job, r1);
  const char *r2[3] = {"300ms", "300ms", NULL};
  printf("a follower without lock_timeout in a batch led by one with it:\n");
  int b = timeouts_round(job, r2);
  return a || b;
}

/* keyrace JOB ROUNDS: KEYRACE_WRITERS (default 8) writers append to JOB with a fresh published key K1; after 300 ms K2 is
 * published retiring K1. Every entry stored must be stamped before K1's retiredAt (the chain
 * verifies), and the writers must then get EKEYREVOKED. */
static int cmd_keyrace(const char *job, int rounds) {
  int nw = getenv("KEYRACE_WRITERS") ? atoi(getenv("KEYRACE_WRITERS")) : 8;
  if (nw < 1 || nw > 8) nw = 8;
  PGconn *c = connect_or_die();
  int bad = 0;
  for (int round = 0; round < rounds; round++) {
    unsigned char seed[32];
    randombytes_buf(seed, sizeof seed);
    struct jb_keyring *k1 = jb_keyring_from_seed(seed);
    randombytes_buf(seed, sizeof seed);
    struct jb_keyring *k2 = jb_keyring_from_seed(seed);
    jb_error err = {0};
    if (jb_audit_key_publish(c, k1->key_id, k1->pk, false, &err) != JB_OK) {
      fprintf(stderr, "publish k1: %s\n", err.msg);
      return 2;
    }
    struct jb_keyring *saved = keys;
    keys = k1;
    mix_stop = 0;
    struct colw w[8] = {0};
    pthread_barrier_init(&start_line, NULL, (unsigned)nw + 1);
    for (int i = 0; i < nw; i++) w[i].job = job, pthread_create(&w[i].t, NULL, col_work, &w[i]);
    pthread_barrier_wait(&start_line);
    usleep(300000);
    if (jb_audit_key_publish(c, k2->key_id, k2->pk, true, &err) != JB_OK)
      fprintf(stderr, "publish k2: %s\n", err.msg);
    usleep(200000);
    mix_stop = 1;
    long ok = 0, other = 0;
    for (int i = 0; i < nw; i++) {
      pthread_join(w[i].t, NULL);
      ok += w[i].ok, other += w[i].other;
      if (w[i].last[0] && !strstr(w[i].last, "retired"))
        fprintf(stderr, "writer: %s\n", w[i].last), bad++;
    }
    pthread_barrier_destroy(&start_line);
    keys = saved;
    struct jb_audit_result res;
    int vrc = verify_db(c, job, &res);
    printf("round %d: stored %ld, refused %ld after the rotation; chain verify %s %s\n", round, ok,
           other, vrc == 0 ? "ok" : jb_audit_reason_name(res.reason), vrc == 0 ? "" : res.detail);
    bad += vrc != 0 || other == 0;
    if (vrc != 0) break; /* the chain is broken from here on */
    jb_keyring_free(k1);
    jb_keyring_free(k2);
  }
  done_with(c);
  return bad ? 1 : 0;
}

/* twokeys JOB: one thread signs with a published key, another with a key that is not
 * published, both appending to JOB at once. Alone, the second gets ENOKEY every time and the
 * first JB_OK every time. */
struct kw {
  pthread_t t;
  const char *job;
  const struct jb_keyring *k;
  long ok, fail, enokey, ekeyrevoked;
  char last[300];
};
static void *kw_work(void *arg) {
  struct kw *w = arg;
  jb_error err = {0};
  PGconn *c = conn_at_start_line(&err);
  for (int i = 0; i < 200; i++) {
    struct jb_audit_head h;
    memset(&err, 0, sizeof err);
    int rc = jb_audit_append(c, w->k, w->job, "resume", NULL, NULL, &h, &err);
    if (rc == JB_OK)
      w->ok++, snprintf(w->last, sizeof w->last, "ok, head signed by key %s", h.key_id);
    else
      w->fail++, snprintf(w->last, sizeof w->last, "%d %s", rc, err.msg);
    w->enokey += rc != JB_OK && err.code == ENOKEY;
    w->ekeyrevoked += rc != JB_OK && err.code == EKEYREVOKED;
  }
  done_with(c);
  return NULL;
}
static int cmd_twokeys(const char *job) {
  done_with(connect_or_die()); /* opens the pool */
  unsigned char seed[32];
  randombytes_buf(seed, sizeof seed);
  struct jb_keyring *un = jb_keyring_from_seed(seed);
  struct kw w[4] = {{.job = job, .k = keys},
                    {.job = job, .k = un},
                    {.job = job, .k = keys},
                    {.job = job, .k = un}};
  pthread_barrier_init(&start_line, NULL, 4);
  for (int i = 0; i < 4; i++) pthread_create(&w[i].t, NULL, kw_work, &w[i]);
  long okp = 0, failp = 0, oku = 0, failu = 0, enokey = 0, erev = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(w[i].t, NULL);
    if (i % 2)
      oku += w[i].ok, failu += w[i].fail;
    else
      okp += w[i].ok, failp += w[i].fail;
    enokey += w[i].enokey, erev += w[i].ekeyrevoked;
  }
  printf("failures with ENOKEY %ld, with EKEYREVOKED %ld (no key is retired here)\n", enokey, erev);
  printf("published key %s: ok %ld, failed %ld (%s)\n", keys->key_id, okp, failp, w[0].last);
  printf("unpublished key %s: ok %ld, failed %ld (%s)\n", un->key_id, oku, failu, w[1].last);
  jb_keyring_free(un);
  return failp || oku ? 1 : 0;
}

/* killer JOB SECONDS: 12 grouped writers; every 20 ms one writer's backend is terminated.
 * Every JB_OK head must be stored; no writer may hang. */
static int kill_pids[16];
struct klw {
  pthread_t t;
  int idx;
  const char *job;
  long ok, fail;
};
static void *kl_work(void *arg) {
  struct klw *w = arg;
  jb_error err = {0};
  PGconn *c = conn_at_start_line(&err);
  for (long i = 0; !mix_stop; i++) {
    if (!c || PQstatus(c) != CONNECTION_OK) {
      if (c) done_with(c);
      c = jb_db_acquire(pool, &err);
      if (!c) continue;
    }
    __atomic_store_n(&kill_pids[w->idx], PQbackendPID(c), __ATOMIC_SEQ_CST);
    struct jb_audit_head h;
    memset(&err, 0, sizeof err);
    int rc = append_one(c, w->job, i, &h, &err);
    if (rc == JB_OK)
      w->ok++, record_head(&h);
    else
      w->fail++;
  }
  if (c) done_with(c);
  return NULL;
}
static int cmd_killer(const char *job, double seconds) {
  PGconn *c = connect_or_die();
  struct jb_audit_result before;
  verify_db(c, job, &before);
  struct klw w[12] = {0};
  pthread_barrier_init(&start_line, NULL, 13);
  for (int i = 0; i < 12; i++)
    w[i].idx = i, w[i].job = job, pthread_create(&w[i].t, NULL, kl_work, &w[i]);
  pthread_barrier_wait(&start_line);
  long long end = now_ms() + (long long)(seconds * 1000);
  int kills = 0;
  unsigned seed = 7;
  while (now_ms() < end) {
    usleep(20000);
    char pid[16];
    snprintf(pid, sizeof pid, "%d",
             __atomic_load_n(&kill_pids[rand_r(&seed) % 12], __ATOMIC_SEQ_CST));
    const char *p[1] = {pid};
    PGresult *r =
        PQexecParams(c, "SELECT pg_terminate_backend($1::int)", 1, NULL, p, NULL, NULL, 0);
    kills += PQresultStatus(r) == PGRES_TUPLES_OK && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
  }
  mix_stop = 1;
  long ok = 0, fail = 0;
  for (int i = 0; i < 12; i++) pthread_join(w[i].t, NULL), ok += w[i].ok, fail += w[i].fail;
  long long entries = 0;
  long bad = check_recorded(c, job, &entries);
  struct jb_audit_result res;
  int vrc = verify_db(c, job, &res);
  done_with(c);
  printf(
      "%d backends killed; ok %ld, failed %ld; heads not in chain %ld; chain %lld -> %lld entries "
      "(%lld stored but reported failed); verify %s\n",
      kills, ok, fail, bad, before.entries, entries, entries - before.entries - ok,
      vrc == 0 ? "ok" : jb_audit_reason_name(res.reason));
  return bad || vrc ? 1 : 0;
}

/* --- group-commit break-it, second review (wip-gcbreak2) ------------------------------------- */

/* burst JOB THREADS SECONDS: THREADS (<= 60) threads append to JOB at once, more than GC_MAX
 * so that batches fill up; every third thread signs with a second published keyring (so the
 * queue interleaves keyrings and the lead is handed to another keyring), every fifth append
 * is malformed (BURST_ONEKEY=1: one keyring only, so that batches reach GC_MAX). Each JB_OK head must be signed by its caller's key, be in the chain once; each
 * malformed one EINVAL; nothing else may fail; no thread may hang; every entry stored must be
 * one some caller got JB_OK for. */
struct bw {
  pthread_t t;
  int idx;
  const char *job;
  const struct jb_keyring *k;
  long ok, refused, wrong, wrongkey;
  char last[300];
  volatile int finished;
};
static void *bw_work(void *arg) {
  struct bw *w = arg;
  jb_error err = {0};
  PGconn *c = conn_at_start_line(&err);
  for (long i = 0; c && !mix_stop; i++) {
    bool bad = (i + w->idx) % 5 == 0;
    struct jb_audit_head h;
    memset(&h, 0, sizeof h);
    memset(&err, 0, sizeof err);
    char path[32];
    snprintf(path, sizeof path, "/t%d/%ld", w->idx, i);
    int rc = jb_audit_append(c, w->k, w->job, bad ? "Bad-Op" : "resume", path, NULL, &h, &err);
    if (bad) {
      if (rc == JB_ERR_FAIL && err.code == EINVAL)
        w->refused++;
      else
        w->wrong++, snprintf(w->last, sizeof w->last, "malformed got %d %s", rc, err.msg);
    } else if (rc == JB_OK) {
      w->ok++;
      record_head(&h);
      if (strcmp(h.key_id, w->k->key_id) != 0)
        w->wrongkey++, snprintf(w->last, sizeof w->last, "head signed by %s, caller's key %s",
                                h.key_id, w->k->key_id);
    } else {
      w->wrong++, snprintf(w->last, sizeof w->last, "%d %s", rc, err.msg);
    }
  }
  if (c) done_with(c);
  w->finished = 1;
  return NULL;
}
static int cmd_burst(const char *job, int n, double seconds) {
  if (n < 1 || n > 60) n = 60;
  PGconn *c = connect_or_die();
  unsigned char seed[32];
  randombytes_buf(seed, sizeof seed);
  struct jb_keyring *k2 = jb_keyring_from_seed(seed);
  jb_error err = {0};
  if (jb_audit_key_publish(c, k2->key_id, k2->pk, false, &err) != JB_OK)
    return fprintf(stderr, "publish: %s\n", err.msg), 2;
  long long before = 0;
  check_recorded(c, job, &before);
  unsigned long b0 = atomic_load(&jb_metric_audit_batches),
                e0 = atomic_load(&jb_metric_audit_batched);
  struct bw *w = calloc((size_t)n, sizeof *w);
  pthread_barrier_init(&start_line, NULL, (unsigned)n + 1);
  mix_stop = 0;
  for (int i = 0; i < n; i++) {
    w[i].idx = i, w[i].job = job, w[i].k = i % 3 == 2 && !getenv("BURST_ONEKEY") ? k2 : keys;
    pthread_create(&w[i].t, NULL, bw_work, &w[i]);
  }
  pthread_barrier_wait(&start_line);
  usleep((useconds_t)(seconds * 1e6));
  mix_stop = 1;
  long ok = 0, refused = 0, wrong = 0, wrongkey = 0, hung = 0;
  for (int i = 0; i < n; i++) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 15;
    if (pthread_timedjoin_np(w[i].t, NULL, &dl) != 0) {
      hung++;
      fprintf(stderr, "thread %d (key %s) never returned\n", i, w[i].k->key_id);
      continue;
    }
    ok += w[i].ok, refused += w[i].refused, wrong += w[i].wrong, wrongkey += w[i].wrongkey;
    if (w[i].last[0]) fprintf(stderr, "thread %d: %s\n", i, w[i].last);
  }
  if (hung) {
    printf("HUNG %ld threads\n", hung);
    fflush(stdout);
    _exit(1);
  }
  long long entries = 0;
  long bad = check_recorded(c, job, &entries);
  struct jb_audit_result res;
  int vrc = verify_db(c, job, &res);
  unsigned long nb = atomic_load(&jb_metric_audit_batches) - b0,
                ne = atomic_load(&jb_metric_audit_batched) - e0;
  printf(
      "%d threads: ok %ld, malformed refused %ld, wrong %ld, signed by another key %ld; "
      "%lu batches of %lu entries (avg %.1f); heads not in chain %ld; stored %lld (JB_OK %ld); "
      "verify %s%s\n",
      n, ok, refused, wrong, wrongkey, nb, ne, nb ? (double)ne / nb : 0.0, bad, entries - before,
      ok, vrc == 0 ? "ok" : jb_audit_reason_name(res.reason), vrc == 0 ? "" : res.detail);
  done_with(c);
  free(w);
  jb_keyring_free(k2);
  return wrong || wrongkey || bad || vrc || entries - before != ok ? 1 : 0;
}

/* Prints entry `seq`'s timestamp and key, the key's retiredAt, and the verdict. */
static int show_verdict(PGconn *c, const char *job) {
  struct jb_audit_result res;
  int vrc = verify_db(c, job, &res);
  printf("verify: %s%s%s (first bad seq %lld)\n",
         vrc == 0 ? "ok" : jb_audit_reason_name(res.reason), vrc == 0 ? "" : ": ",
         vrc == 0 ? "" : res.detail, vrc == 0 ? 0LL : res.first_bad_seq);
  return vrc;
}

/* stepback JOB: appends 3 entries with a fresh published key K1; then this process's clock
 * steps back (run under tests/gcbreak2/clockshim.so with SHIM_TRIGGER=FILE and SHIM_OFFSET_MS
 * negative: this command creates FILE) as an NTP step would, and K2 is published retiring K1.
 * Every entry stored before the retirement must stay valid (stamped before K1's retiredAt). */
static int cmd_stepback(const char *job) {
  PGconn *c = connect_or_die();
  unsigned char seed[32];
  randombytes_buf(seed, sizeof seed);
  struct jb_keyring *k1 = jb_keyring_from_seed(seed);
  randombytes_buf(seed, sizeof seed);
  struct jb_keyring *k2 = jb_keyring_from_seed(seed);
  jb_error err = {0};
  if (jb_audit_key_publish(c, k1->key_id, k1->pk, false, &err) != JB_OK)
    return fprintf(stderr, "publish k1: %s\n", err.msg), 2;
  struct jb_audit_head h = {0};
  for (int i = 0; i < 3; i++)
    if (jb_audit_append(c, k1, job, "resume", NULL, NULL, &h, &err) != JB_OK)
      return fprintf(stderr, "append: %s\n", err.msg), 2;
  printf("appended up to seq %lld with K1 %s\n", h.seq, k1->key_id);
  const char *trig = getenv("SHIM_TRIGGER");
  if (trig) {
    FILE *f = fopen(trig, "w");
    if (f) fclose(f);
    printf("clock stepped back by %s ms\n",
           getenv("SHIM_OFFSET_MS") ? getenv("SHIM_OFFSET_MS") : "0");
  }
  if (jb_audit_key_publish(c, k2->key_id, k2->pk, true, &err) != JB_OK)
    return fprintf(stderr, "publish k2: %s\n", err.msg), 2;
  if (trig) unlink(trig);
  char sq[24];
  snprintf(sq, sizeof sq, "%lld", h.seq);
  const char *pv[3] = {job, sq, k1->key_id};
  PGresult *r = PQexecParams(
      c,
      "SELECT jb_ts(e.created_at), jb_ts(k.retired_at) FROM audit_entries e, audit_signing_keys k"
      " WHERE e.job_id = $1 AND e.seq = $2::bigint AND k.key_id = $3",
      3, NULL, pv, NULL, NULL, 0);
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
    printf("entry %lld (stored before the retirement) stamped %s; K1 retiredAt %s\n", h.seq,
           PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
  PQclear(r);
  int vrc = show_verdict(c, job);
  done_with(c);
  jb_keyring_free(k1);
  jb_keyring_free(k2);
  return vrc ? 1 : 0;
}

/* retire CONNINFO KEYFILE X: publishes a fresh key retiring every other, as a jailboxd
 * starting with a new key file does; prints the retirement time. */
static int cmd_retire(void) {
  PGconn *c = connect_or_die();
  unsigned char seed[32];
  randombytes_buf(seed, sizeof seed);
  struct jb_keyring *k = jb_keyring_from_seed(seed);
  jb_error err = {0};
  int rc = jb_audit_key_publish(c, k->key_id, k->pk, true, &err);
  if (rc != JB_OK) fprintf(stderr, "publish: %s\n", err.msg);
  PGresult *r =
      PQexecParams(c, "SELECT jb_ts(created_at) FROM audit_signing_keys WHERE key_id = $1", 1, NULL,
                   (const char *const[]){k->key_id}, NULL, NULL, 0);
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
    printf("retired every other key at %s\n", PQgetvalue(r, 0, 0));
  PQclear(r);
  done_with(c);
  jb_keyring_free(k);
  return rc == JB_OK ? 0 : 1;
}

/* writers JOB SECONDS THREADS: grouped writers with KEYFILE's key (GC_FRESH_KEY=1: a fresh
 * one) for SECONDS, refusals with EKEYREVOKED tolerated (a retirement runs beside them); then
 * every JB_OK head must be in the chain and the chain must verify. */
static int cmd_writers(const char *job, double seconds, int n) {
  if (n < 1 || n > 8) n = 8;
  PGconn *c = connect_or_die();
  struct colw w[8] = {0};
  mix_stop = 0;
  pthread_barrier_init(&start_line, NULL, (unsigned)n + 1);
  for (int i = 0; i < n; i++) w[i].job = job, pthread_create(&w[i].t, NULL, col_work, &w[i]);
  pthread_barrier_wait(&start_line);
  usleep((useconds_t)(seconds * 1e6));
  mix_stop = 1;
  long ok = 0, other = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(w[i].t, NULL);
    ok += w[i].ok, other += w[i].other;
  }
  printf("writers: stored %ld, refused %ld (%s)\n", ok, other, w[0].last);
  const char *pv[1] = {job};
  PGresult *r = PQexecParams(
      c,
      "SELECT e.seq, jb_ts(e.created_at), jb_ts(k.retired_at) FROM audit_entries e"
      "  JOIN audit_signing_keys k USING (key_id)"
      " WHERE e.job_id = $1 AND k.retired_at IS NOT NULL AND e.created_at >= k.retired_at"
      " ORDER BY e.seq",
      1, NULL, pv, NULL, NULL, 0);
  for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++)
    printf("stored entry %s stamped %s, its key retired at %s\n", PQgetvalue(r, i, 0),
           PQgetvalue(r, i, 1), PQgetvalue(r, i, 2));
  PQclear(r);
  int vrc = show_verdict(c, job);
  done_with(c);
  return vrc ? 1 : 0;
}

/* commitfail JOB: a deferred constraint trigger (made here, in the throwaway database) fails
 * the COMMIT of any transaction that inserted an entry of JOB while a flag row exists — so
 * that gc_try succeeds and the commit (autocommit, or the slow path's COMMIT) then fails.
 * 8 threads x 20 grouped appends must all fail then; the head cache must not be left on an
 * entry never committed; once the flag is gone, 8 x 20 appends must all succeed, their heads
 * be in the chain, and the chain verify. */
static void *cf_work(void *arg) {
  struct colw *w = arg;
  jb_error err = {0};
  PGconn *c = conn_at_start_line(&err);
  for (int i = 0; c && i < 20; i++) {
    struct jb_audit_head h;
    memset(&err, 0, sizeof err);
    int rc = jb_audit_append(c, keys, w->job, "resume", NULL, NULL, &h, &err);
    if (rc == JB_OK)
      w->ok++, record_head(&h);
    else
      w->other++, snprintf(w->last, sizeof w->last, "%d %s", rc, err.msg);
  }
  if (c) done_with(c);
  return NULL;
}
static void cf_round(const char *job, long *ok, long *fail, char *last, size_t lastn) {
  struct colw w[8] = {0};
  pthread_barrier_init(&start_line, NULL, 8);
  for (int i = 0; i < 8; i++) w[i].job = job, pthread_create(&w[i].t, NULL, cf_work, &w[i]);
  *ok = *fail = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(w[i].t, NULL);
    *ok += w[i].ok, *fail += w[i].other;
    if (w[i].last[0]) snprintf(last, lastn, "%s", w[i].last);
  }
  pthread_barrier_destroy(&start_line);
}
static int cmd_commitfail(const char *job) {
  PGconn *c = connect_or_die();
  PGresult *r =
      PQexec(c,
             "CREATE TABLE IF NOT EXISTS gc2_fail (job_id text PRIMARY KEY);"
             "CREATE OR REPLACE FUNCTION gc2_fail_fn() RETURNS trigger LANGUAGE plpgsql AS $$"
             " BEGIN IF EXISTS (SELECT 1 FROM gc2_fail WHERE job_id = NEW.job_id) THEN"
             "   RAISE EXCEPTION 'gc2: commit refused'; END IF; RETURN NULL; END $$;"
             "DROP TRIGGER IF EXISTS gc2_fail_tr ON audit_entries;"
             "CREATE CONSTRAINT TRIGGER gc2_fail_tr AFTER INSERT ON audit_entries"
             " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION gc2_fail_fn()");
  if (PQresultStatus(r) != PGRES_COMMAND_OK)
    return fprintf(stderr, "setup: %s", PQerrorMessage(c)), 2;
  PQclear(r);
  jb_error err = {0};
  struct jb_audit_head h;
  if (jb_audit_append(c, keys, job, "resume", NULL, NULL, &h, &err) != JB_OK)
    return fprintf(stderr, "append: %s\n", err.msg), 2;
  record_head(&h);
  const char *p1[1] = {job};
  PQclear(PQexecParams(c, "INSERT INTO gc2_fail VALUES ($1) ON CONFLICT DO NOTHING", 1, NULL, p1,
                       NULL, NULL, 0));
  long ok1, f1, ok2, f2;
  char last1[300] = "", last2[300] = "";
  cf_round(job, &ok1, &f1, last1, sizeof last1);
  long long cseq = 0, sseq = 0;
  unsigned char chash[32];
  bool cached = jb_audit_head_peek(job, &cseq, chash);
  r = PQexecParams(c, "SELECT seq FROM audit_heads WHERE job_id = $1", 1, NULL, p1, NULL, NULL, 0);
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) sseq = atoll(PQgetvalue(r, 0, 0));
  PQclear(r);
  PQclear(PQexecParams(c, "DELETE FROM gc2_fail WHERE job_id = $1", 1, NULL, p1, NULL, NULL, 0));
  cf_round(job, &ok2, &f2, last2, sizeof last2);
  printf("commit refused: ok %ld, failed %ld (%s)\n", ok1, f1, last1);
  printf("head cache then: %s%lld; stored head %lld\n", cached ? "" : "none, ", cached ? cseq : 0,
         sseq);
  printf("commit allowed again: ok %ld, failed %ld %s\n", ok2, f2, last2);
  long long entries = 0;
  long bad = check_recorded(c, job, &entries);
  int vrc = show_verdict(c, job);
  printf("heads not in chain %ld, chain %lld entries (JB_OK %zu)\n", bad, entries, rec_n);
  PQclear(PQexec(c, "DROP TRIGGER gc2_fail_tr ON audit_entries"));
  done_with(c);
  return ok1 || f2 || bad || vrc || (cached && cseq != sseq) || entries != (long long)rec_n ? 1 : 0;
}

/* rrretire JOB: a caller's REPEATABLE READ transaction takes its snapshot (any statement),
 * then K2 is published retiring K1 (on another connection, committed), then the caller
 * appends with K1 inside its transaction and commits. The entry is stamped after K1's
 * retiredAt: it must be refused (EKEYREVOKED), not stored. */
static int cmd_rrretire(const char *job) {
  PGconn *c = connect_or_die(), *r2 = connect_or_die();
  unsigned char seed[32];
  randombytes_buf(seed, sizeof seed);
  struct jb_keyring *k1 = jb_keyring_from_seed(seed);
  randombytes_buf(seed, sizeof seed);
  struct jb_keyring *k2 = jb_keyring_from_seed(seed);
  jb_error err = {0};
  if (jb_audit_key_publish(c, k1->key_id, k1->pk, false, &err) != JB_OK)
    return fprintf(stderr, "publish k1: %s\n", err.msg), 2;
  PQclear(PQexec(c, "BEGIN ISOLATION LEVEL REPEATABLE READ"));
  PQclear(PQexec(c, "SELECT 1 FROM agents LIMIT 1")); /* the caller's own work: snapshot taken */
  if (jb_audit_key_publish(r2, k2->key_id, k2->pk, true, &err) != JB_OK)
    return fprintf(stderr, "publish k2: %s\n", err.msg), 2;
  printf("K1 %s retired (committed on another connection)\n", k1->key_id);
  struct jb_audit_head h = {0};
  memset(&err, 0, sizeof err);
  int rc = jb_audit_append(c, k1, job, "resume", NULL, NULL, &h, &err);
  PGresult *r = PQexec(c, "COMMIT");
  printf("append with K1 in the caller's REPEATABLE READ transaction: rc %d %s; COMMIT %s\n", rc,
         rc == JB_OK ? "" : err.msg, PQresStatus(PQresultStatus(r)));
  PQclear(r);
  int vrc = 0;
  if (rc == JB_OK) {
    char sq[24];
    snprintf(sq, sizeof sq, "%lld", h.seq);
    const char *pv[3] = {job, sq, k1->key_id};
    r = PQexecParams(
        c,
        "SELECT jb_ts(e.created_at), jb_ts(k.retired_at) FROM audit_entries e, audit_signing_keys k"
        " WHERE e.job_id = $1 AND e.seq = $2::bigint AND k.key_id = $3",
        3, NULL, pv, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
      printf("stored entry %lld stamped %s; K1 retiredAt %s\n", h.seq, PQgetvalue(r, 0, 0),
             PQgetvalue(r, 0, 1));
    PQclear(r);
    vrc = show_verdict(c, job);
  }
  done_with(c);
  done_with(r2);
  jb_keyring_free(k1);
  jb_keyring_free(k2);
  return rc == JB_OK || vrc ? 1 : 0;
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
  if (getenv("GC_FRESH_KEY")) { /* sign with a new published key (keyrace retires the file's) */
    unsigned char seed[32];
    randombytes_buf(seed, sizeof seed);
    jb_keyring_free(keys);
    keys = jb_keyring_from_seed(seed);
    PGconn *c = connect_or_die();
    jb_error err = {0};
    if (jb_audit_key_publish(c, keys->key_id, keys->pk, false, &err) != JB_OK)
      return fprintf(stderr, "publish: %s\n", err.msg), 2;
    done_with(c);
  }
  int rc = 2;
  if (strcmp(cmd, "append") == 0 && argc == 6)
    rc = cmd_append(argv[4], atol(argv[5]));
  else if (strcmp(cmd, "seal") == 0 && argc == 5)
    rc = cmd_seal(argv[4]);
  else if (strcmp(cmd, "concurrent") == 0 && argc == 7)
    rc = cmd_concurrent(argv[4], atoi(argv[5]), atol(argv[6]));
  else if (strcmp(cmd, "grouped-errors") == 0 && argc == 7)
    rc = cmd_grouped_errors(argv[4], atoi(argv[5]), atol(argv[6]));
  else if (strcmp(cmd, "noblock") == 0 && argc == 6)
    rc = cmd_noblock(argv[4], argv[5]);
  else if (strcmp(cmd, "txn") == 0 && argc == 5)
    rc = cmd_txn(argv[4]);
  else if (strcmp(cmd, "resign") == 0 && argc == 6)
    rc = cmd_resign(argv[4], atoll(argv[5]));
  else if (strcmp(cmd, "mixrace") == 0 && argc == 7)
    rc = cmd_mixrace(argv[4], atof(argv[5]), atoi(argv[6]));
  else if (strcmp(cmd, "slotmate") == 0 && argc == 5)
    rc = cmd_slotmate(argv[4]);
  else if (strcmp(cmd, "collide") == 0 && argc == 7)
    rc = cmd_collide(argv[4], argv[5], atof(argv[6]));
  else if (strcmp(cmd, "timeouts") == 0 && argc == 5)
    rc = cmd_timeouts(argv[4]);
  else if (strcmp(cmd, "keyrace") == 0 && argc == 6)
    rc = cmd_keyrace(argv[4], atoi(argv[5]));
  else if (strcmp(cmd, "twokeys") == 0 && argc == 5)
    rc = cmd_twokeys(argv[4]);
  else if (strcmp(cmd, "killer") == 0 && argc == 6)
    rc = cmd_killer(argv[4], atof(argv[5]));
  else if (strcmp(cmd, "burst") == 0 && argc == 7)
    rc = cmd_burst(argv[4], atoi(argv[5]), atof(argv[6]));
  else if (strcmp(cmd, "commitfail") == 0 && argc == 5)
    rc = cmd_commitfail(argv[4]);
  else if (strcmp(cmd, "rrretire") == 0 && argc == 5)
    rc = cmd_rrretire(argv[4]);
  else if (strcmp(cmd, "stepback") == 0 && argc == 5)
    rc = cmd_stepback(argv[4]);
  else if (strcmp(cmd, "retire") == 0 && argc == 5)
    rc = cmd_retire();
  else if (strcmp(cmd, "writers") == 0 && argc == 7)
    rc = cmd_writers(argv[4], atof(argv[5]), atoi(argv[6]));
  else
    fprintf(stderr, "audit_driver: bad arguments (see the comment at the top)\n");
  jb_keyring_free(keys);
  jb_db_close(pool);
  return rc;
usage:
  fprintf(stderr, "audit_driver: bad arguments (see the comment at the top)\n");
  return 2;
}
