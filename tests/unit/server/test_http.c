/* test_http.c — the JSON error shape and route matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"

static void error_shape(void **state) {
  char *s = jb_error_body("not_found", "no \"such\" route\n");
  assert_non_null(s);
  json_error_t je;
  json_t *o = json_loads(s, JSON_REJECT_DUPLICATES, &je);
  assert_non_null(o);
  assert_int_equal(json_object_size(o), 1);
  json_t *e = json_object_get(o, "error");
  assert_true(json_is_object(e));
  assert_int_equal(json_object_size(e), 2);
  assert_string_equal(json_string_value(json_object_get(e, "code")), "not_found");
  assert_string_equal(json_string_value(json_object_get(e, "message")), "no \"such\" route\n");
  json_decref(o);
  free(s);

  /* a message that is not UTF-8 still yields valid JSON with the code */
  s = jb_error_body("bad_request", "\xff\xfe");
  assert_non_null(s);
  o = json_loads(s, 0, &je);
  assert_non_null(o);
  assert_string_equal(json_string_value(json_object_get(json_object_get(o, "error"), "code")),
                      "bad_request");
  json_decref(o);
  free(s);
}

static void resp_error_sets_status(void **state) {
  struct jb_http_resp r = {0};
  jb_resp_error(&r, 413, "payload_too_large", "over %d bytes", 10);
  assert_int_equal(r.status, 413);
  assert_non_null(strstr(r.body, "\"over 10 bytes\""));
  assert_string_equal(r.content_type, "application/json");
  free(r.body);
}

static void route_matching(void **state) {
  char buf[256];
  const char *p[JB_HTTP_MAX_PARAMS];
  int n;
  assert_true(jb_route_match("/healthz", "/healthz", buf, sizeof buf, p, &n));
  assert_int_equal(n, 0);
  assert_false(jb_route_match("/healthz", "/healthz/", buf, sizeof buf, p, &n));
  assert_false(jb_route_match("/healthz", "/health", buf, sizeof buf, p, &n));
  assert_true(jb_route_match("/v1/jailbox/:jobId/approve/:opId", "/v1/jailbox/j-1/approve/42", buf,
                             sizeof buf, p, &n));
  assert_int_equal(n, 2);
  assert_string_equal(p[0], "j-1");
  assert_string_equal(p[1], "42");
  assert_false(jb_route_match("/v1/jailbox/:jobId", "/v1/jailbox/", buf, sizeof buf, p, &n));
  assert_false(jb_route_match("/v1/jailbox/:jobId", "/v1/jailbox//", buf, sizeof buf, p, &n));
  assert_false(jb_route_match("/v1/jailbox/:jobId", "/v1/jailbox/a/b", buf, sizeof buf, p, &n));
  /* a pattern ending in '/' matches that path only (the console's folder) */
  assert_true(jb_route_match("/console/", "/console/", buf, sizeof buf, p, &n));
  assert_false(jb_route_match("/console/", "/console", buf, sizeof buf, p, &n));
  assert_false(jb_route_match("/console/", "/console/x", buf, sizeof buf, p, &n));
  assert_false(jb_route_match("/console/:file", "/console/", buf, sizeof buf, p, &n));
  /* a parameter that does not fit the buffer is no match, never a cut value */
  char small[4];
  assert_false(jb_route_match("/x/:id", "/x/abcdef", small, sizeof small, p, &n));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(error_shape),
      cmocka_unit_test(resp_error_sets_status),
      cmocka_unit_test(route_matching),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
