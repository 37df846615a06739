/* scan_bench.c — what a write costs in jailboxd's content scanner (lib/scan.c, the rules of
 * deploy/scan-rules as built in) and diff preview (lib/diff.c), run on demand (not by CTest):
 *
 *   build/scan_bench [REPS]
 *
 * For 1 MiB inputs — ordinary source text, random base64, and runs of near-matches of each
 * pattern family (the slow cases for a backtracking matcher) — prints the scanner's time per
 * write (best of REPS, default 5), its verdict, and, as the baseline measured in the same run,
 * the time libsodium's SHA-256 takes over the same bytes (jailboxd hashes every write anyway):
 * "scan NAME ms M sha256_ms B ratio M/B verdict V". Then the diff preview of a 1 MiB text
 * file: one line changed and every line changed ("diff NAME ms M bytes N"). */
#define _GNU_SOURCE
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/diff.h"
#include "lib/scan.h"

#define SIZE (1024 * 1024)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void fill(unsigned char *b, size_t n, const char *unit) {
  size_t k = strlen(unit);
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)unit[i % k];
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  if (reps < 1 || sodium_init() < 0) return 2;
  struct jb_scan_rules *rules = NULL;
  jb_error err = {0};
  if (jb_scan_rules_load(NULL, &rules, &err) < 0) {
    fprintf(stderr, "scan_bench: %s\n", err.msg);
    return 1;
  }
  unsigned char *buf = malloc(SIZE);
  static const struct {
    const char *name, *unit;
  } inputs[] = {
      {"source_text", "static int add(int a, int b) { return a + b; } /* the quick brown fox */\n"},
      {"random_base64", NULL},
      {"near_curl", "curl "},
      {"near_curl_words", "curl -fsSL https://cdn.example.com/www/x "},
      {"near_begin", "BEGIN RSA "},
      {"near_aws", "AKIA"},
      {"near_github", "ghp_"},
      {"near_sh", "sh <("},
  };
  for (size_t k = 0; k < sizeof inputs / sizeof inputs[0]; k++) {
    if (inputs[k].unit) {
      fill(buf, SIZE, inputs[k].unit);
    } else {
      static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
      randombytes_buf(buf, SIZE);
      for (size_t i = 0; i < SIZE; i++)
        buf[i] = (i % 77 == 76) ? '\n' : (unsigned char)b64[buf[i] % 64];
    }
    double best = 1e30, best_sha = 1e30;
    char *verdict = NULL;
    for (int r = 0; r < reps; r++) {
      double t0 = now_ms();
      json_t *f = jb_scan_run(rules, "src/file.c", buf, SIZE);
      double t1 = now_ms();
      unsigned char h[32];
      crypto_hash_sha256(h, buf, SIZE);
      double t2 = now_ms();
      if (t1 - t0 < best) best = t1 - t0;
      if (t2 - t1 < best_sha) best_sha = t2 - t1;
      free(verdict);
      verdict = json_dumps(f, JSON_COMPACT);
      json_decref(f);
    }
    printf("scan %s ms %.2f sha256_ms %.2f ratio %.1f verdict %s\n", inputs[k].name, best, best_sha,
           best / best_sha, verdict ? verdict : "?");
    free(verdict);
  }
  /* diff previews of a 1 MiB text file */
  char *a = malloc(SIZE + 64), *b = malloc(SIZE + 64);
  size_t la = 0, lb = 0;
  for (int i = 0; la < SIZE - 40; i++)
    la += (size_t)snprintf(a + la, 64, "line %d of the old file\n", i);
  for (int i = 0; lb < SIZE - 40; i++)
    lb += (size_t)snprintf(b + lb, 64, "line %d of the new text\n", i);
  char *one = malloc(la);
  memcpy(one, a, la);
  one[la / 2] = '#';
  const struct {
    const char *name;
    const char *neu;
    size_t len;
  } diffs[] = {{"one_line_changed", one, la}, {"every_line_changed", b, lb}};
  for (size_t k = 0; k < 2; k++) {
    double best = 1e30;
    json_int_t bytes = 0;
    for (int r = 0; r < reps; r++) {
      json_t *d = NULL;
      double t0 = now_ms();
      if (jb_diff_preview("f.txt", (unsigned char *)a, la, true,
                          (const unsigned char *)diffs[k].neu, diffs[k].len, 65536, &d, &err) < 0) {
        fprintf(stderr, "scan_bench: %s\n", err.msg);
        return 1;
      }
      double t = now_ms() - t0;
      if (t < best) best = t;
      bytes = json_integer_value(json_object_get(d, "bytes"));
      json_decref(d);
    }
    printf("diff %s ms %.2f bytes %lld\n", diffs[k].name, best, (long long)bytes);
  }
  free(one);
  free(a);
  free(b);
  free(buf);
  jb_scan_rules_free(rules);
  return 0;
}
