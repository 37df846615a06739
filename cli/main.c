/* main.c — jailboxctl, the command line for buyers and operators: main() and the offline
 * audit verb — verification of an exported chain with the published keys (no server
 * needed). Signing-key rotation is cli/keys.c, token minting cli/token.c. The verbs that talk to the server (audit export, keys,
 * …) are in cli/rest.c.
 *
 *   jailboxctl audit verify FILE --keys KEYS.json [--head SEQ:HASH] [--sealed] [--session JOB] [--json]
 *   jailboxctl keys rotate --key FILE [--grace S] [--database-url URL | --state-dir DIR]
 *
 * Exit status: 0 intact / done; 1 tampered; 2 usage error or an input that cannot be read.
 * main() hands every other verb to cli/rest.c (jb_ctl_dispatch). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/ctl.h"
#include "lib/audit.h"
#include "lib/keyring.h"

#define MAX_KEYS_BYTES (1L << 20)

static void usage(FILE *out) {
  fputs(
      "usage:\n"
      "  jailboxctl audit verify FILE --keys KEYS.json [--head SEQ:HASH] [--sealed]\n"
      "                          [--session JOB] [--json]\n"
      "      verify an exported chain (FILE, or - for stdin) offline; KEYS.json is the body\n"
      "      of GET /v1/audit/keys; --head: a head kept earlier (jailbox:audit_head) the\n"
      "      chain must still reach; --sealed: the session has ended, the chain must end\n"
      "      with its seal. Exit 0 intact, 1 tampered, 2 usage or unreadable input.\n"
      "  jailboxctl audit export JOB   print the chain of JOB as JSON Lines\n"
      "  jailboxctl audit keys         print the published verification keys\n"
      "      (both read JAILBOX_URL, default http://127.0.0.1:8080, and JAILBOX_TOKEN)\n"
      "  jailboxctl keys rotate --key FILE [--grace S] [--database-url URL | --state-dir DIR]\n"
      "      make the key in FILE (generated, mode 0600, when FILE does not exist) the active\n"
      "      audit signing key and retire the others S seconds later (default 60; 0: at once),\n"
      "      in one transaction, in the database of JAILBOX_DATABASE_URL, else the embedded one\n"
      "      of JAILBOX_STATE_DIR (./var). Put FILE's key in every instance's key file (before\n"
      "      or within the grace): each signs with it once its file holds it, no restart\n"
      "  jailboxctl explain JOB [--json]\n"
      "      the session contract of JOB: which walls stand, their settings, what was checked\n"
      "      from inside, and the residual risks (JAILBOX_URL, JAILBOX_TOKEN: service or buyer)\n"
      "  jailboxctl token create --role service [--label L] [--database-url URL | --state-dir "
      "DIR]\n"
      "      mint a service token (printed once; only its SHA-256 is stored) in the database\n"
      "      of JAILBOX_DATABASE_URL, else the embedded one of JAILBOX_STATE_DIR (./var)\n",
      out);
}

/* Reads all of `path` ("-": stdin), at most `max` bytes. New buffer in *out (free it). */
static int slurp(const char *path, long max, char **out, size_t *len) {
  int fd = strcmp(path, "-") == 0 ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "jailboxctl: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (n == cap) {
      if ((long)cap >= max) {
        fprintf(stderr, "jailboxctl: %s: larger than %ld bytes\n", path, max);
        free(buf);
        buf = NULL;
        break;
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      fprintf(stderr, "jailboxctl: %s: %s\n", path, strerror(errno));
      free(buf);
      buf = NULL;
      break;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (!buf) return -1;
  *out = buf;
  *len = n;
  return 0;
}

static int audit_verify(int argc, char **argv) {
  const char *file = NULL, *keys_path = NULL, *head = NULL, *session = NULL;
  bool sealed = false, as_json = false;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--keys") == 0 && i + 1 < argc)
      keys_path = argv[++i];
    else if (strcmp(a, "--head") == 0 && i + 1 < argc)
      head = argv[++i];
    else if (strcmp(a, "--session") == 0 && i + 1 < argc)
      session = argv[++i];
    else if (strcmp(a, "--sealed") == 0)
      sealed = true;
    else if (strcmp(a, "--json") == 0)
      as_json = true;
    else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "jailboxctl: unknown or incomplete option %s\n", a);
      return 2;
    } else if (!file)
      file = a;
    else {
      fprintf(stderr, "jailboxctl: unexpected argument %s\n", a);
      return 2;
    }
  }
  if (!file) {
    usage(stderr);
    return 2;
  }
  if (!keys_path) {
    fprintf(stderr,
            "jailboxctl: audit verify needs --keys KEYS.json: the server's published "
            "verification keys, saved with `jailboxctl keys > keys.json` (GET /v1/audit/keys)\n");
    return 2;
  }
  jb_error err = {0};
  struct jb_audit_head known;
  if (head && jb_audit_head_parse(head, &known, &err) < 0) {
    fprintf(stderr, "jailboxctl: --head: %s\n", err.msg);
    return 2;
  }
  char *kbuf = NULL;
  size_t klen = 0;
  if (slurp(keys_path, MAX_KEYS_BYTES, &kbuf, &klen) < 0) return 2;
  struct jb_audit_pubkey *keys = NULL;
  size_t nkeys = 0;
  int rc = jb_audit_keys_parse(kbuf, klen, &keys, &nkeys, &err);
  free(kbuf);
  if (rc < 0) {
    fprintf(stderr, "jailboxctl: %s: %s\n", keys_path, err.msg);
    return 2;
  }
  /* read line by line: memory stays one line and one entry, whatever the file's size */
  FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "re");
  if (!in) {
    free(keys);
    fprintf(stderr, "jailboxctl: %s: %s\n", file, strerror(errno));
    return 2;
  }
  struct jb_audit_verify_opts opts = {
      .session = session, .known_head = head ? &known : NULL, .require_seal = sealed};
  struct jb_audit_result res;
  rc = jb_audit_verify_file(in, keys, nkeys, &opts, &res, &err);
  if (in != stdin) fclose(in);
  free(keys);
  if (rc < 0) {
    fprintf(stderr, "jailboxctl: %s: %s\n", file, err.msg);
    return 2;
  }
  char hex[2 * JB_AUDIT_HASH_LEN + 1];
  jb_audit_hex(res.head.hash, JB_AUDIT_HASH_LEN, hex);
  if (as_json) {
    json_t *j = jb_audit_result_json(&res);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
      fprintf(stderr, "jailboxctl: out of memory\n");
      return 2;
    }
    puts(s);
    free(s);
  } else if (res.ok) {
    /* what came from the file reaches the terminal without control characters */
    printf("intact: %lld entries%s, session %s, head %lld:%s\n", res.entries,
           res.sealed ? ", sealed" : "", res.session[0] ? jb_ctl_text(res.session) : "-",
           res.head.seq, res.head.seq ? hex : "-");
  } else {
    printf("TAMPERED at seq %lld: %s (%s)\n", res.first_bad_seq, jb_audit_reason_name(res.reason),
           jb_ctl_text(res.detail));
  }
  if (fflush(stdout) != 0) return 2;
  return res.ok ? 0 : 1;
}

int main(int argc, char **argv) {
  int ctl_rc;
  if (jb_ctl_dispatch(&argc, argv, &ctl_rc)) return ctl_rc; /* cli/rest.c: the other verbs */
  if (argc >= 3 && strcmp(argv[1], "audit") == 0 && strcmp(argv[2], "verify") == 0)
    return audit_verify(argc - 3, argv + 3);
  if (argc >= 3 && strcmp(argv[1], "token") == 0 && strcmp(argv[2], "create") == 0)
    return jb_ctl_token_create(argc - 3, argv + 3);
  if (argc >= 3 && strcmp(argv[1], "keys") == 0 && strcmp(argv[2], "rotate") == 0)
    return jb_ctl_keys_rotate(argc - 3, argv + 3);
  if (argc >= 2 && strcmp(argv[1], "tree-hash") == 0) return jb_ctl_tree_hash(argc - 2, argv + 2);
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  usage(stderr);
  return 2;
}
