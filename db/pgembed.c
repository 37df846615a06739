/* pgembed.c — creates, starts and stops the embedded PostgreSQL cluster (see pgembed.h).
 * Settings go into a file included from postgresql.conf, never through a shell. */
#define _GNU_SOURCE
#include "db/pgembed.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "db/db.h"
#include "lib/log.h"

int jb_conninfo_quote(const char *in, char *out, size_t len) {
  size_t o = 0;
  if (len < 3) return -1;
  out[o++] = '\'';
  for (; *in; in++) {
    if (*in == '\'' || *in == '\\') {
      if (o + 1 >= len) return -1;
      out[o++] = '\\';
    }
    if (o + 1 >= len) return -1;
    out[o++] = *in;
  }
  if (o + 2 > len) return -1;
  out[o++] = '\'';
  out[o] = '\0';
  return 0;
}

static bool is_exec(const char *dir, const char *prog) {
  char p[1100];
  snprintf(p, sizeof p, "%s/%s", dir, prog);
  return access(p, X_OK) == 0;
}

/* Newest /usr/lib/postgresql/<N>/bin holding initdb, else the PATH directory of initdb. */
static int find_bindir(char *out, size_t len, jb_error *err) {
  DIR *d = opendir("/usr/lib/postgresql");
  long best = -1;
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      char *end;
      long v = strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end) continue;
      char bin[300];
      snprintf(bin, sizeof bin, "/usr/lib/postgresql/%s/bin", e->d_name);
      if (v > best && is_exec(bin, "initdb") && is_exec(bin, "pg_ctl")) {
        best = v;
        snprintf(out, len, "%s", bin);
      }
    }
    closedir(d);
  }
  if (best >= 0) return 0;
  const char *path = getenv("PATH");
  char *copy = path ? strdup(path) : NULL;
  for (char *save = NULL, *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir;
       dir = strtok_r(NULL, ":", &save))
    if (is_exec(dir, "initdb") && is_exec(dir, "pg_ctl")) {
      snprintf(out, len, "%s", dir);
      free(copy);
      return 0;
    }
  free(copy);
  return jb_fail(err, ENOENT,
                 "no PostgreSQL server binaries (initdb, pg_ctl) found; install postgresql-15 "
                 "or set JAILBOX_PG_BINDIR");
}

/* mkdir that accepts an existing directory, then sets owner and mode. */
static int ensure_dir(const char *path, mode_t mode, const struct jb_run_as *who, jb_error *err) {
  if (mkdir(path, mode) < 0 && errno != EEXIST) return jb_fail_errno(err, errno, "mkdir %s", path);
  struct stat st;
  if (stat(path, &st) < 0) return jb_fail_errno(err, errno, "stat %s", path);
  if (!S_ISDIR(st.st_mode)) return jb_fail(err, ENOTDIR, "%s is not a directory", path);
  if (who && who->switch_user && (st.st_uid != who->uid || st.st_gid != who->gid) &&
      chown(path, who->uid, who->gid) < 0)
    return jb_fail_errno(err, errno, "chown %s", path);
  if ((st.st_mode & 07777) != mode && chmod(path, mode) < 0)
    return jb_fail_errno(err, errno, "chmod %s", path);
  return 0;
}

/* Writes the settings file included by postgresql.conf: no TCP, our socket directory. */
static int write_settings(struct jb_pgembed *pg, jb_error *err) {
  char path[1200], tmp[1210];
  snprintf(path, sizeof path, "%s/jailbox.conf", pg->datadir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return jb_fail_errno(err, errno, "create %s", tmp);
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    return jb_fail_errno(err, errno, "fdopen %s", tmp);
  }
  /* PostgreSQL configuration strings: single quotes, a quote doubled. */
  fprintf(f,
          "# Written by jailboxd at every start; edits are lost.\n"
          "listen_addresses = ''\nunix_socket_permissions = 0700\nunix_socket_directories = '");
  for (const char *p = pg->sockdir; *p; p++) fputs(*p == '\'' ? "''" : (char[]){*p, 0}, f);
  fputs("'\nmax_connections = 200\nfsync = on\nsynchronous_commit = on\n", f);
  if (fclose(f) != 0) return jb_fail_errno(err, errno, "write %s", tmp);
  if (pg->who.switch_user && chown(tmp, pg->who.uid, pg->who.gid) < 0)
    return jb_fail_errno(err, errno, "chown %s", tmp);
  if (rename(tmp, path) < 0) return jb_fail_errno(err, errno, "rename %s", tmp);

  /* include it once from postgresql.conf */
  char conf[1200];
  snprintf(conf, sizeof conf, "%s/postgresql.conf", pg->datadir);
  FILE *c = fopen(conf, "r+e");
  if (!c) return jb_fail_errno(err, errno, "open %s", conf);
  char line[512];
  bool found = false;
  while (fgets(line, sizeof line, c))
    if (strncmp(line, "include_if_exists = 'jailbox.conf'", 34) == 0) found = true;
  if (!found) fputs("\ninclude_if_exists = 'jailbox.conf'\n", c);
  if (fclose(c) != 0) return jb_fail_errno(err, errno, "write %s", conf);
  return 0;
}

static int run_tool(struct jb_pgembed *pg, const char *const argv[], const char *what,
                    jb_error *err) {
  int rc = jb_proc_run(argv, &pg->who, pg->logfile, err);
  if (rc < 0) return jb_error_wrap(err, "%s", what);
  if (rc != 0) return jb_fail(err, EIO, "%s failed (exit %d); see %s", what, rc, pg->logfile);
  return 0;
}

/* Connects to the maintenance database and creates "jailbox" when it is missing. */
static int create_database(struct jb_pgembed *pg, jb_error *err) {
  char qs[1200], ci[1400];
  if (jb_conninfo_quote(pg->sockdir, qs, sizeof qs) < 0)
    return jb_fail(err, ENAMETOOLONG, "socket directory path too long");
  snprintf(ci, sizeof ci,
           "host=%s dbname=postgres user=jailbox connect_timeout=10 options='-c "
           "client_min_messages=warning'",
           qs);
  PGconn *c = PQconnectdb(ci);
  if (PQstatus(c) != CONNECTION_OK) {
    jb_db_fail(err, c, "embedded PostgreSQL");
    PQfinish(c);
    return -1;
  }
  PGresult *r = PQexec(c, "SELECT 1 FROM pg_database WHERE datname = 'jailbox'");
  int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
  int exists = ok && PQntuples(r) == 1;
  if (!ok) jb_db_fail_res(err, r, "embedded PostgreSQL");
  PQclear(r);
  if (ok && !exists) {
    r = PQexec(c, "CREATE DATABASE jailbox ENCODING 'UTF8' TEMPLATE template0");
    /* another instance may have created it meanwhile: 42P04 duplicate_database is fine */
    const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && !(st && strcmp(st, "42P04") == 0)) {
      jb_db_fail_res(err, r, "create database jailbox");
      ok = 0;
    }
    PQclear(r);
  }
  PQfinish(c);
  if (!ok) return -1;
  snprintf(pg->conninfo, sizeof pg->conninfo, "host=%s dbname=jailbox user=jailbox", qs);
  return 0;
}

int jb_pgembed_start(struct jb_pgembed *pg, const char *state_dir, const char *bindir,
                     const char *db_user, jb_error *err) {
  memset(pg, 0, sizeof *pg);
  if (bindir && bindir[0]) {
    if (!is_exec(bindir, "initdb") || !is_exec(bindir, "pg_ctl"))
      return jb_fail(err, ENOENT, "JAILBOX_PG_BINDIR %s has no initdb/pg_ctl", bindir);
    snprintf(pg->bindir, sizeof pg->bindir, "%s", bindir);
  } else if (find_bindir(pg->bindir, sizeof pg->bindir, err) < 0) {
    return -1;
  }
  if (geteuid() == 0 && jb_run_as_lookup(db_user, &pg->who, err) < 0)
    return jb_error_wrap(err, "the embedded PostgreSQL must not run as root");

  if (mkdir(state_dir, 0711) < 0 && errno != EEXIST)
    return jb_fail_errno(err, errno, "create state directory %s", state_dir);
  char abs[PATH_MAX];
  if (!realpath(state_dir, abs)) return jb_fail_errno(err, errno, "state directory %s", state_dir);
  if (strlen(abs) > 900) return jb_fail(err, ENAMETOOLONG, "state directory path too long");
  snprintf(pg->root, sizeof pg->root, "%s/pg", abs);
  snprintf(pg->datadir, sizeof pg->datadir, "%s/data", pg->root);
  snprintf(pg->sockdir, sizeof pg->sockdir, "%s/run", pg->root);
  snprintf(pg->logfile, sizeof pg->logfile, "%s/postgres.log", pg->root);
  struct sockaddr_un sun;
  if (strlen(pg->sockdir) + strlen("/.s.PGSQL.5432") >= sizeof sun.sun_path)
    return jb_fail(err, ENAMETOOLONG,
                   "state directory %s is too deep for a Unix socket path (%zu bytes max); "
                   "choose a shorter JAILBOX_STATE_DIR",
                   abs, sizeof sun.sun_path - 15);

  /* the cluster's user must be able to reach its directory from / */
  if (pg->who.switch_user) {
    struct stat st;
    if (stat(abs, &st) == 0 && (st.st_mode & 0001) == 0 && chmod(abs, st.st_mode | 0011) < 0)
      return jb_fail_errno(err, errno, "chmod %s", abs);
  }
  if (ensure_dir(pg->root, 0700, &pg->who, err) < 0 ||
      ensure_dir(pg->sockdir, 0700, &pg->who, err) < 0)
    return -1;

  char pgver[1200];
  snprintf(pgver, sizeof pgver, "%s/PG_VERSION", pg->datadir);
  char initdb[1100], pgctl[1100];
  snprintf(initdb, sizeof initdb, "%s/initdb", pg->bindir);
  snprintf(pgctl, sizeof pgctl, "%s/pg_ctl", pg->bindir);
  if (access(pgver, F_OK) != 0) {
    jb_log(JB_LOG_INFO, "creating embedded PostgreSQL cluster", "datadir", pg->datadir, NULL);
    const char *const argv[] = {
        initdb,  "-D", pg->datadir, "-U",         "jailbox",           "-A",
        "trust", "-E", "UTF8",      "--locale=C", "--no-instructions", NULL};
    if (run_tool(pg, argv, "initdb", err) < 0) {
      if (err && err->code == EACCES && pg->who.switch_user)
        jb_error_wrap(err, "user '%s' cannot reach %s (every parent directory needs o+x)", db_user,
                      pg->root);
      return -1;
    }
  }
  if (write_settings(pg, err) < 0) return -1;

  const char *const status_argv[] = {pgctl, "-D", pg->datadir, "status", NULL};
  jb_error serr = {0}; /* a failed status is answered by a start */
  int st = jb_proc_run(status_argv, &pg->who, NULL, &serr);
  if (st == 0) {
    jb_log(JB_LOG_WARN, "adopting embedded PostgreSQL left running", "datadir", pg->datadir, NULL);
  } else {
    const char *const argv[] = {pgctl, "-D", pg->datadir, "-l",    pg->logfile,
                                "-w",  "-t", "60",        "start", NULL};
    if (run_tool(pg, argv, "start embedded PostgreSQL", err) < 0) return -1;
  }
  pg->running = true;
  if (create_database(pg, err) < 0) {
    jb_pgembed_stop(pg, NULL);
    return -1;
  }
  jb_log(JB_LOG_INFO, "embedded PostgreSQL ready", "datadir", pg->datadir, "socket", pg->sockdir,
         NULL);
  return 0;
}

int jb_pgembed_stop(struct jb_pgembed *pg, jb_error *err) {
  if (!pg->running) return 0;
  char pgctl[1100];
  snprintf(pgctl, sizeof pgctl, "%s/pg_ctl", pg->bindir);
  const char *const argv[] = {pgctl, "-D", pg->datadir, "-m",   "fast",
                              "-w",  "-t", "60",        "stop", NULL};
  pg->running = false;
  if (run_tool(pg, argv, "stop embedded PostgreSQL", err) < 0) return -1;
  jb_log(JB_LOG_INFO, "embedded PostgreSQL stopped", "datadir", pg->datadir, NULL);
  return 0;
}
