/* token.c — `jailboxctl token create --role service`: mints a service token for the
 * platform dashboard straight into the database (an operator's tool, run where the database
 * is reachable), prints it once, and keeps only its SHA-256. */
#include <libpq-fe.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/token.h"
#include "db/db.h"
#include "db/pgembed.h"
#include "db/tokens.h"
#include "cli/ctl.h"

int jb_ctl_token_create(int argc, char **argv) {
  const char *role = NULL, *label = NULL, *url = getenv("JAILBOX_DATABASE_URL");
  const char *state = getenv("JAILBOX_STATE_DIR");
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--role") == 0 && i + 1 < argc)
      role = argv[++i];
    else if (strcmp(argv[i], "--label") == 0 && i + 1 < argc)
      label = argv[++i];
    else if (strcmp(argv[i], "--database-url") == 0 && i + 1 < argc)
      url = argv[++i];
    else if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc)
      state = argv[++i];
    else {
      fprintf(stderr, "jailboxctl token create: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (!role || strcmp(role, "service") != 0) {
    fprintf(stderr,
            "jailboxctl token create: --role service is required (buyer and agent tokens "
            "are minted when a session opens)\n");
    return 2;
  }
  if (label && strlen(label) > 200) {
    fprintf(stderr, "jailboxctl token create: --label is longer than 200 bytes\n");
    return 2;
  }
  char conninfo[2400];
  if (url && url[0]) {
    snprintf(conninfo, sizeof conninfo, "%s", url);
  } else {
    /* the embedded cluster of a jailboxd started with this state directory */
    char sock[1200], q[1300];
    snprintf(sock, sizeof sock, "%s/pg/run", state && state[0] ? state : "./var");
    if (jb_conninfo_quote(sock, q, sizeof q) < 0) {
      fprintf(stderr, "jailboxctl token create: state directory path too long\n");
      return 2;
    }
    snprintf(conninfo, sizeof conninfo, "host=%s dbname=jailbox user=jailbox", q);
  }
  if (sodium_init() < 0) return 3;
  struct jb_db *db = NULL;
  jb_error err = {0};
  if (jb_db_open(&db, conninfo, 1, 5, &err) < 0) {
    fprintf(stderr,
            "jailboxctl token create: %s (is jailboxd running? set JAILBOX_DATABASE_URL "
            "or --state-dir)\n",
            err.msg);
    return 3;
  }
  PGconn *c = jb_db_acquire(db, &err);
  char text[JB_TOKEN_TEXT_LEN];
  unsigned char hash[32];
  jb_token_mint(text, hash);
  int rc = c ? jb_db_token_insert(c, hash, "service", NULL, label ? label : "jailboxctl", &err)
             : JB_ERR_FAIL;
  jb_db_release(db, c);
  jb_db_close(db);
  if (rc != JB_OK) {
    fprintf(stderr, "jailboxctl token create: %s\n", err.msg);
    return 3;
  }
  printf("%s\n", text);
  sodium_memzero(text, sizeof text);
  return 0;
}
