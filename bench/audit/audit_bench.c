/* audit_bench.c — measurements for bench/audit/run.sh (run on demand, not by CTest).
 *
 *   audit_bench append CONNINFO KEYFILE SECONDS SESSIONS WRITERS_PER_SESSION JOB_PREFIX
 *       durable appends (each its own committed transaction, synchronous_commit as the
 *       server has it) to sessions JOB_PREFIX0..; one connection per writer. Prints
 *       "appends N seconds S rate R" (R in committed entries/s) after checking that every
 *       chain written verifies (whole chains: earlier runs' entries too; skipped with
 *       AUDIT_BENCH_VERIFY=0, for all but the last of a run's slices).
 *   audit_bench verify ENTRIES
 *       builds a signed chain of ENTRIES entries in memory and its JSON Lines export, then on
 *       one thread measures (a) the offline verifier (jb_audit_verify_file reading the
 *       lines one at a time from a stream, exactly as `jailboxctl audit verify` does) and (b) libsodium's crypto_sign_verify_detached alone on the same
 *       hashes and signatures. Prints "verify R raw R2 ratio X" (entries per second of the
 *       thread's CPU time, best of three interleaved runs). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "lib/keyring.h"

/* CPU time of the calling thread, s: what one-thread verification costs, unaffected by other
 * processes taking the cores (this machine is shared). */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The details of a typical write entry. */
static json_t *write_details(long i) {
  return json_pack("{s:I,s:s,s:s,s:b}", "size", (json_int_t)(4096 + i % 1000), "sha256",
                   "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "decision",
                   "auto", "ok", 1);
}

struct writer {
  pthread_t t;
  struct jb_db *pool;
  const struct jb_keyring *keys;
  char job[64];
  double until;
  long done;
  char error[600];
};

static pthread_barrier_t ready, go; /* all connected; clock set */

static void *writer_run(void *arg) {
  struct writer *w = arg;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(w->pool, &err); /* as jailboxd: pooled, statements prepared */
  pthread_barrier_wait(&ready);
  pthread_barrier_wait(&go);
  if (!c) {
    snprintf(w->error, sizeof w->error, "connect: %s", err.msg);
    return NULL;
  }
  char path[64];
  for (long i = 0; now() < w->until; i++) {
    json_t *d = write_details(i);
    snprintf(path, sizeof path, "/workspace/src/module%ld.c", i % 97);
    int rc = jb_audit_append(c, w->keys, w->job, "write", path, d, NULL, &err);
    json_decref(d);
    if (rc != JB_OK) {
      snprintf(w->error, sizeof w->error, "append: %s", err.msg);
      break;
    }
    w->done++;
  }
  jb_db_release(w->pool, c);
  return NULL;
}

static int verify_stored(struct jb_db *pool, const char *job) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(pool, &err); /* pooled: its prepared statements are remembered */
  if (!c) {
    fprintf(stderr, "%s: %s\n", job, err.msg);
    return 0;
  }
  struct jb_audit_chain ch;
  int ok = 0;
  struct jb_audit_key_row *rows = NULL;
  size_t nk = 0;
  if (jb_audit_chain_load(c, job, &ch, &err) == JB_OK) {
    if (jb_audit_keys_load(c, &rows, &nk, &err) == JB_OK) {
      struct jb_audit_pubkey *k = calloc(nk + 1, sizeof *k);
      for (size_t i = 0; i < nk; i++) k[i] = rows[i].key;
      struct jb_audit_verify_opts o = {.session = job, .stored_head = &ch.stored};
      struct jb_audit_result r;
      ok = jb_audit_verify(ch.entries, ch.n, k, nk, &o, &r) == 0;
      if (!ok)
        fprintf(stderr, "%s: %s at %lld\n", job, jb_audit_reason_name(r.reason), r.first_bad_seq);
      free(k);
      free(rows);
    }
    jb_audit_chain_free(&ch);
  }
  if (err.msg[0]) fprintf(stderr, "%s: %s\n", job, err.msg);
  jb_db_release(pool, c);
  return ok;
}

static int bench_append(const char *conninfo, const char *keyfile, double secs, int sessions,
                        int per, const char *prefix) {
  struct jb_keyring *keys = NULL;
  jb_error err = {0};
  if (jb_keyring_load(&keys, NULL, keyfile, &err) < 0) {
    fprintf(stderr, "key: %s\n", err.msg);
    return 2;
  }
  int n = sessions * per;
  struct jb_db *pool = NULL;
  if (jb_db_open(&pool, conninfo, n, 10, &err) < 0) {
    fprintf(stderr, "database: %s\n", err.msg);
    return 2;
  }
  struct writer *w = calloc((size_t)n, sizeof *w);
  pthread_barrier_init(&ready, NULL, (unsigned)n + 1);
  pthread_barrier_init(&go, NULL, (unsigned)n + 1);
  for (int i = 0; i < n; i++) {
    w[i].pool = pool;
    w[i].keys = keys;
    snprintf(w[i].job, sizeof w[i].job, "%s%d", prefix, i % sessions);
    pthread_create(&w[i].t, NULL, writer_run, &w[i]);
  }
  pthread_barrier_wait(&ready);
  double t0 = now();
  for (int i = 0; i < n; i++) w[i].until = t0 + secs;
  pthread_barrier_wait(&go);
  long total = 0;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(w[i].t, NULL);
    total += w[i].done;
    if (w[i].error[0]) {
      fprintf(stderr, "writer %d: %s\n", i, w[i].error);
      bad = 1;
    }
  }
  double el = now() - t0;
  pthread_barrier_destroy(&ready);
  pthread_barrier_destroy(&go);
  const char *v = getenv("AUDIT_BENCH_VERIFY"); /* "0": not now (a later slice verifies) */
  for (int s = 0; s < sessions && !bad && !(v && strcmp(v, "0") == 0); s++) {
    char job[64];
    snprintf(job, sizeof job, "%s%d", prefix, s);
    if (!verify_stored(pool, job)) bad = 1;
  }
  free(w);
  jb_db_close(pool);
  jb_keyring_free(keys);
  printf("appends %ld seconds %.2f rate %.0f\n", total, el, (double)total / el);
  return bad;
}

static int bench_verify(long n) {
  unsigned char seed[32];
  randombytes_buf(seed, sizeof seed);
  struct jb_keyring *k = jb_keyring_from_seed(seed);
  size_t cap = (size_t)n * 1024, len = 0;
  char *buf = malloc(cap);
  unsigned char prev[32] = {0};
  unsigned char(*hashes)[32] = malloc((size_t)n * 32);
  unsigned char(*sigs)[64] = malloc((size_t)n * 64);
  for (long i = 0; i < n; i++) {
    struct jb_audit_entry e;
    json_t *d = write_details(i);
    char path[64];
    snprintf(path, sizeof path, "/workspace/src/module%ld.c", i % 97);
    if (jb_audit_entry_make(&e, i + 1, "job-bench-0123456789abcdef", "write", path,
                            "2026-01-02T03:04:05.678Z", d, prev, k->sk, k->pk, NULL) < 0)
      return 2;
    json_decref(d);
    char *line = jb_audit_entry_line(&e);
    size_t l = strlen(line);
    if (len + l > cap) return 2;
    memcpy(buf + len, line, l);
    len += l;
    free(line);
    memcpy(prev, e.hash, 32);
    memcpy(hashes[i], e.hash, 32);
    memcpy(sigs[i], e.signature, 64);
    jb_audit_entry_clear(&e);
  }
  struct jb_audit_pubkey pk = {0};
  memcpy(pk.public_key, k->pk, 32);
  memcpy(pk.key_id, k->key_id, sizeof pk.key_id);

  /* best of three runs each, interleaved, so both see the same machine */
  double best_v = 1e300, best_r = 1e300;
  for (int round = 0; round < 3; round++) {
    double t0 = cpu_now();
    struct jb_audit_result r;
    FILE *in = fmemopen(buf, len, "r");
    if (!in || jb_audit_verify_file(in, &pk, 1, NULL, &r, NULL) != 0 || r.entries != n) {
      fprintf(stderr, "verify failed: %s\n", r.detail);
      return 1;
    }
    fclose(in);
    double tv = cpu_now() - t0;
    if (tv < best_v) best_v = tv;
    t0 = cpu_now();
    for (long i = 0; i < n; i++)
      if (crypto_sign_verify_detached(sigs[i], hashes[i], 32, k->pk) != 0) return 1;
    double tr = cpu_now() - t0;
    if (tr < best_r) best_r = tr;
  }
  printf("verify %.0f raw %.0f ratio %.3f bytes_per_line %.0f\n", (double)n / best_v,
         (double)n / best_r, best_r / best_v, (double)len / (double)n);
  free(buf);
  free(hashes);
  free(sigs);
  jb_keyring_free(k);
  return 0;
}

int main(int argc, char **argv) {
  if (sodium_init() < 0) return 2;
  if (argc == 8 && strcmp(argv[1], "append") == 0)
    return bench_append(argv[2], argv[3], atof(argv[4]), atoi(argv[5]), atoi(argv[6]), argv[7]);
  if (argc == 3 && strcmp(argv[1], "verify") == 0) return bench_verify(atol(argv[2]));
  fprintf(stderr, "usage: see the comment at the top of bench/audit/audit_bench.c\n");
  return 2;
}
