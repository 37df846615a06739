/* rules_bench.c — bench/policy/run.sh's matcher part: deciding one op against 256 compiled
 * approval rules (lib/policy.h jb_rules_match; none matches, so all 256 are tried, then the
 * same list with an allow for the op last), beside compiling the list once (what a new rules
 * version costs a jailboxd instance) and beside the one-off jb_rules_first_match on the JSON
 * list (compiles, matches, frees). Thread CPU time; prints ns per decision.
 * Usage: build/rules_bench [reps] */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lib/policy.h"

static double cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* The bench.mjs list: `n` rules none of which matches a write of notes/n.txt. */
static json_t *rules(int n) {
  json_t *a = json_array();
  char glob[64], t[32];
  for (int i = 0; (int)json_array_size(a) < n; i++) {
    json_t *r = NULL;
    switch (i % 6) {
      case 0:
        snprintf(glob, sizeof glob, "src/mod%d/**", i);
        r = json_pack("{s:s,s:s,s:s}", "tool", "write", "path", glob, "effect", "allow");
        break;
      case 1:
        snprintf(glob, sizeof glob, "lib/pkg%d/**/*.c", i);
        r = json_pack("{s:s,s:s,s:s}", "tool", "write", "path", glob, "effect", "allow");
        break;
      case 2:
        snprintf(glob, sizeof glob, "secrets%d/**", i);
        r = json_pack("{s:s,s:s,s:s}", "tool", "write", "path", glob, "effect", "deny");
        break;
      case 3:
        snprintf(glob, sizeof glob, "*.gen%d", i);
        r = json_pack("{s:s,s:s,s:s}", "tool", "write", "path", glob, "effect", "ask");
        break;
      case 4:
        snprintf(glob, sizeof glob, "docs/part%d/*.md", i);
        r = json_pack("{s:s,s:s,s:s}", "tool", "edit", "path", glob, "effect", "allow");
        break;
      default:
        snprintf(t, sizeof t, "target%d", i);
        r = json_pack("{s:s,s:[ss],s:s}", "tool", "exec", "argvPrefix", "make", t, "effect",
                      "allow");
    }
    char msg[200];
    json_t *ok = jb_rule_check(r, false, 0, msg, sizeof msg);
    json_decref(r);
    if (!ok) {
      fprintf(stderr, "rules_bench: %s\n", msg);
      exit(1);
    }
    json_array_append_new(a, ok);
  }
  return a;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20000;
  if (reps < 1) reps = 1;
  struct jb_rule_op op = {.tool = "write", .path = "notes/n.txt", .size = 1024};
  json_t *none = rules(256), *last = rules(255);
  char msg[200];
  json_t *allow =
      json_pack("{s:s,s:s,s:s}", "tool", "write", "path", "notes/**", "effect", "allow");
  json_array_append_new(last, jb_rule_check(allow, false, 0, msg, sizeof msg));
  json_decref(allow);
  json_t *lists[2] = {none, last};
  const char *names[2] = {"256 rules, none matching", "256 rules, the last allowing"};
  long want[2] = {-1, 255};
  for (int k = 0; k < 2; k++) {
    double t0 = cpu_ns();
    struct jb_rules *rs = NULL;
    for (int i = 0; i < 200; i++) {
      jb_rules_free(rs);
      rs = jb_rules_compile(lists[k]);
    }
    double compile = (cpu_ns() - t0) / 200;
    long got = 0;
    t0 = cpu_ns();
    for (int i = 0; i < reps; i++) got = jb_rules_match(rs, &op, 1700000000);
    double match = (cpu_ns() - t0) / reps;
    if (got != want[k]) {
      fprintf(stderr, "rules_bench: %s: rule %ld matched, not %ld\n", names[k], got, want[k]);
      return 1;
    }
    int once = reps / 20 > 0 ? reps / 20 : 1;
    t0 = cpu_ns();
    for (int i = 0; i < once; i++) jb_rules_first_match(lists[k], &op, 1700000000);
    double oneoff = (cpu_ns() - t0) / once;
    printf(
        "matcher, %s: %.2f us a decision (compiled once: %.1f us; compile+match+free each "
        "time: %.1f us)\n",
        names[k], match / 1000, compile / 1000, oneoff / 1000);
    jb_rules_free(rs);
  }
  json_decref(none);
  json_decref(last);
  return 0;
}
