/* test_landing.c — the landing check over what a writable command leaves (sandbox/worker/
 * landing.h) against a temporary directory as the workspace: the pre-image of the covered
 * entries, then a new hook and workflow removed, a changed git config and a deleted hook put
 * back byte for byte, an execute bit on a covered file undone, set-ID bits cleared, ordinary
 * files left as the command left them, and a pre-image over its bound reported; links judged
 * as directories and by where they resolve; the sweep past a cut walk. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka after the headers it needs */
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/worker/landing.h"

static void put(const char *dir, const char *name, const char *text, mode_t mode) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(p, mode), 0);
}

static char *slurp(const char *dir, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "r");
  if (!f) return NULL;
  static char b[4096];
  size_t n = fread(b, 1, sizeof b - 1, f);
  fclose(f);
  b[n] = '\0';
  return b;
}

static mode_t mode_of(const char *dir, const char *name) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return lstat(p, &st) == 0 ? st.st_mode & 07777 : (mode_t)-1;
}

static json_t *change(json_t *changes, const char *path) {
  size_t i;
  json_t *c;
  json_array_foreach (changes, i, c)
    if (!strcmp(json_string_value(json_object_get(c, "path")), path)) return c;
  return NULL;
}

static void run(const char *dir, const char *cmd) {
  char c[2048];
  snprintf(c, sizeof c, "cd %s && %s", dir, cmd);
  assert_int_equal(system(c), 0);
}

static void undone_or_kept(void **state) {
  (void)state;
  char dir[] = "/tmp/jblandXXXXXX";
  assert_non_null(mkdtemp(dir));
  run(dir, "mkdir -p .git/hooks src");
  put(dir, ".git/config", "[core]\n\tbare = false\n", 0644);
  put(dir, ".git/hooks/pre-push.sample", "#!/bin/sh\n", 0755);
  put(dir, ".git/HEAD", "ref: refs/heads/main\n", 0644);
  put(dir, "src/a.c", "int a;\n", 0644);
  put(dir, "Makefile", "all:\n", 0644);
  jb_error err = {0};
  struct jb_scan_snapshot before, after;
  struct jb_preimage *pre = NULL;
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &before, &err), 0);
  assert_int_equal(jb_preimage_take(dir, &before, &pre, &err), 0);
  assert_true(jb_preimage_whole(pre));
  /* what a command does */
  run(dir, "printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' >> .git/config");
  put(dir, ".git/hooks/pre-commit", "#!/bin/sh\ntouch /tmp/x\n", 0755);
  run(dir, "rm .git/hooks/pre-push.sample; mkdir -p .github/workflows");
  put(dir, ".github/workflows/x.yml", "on: push\n", 0644);
  put(dir, "src/a.c", "int b;\n", 0644);
  put(dir, ".git/HEAD", "ref: refs/heads/other\n", 0644); /* not covered */
  put(dir, "tool", "#!/bin/sh\n", 04755);
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &after, &err), 0);
  size_t total = 0;
  json_t *changes = jb_scan_changes(&before, &after, 1000, &total);
  struct jb_landing_outcome out;
  jb_landing_undo(dir, &before, &after, pre, changes, &out);
  /* undone */
  assert_null(slurp(dir, ".git/hooks/pre-commit"));
  assert_null(slurp(dir, ".github/workflows/x.yml"));
  assert_int_equal(mode_of(dir, ".github/workflows"), (mode_t)-1);
  assert_string_equal(slurp(dir, ".git/config"), "[core]\n\tbare = false\n");
  assert_string_equal(slurp(dir, ".git/hooks/pre-push.sample"), "#!/bin/sh\n");
  assert_int_equal(mode_of(dir, ".git/hooks/pre-push.sample"), 0755);
  json_t *c = change(changes, ".git/hooks/pre-commit");
  assert_string_equal(json_string_value(json_object_get(c, "flagged")), "git_hooks");
  assert_true(json_is_true(json_object_get(c, "removed")));
  c = change(changes, ".git/config");
  assert_string_equal(json_string_value(json_object_get(c, "flagged")), "git_config");
  assert_true(json_is_true(json_object_get(c, "restored")));
  assert_true(
      json_is_true(json_object_get(change(changes, ".git/hooks/pre-push.sample"), "restored")));
  assert_int_equal(out.failed, 0);
  assert_true(out.flagged >= 4);
  assert_false(out.incomplete);
  assert_non_null(strstr(out.first, "landing "));
  /* kept as the command left them; set-ID bits cleared */
  assert_string_equal(slurp(dir, "src/a.c"), "int b;\n");
  assert_string_equal(slurp(dir, ".git/HEAD"), "ref: refs/heads/other\n");
  assert_int_equal(mode_of(dir, "tool"), 0755);
  assert_null(json_object_get(change(changes, "src/a.c"), "flagged"));
  json_decref(changes);
  jb_scan_snapshot_free(&after);
  jb_scan_snapshot_free(&before);
  jb_preimage_free(pre);
  /* an execute bit gained at a covered path is undone too */
  put(dir, ".git/hooks/post-merge", "echo\n", 0644);
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &before, &err), 0);
  assert_int_equal(jb_preimage_take(dir, &before, &pre, &err), 0);
  run(dir, "chmod +x .git/hooks/post-merge");
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &after, &err), 0);
  jb_landing_undo(dir, &before, &after, pre, NULL, &out);
  assert_int_equal(mode_of(dir, ".git/hooks/post-merge"), 0644);
  assert_int_equal(out.flagged, 1);
  jb_scan_snapshot_free(&after);
  jb_scan_snapshot_free(&before);
  jb_preimage_free(pre);
  /* a covered file over the pre-image's bound: not whole; changed, it is removed */
  char big[128];
  snprintf(big, sizeof big, "head -c %d /dev/zero > .git/config", JB_PREIMAGE_BYTES_MAX + 1);
  run(dir, big);
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 64 << 20, &before, &err), 0);
  assert_int_equal(jb_preimage_take(dir, &before, &pre, &err), 0);
  assert_false(jb_preimage_whole(pre));
  run(dir, "echo x >> .git/config");
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 64 << 20, &after, &err), 0);
  jb_landing_undo(dir, &before, &after, pre, NULL, &out);
  assert_true(out.incomplete);
  assert_int_equal(mode_of(dir, ".git/config"), (mode_t)-1);
  jb_scan_snapshot_free(&after);
  jb_scan_snapshot_free(&before);
  jb_preimage_free(pre);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* Links: a buyer's hook link's target is kept and restored, a dangling one's target made by the
 * command removed; a new link at a covered directory name, or one through which an entry lies
 * at a covered path, removed; the buyer's links and an ordinary new one left alone. */
static void links_judged(void **state) {
  (void)state;
  char dir[] = "/tmp/jblandXXXXXX";
  assert_non_null(mkdtemp(dir));
  run(dir,
      "mkdir -p .git/hooks scripts circle src && ln -s ../../scripts/hook.sh "
      ".git/hooks/post-commit && ln -s ../../gen/h.sh .git/hooks/commit-msg && "
      "ln -s circle .circleci && ln -s src lib");
  put(dir, "scripts/hook.sh", "#!/bin/sh\nexit 0\n", 0755);
  put(dir, "circle/config.yml", "version: 2\n", 0644);
  jb_error err = {0};
  struct jb_scan_snapshot before, after;
  struct jb_preimage *pre = NULL;
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &before, &err), 0);
  assert_int_equal(jb_preimage_take(dir, &before, &pre, &err), 0);
  put(dir, "scripts/hook.sh", "#!/bin/sh\ntouch /tmp/x\n", 0755);
  run(dir,
      "mkdir gen vs wf wf/workflows mise && echo x > gen/h.sh && echo '{}' > vs/tasks.json "
      "&& ln -s vs .vscode && echo on > wf/workflows/x.yml && ln -s wf .github && "
      "ln -s hk .husky && echo t > mise/config.toml && ln -s . .config && ln -s src inc");
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &after, &err), 0);
  size_t total = 0;
  json_t *changes = jb_scan_changes(&before, &after, 1000, &total);
  struct jb_landing_outcome out;
  jb_landing_undo(dir, &before, &after, pre, changes, &out);
  assert_string_equal(slurp(dir, "scripts/hook.sh"), "#!/bin/sh\nexit 0\n");
  assert_true(json_is_true(json_object_get(change(changes, "scripts/hook.sh"), "restored")));
  assert_null(slurp(dir, "gen/h.sh"));
  const char *gone[] = {".vscode", ".github", ".husky", ".config"};
  for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) {
    assert_int_equal(mode_of(dir, gone[i]), (mode_t)-1);
    assert_true(json_is_true(json_object_get(change(changes, gone[i]), "removed")));
  }
  assert_string_equal(slurp(dir, "vs/tasks.json"), "{}\n"); /* what a link led to stays */
  assert_int_not_equal(mode_of(dir, ".circleci"), (mode_t)-1);
  assert_int_not_equal(mode_of(dir, "lib"), (mode_t)-1);
  assert_int_not_equal(mode_of(dir, "inc"), (mode_t)-1);
  assert_null(json_object_get(change(changes, "inc"), "flagged"));
  assert_false(out.incomplete);
  json_decref(changes);
  jb_scan_snapshot_free(&after);
  jb_scan_snapshot_free(&before);
  jb_preimage_free(pre);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* The sweep past a cut walk: landings the walk did not see are removed or restored, a fifo and
 * a link leading out removed, older entries untouched; its own bound cuts it. */
static void swept(void **state) {
  (void)state;
  char dir[] = "/tmp/jblandXXXXXX";
  assert_non_null(mkdtemp(dir));
  run(dir, "mkdir -p .git/hooks src wf/workflows");
  put(dir, ".git/config", "[core]\n", 0644);
  put(dir, "src/a.c", "int a;\n", 0644);
  put(dir, "wf/workflows/y.yml", "on: push\n", 0644); /* the buyer's */
  jb_error err = {0};
  struct jb_scan_snapshot before, after;
  struct jb_preimage *pre = NULL;
  assert_int_equal(jb_workspace_snapshot(dir, 1000, 1 << 20, &before, &err), 0);
  assert_int_equal(jb_preimage_take(dir, &before, &pre, &err), 0);
  run(dir,
      "mkdir -p many .vscode && for i in $(seq 1 50); do echo > many/f$i; done && "
      "echo '{}' > .vscode/tasks.json && echo x > .envrc && echo '[x]' >> .git/config && "
      "mkfifo src/p && ln -s ../.. src/out && ln -s wf .github && ln -s . up");
  put(dir, ".git/hooks/pre-commit", "#!/bin/sh\n", 0755);
  assert_int_equal(jb_workspace_snapshot(dir, 5, 1 << 20, &after, &err), 0); /* cut */
  assert_true(after.truncated);
  struct jb_landing_outcome out;
  jb_landing_undo(dir, &before, &after, pre, NULL, &out);
  char why[48];
  struct jb_sweep_limits small = {.max_entries = 10, .since_ns = before.started_ns - 2000000000LL};
  assert_false(jb_landing_sweep(dir, &before, &after, pre, &small, NULL, &out, why, sizeof why));
  assert_string_equal(why, "entries");
  json_t *changes = json_array();
  struct jb_sweep_limits lim = {.max_entries = 1000, .since_ns = before.started_ns - 2000000000LL};
  assert_true(jb_landing_sweep(dir, &before, &after, pre, &lim, changes, &out, why, sizeof why));
  assert_null(slurp(dir, ".vscode/tasks.json"));
  assert_null(slurp(dir, ".envrc"));
  assert_null(slurp(dir, ".git/hooks/pre-commit"));
  assert_string_equal(slurp(dir, ".git/config"), "[core]\n");
  assert_int_equal(mode_of(dir, "src/p"), (mode_t)-1);
  assert_int_equal(mode_of(dir, "src/out"), (mode_t)-1);
  assert_string_equal(slurp(dir, "src/a.c"), "int a;\n");
  assert_non_null(slurp(dir, "many/f50"));
  assert_int_equal(mode_of(dir, ".github"), (mode_t)-1); /* it put y.yml at a covered path */
  assert_non_null(slurp(dir, "wf/workflows/y.yml"));
  assert_int_not_equal(mode_of(dir, "up"), (mode_t)-1); /* it reaches nothing new */
  assert_true(json_array_size(changes) > 0); /* what lay past the walk, listed */
  json_t *c = json_array_get(changes, 0);
  assert_true(json_is_true(json_object_get(c, "pastWalk")));
  assert_non_null(json_object_get(c, "flagged"));
  json_decref(changes);
  jb_scan_snapshot_free(&after);
  jb_scan_snapshot_free(&before);
  jb_preimage_free(pre);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* A walk before the command that was cut: the pre-image is taken by a stat-only sweep (whole,
 * the buyer's links past the cut included), and the sweep after restores a hook link's target. */
static void preimage_past_cut(void **state) {
  (void)state;
  char dir[] = "/tmp/jblandXXXXXX";
  assert_non_null(mkdtemp(dir));
  run(dir,
      "mkdir -p a b c .git/hooks scripts && for i in 1 2 3 4 5 6; do echo > a/f$i; done && "
      "ln -s ../../scripts/hook.sh .git/hooks/post-commit");
  put(dir, "scripts/hook.sh", "#!/bin/sh\nexit 0\n", 0755);
  put(dir, ".git/config", "[core]\n", 0644);
  jb_error err = {0};
  struct jb_scan_snapshot before, after;
  struct jb_preimage *pre = NULL;
  assert_int_equal(jb_workspace_snapshot(dir, 3, 1 << 20, &before, &err), 0);
  assert_true(before.truncated);
  struct jb_sweep_limits lim = {.max_entries = 1000};
  assert_int_equal(jb_preimage_take_swept(dir, &before, &lim, &pre, &err), 0);
  assert_true(jb_preimage_whole(pre));
  put(dir, "scripts/hook.sh", "#!/bin/sh\ntouch /tmp/x\n", 0755);
  run(dir, "echo '[x]' >> .git/config");
  assert_int_equal(jb_workspace_snapshot(dir, 3, 1 << 20, &after, &err), 0);
  struct jb_landing_outcome out;
  jb_landing_undo(dir, &before, &after, pre, NULL, &out);
  assert_false(out.incomplete);
  char why[48];
  lim.since_ns = before.started_ns - 2000000000LL;
  assert_true(jb_landing_sweep(dir, &before, &after, pre, &lim, NULL, &out, why, sizeof why));
  assert_string_equal(slurp(dir, "scripts/hook.sh"), "#!/bin/sh\nexit 0\n");
  assert_string_equal(slurp(dir, ".git/config"), "[core]\n");
  jb_preimage_free(pre);
  /* the sweep before cut by its own bound: not whole */
  lim.max_entries = 4;
  assert_int_equal(jb_preimage_take_swept(dir, &before, &lim, &pre, &err), 0);
  assert_false(jb_preimage_whole(pre));
  jb_preimage_free(pre);
  jb_scan_snapshot_free(&after);
  jb_scan_snapshot_free(&before);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(undone_or_kept),
      cmocka_unit_test(links_judged),
      cmocka_unit_test(swept),
      cmocka_unit_test(preimage_past_cut),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
