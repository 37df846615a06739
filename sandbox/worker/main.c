/* main.c — jailbox-worker: the only process that talks to Docker. Its settings (the table for
 * lib/settings.h, all from the environment: the worker is normally started by jailboxd, which
 * passes the database), its start — the seccomp profile, the signing key, the pid file, the
 * database, taking over or clearing what a previous run left (adopt.c), the wall probe, the
 * threads — the main thread's loop (launch and teardown jobs, jb_kill, probing again), and its
 * stop.
 * worker.h says which thread owns what; the other files: launch.c, adopt.c, relay.c, signals.c,
 * sessions.c, control.c, direct_server.c, heads.c.
 *
 * `jailbox-worker --help` lists the settings. `--probe` runs the probe, prints it as JSON and
 * exits (0 when every required wall is up); `--explain` reads a session (or its contract) as
 * JSON on stdin and prints the contract for a person. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db/audit_store.h"
#include "db/launch_jobs.h"
#include "lib/images.h"
#include "lib/metrics.h"
#include "lib/scan.h"
#include "lib/settings.h"
#include "sandbox/proto/explain.h"
#include "sandbox/proto/shim.h"
#include "sandbox/worker/preimage_store.h"
#include "sandbox/worker/worker.h"

/* deploy/seccomp/jailbox.json, embedded at build time (cmake/embed_file.cmake) */
extern const unsigned char jb_seccomp_profile[];
extern const size_t jb_seccomp_profile_len;

/* ---- settings ------------------------------------------------------------------------------ */

#define S(f) offsetof(struct jb_worker_settings, f)
static const struct jb_setting settings[] = {
    {NULL, "JAILBOX_DATABASE_URL", JB_SETTING_STRING, S(database_url), "", 0, 0,
     "PostgreSQL URL or conninfo (required; jailboxd passes its own)"},
    {NULL, "JAILBOX_SIGNING_KEY_FILE", JB_SETTING_STRING, S(signing_key_file), "", 0, 0,
     "audit signing key (required: every session transition is a signed audit entry; jailboxd "
     "passes its own). Must hold the active key; read again when it changes"},
    {NULL, "JAILBOX_WORKER_ID", JB_SETTING_STRING, S(worker_id), "", 0, 0,
     "stable id of this worker; empty: the host name (jailboxd: host:state-dir#N)"},
    {NULL, "JAILBOX_DOCKER_SOCKET", JB_SETTING_STRING, S(docker_socket), "/var/run/docker.sock", 0,
     0, "Docker Engine API socket"},
    {NULL, "JAILBOX_SANDBOX_IMAGE", JB_SETTING_STRING, S(sandbox_image), JB_SANDBOX_IMAGE_DEFAULT,
     0, 0,
     "sandbox image of a session that names none, and the one the probe uses "
     "(deploy/sandbox-image/build.sh)"},
    {NULL, "JAILBOX_SANDBOX_IMAGES", JB_SETTING_STRING, S(sandbox_images),
     JB_SANDBOX_IMAGES_DEFAULT, 0, 0,
     "images a session may run in besides JAILBOX_SANDBOX_IMAGE, comma-separated (jailboxd "
     "passes its own); a launch with another fails"},
    {NULL, "JAILBOX_RUNTIME", JB_SETTING_STRING, S(runtime), "runsc", 0, 0,
     "name of the gVisor runtime registered with Docker"},
    {NULL, "JAILBOX_REQUIRE_WALLS", JB_SETTING_STRING, S(require_walls), JB_WALLS_DEFAULT_REQUIRE,
     0, 0,
     "walls a session must have, comma-separated; anything narrower is a development override"},
    {NULL, "JAILBOX_SECCOMP_PROFILE", JB_SETTING_STRING, S(seccomp_profile), "", 0, 0,
     "Wall 2 seccomp profile file; empty: the copy of deploy/seccomp/jailbox.json built in"},
    {NULL, "JAILBOX_CONTAINER_TMP_MIB", JB_SETTING_INT, S(container_tmp_mib), "16", 1, 4096,
     "size of the container's /tmp tmpfs, MiB"},
    {NULL, "JAILBOX_CHANGESET_UPPER_MIB", JB_SETTING_INT, S(changeset_upper_mib), "1024", 1, 65536,
     "size of the container's /jailbox-cs tmpfs (a writable command's overlay upper), MiB"},
    {NULL, "JAILBOX_JAIL_TMP_MIB", JB_SETTING_INT, S(jail_tmp_mib), "16", 1, 4096,
     "size of the jail's own /tmp tmpfs, MiB"},
    {NULL, "JAILBOX_START_TIMEOUT_MS", JB_SETTING_INT, S(start_timeout_ms), "30000", 1000, 600000,
     "container start to shim ready, ms"},
    {NULL, "JAILBOX_CALL_TIMEOUT_MS", JB_SETTING_INT, S(call_timeout_ms), "30000", 100, 3600000,
     "one call to the shim, ms"},
    {NULL, "JAILBOX_SHIM_SOCKET_DIR", JB_SETTING_STRING, S(shim_socket_dir), "", 0, 0,
     "where each session's shim socket directory (mode 0700) is made; empty: the directory of "
     "JAILBOX_WORKER_PIDFILE (jailboxd's state dir), else $TMPDIR or /tmp; none: the Docker attach "
     "stream only"},
    {NULL, "JAILBOX_WORKER_CONTROL", JB_SETTING_STRING, S(control_socket), "", 0, 0,
     "Unix socket (mode 0600) for operators and tests to talk to a session's shim; empty: none"},
    {NULL, "JAILBOX_WORKER_OPS_SOCKET", JB_SETTING_STRING, S(ops_socket), "", 0, 0,
     "Unix socket (mode 0600) on which jailboxd hands reads, lists and stats straight to this "
     "worker (sandbox/proto/direct.h); empty: none (jailboxd: <state dir>/worker-N.ops)"},
    {NULL, "JAILBOX_WORKER_PIDFILE", JB_SETTING_STRING, S(pidfile), "", 0, 0,
     "pid file, locked while the worker runs; empty: none"},
    {NULL, "JAILBOX_PRESCAN_HOLD", JB_SETTING_BOOL, S(prescan_hold), "0", 0, 0,
     "1: leave sessions in prescanning for the buyer's pre_scan_done; 0: go on to awaiting_agent"},
    {NULL, "JAILBOX_PRESCAN_EXCLUDE_SECRETS", JB_SETTING_BOOL, S(prescan_exclude_secrets), "0", 0,
     0,
     "1: files the scan rules' secret rules match are hidden from the agent and refused from "
     "the start (flagged secret); 0: the pre-scan only lists them for the buyer"},
    {NULL, "JAILBOX_PRESCAN_HASH_MAX_MIB", JB_SETTING_INT, S(prescan_hash_max_mib), "1024", 0,
     1L << 30,
     "pre-scan: regular files over this many MiB are not read, only flagged too_large "
     "(sandbox/WALLS.md)"},
    {NULL, "JAILBOX_TREE_HASH_MAX_BYTES", JB_SETTING_INT, S(tree_hash_max_bytes), "4294967296", 1,
     1L << 50,
     "bytes of file content one tree hash (the pre-scan's treeSha256) reads at most; past it the "
     "hash is null (api/audit.md)"},
    {NULL, "JAILBOX_EFFECTS_MAX_ENTRIES", JB_SETTING_INT, S(effects_max_entries), "250000", 1,
     10000000,
     "entries the walk around a writable command reads at most; past it the rest is swept for "
     "landings, and when that is cut too the command's effects are incomplete (an alert; later "
     "writable commands refused until the buyer clears it)"},
    {NULL, "JAILBOX_EFFECTS_HASH_MAX_MIB", JB_SETTING_INT, S(effects_hash_max_mib), "4096", 1,
     1L << 30,
     "MiB of changed files the walk around a writable command reads to hash, at most (unchanged "
     "and sparse files are not read); past it the effects are incomplete"},
    {NULL, "JAILBOX_EFFECTS_MAX_MS", JB_SETTING_INT, S(effects_max_ms), "30000", 100, 3600000,
     "milliseconds one walk around a writable command may take; past it the effects are "
     "incomplete"},
    {NULL, "JAILBOX_EFFECTS_SWEEP_MAX_ENTRIES", JB_SETTING_INT, S(effects_sweep_max_entries),
     "2000000", 1, 100000000,
     "entries the landing sweep reads at most when the walk after a writable command was cut "
     "(stat only, no hashing); past it the effects stay incomplete"},
    {NULL, "JAILBOX_EFFECTS_SWEEP_MAX_MS", JB_SETTING_INT, S(effects_sweep_max_ms), "60000", 100,
     3600000,
     "milliseconds the landing sweep past a cut walk may take; past it the effects stay "
     "incomplete"},
    {NULL, "JAILBOX_WORKER_MAX_SESSIONS", JB_SETTING_INT, S(max_sessions), "64", 1,
     JB_WORKER_SESSIONS_MAX, "sessions this worker runs at once"},
    {NULL, "JAILBOX_WORKER_MAX_COMMANDS", JB_SETTING_INT, S(max_commands), "16", 1,
     JB_WORKER_COMMANDS_MAX,
     "agent commands (exec) this worker runs at once, one per session; each has a thread and a "
     "database connection of its own, so that file ops never wait behind a command"},
    {NULL, "JAILBOX_WORKER_LEASE_S", JB_SETTING_INT, S(lease_s), "30", 3, 86400,
     "a session's lease: a session whose worker is gone this long (not restarted to re-adopt "
     "it) is failed with the reason worker_unavailable; renewed every third of it"},
    {NULL, "JAILBOX_LOG_LEVEL", JB_SETTING_STRING, S(log_level), "info", 0, 0,
     "debug, info, warn, error"},
    {NULL, "JAILBOX_ESCAPE_ABORT", JB_SETTING_STRING, S(escape_abort), JB_ESCAPE_KINDS_TEXT, 0, 0,
     "signal kinds that abort a session at once (jailboxd passes its own)"},
    {NULL, "JAILBOX_ALERT_AFTER", JB_SETTING_STRING, S(alert_after), JB_ALERT_AFTER_DEFAULT, 0, 0,
     "kind:N,...: signals that alert every N occurrences (jailboxd passes its own)"},
    {NULL, "JAILBOX_TRUST_PENALTY", JB_SETTING_INT, S(trust_penalty), "20", 0, 1000,
     "trust score points an agent loses per escape abort (jailboxd passes its own)"},
    {NULL, "JAILBOX_SCAN_RULES", JB_SETTING_STRING, S(scan_rules), "", 0, 0,
     "the scan rules file whose secret and redact rules redact exec output (grammar in "
     "deploy/scan-rules); empty: the rules built in (jailboxd passes its own)"},
    {NULL, "JAILBOX_PREIMAGE_DIR", JB_SETTING_STRING, S(preimage_dir), "", 0, 0,
     "where the pre-images of the files ops change are kept (<dir>/<jobId>/objects, mode 0700); "
     "empty: preimages/ beside JAILBOX_WORKER_PIDFILE (jailboxd's state dir), else "
     "$TMPDIR/jailbox-preimages"},
    {NULL, "JAILBOX_PREIMAGE_MAX_BYTES", JB_SETTING_INT, S(preimage_max_bytes), "268435456", 0,
     1L << 50,
     "bytes of pre-images a session keeps at most; an op that would pass it fails with "
     "preimage_budget (it is not run unprotected)"},
    {NULL, "JAILBOX_PREIMAGE_RETENTION_S", JB_SETTING_INT, S(preimage_retention_s), "604800", 0,
     1L << 40,
     "seconds a session's pre-images are kept after it ended (done, aborted, failed); an "
     "accepted session's go at once"},
    {NULL, "JAILBOX_ROLLBACK_ON_ESCAPE", JB_SETTING_BOOL, S(rollback_on_escape), "0", 0, 0,
     "1: a session an escape ends is rolled back to its state at open (not forced: conflicts are "
     "listed, left alone) once its sandbox is gone and before its chain is sealed"},
    {NULL, "JAILBOX_ROLLBACK_ON_ESCAPE_TIMEOUT_S", JB_SETTING_INT, S(rollback_on_escape_timeout_s),
     "120", 5, 3600,
     "seconds an escape's seal waits at most for that rollback; then the chain is sealed anyway, "
     "the rollback recorded as failed (timeout)"},
};
#undef S
#define N_SETTINGS JB_SETTINGS_COUNT(settings)

static const char *env_lookup(const char *name) { return getenv(name); }

static void print_help(const char *prog) {
  printf(
      "Usage: %s [--probe]\n\njailbox-worker: builds the walls of jailbox sessions. Settings:\n\n",
      prog);
  jb_settings_print_help(stdout, settings, N_SETTINGS);
  printf(
      "\n  --probe   probe the walls, print the result as JSON, exit 0 when every required wall is "
      "up\n");
  printf(
      "  --explain read GET /v1/jailbox/:jobId (or its walls) on stdin, print the session contract "
      "for a person\n");
  printf(
      "  --keeper PATH  the descriptor keeper (started by the worker itself): holds the sessions' "
      "shim channels at the socket PATH across a restart\n\nSignals: SIGTERM drains (the "
      "sessions are left running for the next worker under this id), SIGINT ends them.\n");
}

/* The Wall 2 seccomp profile: JAILBOX_SECCOMP_PROFILE's file, or the copy built in; checked to
 * be a Docker profile, and hashed for the contracts. */
static int load_profile(struct jb_worker *w, jb_error *err) {
  const char *file = w->set.seccomp_profile;
  const char *text;
  size_t len;
  if (file[0]) {
    FILE *f = fopen(file, "re");
    if (!f) return jb_fail_errno(err, errno, "JAILBOX_SECCOMP_PROFILE %s", file);
    w->profile_buf = malloc(1 << 20);
    len = w->profile_buf ? fread(w->profile_buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!w->profile_buf || len == 0)
      return jb_fail(err, EINVAL, "JAILBOX_SECCOMP_PROFILE %s: empty or unreadable", file);
    w->profile_buf[len] = '\0';
    text = w->profile_buf;
    snprintf(w->walls.profile_source, sizeof w->walls.profile_source, "file %s", file);
  } else {
    text = (const char *)jb_seccomp_profile;
    len = jb_seccomp_profile_len;
    snprintf(w->walls.profile_source, sizeof w->walls.profile_source, "built into jailbox-worker");
  }
  json_error_t je;
  json_t *p = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!json_is_object(p) || !json_is_array(json_object_get(p, "syscalls"))) {
    json_decref(p);
    return jb_fail(err, EINVAL, "seccomp profile (%s) is not a Docker profile: %s",
                   w->walls.profile_source, je.text);
  }
  json_decref(p);
  w->walls.profile = text;
  w->walls.profile_len = len;
  unsigned char h[32];
  crypto_hash_sha256(h, (const unsigned char *)text, len);
  sodium_bin2hex(w->walls.profile_sha256, sizeof w->walls.profile_sha256, h, sizeof h);
  return 0;
}

/* The directory of the pid file (jailboxd's state dir), resolved, into `abs` (PATH_MAX
 * bytes); false when there is no pid file or it cannot be resolved. */
static bool pidfile_dir(const struct jb_worker_settings *set, char *abs) {
  char pid[PATH_MAX];
  snprintf(pid, sizeof pid, "%s", set->pidfile);
  char *slash = strrchr(pid, '/');
  const char *pdir = !slash ? "." : slash == pid ? "/" : (*slash = '\0', pid);
  return pid[0] && realpath(pdir, abs);
}

/* $TMPDIR when absolute, else /tmp. */
static const char *tmp_dir(void) {
  return getenv("TMPDIR") && getenv("TMPDIR")[0] == '/' ? getenv("TMPDIR") : "/tmp";
}

/* JAILBOX_SHIM_SOCKET_DIR into c->shim_socket_dir (absolute, made if missing) or
 * c->shim_socket_off. The default sits where a socket path fits (sockaddr_un: 108 bytes,
 * of which "/jbshim-XXXXXX/shim.sock" takes 24). 0 or -1 with `err`. */
static int shim_socket_dir(const struct jb_worker_settings *set, struct jb_walls_config *c,
                           jb_error *err) {
  const char *v = set->shim_socket_dir;
  const size_t fits = 107 - strlen("/jbshim-XXXXXX/" JB_SHIM_SOCKET_NAME);
  char dir[PATH_MAX] = "";
  c->shim_socket_off = strcmp(v, "none") == 0;
  if (c->shim_socket_off) return 0;
  if (v[0]) {
    snprintf(dir, sizeof dir, "%s", v);
  } else {
    char abs[PATH_MAX];
    if (pidfile_dir(set, abs) && strlen(abs) <= fits) snprintf(dir, sizeof dir, "%s", abs);
    if (!dir[0]) snprintf(dir, sizeof dir, "%s", tmp_dir());
  }
  if (dir[0] != '/')
    return jb_fail(err, EINVAL, "JAILBOX_SHIM_SOCKET_DIR must be an absolute path or none");
  if (strlen(dir) > fits || strlen(dir) >= sizeof c->shim_socket_dir)
    return jb_fail(
        err, ENAMETOOLONG,
        "JAILBOX_SHIM_SOCKET_DIR %s: at most %zu bytes (a socket path under it must fit 108)", dir,
        fits);
  if (mkdir(dir, 0700) < 0 && errno != EEXIST)
    return jb_fail_errno(err, errno, "JAILBOX_SHIM_SOCKET_DIR %s", dir);
  snprintf(c->shim_socket_dir, sizeof c->shim_socket_dir, "%s", dir);
  return 0;
}

/* JAILBOX_PREIMAGE_DIR into `out` (`size` bytes): absolute, made if missing (0700), this
 * user's own and writable by no one else (jb_pstore_open_base). The
 * default sits beside the pid file (jailboxd's state dir). 0 or -1 with `err`. */
static int preimage_dir(const struct jb_worker_settings *set, char *out, size_t size,
                        jb_error *err) {
  char abs[PATH_MAX];
  int n = set->preimage_dir[0]    ? snprintf(out, size, "%s", set->preimage_dir)
          : pidfile_dir(set, abs) ? snprintf(out, size, "%s/preimages", abs)
                                  : snprintf(out, size, "%s/jailbox-preimages", tmp_dir());
  if (n < 0 || (size_t)n >= size || out[0] != '/')
    return jb_fail(err, EINVAL, "JAILBOX_PREIMAGE_DIR must be an absolute path");
  int fd = jb_pstore_open_base(out, true, err); /* this user's own, writable by no one else */
  if (fd < 0) return jb_error_wrap(err, "JAILBOX_PREIMAGE_DIR");
  close(fd);
  return 0;
}

/* The settings into w->set, and what follows from them into the walls' configuration, the
 * escape policy and the seccomp profile. 0, or -1 with `err`. */
static int load_config(struct jb_worker *w, jb_error *err) {
  if (jb_settings_load(&w->set, settings, N_SETTINGS, 0, NULL, env_lookup, err) != 0) return -1;
  const struct jb_worker_settings *set = &w->set;
  jb_log_set_level(set->log_level);
  struct jb_walls_config *c = &w->walls;
  if (set->worker_id[0])
    snprintf(c->worker_id, sizeof c->worker_id, "%s", set->worker_id);
  else if (gethostname(c->worker_id, sizeof c->worker_id - 1) < 0)
    snprintf(c->worker_id, sizeof c->worker_id, "worker");
  snprintf(c->docker.socket, sizeof c->docker.socket, "%s", set->docker_socket);
  if (jb_image_name_canonical(set->sandbox_image, c->image, sizeof c->image, err) < 0)
    return jb_error_wrap(err, "JAILBOX_SANDBOX_IMAGE");
  if (jb_image_list_check(set->sandbox_images, err) < 0)
    return jb_error_wrap(err, "JAILBOX_SANDBOX_IMAGES");
  snprintf(c->runtime, sizeof c->runtime, "%s", set->runtime);
  snprintf(c->require_text, sizeof c->require_text, "%s", set->require_walls);
  char req[128];
  snprintf(req, sizeof req, "%s", c->require_text);
  char *save = NULL;
  for (char *t = strtok_r(req, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
    int wall;
    for (wall = 0; wall < JB_WALL_COUNT; wall++)
      if (strcmp(t, jb_wall_names[wall]) == 0) break;
    if (wall == JB_WALL_COUNT)
      return jb_fail(err, EINVAL,
                     "JAILBOX_REQUIRE_WALLS: unknown wall '%s' (gvisor, docker, bwrap)", t);
    c->require[wall] = true;
  }
  c->override =
      !(c->require[JB_WALL_GVISOR] && c->require[JB_WALL_DOCKER] && c->require[JB_WALL_BWRAP]);
  c->container_tmp_mib = set->container_tmp_mib;
  c->changeset_upper_mib = set->changeset_upper_mib;
  c->jail_tmp_mib = set->jail_tmp_mib;
  c->start_timeout_ms = set->start_timeout_ms;
  c->call_timeout_ms = set->call_timeout_ms;
  if (shim_socket_dir(set, c, err) < 0) return -1;
  if (preimage_dir(set, w->preimage_dir, sizeof w->preimage_dir, err) < 0) return -1;
  w->prescan_hash_max = (long long)set->prescan_hash_max_mib << 20;
  w->tree_hash = (struct jb_tree_hash_limits){.max_entries = JB_TREE_HASH_MAX_ENTRIES_DEFAULT,
                                              .max_bytes = set->tree_hash_max_bytes};
  if (jb_escape_policy_parse(&w->policy, set->escape_abort, set->alert_after, set->trust_penalty,
                             err) < 0)
    return -1;
  return load_profile(w, err);
}

/* ---- start ------------------------------------------------------------------------------- */

/* Locks the pid file so that jailboxd (and a second worker with the same id) can tell this
 * one runs. The fd, kept open (and locked) for the life of the process, or -1 with `err`. */
static int take_pidfile(const char *path, jb_error *err) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return jb_fail_errno(err, errno, "pid file %s", path);
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    close(fd);
    return jb_fail(err, EEXIST, "pid file %s is locked: a worker with this id runs already", path);
  }
  char pid[32], ready[PATH_MAX];
  int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  snprintf(ready, sizeof ready, "%s.ready", path);
  unlink(ready); /* an earlier worker's: this one is not ready yet */
  if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
    int e = errno;
    close(fd);
    return jb_fail_errno(err, e, "pid file %s", path);
  }
  return fd;
}

/* Says this worker is ready (its sessions re-adopted, its threads up) to jailboxd: its pid in
 * "<pid file>.ready", put in place by a rename (server/workers.c restarts a worker that was
 * ready at once when it dies). Logged when it cannot be written. */
static void mark_ready(struct jb_worker *w) {
  const char *path = w->set.pidfile;
  if (!path[0]) return;
  char ready[PATH_MAX], tmp[PATH_MAX + 8], pid[32];
  snprintf(ready, sizeof ready, "%s.ready", path);
  snprintf(tmp, sizeof tmp, "%s.tmp", ready);
  int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  bool ok = fd >= 0 && write(fd, pid, (size_t)n) == n;
  if (fd >= 0) close(fd);
  if (!ok || rename(tmp, ready) < 0)
    slog(w, JB_LOG_WARN, NULL, "cannot mark the worker ready", "path", ready, "error",
         strerror(errno), NULL);
}

static bool probe_ok(const struct jb_worker *w, const struct jb_probe *p) {
  for (int wall = 0; wall < JB_WALL_COUNT; wall++)
    if (w->walls.require[wall] && !p->up[wall]) return false;
  return true;
}

static void log_probe(struct jb_worker *w, const struct jb_probe *p) {
  for (int wall = 0; wall < JB_WALL_COUNT; wall++)
    slog(w, p->up[wall] ? JB_LOG_INFO : (w->walls.require[wall] ? JB_LOG_ERROR : JB_LOG_WARN), NULL,
         "wall probe", "wall", jb_wall_names[wall], "up", p->up[wall] ? "true" : "false",
         "required", w->walls.require[wall] ? "true" : "false", "reason", p->reason[wall], NULL);
}

/* --probe: the probe as JSON on stdout; the exit code. */
static int probe_only(struct jb_worker *w) {
  jb_walls_probe(&w->walls, &w->probe);
  json_t *j = jb_probe_json(&w->probe);
  json_object_set_new(j, "required", json_string(w->walls.require_text));
  json_object_set_new(j, "seccompProfileSha256", json_string(w->walls.profile_sha256));
  char *s = json_dumps(j, JSON_INDENT(2));
  printf("%s\n", s ? s : "{}");
  free(s);
  json_decref(j);
  return probe_ok(w, &w->probe) ? 0 : 1;
}

/* Never sign with a key verifiers cannot find or that may not sign: the key must be the
 * active one (db/signer.h; a worker never publishes or retires a key, but on an empty
 * database), and a rotated key is taken up from the file as jailboxd does. */
static int open_signer(struct jb_worker *w, jb_error *err) {
  return jb_signer_open(&w->signer, w->db, "/nonexistent", w->set.signing_key_file,
                        "jailbox-worker", err);
}

/* The deployment's name (the database's), into `name` (`len` bytes). */
static int deployment_name(struct jb_worker *w, char *name, size_t len, jb_error *err) {
  cleanup_conn struct worker_conn conn = worker_conn(w, err);
  if (!conn.pg || jb_db_deployment_name(conn.pg, name, len, err) != JB_OK) return -1;
  return 0;
}

/* From the settings to a worker ready to take jobs: the signing key, the pid file, the
 * database and the deployment label. 0, or the exit code after saying why. */
static int start(struct jb_worker *w) {
  jb_error err = {0};
  if (!w->set.database_url[0]) {
    fprintf(stderr, "jailbox-worker: JAILBOX_DATABASE_URL is required\n");
    return 2;
  }
  const char *keyfile = w->set.signing_key_file;
  if (!keyfile[0]) {
    fprintf(stderr,
            "jailbox-worker: JAILBOX_SIGNING_KEY_FILE is required (the audit signing key)\n");
    return 2;
  }
  struct jb_keyring *keys = NULL; /* read here to report a bad file early; kept by the signer */
  if (jb_keyring_load(&keys, "/nonexistent", keyfile, &err) < 0) {
    fprintf(stderr, "jailbox-worker: %s\n", err.msg);
    return 2;
  }
  jb_keyring_free(keys);
  /* exec output is redacted with these rules (exec_op.c); a bad file stops the start */
  struct jb_scan_rules *rules = NULL;
  if (jb_scan_rules_load(w->set.scan_rules, &rules, &err) < 0) {
    fprintf(stderr, "jailbox-worker: scan rules: %s\n", err.msg);
    return 2;
  }
  jb_scan_use(rules);
  if (w->set.pidfile[0] && take_pidfile(w->set.pidfile, &err) < 0) {
    jb_log(JB_LOG_FATAL, err.msg, "worker", w->walls.worker_id, NULL);
    return 1;
  }
  slog(w, JB_LOG_INFO, NULL, "worker starting", "require", w->walls.require_text, "image",
       w->walls.image, "runtime", w->walls.runtime, "seccompProfileSha256", w->walls.profile_sha256,
       NULL);
  if (w->walls.override)
    slog(w, JB_LOG_WARN, NULL, "development override: sessions may run with fewer walls", "require",
         w->walls.require_text, NULL);
  if (jb_db_open(&w->db, w->set.database_url, 8, 10, &err) < 0) {
    slog(w, JB_LOG_FATAL, NULL, err.msg, "phase", "database", NULL);
    return 1;
  }
  if (commands_init(w, &err) < 0) {
    slog(w, JB_LOG_FATAL, NULL, err.msg, "phase", "database", NULL);
    return 1;
  }
  if (open_signer(w, &err) < 0) {
    slog(w, JB_LOG_FATAL, NULL, err.msg, "phase", "audit signing key", NULL);
    return 1;
  }
  char name[300];
  if (deployment_name(w, name, sizeof name, &err) < 0) {
    slog(w, JB_LOG_FATAL, NULL, err.msg, "phase", "deployment name", NULL);
    return 1;
  }
  unsigned char h[32];
  crypto_hash_sha256(h, (const unsigned char *)name, strlen(name));
  sodium_bin2hex(w->walls.deployment, sizeof w->walls.deployment, h, 8);
  slog(w, JB_LOG_INFO, NULL, "deployment", "name", name, "label", w->walls.deployment, NULL);
  return 0;
}

/* The threads besides the main one and the sessions' (worker.h). */
struct threads {
  pthread_t control, ops, heads, direct;
  bool has_control, has_ops, has_heads, has_direct;
};

static void start_threads(struct jb_worker *w, struct threads *t) {
  jb_error err = {0};
  const char *cpath = w->set.control_socket;
  if (cpath[0]) {
    w->control_fd = worker_unix_listen(cpath, "JAILBOX_WORKER_CONTROL", &err);
    if (w->control_fd < 0)
      slog(w, JB_LOG_ERROR, NULL, err.msg, "phase", "control socket", NULL);
    else
      t->has_control = pthread_create(&t->control, NULL, control_main, w) == 0;
  }
  t->has_ops = pthread_create(&t->ops, NULL, relay_queued_main, w) == 0;
  heads_init(w);
  t->has_heads = pthread_create(&t->heads, NULL, heads_main, w) == 0;
  /* without it the heads of direct reads would never be announced: no ops socket then, and
   * jailboxd sends every op the queued way */
  if (!t->has_heads)
    slog(w, JB_LOG_ERROR, NULL, "cannot start the audit-head thread: no ops socket", NULL);
  const char *opath = w->set.ops_socket;
  if (opath[0] && t->has_heads) {
    w->ops_fd = worker_unix_listen(opath, "JAILBOX_WORKER_OPS_SOCKET", &err);
    if (w->ops_fd < 0)
      slog(w, JB_LOG_ERROR, NULL, err.msg, "phase", "ops socket", NULL);
    else
      t->has_direct = pthread_create(&t->direct, NULL, direct_server_main, w) == 0;
  }
  slog(w, JB_LOG_INFO, NULL, "worker ready", "control", t->has_control ? cpath : "", NULL);
}

/* ---- the main thread's loop ----------------------------------------------------------------- */

/* A wall that was down may have been fixed: probes again every 30 s while one is down.
 * *last_probe: when it last ran, ms since the epoch. */
static void probe_again(struct jb_worker *w, long long *last_probe) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  struct jb_probe snap = worker_probe(w);
  if (probe_ok(w, &snap) || now - *last_probe <= 30000) return;
  struct jb_probe p;
  jb_walls_probe(&w->walls, &p);
  pthread_mutex_lock(&w->lock);
  w->probe = p;
  pthread_mutex_unlock(&w->lock);
  *last_probe = now;
  log_probe(w, &p);
}

/* Until SIGTERM or SIGINT on `sfd`: woken by a change notification (sessions and their launch
 * jobs are inserted together), jb_kill, a signal, or once a second to catch anything missed. */
/* Renews this worker's leases every third of JAILBOX_WORKER_LEASE_S (*last: when, ms). */
static void renew_leases(struct jb_worker *w, long long *last) {
  long long now = jb_now_ms();
  if (now - *last < w->set.lease_s * 1000 / 3) return;
  jb_error err = {0};
  cleanup_conn struct worker_conn conn = worker_conn(w, &err);
  if (!conn.pg || jb_db_leases_renew(conn.pg, w->walls.worker_id, w->set.lease_s, &err) != JB_OK)
    slog(w, JB_LOG_WARN, NULL, err.msg, "step", "renew leases", NULL);
  else
    *last = now;
}

static void serve(struct jb_worker *w, int sfd) {
  PGconn *listen = NULL;
  long long last_probe = w->probe.at_ms, last_lease = 0, last_preimages = jb_now_ms();
  while (!atomic_load(&w->stopping)) {
    renew_leases(w, &last_lease);
    /* jb_kill: an abort waits for an op this worker runs (api/core/escape.h) */
    worker_listen(w, &listen, "LISTEN jb_change; LISTEN jb_kill");
    launch_drain_queue(w);
    sessions_reap(w);
    probe_again(w, &last_probe);
    preimages_sweep(w, &last_preimages);
    struct pollfd pf[2] = {{.fd = sfd, .events = POLLIN},
                           {.fd = listen ? PQsocket(listen) : -1, .events = POLLIN}};
    int pr = poll(pf, 2, 1000);
    if (pr > 0 && (pf[0].revents & POLLIN)) {
      struct signalfd_siginfo si;
      if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        bool drain = si.ssi_signo == SIGTERM && w->keeper_path[0];
        slog(w, JB_LOG_INFO, NULL, "worker stopping", "signal",
             si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", "sessions",
             drain ? "left running for the next worker" : "ended", NULL);
        atomic_store(&w->drain, drain);
        atomic_store(&w->stopping, true);
      }
    }
    if (listen && pr > 0 && (pf[1].revents & POLLIN)) {
      PQconsumeInput(listen);
      PGnotify *n;
      while ((n = PQnotifies(listen))) {
        if (!strcmp(n->relname, "jb_kill") && n->extra && n->extra[0]) kill_for_abort(w, n->extra);
        PQfreemem(n);
      }
    }
  }
  if (listen) PQfinish(listen);
}

/* ---- stop ----------------------------------------------------------------------------------- */

/* SIGINT: every session of this worker ends with it. SIGTERM (a drain, for an upgrade): no
 * session is touched — the op in flight of each finishes, no new one is claimed, and its
 * thread lets go of the sandbox without removing it (launch.c); the next worker under this id
 * re-adopts them. A session on the attach-stream channel cannot outlive the worker (the
 * shim's stdin closes): it ends either way. Then the other threads; the heads the last direct
 * ops committed are announced before the pool closes. The ops socket's threads end after the
 * request each runs (an answer no peer takes ends its connection within 30 s). */
struct stop_work {
  struct jb_worker *w;
  struct jb_session **list;
  size_t n;
  atomic_size_t next; /* the index of the next session to end */
};

/* how long a stopping worker lets each sandbox end by itself before its removal kills it */
#define STOP_QUIT_MS 3000

/* Ends sessions of `arg` (a struct stop_work) until none is left: each is failed with
 * "worker stopped", its sandbox let quit (sandbox_quit) and its container removed, except the
 * ones a drain keeps. */
static void *stop_main(void *arg) {
  struct stop_work *sw = arg;
  struct jb_worker *w = sw->w;
  for (size_t i; (i = atomic_fetch_add(&sw->next, 1)) < sw->n;) {
    struct jb_session *s = sw->list[i];
    if (atomic_load(&w->drain) && session_keepable(s)) continue;
    atomic_store(&s->teardown, true);
    session_fail(w, s->job_id, "worker stopped");
    char cid[80];
    sandbox_quit(s, STOP_QUIT_MS, cid);
    jb_error err = {0};
    if (cid[0]) jb_container_remove(&w->walls, cid, &err);
  }
  return NULL;
}

static void stop(struct jb_worker *w, struct threads *t) {
  pthread_mutex_lock(&w->lock);
  size_t n = w->n_sessions;
  struct jb_session *list[JB_WORKER_SESSIONS_MAX];
  memcpy(list, w->sessions, n * sizeof list[0]);
  pthread_mutex_unlock(&w->lock);
  /* the sessions end side by side: one after another, a container removal under runsc that
   * takes seconds on a loaded host times 64 sessions would outlast the grace jailboxd gives a
   * stopping worker, and its SIGKILL would leave the rest behind */
  struct stop_work sw = {.w = w, .list = list, .n = n};
  atomic_init(&sw.next, 0);
  sessions_in_parallel(stop_main, &sw, n);
  for (size_t i = 0; i < n; i++) pthread_join(list[i]->thread, NULL);
  /* the threads that may still hold a session or a connection end first: an op they run
   * fails at once now that the containers are gone */
  if (t->has_control) pthread_join(t->control, NULL);
  if (t->has_ops) pthread_join(t->ops, NULL);
  if (t->has_direct)
    pthread_join(t->direct, NULL); /* its pool's requests ended, connections closed */
  rollbacks_wait(w, 10000); /* each stops between two rows; what is left is re-run later */
  heads_stop(w);
  if (t->has_heads) pthread_join(t->heads, NULL);
  for (size_t i = 0; i < n; i++) session_free(list[i]);
  w->n_sessions = 0;
  if (w->ops_fd >= 0) {
    close(w->ops_fd);
    unlink(w->set.ops_socket);
  }
  if (w->control_fd >= 0) {
    close(w->control_fd);
    unlink(w->set.control_socket);
  }
}

/* ---- main ----------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  bool probe = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      print_help(argv[0]);
      return 0;
    }
    if (!strcmp(argv[i], "--explain")) {
      json_error_t je;
      json_t *c = json_loadf(stdin, JSON_REJECT_DUPLICATES, &je);
      int rc = c ? jb_contract_explain(c, stdout) : -1;
      json_decref(c);
      if (rc < 0) fprintf(stderr, "jailbox-worker: stdin is not a session contract\n");
      return rc < 0 ? 1 : 0;
    }
    if (!strcmp(argv[i], "--keeper") && i + 1 < argc) return keeper_main(argv[i + 1]);
    if (!strcmp(argv[i], "--probe"))
      probe = true;
    else {
      fprintf(stderr, "jailbox-worker: unknown argument '%s' (see --help)\n", argv[i]);
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);

  if (sodium_init() < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    fprintf(stderr, "jailbox-worker: library initialisation failed\n");
    return 1;
  }
  static struct jb_worker worker = {.control_fd = -1, .ops_fd = -1};
  struct jb_worker *w = &worker;
  pthread_mutex_init(&w->lock, NULL);
  jb_error err = {0};
  if (load_config(w, &err) < 0) {
    fprintf(stderr, "jailbox-worker: %s\n", err.msg);
    return 2;
  }
  if (probe) return probe_only(w);
  int rc = start(w);
  if (rc != 0) return rc;
  if (keeper_init(w, &err) < 0)
    slog(w, JB_LOG_WARN, NULL, err.msg, "phase", "descriptor keeper", NULL);
  /* the sessions an earlier run left are taken over before anything else, and served before
   * the probe (seconds: a container of its own) — only new launches need it */
  adopt_at_start(w);
  struct threads t = {0};
  start_threads(w, &t);
  mark_ready(w);
  struct jb_probe p;
  jb_walls_probe(&w->walls, &p);
  pthread_mutex_lock(&w->lock);
  w->probe = p;
  pthread_mutex_unlock(&w->lock);
  log_probe(w, &p);
  serve(w, sfd);
  stop(w, &t);
  jb_signer_close(w->signer);
  jb_db_close(w->db);
  free(w->profile_buf);
  jb_settings_free(&w->set, settings, N_SETTINGS);
  curl_global_cleanup();
  slog(w, JB_LOG_INFO, NULL, "worker stopped", NULL);
  return 0;
}
