/* keys.c — `jailboxctl keys rotate`: makes the key of a key file the active audit signing key,
 * straight in the database (an operator's tool, run where the database is reachable), and
 * schedules the retirement of the key it replaces (db/audit_store.h jb_audit_key_rotate). */
#include <errno.h>
#include <libpq-fe.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/ctl.h"
#include "db/audit_store.h"
#include "db/db.h"
#include "db/pgembed.h"
#include "lib/keyring.h"

#define GRACE_DEFAULT_S 60

int jb_ctl_keys_rotate(int argc, char **argv) {
  const char *file = NULL, *url = getenv("JAILBOX_DATABASE_URL");
  const char *state = getenv("JAILBOX_STATE_DIR");
  long long grace_s = GRACE_DEFAULT_S;
  for (int i = 0; i < argc; i++) {
    if ((strcmp(argv[i], "--key") == 0 || strcmp(argv[i], "--key-file") == 0) && i + 1 < argc) {
      file = argv[++i];
    } else if (strcmp(argv[i], "--grace") == 0 && i + 1 < argc) {
      char *end = NULL;
      errno = 0;
      grace_s = strtoll(argv[++i], &end, 10);
      if (errno || !end || *end || grace_s < 0 || grace_s > 7 * 24 * 3600) {
        fprintf(stderr, "jailboxctl keys rotate: --grace takes seconds, 0 .. 604800\n");
        return JB_CTL_USAGE;
      }
    } else if (strcmp(argv[i], "--database-url") == 0 && i + 1 < argc) {
      url = argv[++i];
    } else if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc) {
      state = argv[++i];
    } else {
      fprintf(stderr, "jailboxctl keys rotate: unexpected argument '%s'\n", argv[i]);
      return JB_CTL_USAGE;
    }
  }
  if (!file || !file[0]) {
    fprintf(stderr,
            "jailboxctl keys rotate: --key FILE is required (the new key; generated when FILE "
            "does not exist)\n");
    return JB_CTL_USAGE;
  }
  if (sodium_init() < 0) return JB_CTL_FAILED;
  jb_error err = {0};
  char gen_id[JB_AUDIT_KEY_ID_LEN + 1] = "";
  if (access(file, F_OK) < 0 && errno == ENOENT && jb_keyring_generate(file, gen_id, &err) < 0) {
    fprintf(stderr, "jailboxctl keys rotate: %s\n", err.msg);
    return JB_CTL_FAILED;
  }
  struct jb_keyring *k = NULL;
  if (jb_keyring_load(&k, NULL, file, &err) < 0) {
    fprintf(stderr, "jailboxctl keys rotate: %s\n", err.msg);
    return JB_CTL_FAILED;
  }
  char conninfo[2400];
  if (url && url[0]) {
    snprintf(conninfo, sizeof conninfo, "%s", url);
  } else { /* the embedded cluster of a jailboxd started with this state directory */
    char sock[1200], q[1300];
    snprintf(sock, sizeof sock, "%s/pg/run", state && state[0] ? state : "./var");
    if (jb_conninfo_quote(sock, q, sizeof q) < 0) {
      fprintf(stderr, "jailboxctl keys rotate: state directory path too long\n");
      jb_keyring_free(k);
      return JB_CTL_USAGE;
    }
    snprintf(conninfo, sizeof conninfo, "host=%s dbname=jailbox user=jailbox", q);
  }
  struct jb_db *db = NULL;
  if (jb_db_open(&db, conninfo, 1, 5, &err) < 0) {
    fprintf(stderr,
            "jailboxctl keys rotate: %s (is jailboxd running? set JAILBOX_DATABASE_URL or "
            "--state-dir)\n",
            err.msg);
    jb_keyring_free(k);
    return JB_CTL_FAILED;
  }
  PGconn *c = jb_db_acquire(db, &err);
  char retired[256] = "", at[32] = "";
  int rc = c ? jb_audit_key_rotate(c, k->key_id, k->pk, grace_s * 1000, retired, sizeof retired, at,
                                   &err)
             : JB_ERR_FAIL;
  jb_db_release(db, c);
  jb_db_close(db);
  if (rc != JB_OK) {
    fprintf(stderr, "jailboxctl keys rotate: %s\n", err.msg);
    jb_keyring_free(k);
    return JB_CTL_FAILED;
  }
  printf("rotated: key %s (%s%s) is active", k->key_id, file, gen_id[0] ? ", generated" : "");
  if (retired[0])
    printf("; retired %s as of %s (grace %llds)", retired, at, grace_s);
  else
    printf("; no other key was active");
  printf(
      "\nrunning instances sign with %s as soon as their key file holds it (read on change, "
      "SIGHUP, and every 2 s)\n",
      k->key_id);
  jb_keyring_free(k);
  return fflush(stdout) == 0 ? JB_CTL_OK : JB_CTL_FAILED;
}
