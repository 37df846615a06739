/* test_reviewer.c — the reviewer on the wire (lib/reviewer.c): the answer parser on good and
 * hostile answers (every fault is ask, failed), the webhook address rules, and the program
 * runner with real programs (/bin/sh scripts written here): an answer, a non-zero exit, a
 * timeout that kills it, an oversized answer, and stdin carrying the request. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/reviewer.h"

static char dir[64]; /* the test's scratch directory */

static struct jb_review parse(const char *s) {
  struct jb_review r;
  jb_review_parse(s, strlen(s), &r);
  return r;
}

static void answers(void **state) {
  (void)state;
  struct jb_review r = parse("{\"verdict\":\"allow\",\"reason\":\"fine\",\"x\":[1]}");
  assert_int_equal(r.verdict, JB_REVIEW_ALLOW);
  assert_false(r.failed);
  assert_string_equal(r.reason, "fine");
  r = parse("{\"verdict\":\"deny\"}");
  assert_int_equal(r.verdict, JB_REVIEW_DENY);
  assert_false(r.failed);
  assert_string_equal(r.reason, "");
  r = parse("{\"verdict\":\"ask\",\"reason\":null}");
  assert_int_equal(r.verdict, JB_REVIEW_ASK);
  assert_false(r.failed);
  /* control characters (C0, DEL, C1) become spaces; other text stays */
  r = parse(
      "{\"verdict\":\"deny\",\"reason\":\"a\\nb\\u001b[31mc\\u007fd\\u0085e \\u00e9\\u2603\"}");
  assert_int_equal(r.verdict, JB_REVIEW_DENY);
  assert_string_equal(r.reason, "a b [31mc d e \xc3\xa9\xe2\x98\x83");
  /* a long reason is cut at a character's start within JB_REVIEW_REASON_MAX bytes */
  char big[2100] = "{\"verdict\":\"allow\",\"reason\":\"";
  size_t n = strlen(big);
  for (int i = 0; i < 600; i++) n += (size_t)sprintf(big + n, "\xc3\xa9"); /* 2 bytes each */
  strcpy(big + n, "\"}");
  r = parse(big);
  assert_int_equal(r.verdict, JB_REVIEW_ALLOW);
  assert_int_equal(strlen(r.reason), JB_REVIEW_REASON_MAX);
  assert_memory_equal(r.reason + JB_REVIEW_REASON_MAX - 2, "\xc3\xa9", 2);
  assert_int_equal(jb_review_verdict_name(JB_REVIEW_DENY)[0], 'd');
}

static void bad_answer(const char *text, const char *words) {
  struct jb_review r = parse(text);
  if (r.verdict != JB_REVIEW_ASK || !r.failed)
    fail_msg("%s: not ask/failed (verdict %d)", text, r.verdict);
  if (!strstr(r.reason, words)) fail_msg("%s: reason \"%s\" lacks \"%s\"", text, r.reason, words);
}

static void hostile_answers(void **state) {
  (void)state;
  bad_answer("", "not a JSON object");
  bad_answer("allow", "not a JSON object");
  bad_answer("[\"allow\"]", "not a JSON object");
  bad_answer("{\"verdict\":\"allow\"} x", "not a JSON object");
  bad_answer("{\"verdict\":\"deny\",\"verdict\":\"allow\"}", "duplicate");
  bad_answer("{\"verdict\":\"ALLOW\"}", "unknown verdict \"ALLOW\"");
  bad_answer("{\"verdict\":\"allow\\u0000\"}", "not a JSON object");
  bad_answer("{\"verdict\":true}", "no verdict");
  bad_answer("{\"reason\":\"allow\"}", "no verdict");
  bad_answer("{\"verdict\":\"allow\",\"reason\":7}", "reason is not a string");
  bad_answer("{\"verdict\":\"allow\",\"a\":[[[[[[[[[[1]]]]]]]]]]}", "nested deeper");
  bad_answer("{\"verdict\":\"allow\",\"r\":\"\xff\"}", "not a JSON object");
  /* over the cap: refused before parsing */
  size_t n = JB_REVIEW_ANSWER_MAX + 10;
  char *huge = malloc(n);
  assert_non_null(huge);
  memset(huge, ' ', n);
  memcpy(huge, "{\"verdict\":\"allow\"}", 19);
  struct jb_review r;
  jb_review_parse(huge, n, &r);
  assert_int_equal(r.verdict, JB_REVIEW_ASK);
  assert_true(r.failed);
  assert_non_null(strstr(r.reason, "over 65536 bytes"));
  free(huge);
}

static void url_rules(void **state) {
  (void)state;
  jb_error err = {0};
  assert_int_equal(jb_review_url_check("https://review.example.com/hook?x=1", &err), 0);
  assert_int_equal(jb_review_url_check("https://u:p@review.example.com:8443/hook", &err), 0);
  assert_int_equal(jb_review_url_check("http://127.0.0.1:9000/r", &err), 0);
  assert_int_equal(jb_review_url_check("http://127.8.9.10/r", &err), 0);
  assert_int_equal(jb_review_url_check("http://[::1]:80/r", &err), 0);
  const char *bad[] = {"http://localhost/r",
                       "http://10.0.0.1/r",
                       "http://[::2]/r",
                       "http://u:secret@example.com/r",
                       "ftp://example.com/",
                       "file:///etc/passwd",
                       "https://example.com/#f",
                       "review.example.com/hook",
                       "",
                       NULL};
  for (int i = 0; bad[i]; i++) {
    memset(&err, 0, sizeof err);
    if (jb_review_url_check(bad[i], &err) == 0) fail_msg("accepted %s", bad[i]);
    if (strstr(err.msg, "secret")) fail_msg("the message repeats the URL: %s", err.msg);
  }
  assert_int_equal(jb_review_cmd_check("/bin/sh", &err), 0);
  assert_int_equal(jb_review_cmd_check("sh", &err), -1);
  char plain[128];
  snprintf(plain, sizeof plain, "%s/plain", dir);
  FILE *f = fopen(plain, "we");
  assert_non_null(f);
  fclose(f);
  chmod(plain, 0644);
  assert_int_equal(jb_review_cmd_check(plain, &err), -1);
  assert_int_equal(jb_review_cmd_check("/nonexistent", &err), -1);
}

/* A /bin/sh script in the test's directory (its path into `path`, 128 bytes). */
static void script(char path[128], const char *name, const char *body) {
  snprintf(path, 128, "%s/%s", dir, name);
  FILE *f = fopen(path, "we");
  assert_non_null(f);
  fprintf(f, "#!/bin/sh\n%s\n", body);
  fclose(f);
  chmod(path, 0755);
}

static long long ms_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void program(void **state) {
  (void)state;
  char p[128], out[160];
  struct jb_review r;
  /* stdin is the request; the answer is stdout */
  script(p, "echo.sh",
         "read line; case \"$line\" in *write*) printf '{\"verdict\":\"allow\",\"reason\":\"%s\"}' "
         "\"$PATH\";; *) echo '{\"verdict\":\"deny\"}';; esac");
  const char *req = "{\"op\":{\"tool\":\"write\"}}\n";
  jb_review_cmd(p, req, strlen(req), 5000, NULL, &r);
  assert_false(r.failed);
  assert_int_equal(r.verdict, JB_REVIEW_ALLOW);
  assert_string_equal(r.reason, "/usr/local/bin:/usr/bin:/bin");
  jb_review_cmd(p, "{}\n", 3, 5000, NULL, &r);
  assert_int_equal(r.verdict, JB_REVIEW_DENY);
  /* a non-zero exit, even with an allow printed */
  script(p, "exit.sh", "echo '{\"verdict\":\"allow\"}'; exit 4");
  jb_review_cmd(p, "{}", 2, 5000, NULL, &r);
  assert_true(r.failed);
  assert_int_equal(r.verdict, JB_REVIEW_ASK);
  assert_string_equal(r.reason, "reviewer program exited with status 4");
  /* past the timeout: killed with what it started; an answer after it does not count */
  snprintf(out, sizeof out, "%s/late", dir);
  char body[400];
  snprintf(body, sizeof body, "(sleep 1; touch %s) & sleep 5; echo '{\"verdict\":\"allow\"}'", out);
  script(p, "slow.sh", body);
  long long t0 = ms_now();
  jb_review_cmd(p, "{}", 2, 300, NULL, &r);
  long long took = ms_now() - t0;
  assert_true(r.failed);
  assert_int_equal(r.verdict, JB_REVIEW_ASK);
  assert_string_equal(r.reason, "reviewer timed out after 300 ms");
  assert_true(took >= 300 && took < 2000);
  usleep(1200 * 1000);
  assert_int_equal(access(out, F_OK), -1); /* the background child was killed too */
  /* an answer over the cap */
  script(p, "big.sh", "head -c 100000 /dev/zero | tr '\\0' ' '");
  jb_review_cmd(p, "{}", 2, 5000, NULL, &r);
  assert_true(r.failed);
  assert_non_null(strstr(r.reason, "over 65536 bytes"));
  /* a program that does not read its stdin: the request is dropped, the answer read */
  script(p, "noread.sh", "echo '{\"verdict\":\"deny\",\"reason\":\"no\"}'");
  char *large = malloc(1 << 20);
  assert_non_null(large);
  memset(large, 'x', 1 << 20);
  jb_review_cmd(p, large, 1 << 20, 5000, NULL, &r);
  free(large);
  assert_false(r.failed);
  assert_int_equal(r.verdict, JB_REVIEW_DENY);
  /* no such program */
  jb_review_cmd("/nonexistent/reviewer", "{}", 2, 1000, NULL, &r);
  assert_true(r.failed);
  assert_int_equal(r.verdict, JB_REVIEW_ASK);
}

static void webhook_down(void **state) {
  (void)state;
  jb_error err = {0};
  assert_int_equal(jb_review_global_init(&err), 0);
  struct jb_review r;
  /* nothing listens on port 1 of the loopback: refused at once */
  jb_review_http("http://127.0.0.1:1/r", "{}", 2, 2000, NULL, &r);
  assert_true(r.failed);
  assert_int_equal(r.verdict, JB_REVIEW_ASK);
  assert_non_null(strstr(r.reason, "reviewer unreachable"));
}

/* A review still running when its cut comes (set while it runs, as a shutdown sets it) ends
 * at once: ask, failed, cut — the program killed, the webhook's transfer aborted. */
static void cut_short(void **state) {
  (void)state;
  jb_error err = {0};
  assert_int_equal(jb_review_global_init(&err), 0);
  char p[300];
  script(p, "sleepy.sh", "sleep 5; echo '{\"verdict\":\"allow\"}'");
  _Atomic long long at = 0;
  const struct jb_review_cut cut = {.at_ms = &at, .before_ms = 100};
  struct jb_review r;
  /* not set: the timeout decides */
  long long t0 = ms_now();
  jb_review_cmd(p, "{}", 2, 300, &cut, &r);
  assert_false(r.cut);
  assert_string_equal(r.reason, "reviewer timed out after 300 ms");
  /* set to come 400 ms from now, less 100: about 300 ms in, long before the 5 s timeout */
  t0 = ms_now();
  atomic_store(&at, t0 + 400);
  jb_review_cmd(p, "{}", 2, 5000, &cut, &r);
  long long took = ms_now() - t0;
  assert_true(r.cut);
  assert_true(r.failed);
  assert_int_equal(r.verdict, JB_REVIEW_ASK);
  assert_non_null(strstr(r.reason, "cut short"));
  assert_true(took >= 250 && took < 1500);
  /* a webhook that takes the request and never answers */
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l, 4), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/r", ntohs(a.sin_port));
  t0 = ms_now();
  atomic_store(&at, t0 + 400);
  jb_review_http(url, "{}", 2, 10000, &cut, &r);
  took = ms_now() - t0;
  close(l);
  assert_true(r.cut);
  assert_int_equal(r.verdict, JB_REVIEW_ASK);
  assert_non_null(strstr(r.reason, "cut short"));
  assert_true(took >= 250 && took < 2500);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/jb-test-reviewer-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(answers), cmocka_unit_test(hostile_answers), cmocka_unit_test(url_rules),
      cmocka_unit_test(program), cmocka_unit_test(webhook_down),    cmocka_unit_test(cut_short),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
