/* treehash.c — `jailboxctl tree-hash DIR`: tree hash v1 of a directory (lib/treehash.h,
 * api/audit.md "Tree hash v1"), offline, so that a buyer can compare a tree on disk with the
 * treeSha256 of an audit entry. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/ctl.h"
#include "lib/treehash.h"

/* JAILBOX_TREE_HASH_MAX_BYTES as the worker reads it: 0 with the default when unset. */
static int max_bytes_from_env(long long *out) {
  const char *v = getenv("JAILBOX_TREE_HASH_MAX_BYTES");
  *out = JB_TREE_HASH_MAX_BYTES_DEFAULT;
  if (!v || !v[0]) return 0;
  char *end = NULL;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (errno || !end || *end || n < 1) return -1;
  *out = n;
  return 0;
}

int jb_ctl_tree_hash(int argc, char **argv) {
  const char *dir = NULL;
  bool as_json = false;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      as_json = true;
    } else if (!dir && argv[i][0] != '-') {
      dir = argv[i];
    } else {
      fprintf(stderr, "jailboxctl tree-hash: unexpected argument '%s'\n", argv[i]);
      return JB_CTL_USAGE;
    }
  }
  struct jb_tree_hash_limits lim = {0};
  if (!dir) {
    fprintf(stderr, "usage: jailboxctl tree-hash DIR [--json]\n");
    return JB_CTL_USAGE;
  }
  if (max_bytes_from_env(&lim.max_bytes) < 0) {
    fprintf(stderr,
            "jailboxctl tree-hash: JAILBOX_TREE_HASH_MAX_BYTES takes a whole number of "
            "bytes, at least 1\n");
    return JB_CTL_USAGE;
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* DIR itself may be a link */
  if (fd < 0) {
    fprintf(stderr, "jailboxctl tree-hash: %s: %s\n", jb_ctl_text(dir), strerror(errno));
    return JB_CTL_FAILED;
  }
  char hex[65];
  const char *why = NULL;
  jb_error err = {0};
  int rc = jb_tree_hash_at(fd, &lim, hex, &why, &err);
  close(fd);
  if (rc < 0) {
    fprintf(stderr, "jailboxctl tree-hash: %s\n", jb_ctl_text(err.msg));
    return JB_CTL_FAILED;
  }
  if (as_json) {
    json_t *j = rc == 0 ? json_pack("{s:s}", "treeSha256", hex)
                        : json_pack("{s:n,s:s}", "treeSha256", "treeSha256Why", why);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return JB_CTL_FAILED;
    puts(s);
    free(s);
  } else if (rc == 0) {
    puts(hex);
  } else {
    printf("null %s\n", why);
  }
  if (fflush(stdout) != 0) return JB_CTL_FAILED;
  return rc == 0 ? JB_CTL_OK : JB_CTL_REFUSED;
}
