/* test_scale.c — the pieces of the scale-out that need no server: Redis URLs
 * (server/fanout.h), the event bus with and without a transport (server/bus.h), and the
 * Prometheus text writers and histograms (lib/metrics.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "server/bus.h"
#include "server/fanout.h"
#include "lib/metrics.h"

static void redis_urls(void **state) {
  struct jb_redis_addr a;
  jb_error err = {0};
  assert_int_equal(jb_redis_url_parse("redis://127.0.0.1", &a, &err), 0);
  assert_string_equal(a.host, "127.0.0.1");
  assert_int_equal(a.port, 6379);
  assert_string_equal(a.password, "");
  assert_int_equal(jb_redis_url_parse("redis://cache.internal:6380/2", &a, &err), 0);
  assert_string_equal(a.host, "cache.internal");
  assert_int_equal(a.port, 6380);
  assert_int_equal(jb_redis_url_parse("redis://:s3cret@redis:7000", &a, &err), 0);
  assert_string_equal(a.user, "");
  assert_string_equal(a.password, "s3cret");
  assert_string_equal(a.host, "redis");
  assert_int_equal(a.port, 7000);
  assert_int_equal(jb_redis_url_parse("redis://jailbox:pw@[::1]:6379", &a, &err), 0);
  assert_string_equal(a.user, "jailbox");
  assert_string_equal(a.password, "pw");
  assert_string_equal(a.host, "::1");
  assert_int_equal(jb_redis_url_parse("redis://onlypw@h", &a, &err), 0);
  assert_string_equal(a.password, "onlypw");
  assert_string_equal(a.user, "");
  /* a password holding '@' : the last '@' ends the credentials */
  assert_int_equal(jb_redis_url_parse("redis://:p@ss@h:1", &a, &err), 0);
  assert_string_equal(a.password, "p@ss");
  assert_string_equal(a.host, "h");
  assert_int_equal(jb_redis_url_parse("unix:///run/redis/redis.sock", &a, &err), 0);
  assert_string_equal(a.path, "/run/redis/redis.sock");
  assert_string_equal(a.host, "");
  assert_string_equal(a.password, "");
  assert_int_equal(jb_redis_url_parse("unix://u:p@w@/run/r.sock", &a, &err), 0);
  assert_string_equal(a.user, "u");
  assert_string_equal(a.password, "p@w");
  assert_string_equal(a.path, "/run/r.sock");
  assert_int_equal(jb_redis_url_parse("unix://pw@/run/r.sock", &a, &err), 0);
  assert_string_equal(a.user, "");
  assert_string_equal(a.password, "pw");

  const char *bad[] = {"",
                       "http://h",
                       "redis://",
                       "redis://h:0",
                       "redis://h:65536",
                       "redis://h:12x",
                       "redis://h:",
                       "redis://[::1",
                       "redis://[]:1",
                       "redis://h/db1",
                       "redis://h?x=1",
                       "redis://h x",
                       "redis://h\n",
                       "unix://relative.sock",
                       "redis://h#f",
                       "unix://pw@relative.sock",
                       "unix://",
                       NULL};
  for (int i = 0; bad[i]; i++) {
    memset(&err, 0, sizeof err);
    assert_int_equal(jb_redis_url_parse(bad[i], &a, &err), -1);
    assert_true(err.msg[0] != '\0');
  }
  char longurl[2000];
  memset(longurl, 'a', sizeof longurl - 1);
  longurl[sizeof longurl - 1] = '\0';
  memcpy(longurl, "redis://", 8);
  assert_int_equal(jb_redis_url_parse(longurl, &a, &err), -1);
  char longhost[400] = "redis://";
  memset(longhost + 8, 'h', 300);
  assert_int_equal(jb_redis_url_parse(longhost, &a, &err), -1);
}

/* ---- messages from Redis ---- */

static int accepted(const char *channel, const char *msg, size_t len) {
  json_t *doc = NULL, *payload;
  const char *job;
  enum jb_event_kind kind;
  int rc = jb_fanout_accept(channel, msg, len, &doc, &job, &kind, &payload);
  if (rc == 0) {
    assert_string_equal(channel + strlen("jailbox:session:"), job);
    json_decref(doc);
  } else {
    assert_null(doc);
  }
  return rc;
}

static void redis_messages(void **state) {
  const char *ok = "{\"job\":\"j1\",\"kind\":\"op\",\"payload\":{\"opId\":1}}";
  assert_int_equal(accepted("jailbox:session:j1", ok, strlen(ok)), 0);
  assert_int_equal(accepted("jailbox:session:j2", ok, strlen(ok)),
                   -1); /* another session's channel */
  assert_int_equal(accepted("jailbox:sessions:j1", ok, strlen(ok)), -1); /* not our prefix */
  assert_int_equal(accepted("jailbox:session:j1", ok, strlen(ok) - 1), -1); /* cut short */
  const char *dup = "{\"job\":\"j1\",\"job\":\"j1\",\"kind\":\"op\",\"payload\":{}}";
  assert_int_equal(accepted("jailbox:session:j1", dup, strlen(dup)), -1);
  const char *notours = "{\"job\":\"j1\",\"kind\":\"connect\",\"payload\":{}}";
  assert_int_equal(accepted("jailbox:session:j1", notours, strlen(notours)), -1);
  /* the wire name is not the envelope's kind: clients' names stay on the server side */
  const char *wire = "{\"job\":\"j1\",\"kind\":\"jailbox:op\",\"payload\":{}}";
  assert_int_equal(accepted("jailbox:session:j1", wire, strlen(wire)), -1);
  const char *arr = "{\"job\":\"j1\",\"kind\":\"op\",\"payload\":[1]}";
  assert_int_equal(accepted("jailbox:session:j1", arr, strlen(arr)), -1);
  /* a NUL byte inside: refused, not cut there */
  char nul[128];
  size_t n = (size_t)snprintf(nul, sizeof nul, "%s", ok);
  nul[n] = '\0';
  memcpy(nul + n + 1, "xx", 2);
  assert_int_equal(accepted("jailbox:session:j1", nul, n + 3), -1);
  /* an object payload nested 60 deep is taken; 70 deep (over JB_JSON_MAX_DEPTH, 64) is not */
  for (int levels = 60; levels <= 70; levels += 10) {
    char deep[1024];
    int k = snprintf(deep, sizeof deep, "{\"job\":\"j1\",\"kind\":\"op\",\"payload\":");
    for (int i = 0; i < levels; i++) k += snprintf(deep + k, sizeof deep - (size_t)k, "{\"a\":");
    k += snprintf(deep + k, sizeof deep - (size_t)k, "{}");
    for (int i = 0; i < levels + 1; i++) deep[k++] = '}';
    assert_int_equal(accepted("jailbox:session:j1", deep, (size_t)k), levels == 60 ? 0 : -1);
  }
  /* over 4 MiB: refused before parsing */
  size_t big = 4 * 1024 * 1024 + 2;
  char *b = malloc(big);
  assert_non_null(b);
  memset(b, ' ', big);
  memcpy(b, ok, strlen(ok));
  assert_int_equal(accepted("jailbox:session:j1", b, big), -1);
  assert_int_equal(accepted("jailbox:session:j1", b, strlen(ok) + 10),
                   0); /* trailing spaces are fine */
  free(b);
  assert_int_equal(accepted(NULL, ok, strlen(ok)), -1);
}

/* ---- the bus ---- */

static int delivered;
static enum jb_event_kind last_kind;
/* Feeds `bytes` to a limited reader; the number of whole replies, or -1 at a reader error. */
static int read_replies(const char *bytes, size_t len) {
  redisReader *r = redisReaderCreate();
  assert_non_null(r);
  jb_redis_reader_limit(r);
  int n = 0;
  assert_int_equal(redisReaderFeed(r, bytes, len), REDIS_OK);
  void *reply;
  for (;;) {
    if (redisReaderGetReply(r, &reply) != REDIS_OK) {
      n = -1;
      break;
    }
    if (!reply) break;
    freeReplyObject(reply);
    n++;
  }
  redisReaderFree(r);
  return n;
}

static void redis_reader_limits(void **state) {
  (void)state;
  const char pm[] = "*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$5\r\nchan1\r\n$2\r\n{}\r\n";
  assert_int_equal(read_replies(pm, sizeof pm - 1), 1);
  const char eight[] = "*8\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n:8\r\n";
  assert_int_equal(read_replies(eight, sizeof eight - 1), 1);
  const char nine[] = "*9\r\n";
  assert_int_equal(read_replies(nine, sizeof nine - 1), -1);
  /* would be a 4.4 GB calloc without the limit (found by fuzz_redis) */
  const char huge[] = "*0\r\n*555555550\r\nme";
  assert_int_equal(read_replies(huge, sizeof huge - 1), -1);
  const char nested[] = "*2\r\n*1\r\n:1\r\n:2\r\n";
  assert_int_equal(read_replies(nested, sizeof nested - 1), -1);
  const char nil[] = "*-1\r\n";
  assert_int_equal(read_replies(nil, sizeof nil - 1), 1);
}

static void sub(void *ctx, const char *job, enum jb_event_kind kind, json_t *payload) {
  delivered++;
  last_kind = kind;
  assert_non_null(payload);
}
static int transported, transport_answer;
static int transport(void *ctx, const char *job, enum jb_event_kind kind, json_t *payload) {
  transported++;
  return transport_answer;
}

static void bus_transport(void **state) {
  struct jb_bus *b = jb_bus_new();
  assert_int_equal(jb_bus_subscribe(b, sub, NULL), 0);
  delivered = transported = 0;
  jb_bus_publish(b, "j1", JB_EVENT_STATE, json_object());
  assert_int_equal(delivered, 1); /* no transport: here only */
  jb_bus_set_transport(b, transport, NULL);
  transport_answer = 0;
  jb_bus_publish(b, "j1", JB_EVENT_OP, json_object());
  assert_int_equal(transported, 1);
  assert_int_equal(delivered, 1); /* taken: it comes back through jb_bus_deliver, not here */
  jb_bus_deliver(b, "j1", JB_EVENT_OP, json_object());
  assert_int_equal(delivered, 2);
  transport_answer = -1;
  jb_bus_publish(b, "j1", JB_EVENT_AUDIT_HEAD, json_object());
  assert_int_equal(transported, 2);
  assert_int_equal(delivered, 3); /* refused: delivered here so local sockets still get it */
  assert_int_equal(last_kind, JB_EVENT_AUDIT_HEAD);
  jb_bus_set_transport(b, NULL, NULL);
  jb_bus_publish(b, "j1", JB_EVENT_STATE, json_object());
  assert_int_equal(transported, 2);
  assert_int_equal(delivered, 4);
  jb_bus_free(b);
}

/* ---- Prometheus text ---- */

static char *render(void (*fn)(FILE *)) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  fn(f);
  fclose(f);
  return text;
}

static void w_samples(FILE *f) {
  jb_prom_header(f, "jailbox_x", "gauge", "Line one\\two\nthree");
  jb_prom_sample(f, "jailbox_x", 3, NULL);
  jb_prom_sample(f, "jailbox_x", 0.25, "a", "q\"uo\\te\nnl", "b", "", NULL);
}

JB_HISTOGRAM(h_test, 0.001, 0.01, 0.1);
static void w_hist(FILE *f) { jb_prom_histogram(f, "jailbox_h_seconds", "H.", &h_test); }

static void prom_text(void **state) {
  char *t = render(w_samples);
  assert_string_equal(t,
                      "# HELP jailbox_x Line one\\\\two\\nthree\n# TYPE jailbox_x gauge\n"
                      "jailbox_x 3\n"
                      "jailbox_x{a=\"q\\\"uo\\\\te\\nnl\",b=\"\"} 0.25\n");
  free(t);
  jb_histogram_observe(&h_test, 500000); /* 0.5 ms */
  jb_histogram_observe(&h_test, 1000000); /* exactly 1 ms: le="0.001" includes it */
  jb_histogram_observe(&h_test, 50000000); /* 50 ms */
  jb_histogram_observe(&h_test, 2000000000); /* 2 s: +Inf only */
  jb_histogram_observe(&h_test, -5); /* clock oddity: counted as 0 */
  t = render(w_hist);
  assert_string_equal(t,
                      "# HELP jailbox_h_seconds H.\n# TYPE jailbox_h_seconds histogram\n"
                      "jailbox_h_seconds_bucket{le=\"0.001\"} 3\n"
                      "jailbox_h_seconds_bucket{le=\"0.01\"} 3\n"
                      "jailbox_h_seconds_bucket{le=\"0.1\"} 4\n"
                      "jailbox_h_seconds_bucket{le=\"+Inf\"} 5\n"
                      "jailbox_h_seconds_sum 2.0515\n"
                      "jailbox_h_seconds_count 5\n");
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(redis_urls),          cmocka_unit_test(redis_messages),
      cmocka_unit_test(redis_reader_limits), cmocka_unit_test(bus_transport),
      cmocka_unit_test(prom_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
