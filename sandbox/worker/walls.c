/* walls.c — check and describe the three walls (see walls.h): the image a launch runs, the
 * probe as JSON, a container removed and a sandbox destroyed, the checks of the walls as they
 * stand (the jailed shim's own view and Docker's inspect; again on a running sandbox with
 * jb_sandbox_recheck) and the residual risks. Building them is walls_launch.c's, probing the
 * host walls_probe.c's; both are above this file (walls_internal.h: what it shares with them). */
#define _GNU_SOURCE
#include "sandbox/worker/walls.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "sandbox/worker/secopt.h"
#include "sandbox/worker/walls_internal.h"
#include "lib/log.h"
#include "lib/metrics.h"

const char *const jb_wall_names[JB_WALL_COUNT] = {"gvisor", "docker", "bwrap"};

long long walls_epoch_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000L;
}

void walls_iso8601(long long ms, char *buf, size_t len) {
  time_t s = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&s, &tm);
  char head[32];
  strftime(head, sizeof head, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%03lldZ", head, ms % 1000);
}

void walls_sha256_hex(const void *data, size_t len, char out[65]) {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, data, len);
  sodium_bin2hex(out, 65, h, sizeof h);
}

int jb_image_inspect(const struct jb_walls_config *cfg, const char *name, struct jb_image_info *out,
                     jb_error *err) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", name);
  char enc[3 * sizeof out->name], path[sizeof enc + 32];
  if (jb_docker_urlencode(name, enc, sizeof enc) < 0)
    return jb_fail(err, ENAMETOOLONG, "image name %s too long", name);
  snprintf(path, sizeof path, "/images/%s/json", enc);
  json_t *img = NULL;
  if (jb_docker_expect(&cfg->docker, "GET", path, NULL, 5000, &img, err) < 0) {
    if (err && err->code == 404)
      return jb_fail(err, ENOENT,
                     "image %s not present on this Docker daemon (build it with "
                     "deploy/sandbox-image/build.sh%s)",
                     name, strstr(name, "-build") ? " --userland" : "");
    return jb_fail(err, err && err->code ? err->code : EIO, "image %s: %s", name,
                   err ? err->msg : "?");
  }
  snprintf(out->id, sizeof out->id, "%s", json_string_value(json_object_get(img, "Id")) ?: "");
  json_t *labels = json_object_get(json_object_get(img, "Config"), "Labels");
  snprintf(out->digest, sizeof out->digest, "%s",
           json_string_value(json_object_get(labels, "jailbox.image.digest")) ?: "");
  snprintf(out->shim_sha256, sizeof out->shim_sha256, "%s",
           json_string_value(json_object_get(labels, "jailbox.shim.sha256")) ?: "");
  snprintf(out->bwrap_version, sizeof out->bwrap_version, "%s",
           json_string_value(json_object_get(labels, "jailbox.bwrap.version")) ?: "");
  json_decref(img);
  return 0;
}

void jb_probe_set_image(struct jb_probe *p, const struct jb_image_info *img) {
  snprintf(p->image_name, sizeof p->image_name, "%s", img->name);
  snprintf(p->image_id, sizeof p->image_id, "%s", img->id);
  snprintf(p->image_digest, sizeof p->image_digest, "%s", img->digest);
  snprintf(p->shim_sha256, sizeof p->shim_sha256, "%s", img->shim_sha256);
  snprintf(p->bwrap_version, sizeof p->bwrap_version, "%s", img->bwrap_version);
}

json_t *jb_probe_json(const struct jb_probe *p) {
  char at[40];
  walls_iso8601(p->at_ms, at, sizeof at);
  json_t *walls = json_object();
  for (int w = 0; w < JB_WALL_COUNT; w++) {
    json_t *o = json_pack("{s:b}", "up", p->up[w]);
    if (!p->up[w]) json_object_set_new(o, "reason", json_string(p->reason[w]));
    json_object_set_new(walls, jb_wall_names[w], o);
  }
  return json_pack("{s:s, s:I, s:o}", "at", at, "durationMs", (json_int_t)p->duration_ms, "walls",
                   walls);
}

int jb_container_remove(const struct jb_walls_config *cfg, const char *id, jb_error *err) {
  char path[256];
  snprintf(path, sizeof path, "/containers/%s?force=1&v=1", id);
  long status = 0;
  if (jb_docker_call(&cfg->docker, "DELETE", path, NULL, 30000, &status, NULL, err) < 0) return -1;
  if (status == 204 || status == 404) return 0;
  /* 409: removal already in progress */
  if (status == 409) return 0;
  return jb_fail(err, (int)status, "docker DELETE container %.12s: status %ld", id, status);
}

void jb_sandbox_destroy(const struct jb_walls_config *cfg, struct jb_sandbox *sb) {
  jb_spawner_close(&sb->spawner);
  if (sb->conn_open) jb_shimconn_close(&sb->conn);
  sb->conn_open = false;
  if (sb->container_id[0]) {
    jb_error err = {0};
    (void)jb_container_remove(cfg, sb->container_id, &err);
  }
  sb->container_id[0] = '\0';
  json_decref(sb->contract);
  sb->contract = NULL;
}

static void problem(struct check *c, enum jb_wall w, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void problem(struct check *c, enum jb_wall w, const char *fmt, ...) {
  char buf[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  json_array_append_new(c->problems[w], json_string(buf));
}

static bool all_zero(const char *hex) {
  if (!hex || !*hex) return false;
  for (; *hex; hex++)
    if (*hex != '0') return false;
  return true;
}

/* `later`: the shim has served ops since its launch; it then holds the workspace open (its
 * root for openat2), which is the one descriptor besides stdio allowed. */
void walls_check_status(const json_t *st, bool gvisor, bool bwrap, bool later, struct check *c) {
  /* the jailed process: whichever wall put it there (bwrap + setpriv, or setpriv alone) */
  enum jb_wall jw = bwrap ? JB_WALL_BWRAP : JB_WALL_DOCKER;
  json_int_t euid = json_integer_value(json_object_get(json_object_get(st, "uid"), "effective"));
  json_int_t ruid = json_integer_value(json_object_get(json_object_get(st, "uid"), "real"));
  if (euid != JB_JAIL_UID || ruid != JB_JAIL_UID)
    problem(c, jw, "jailed uid is %lld/%lld, not %d", (long long)ruid, (long long)euid,
            JB_JAIL_UID);
  json_t *caps = json_object_get(st, "capabilities");
  static const char *const capkeys[] = {"effective",   "permitted",       "bounding",
                                        "inheritable", "effectiveCapget", "permittedCapget"};
  for (size_t i = 0; i < sizeof capkeys / sizeof capkeys[0]; i++) {
    const char *v = json_string_value(json_object_get(caps, capkeys[i]));
    if (!all_zero(v)) problem(c, jw, "capability set %s is %s", capkeys[i], v ? v : "unknown");
  }
  if (json_integer_value(json_object_get(st, "noNewPrivs")) != 1)
    problem(c, jw, "no_new_privs is not set");
  json_t *fds = json_object_get(st, "fds");
  size_t i;
  json_t *f;
  json_array_foreach (fds, i, f) {
    json_int_t fd = json_integer_value(json_object_get(f, "fd"));
    const char *target = json_string_value(json_object_get(f, "target"));
    if (later && target && !strcmp(target, "/workspace")) continue;
    if (fd > 2)
      problem(c, jw, "unexpected open descriptor %lld (%s)", (long long)fd,
              json_string_value(json_object_get(f, "target")) ?: "?");
  }
  /* Wall 2: no network but loopback */
  json_t *nd = json_object_get(st, "netdevs");
  json_array_foreach (nd, i, f) {
    const char *n = json_string_value(f);
    if (!n || strcmp(n, "lo") != 0)
      problem(c, JB_WALL_DOCKER, "network interface '%s' present", n ? n : "?");
  }
  /* Wall 1: a kernel that is not the host's */
  if (gvisor) {
    struct utsname u;
    uname(&u);
    const char *k = json_string_value(json_object_get(st, "kernel"));
    if (!k || strcmp(k, u.release) == 0)
      problem(c, JB_WALL_GVISOR, "the jail sees the host's kernel %s", u.release);
  }
  if (!bwrap) return;
  /* Wall 3 */
  if (json_integer_value(json_object_get(st, "seccomp")) != 2)
    problem(c, JB_WALL_BWRAP, "seccomp filter not in force");
  if (json_array_size(json_object_get(st, "pids")) > 2)
    problem(c, JB_WALL_BWRAP, "the jail sees %zu processes",
            json_array_size(json_object_get(st, "pids")));
  if (json_is_true(json_object_get(st, "sysPresent"))) problem(c, JB_WALL_BWRAP, "/sys is visible");
  bool root_ro = false;
  json_t *mounts = json_object_get(st, "mounts");
  json_array_foreach (mounts, i, f) {
    const char *path = json_string_value(json_object_get(f, "path"));
    const char *opts = json_string_value(json_object_get(f, "options"));
    if (path && opts && strcmp(path, "/") == 0)
      root_ro = strncmp(opts, "ro", 2) == 0 && (opts[2] == '\0' || opts[2] == ',');
  }
  if (!root_ro) problem(c, JB_WALL_BWRAP, "the jail's root is not read-only");
}

/* Reads the parts of `docker inspect` the contract reports and checks Wall 2's settings. */
json_t *walls_inspect_settings(const struct jb_walls_config *cfg, const char *id, bool gvisor,
                               struct check *c, jb_error *err) {
  char path[128];
  snprintf(path, sizeof path, "/containers/%s/json", id);
  json_t *in = NULL;
  if (jb_docker_expect(&cfg->docker, "GET", path, NULL, 10000, &in, err) < 0) return NULL;
  json_t *hc = json_object_get(in, "HostConfig");
  const char *rt = json_string_value(json_object_get(hc, "Runtime"));
  if (gvisor && (!rt || strcmp(rt, cfg->runtime) != 0))
    problem(c, JB_WALL_GVISOR, "container runtime is %s", rt ? rt : "unknown");
  if (!json_is_true(json_object_get(hc, "ReadonlyRootfs")))
    problem(c, JB_WALL_DOCKER, "root filesystem is writable");
  const char *nm = json_string_value(json_object_get(hc, "NetworkMode"));
  if (!nm || strcmp(nm, "none") != 0)
    problem(c, JB_WALL_DOCKER, "network mode is %s", nm ? nm : "unknown");
  bool nnp, sc; /* as Docker applies the options: the last of each kind decides */
  jb_secopt_judge(json_object_get(hc, "SecurityOpt"), cfg->profile, cfg->profile_len, &nnp, &sc);
  if (!nnp) problem(c, JB_WALL_DOCKER, "no-new-privileges not set");
  if (!sc) problem(c, JB_WALL_DOCKER, "seccomp profile not set, or not jailbox's");
  json_t *out = json_pack(
      "{s:s, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "runtime", rt ? rt : "?", "capDrop",
      json_object_get(hc, "CapDrop"), "capAdd", json_object_get(hc, "CapAdd"), "readOnlyRootfs",
      json_object_get(hc, "ReadonlyRootfs"), "networkMode", json_object_get(hc, "NetworkMode"),
      "tmpfs", json_object_get(hc, "Tmpfs") ?: json_null(), "ulimits",
      json_object_get(hc, "Ulimits") ?: json_null(), "state",
      json_object_get(json_object_get(in, "State"), "Status") ?: json_null());
  json_decref(in);
  return out;
}

int jb_sandbox_recheck(const struct jb_walls_config *cfg, struct jb_sandbox *sb, jb_error *err) {
  bool gvisor = sb->walls_up[JB_WALL_GVISOR], bwrap = sb->walls_up[JB_WALL_BWRAP];
  json_t *req = json_pack("{s:s}", "op", "status");
  json_t *ans = req ? jb_shimconn_call(&sb->conn, req, cfg->call_timeout_ms, err) : NULL;
  json_decref(req);
  if (!ans || !json_is_true(json_object_get(ans, "ok"))) {
    json_decref(ans);
    return ans ? jb_fail(err, EPROTO, "shim status: refused") : -1;
  }
  struct check chk;
  for (int w = 0; w < JB_WALL_COUNT; w++) chk.problems[w] = json_array();
  walls_check_status(json_object_get(ans, "result"), gvisor, bwrap, true, &chk);
  json_decref(ans);
  json_t *settings = walls_inspect_settings(cfg, sb->container_id, gvisor, &chk, err);
  int rc = settings ? 0 : -1;
  json_decref(settings);
  for (int w = 0; w < JB_WALL_COUNT && rc == 0; w++)
    if (sb->walls_up[w] && json_array_size(chk.problems[w]) > 0)
      rc = jb_fail(err, EPERM, "%s: not as specified any more: %s", jb_wall_names[w],
                   json_string_value(json_array_get(chk.problems[w], 0)));
  for (int w = 0; w < JB_WALL_COUNT; w++) json_decref(chk.problems[w]);
  return rc;
}

json_t *jb_walls_residual_risks(const struct jb_walls_config *cfg, const bool up[JB_WALL_COUNT],
                                bool apparmor) {
  json_t *r = json_array();
#define RISK(s) json_array_append_new(r, json_string(s))
  if (up[JB_WALL_GVISOR])
    RISK(
        "gVisor's Sentry is one shared surface: a Sentry flaw combined with a flaw in the few host "
        "syscalls the Sentry itself may make would reach the host kernel.");
  else
    RISK(
        "Wall 1 is missing: the jail runs on the host kernel (runc), so any kernel flaw reachable "
        "through the remaining filters is a way out.");
  if (!up[JB_WALL_BWRAP])
    RISK(
        "Wall 3 is missing: no private mount, pid, ipc and uts namespaces and no per-jail syscall "
        "filter; the shim runs in the container's own view.");
  RISK(
      "The container starts as root inside gVisor with SYS_ADMIN, SETPCAP, SETUID and SETGID so "
      "that bwrap can build Wall 3 (and, with changesets, CHOWN, DAC_OVERRIDE and FOWNER, with "
      "which gVisor's overlay writes a command's upper: walls.docker.capabilities.add); they "
      "exist only in gVisor's kernel and are gone from the jailed process (checked from inside "
      "at every launch).");
  RISK(
      "Wall 2's profile allows mount, umount2, pivot_root and clone with namespace flags because "
      "bwrap needs them; only Wall 3's filter takes them from the jailed process.");
  RISK(
      "The workspace is bind-mounted read-write: whatever the shim is asked to write lands in "
      "the buyer's files; the policy, scanner and supervision above decide what reaches it.");
  RISK(
      "Only memory, CPU and process count are limited: disk use inside the workspace has no "
      "quota, and timing side channels between sessions on one host are not addressed.");
  RISK(
      "jailbox-worker holds the Docker socket, which is root on this host: a flaw in the worker "
      "is a flaw in every wall.");
  if (apparmor)
    RISK(
        "AppArmor's docker-default profile is requested; whether runsc applies it to anything "
        "but its own host processes was not verified (the test hosts have no AppArmor).");
  else
    RISK("No AppArmor: the host kernel has none, so Wall 2 has no mandatory access control layer.");
  if (cfg->override)
    RISK(
        "Development override: JAILBOX_REQUIRE_WALLS is narrower than gvisor,docker,bwrap, so "
        "sessions may run with fewer walls than the product promises.");
#undef RISK
  return r;
}
