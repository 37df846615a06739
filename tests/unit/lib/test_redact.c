/* test_redact.c — the redactor of command output (lib/redact.h) with the embedded rules and
 * small rule sets: a PEM key block, a cloud key and a .netrc entry replaced by their markers
 * with their offsets recorded; a secret split at every byte across two chunks, and fed one
 * byte at a time, caught all the same; clean text released at once and only a possible
 * beginning held back; look-behind context kept across chunks; a `redact` rule that redacts
 * but flags no write; the hold-back cap; a match limit failing closed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/redact.h"
#include "lib/scan.h"

static struct jb_scan_rules *embedded;

static int setup(void **state) {
  (void)state;
  jb_error err = {0};
  return jb_scan_rules_load(NULL, &embedded, &err);
}

static int teardown(void **state) {
  (void)state;
  jb_scan_rules_free(embedded);
  return 0;
}

static struct jb_scan_rules *parse(const char *text) {
  struct jb_scan_rules *r = NULL;
  jb_error err = {0};
  if (jb_scan_rules_parse(text, strlen(text), "test", &r, &err) < 0) fail_msg("%s", err.msg);
  return r;
}

/* `in` fed in chunks cut at the offsets in `cuts` (ascending, ending with SIZE_MAX), then
 * the end; the output (new, NUL-terminated) and the redactor (new) in *rd_out. */
static char *feed(const struct jb_scan_rules *r, const char *in, size_t n, const size_t *cuts,
                  struct jb_redactor **rd_out) {
  struct jb_redactor *rd;
  assert_int_equal(jb_redactor_new(r, &rd, NULL), 0);
  struct jb_buf out;
  jb_buf_init(&out, SIZE_MAX - 1);
  size_t at = 0;
  for (size_t i = 0; cuts && cuts[i] != SIZE_MAX; i++) {
    assert_int_equal(
        jb_redactor_feed(rd, (const unsigned char *)in + at, cuts[i] - at, false, &out, NULL), 0);
    at = cuts[i];
  }
  assert_int_equal(jb_redactor_feed(rd, (const unsigned char *)in + at, n - at, true, &out, NULL),
                   0);
  assert_int_equal(jb_redactor_held(rd), 0);
  char *s = jb_buf_take(&out, NULL);
  if (rd_out)
    *rd_out = rd;
  else
    jb_redactor_free(rd);
  return s;
}

#define PEM                                                            \
  "-----BEGIN RSA PRIVATE KEY-----\n"                                  \
  "MIIEowIBAAKCAQEA2a2rwplBQLzHPZe5TNJNm9kHlGnqAkZkdHcTBCWNGjqXHgyf\n" \
  "Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,9F1A\n"               \
  "q1Zg0yq6vQx9bZb0WzXzq0e7Qh3y0Lrj2t7sYdH8Yp0=\n"                     \
  "-----END RSA PRIVATE KEY-----"
#define AWS "AKIAIOSFODNN7EXAMPLE"

static void records_and_markers(void **state) {
  (void)state;
  const char *in = "key:\n" PEM "\nid " AWS
                   " ok\n"
                   "machine example.com login bob password "
                   "hunter2hunter2\nend\n";
  struct jb_redactor *rd;
  char *out = feed(embedded, in, strlen(in), NULL, &rd);
  assert_string_equal(out,
                      "key:\n[REDACTED:private_key_block]\nid [REDACTED:aws_access_key_id] "
                      "ok\n[REDACTED:netrc_entry]\nend\n");
  assert_int_equal(jb_redactor_count(rd), 3);
  const struct jb_redaction *v;
  assert_int_equal(jb_redactor_records(rd, &v), 3);
  assert_string_equal(v[0].rule, "private_key_block");
  assert_int_equal(v[0].offset, 5);
  assert_string_equal(v[1].rule, "aws_access_key_id");
  assert_int_equal(v[1].offset, strstr(in, AWS) - in);
  assert_string_equal(v[2].rule, "netrc_entry");
  assert_int_equal(v[2].offset, strstr(in, "machine") - in);
  assert_false(v[0].failed || v[1].failed || v[2].failed);
  jb_redactor_free(rd);
  free(out);
  /* a key block cut short (no END line) loses its body too; a header alone is private_key */
  out = feed(embedded, "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n", 42, NULL, NULL);
  assert_string_equal(out, "[REDACTED:private_key_block]");
  free(out);
  out = feed(embedded, "BEGIN OPENSSH PRIVATE KEY!", 26, NULL, NULL);
  assert_string_equal(out, "[REDACTED:private_key]!");
  free(out);
  /* clean text, and a certificate, as they are */
  const char *clean = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\nok 123\n";
  out = feed(embedded, clean, strlen(clean), NULL, NULL);
  assert_string_equal(out, clean);
  free(out);
}

/* Every cut of the text into two chunks, and one byte a chunk, gives what one chunk gives. */
static void split_secrets(void **state) {
  (void)state;
  const char *in = "x " PEM " y " AWS "\nghp_0123456789abcdefghijklmnopqrstuvwxyz z\n";
  size_t n = strlen(in);
  char *whole = feed(embedded, in, n, NULL, NULL);
  assert_string_equal(whole,
                      "x [REDACTED:private_key_block] y [REDACTED:aws_access_key_id]\n"
                      "[REDACTED:github_token] z\n");
  for (size_t c = 1; c < n; c++) {
    size_t cuts[] = {c, SIZE_MAX};
    struct jb_redactor *rd;
    char *two = feed(embedded, in, n, cuts, &rd);
    if (strcmp(two, whole)) fail_msg("cut at %zu: %s", c, two);
    const struct jb_redaction *v;
    assert_int_equal(jb_redactor_records(rd, &v), 3);
    assert_int_equal(v[1].offset, strstr(in, AWS) - in);
    jb_redactor_free(rd);
    free(two);
  }
  size_t *bytes = malloc((n + 1) * sizeof *bytes);
  for (size_t i = 0; i < n; i++) bytes[i] = i;
  bytes[n] = SIZE_MAX;
  char *one = feed(embedded, in, n, bytes + 1, NULL);
  assert_string_equal(one, whole);
  free(one);
  free(bytes);
  free(whole);
}

/* Clean bytes go at once; only where a secret may begin is held; look-behinds see the bytes
 * released before. */
static void hold_back(void **state) {
  (void)state;
  struct jb_redactor *rd;
  assert_int_equal(jb_redactor_new(embedded, &rd, NULL), 0);
  struct jb_buf out;
  jb_buf_init(&out, SIZE_MAX - 1);
  assert_int_equal(
      jb_redactor_feed(rd, (const unsigned char *)"hello world\n", 12, false, &out, NULL), 0);
  assert_int_equal(out.len, 12);
  assert_int_equal(
      jb_redactor_feed(rd, (const unsigned char *)"id AKIAIOSF", 11, false, &out, NULL), 0);
  assert_string_equal(out.data, "hello world\nid ");
  assert_int_equal(jb_redactor_held(rd), 8);
  assert_int_equal(
      jb_redactor_feed(rd, (const unsigned char *)"ODNN7EXAMPLE.", 13, false, &out, NULL), 0);
  assert_string_equal(out.data, "hello world\nid [REDACTED:aws_access_key_id].");
  /* "Z" released in one chunk still precedes the key of the next: no AWS key */
  assert_int_equal(jb_redactor_feed(rd, (const unsigned char *)" Z", 2, false, &out, NULL), 0);
  assert_int_equal(jb_redactor_feed(rd, (const unsigned char *)AWS "Q ", 22, true, &out, NULL), 0);
  assert_string_equal(out.data, "hello world\nid [REDACTED:aws_access_key_id]. Z" AWS "Q ");
  assert_int_equal(jb_redactor_count(rd), 1);
  jb_buf_free(&out);
  jb_redactor_free(rd);
}

/* A `redact` rule redacts output and flags no write; a `secret` rule does both. */
static void redact_rule(void **state) {
  (void)state;
  struct jb_scan_rules *r = parse(
      "# test\n"
      "internal_ticket  low   redact  TCK-[0-9]{6}\n"
      "canary           high  secret  canary-[a-f0-9]{8}\n");
  assert_int_equal(jb_scan_rule_check(r, 0), JB_SCAN_REDACT);
  assert_int_equal(jb_scan_rule_check(r, 1), JB_SCAN_SECRET);
  json_t *f = jb_scan_run(r, "a.txt", (const unsigned char *)"see TCK-123456", 14);
  assert_int_equal(json_array_size(f), 0);
  json_decref(f);
  f = jb_scan_run(r, "a.txt", (const unsigned char *)"canary-0badf00d", 15);
  assert_int_equal(json_array_size(f), 1);
  json_decref(f);
  const char *in = "see TCK-123456 and canary-0badf00d.";
  size_t cuts[] = {9, 25, SIZE_MAX};
  char *out = feed(r, in, strlen(in), cuts, NULL);
  assert_string_equal(out, "see [REDACTED:internal_ticket] and [REDACTED:canary].");
  free(out);
  /* an empty stream: nothing fed, then the end (no window yet: nothing is formed from it) */
  struct jb_redactor *rd = NULL;
  jb_error err = {0};
  assert_int_equal(jb_redactor_new(r, &rd, &err), 0);
  struct jb_buf o;
  jb_buf_init(&o, 1024);
  assert_int_equal(jb_redactor_feed(rd, NULL, 0, false, &o, &err), 0);
  assert_int_equal(jb_redactor_feed(rd, NULL, 0, true, &o, &err), 0);
  assert_int_equal(o.len, 0);
  assert_int_equal(jb_redactor_count(rd), 0);
  jb_buf_free(&o);
  jb_redactor_free(rd);
  jb_scan_rules_free(r);
  /* a rule set without redacting rules passes everything at once */
  r = parse("p high path ^x$\n");
  out = feed(r, AWS, 20, NULL, NULL);
  assert_string_equal(out, AWS);
  free(out);
  jb_scan_rules_free(r);
  /* the grammar names the new checks */
  struct jb_scan_rules *bad = NULL;
  err = (jb_error){0};
  assert_int_equal(jb_scan_rules_parse("a low redcat x\n", 15, "t", &bad, &err), -1);
  assert_non_null(strstr(err.msg, "secret, redact"));
}

/* At most JB_REDACT_HOLD_MAX bytes wait: a key block that never ends is released, redacted
 * as far as it had come. */
static void hold_cap(void **state) {
  (void)state;
  struct jb_redactor *rd;
  assert_int_equal(jb_redactor_new(embedded, &rd, NULL), 0);
  struct jb_buf out;
  jb_buf_init(&out, SIZE_MAX - 1);
  const char *head = "-----BEGIN PRIVATE KEY-----\n";
  assert_int_equal(
      jb_redactor_feed(rd, (const unsigned char *)head, strlen(head), false, &out, NULL), 0);
  char line[65];
  memset(line, 'A', 63);
  line[63] = '\n';
  line[64] = '\0';
  size_t most = 0;
  for (int i = 0; i < 2048; i++) { /* 128 KiB of body */
    assert_int_equal(jb_redactor_feed(rd, (const unsigned char *)line, 64, false, &out, NULL), 0);
    if (jb_redactor_held(rd) > most) most = jb_redactor_held(rd);
  }
  assert_true(most <= JB_REDACT_HOLD_MAX + 64);
  assert_int_equal(strncmp(out.data, "[REDACTED:private_key_block]", 28), 0);
  assert_null(strstr(out.data, "BEGIN"));
  jb_buf_free(&out);
  jb_redactor_free(rd);
}

/* A match that stops at PCRE2's match limit replaces everything held (fail closed). */
static void limit_fails_closed(void **state) {
  (void)state;
  struct jb_scan_rules *r = parse("slow medium redact (a|a)+(a|a)+(a|a)+(?:x|y)\n");
  struct jb_redactor *rd;
  char in[64];
  memset(in, 'a', 40);
  memcpy(in + 40, "c", 2);
  char *out = feed(r, in, 41, NULL, &rd);
  assert_string_equal(out, "[REDACTED:slow]");
  const struct jb_redaction *v;
  assert_int_equal(jb_redactor_records(rd, &v), 1);
  assert_true(v[0].failed);
  free(out);
  jb_redactor_free(rd);
  jb_scan_rules_free(r);
}

/* Each rule of deploy/scan-rules that redacts output, with a line it redacts (the marker
 * replaces `secret`) and one it leaves alone. */
static const struct sample {
  const char *rule, *before, *secret, *after;
  bool redacted;
} samples[] = {
    {"private_key_block", "k: ", PEM, "\n", true},
    {"private_key_block", "client-key-data: ",
     "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVB", "\n", true},
    {"private_key_block", "", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----", "",
     false},
    {"private_key", "", "BEGIN RSA PRIVATE KEY", " (header only)", true},
    {"private_key", "", "BEGIN THE PRIVATE PART", "", false},
    {"aws_access_key_id", "id=", AWS, "\n", true},
    {"aws_access_key_id", "", "XAKIAIOSFODNN7EXAMPLE", "", false},
    {"github_token", "", "ghp_0123456789abcdefghijklmnopqrstuvwxyz", " x", true},
    {"github_token", "", "ghp_short", "", false},
    {"gitlab_token", "", "glpat-0123456789abcdefghij", "\n", true},
    {"gitlab_token", "", "glpat-short", "", false},
    {"slack_token", "", "xoxb-1234567890-abcdef", " ", true},
    {"slack_token", "", "xoxb-12", "", false},
    {"google_api_key", "", "AIzaSyA0123456789abcdefghijklmnopqrstuv", "\n", true},
    {"google_api_key", "", "AIza-not-a-key", "", false},
    {"netrc_entry", "", "machine github.com\n  login bob\n  password s3cr3t!", "\n", true},
    {"netrc_entry", "", "machine learning password", "", false},
    {"kubeconfig_token", "    ", "token: eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.e30.c2ln", "\n", true},
    {"kubeconfig_token", "", "token: short", "", false},
    {"aws_secret_key", "", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "\n",
     true},
    {"aws_secret_key", "", "aws_secret_access_key = <yours>", "", false},
};
#define N_SAMPLES (sizeof samples / sizeof samples[0])

static void samples_redact(void **state) {
  (void)state;
  for (size_t i = 0; i < N_SAMPLES; i++) {
    const struct sample *t = &samples[i];
    char in[1024], want[1024];
    snprintf(in, sizeof in, "%s%s%s", t->before, t->secret, t->after);
    if (t->redacted)
      snprintf(want, sizeof want, "%s[REDACTED:%s]%s", t->before, t->rule, t->after);
    else
      snprintf(want, sizeof want, "%s", in);
    char *out = feed(embedded, in, strlen(in), NULL, NULL);
    if (strcmp(out, want)) fail_msg("sample %zu (%s): got '%s'", i, t->rule, out);
    free(out);
  }
  /* every rule that redacts has both kinds of sample */
  for (size_t k = 0; k < jb_scan_rules_count(embedded); k++) {
    enum jb_scan_check c = jb_scan_rule_check(embedded, k);
    if (c != JB_SCAN_SECRET && c != JB_SCAN_REDACT) continue;
    int hit = 0, miss = 0;
    for (size_t i = 0; i < N_SAMPLES; i++)
      if (!strcmp(samples[i].rule, jb_scan_rule_id(embedded, k)))
        samples[i].redacted ? hit++ : miss++;
    if (!hit || !miss)
      fail_msg("rule %s redacts output: add a redacted and a kept sample to samples[]",
               jb_scan_rule_id(embedded, k));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(records_and_markers),
      cmocka_unit_test(split_secrets),
      cmocka_unit_test(hold_back),
      cmocka_unit_test(redact_rule),
      cmocka_unit_test(hold_cap),
      cmocka_unit_test(limit_fails_closed),
      cmocka_unit_test(samples_redact),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
