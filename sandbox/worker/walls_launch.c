/* walls_launch.c — jb_sandbox_launch: building the three walls for one session, stage by
 * stage over one `struct launch` (the container's request and command, the filters handed to
 * the launcher, the shim's channel, the checks from inside), and the session contract written
 * from what the stages found, on failure too. Below it: walls.c (the checks, the residual
 * risks; walls_internal.h). */
#define _GNU_SOURCE
#include "sandbox/worker/walls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/worker/filter.h"
#include "sandbox/worker/walls_internal.h"
#include "sandbox/proto/shim.h"
#include "lib/log.h"
#include "lib/metrics.h"

/* Capabilities the container keeps under runsc. They exist only in gVisor's kernel: bwrap
 * needs SYS_ADMIN for its namespaces and mounts, SETPCAP to empty the bounding set, and
 * setpriv SETUID/SETGID to leave uid 0. Each was removed in turn on this host and the jail
 * then failed to build (or kept a non-empty bounding set, without SETPCAP). */
static const char *const gvisor_caps[] = {"SYS_ADMIN", "SETPCAP", "SETUID", "SETGID", NULL};
/* With changesets (the /jailbox-cs tmpfs sized by JAILBOX_CHANGESET_UPPER_MIB) a supervised
 * writable command runs on an overlay the spawner mounts as root. gVisor's overlay does every
 * write in its upper with the credentials of whoever mounted it, and chowns each file a command
 * makes to its creator: without CHOWN, DAC_OVERRIDE and FOWNER a command of uid 65534 gets
 * EPERM or EACCES (sandbox/WALLS.md, "Changesets", measured). Like the four above they exist
 * only in gVisor's kernel, for root in the container (the launcher and the spawner); the shim
 * and every command still run with an empty bounding set (checked from inside at launch). */
static const char *const gvisor_overlay_caps[] = {"SYS_ADMIN", "SETPCAP",      "SETUID", "SETGID",
                                                  "CHOWN",     "DAC_OVERRIDE", "FOWNER", NULL};
/* Without bwrap only setpriv's three are needed. */
static const char *const setpriv_caps[] = {"SETPCAP", "SETUID", "SETGID", NULL};

/* The capabilities the container is given (and its contract names): the overlay's three on top
 * when uppers are sized (or under the test switch JB_TEST_EXEC_OVERLAY), and only under
 * gVisor — on runc they would be the host kernel's. */
static const char *const *container_caps(const struct jb_walls_config *cfg, bool gvisor,
                                         bool bwrap) {
  if (!gvisor || !bwrap) return setpriv_caps;
  return cfg->changeset_upper_mib > 0 || getenv("JB_TEST_EXEC_OVERLAY") ? gvisor_overlay_caps
                                                                        : gvisor_caps;
}

static json_t *str_array(const char *const list[]) {
  json_t *a = json_array();
  for (size_t i = 0; list[i]; i++) json_array_append_new(a, json_string(list[i]));
  return a;
}

/* ---- launch --------------------------------------------------------------------------- */

static void add_args(json_t *cmd, const char *const list[]) {
  for (size_t i = 0; list[i]; i++) json_array_append_new(cmd, json_string(list[i]));
}

/* The container's command: the launcher, then bwrap with Wall 3, then setpriv, then the shim
 * (or, without Wall 3, setpriv and the shim directly). */
static json_t *container_cmd(bool bwrap, long jail_tmp_mib) {
  json_t *cmd = json_array();
  static const char *const setpriv[] = {JB_IMAGE_SETPRIV,  "--reuid",
                                        "65534",           "--regid",
                                        "65534",           "--clear-groups",
                                        "--inh-caps=-all", "--bounding-set=-all",
                                        "--no-new-privs",  "--",
                                        JB_IMAGE_SHIM,     NULL};
  if (!bwrap) {
    add_args(cmd, setpriv);
    return cmd;
  }
  static const char *const head[] = {
      JB_IMAGE_SHIM, "--launch", "--", JB_IMAGE_BWRAP,
      /* directories bwrap would create 0700 (unreadable after the switch to uid 65534) */
      "--perms", "0755", "--dir", "/usr", "--perms", "0755", "--dir", "/usr/bin", "--perms", "0755",
      "--dir", "/opt", "--perms", "0755", "--dir", "/opt/jailbox", "--perms", "0755", "--dir",
      "/opt/jailbox/bin",
      /* the minimal tree: setpriv and its libraries, the shim, the workspace */
      "--ro-bind", "/lib", "/lib", "--ro-bind", "/lib64", "/lib64", "--ro-bind", JB_IMAGE_SETPRIV,
      JB_IMAGE_SETPRIV, "--ro-bind", JB_IMAGE_SHIM, JB_IMAGE_SHIM, "--bind", "/workspace",
      "/workspace", NULL};
  add_args(cmd, head);
  char size[32];
  snprintf(size, sizeof size, "%ld", jail_tmp_mib * 1024 * 1024);
  json_array_append_new(cmd, json_string("--perms"));
  json_array_append_new(cmd, json_string("1777"));
  json_array_append_new(cmd, json_string("--size"));
  json_array_append_new(cmd, json_string(size));
  static const char *const tail[] = {"--tmpfs",
                                     "/tmp",
                                     "--proc",
                                     "/proc",
                                     "--remount-ro",
                                     "/",
                                     "--chdir",
                                     "/workspace",
                                     "--clearenv",
                                     "--unshare-pid",
                                     "--unshare-ipc",
                                     "--unshare-uts",
                                     "--unshare-cgroup-try",
                                     "--die-with-parent",
                                     "--new-session",
                                     "--cap-drop",
                                     "ALL",
                                     "--cap-add",
                                     "CAP_SETUID",
                                     "--cap-add",
                                     "CAP_SETGID",
                                     "--cap-add",
                                     "CAP_SETPCAP",
                                     "--seccomp",
                                     "3",
                                     NULL};
  add_args(cmd, tail);
  add_args(cmd, setpriv);
  return cmd;
}

struct limits {
  long long memory_bytes, nano_cpus, pids, host_pids;
};

static void read_limits(const json_t *l, bool gvisor, struct limits *out) {
  json_int_t mem = json_integer_value(json_object_get(l, "memoryMiB"));
  double cpus = json_number_value(json_object_get(l, "cpus"));
  json_int_t pids = json_integer_value(json_object_get(l, "pids"));
  if (mem <= 0) mem = 1024;
  if (cpus <= 0) cpus = 1.0;
  if (pids <= 0) pids = 256;
  out->memory_bytes = (long long)mem * 1024 * 1024;
  out->nano_cpus = (long long)(cpus * 1e9);
  out->pids = pids;
  /* Under gVisor the host's pids cgroup also counts the Sentry's own threads (about two per
   * jailed process were seen); hitting it crashes the whole sandbox instead of failing a
   * fork. The jail's limit is therefore RLIMIT_NPROC inside gVisor (uid 65534 is the jail's
   * alone there), and the host limit sits above it with room for the Sentry. */
  out->host_pids = gvisor ? 4 * pids + 256 : pids;
}

/* `socket_dir`: the session's shim socket directory on the host, bind-mounted read-only
 * at JB_IMAGE_SHIM_SOCKET_DIR (NULL: no socket channel). */
static json_t *create_body(const struct jb_walls_config *cfg, const char *workspace,
                           const json_t *labels, bool gvisor, bool bwrap, bool apparmor,
                           const struct limits *lim, const char *socket_dir, bool spawner) {
  json_t *lab = json_pack("{s:s, s:s}", "jailbox.worker", cfg->worker_id, "jailbox.deployment",
                          cfg->deployment);
  if (labels) json_object_update(lab, (json_t *)labels);
  json_t *secopt = json_array();
  json_array_append_new(secopt, json_string("no-new-privileges=true"));
  char *seccomp = malloc(cfg->profile_len + 9);
  if (seccomp) {
    memcpy(seccomp, "seccomp=", 8);
    memcpy(seccomp + 8, cfg->profile, cfg->profile_len);
    seccomp[8 + cfg->profile_len] = '\0';
    json_array_append_new(secopt, json_string(seccomp));
    free(seccomp);
  }
  if (apparmor) json_array_append_new(secopt, json_string("apparmor=docker-default"));
  char tmpfs[64], cs[80];
  snprintf(tmpfs, sizeof tmpfs, "rw,nosuid,nodev,size=%ldm", cfg->container_tmp_mib);
  /* overlay uppers (sandbox/shim/overlay.c): root only, sized, exec (Docker's default noexec
   * would stop a command running what it built). Its bytes are the container's memory, and
   * counted in the writing jail's memory cgroup: they come out of the command's own limit, so
   * Memory is not raised by the upper's size (raised, a command the watch does not hold could
   * take that share as memory) — sandbox/WALLS.md, "Changesets" */
  snprintf(cs, sizeof cs, "rw,nosuid,nodev,exec,size=%ldm,mode=0700",
           cfg->changeset_upper_mib > 0 ? cfg->changeset_upper_mib : 1024);
  json_t *ulimits = json_array();
  json_array_append_new(ulimits,
                        json_pack("{s:s, s:i, s:i}", "Name", "core", "Soft", 0, "Hard", 0));
  json_array_append_new(ulimits,
                        json_pack("{s:s, s:i, s:i}", "Name", "nofile", "Soft", 1024, "Hard", 1024));
  if (gvisor)
    json_array_append_new(ulimits, json_pack("{s:s, s:I, s:I}", "Name", "nproc", "Soft",
                                             (json_int_t)lim->pids, "Hard", (json_int_t)lim->pids));
  json_t *host = json_pack(
      "{s:s, s:s, s:[s], s:o, s:o, s:b, s:{s:s, s:s}, s:I, s:I, s:I, s:I, s:o,"
      " s:[{s:s, s:s, s:s, s:b, s:{s:s}}], s:s, s:{s:s}, s:i, s:b, s:b}",
      "Runtime", gvisor ? cfg->runtime : "runc", "NetworkMode", "none", "CapDrop", "ALL", "CapAdd",
      str_array(container_caps(cfg, gvisor, bwrap)), "SecurityOpt", secopt, "ReadonlyRootfs", 1,
      "Tmpfs", "/tmp", tmpfs, "/jailbox-cs", cs, "Memory", (json_int_t)lim->memory_bytes,
      "MemorySwap", (json_int_t)lim->memory_bytes, "NanoCpus", (json_int_t)lim->nano_cpus,
      "PidsLimit", (json_int_t)lim->host_pids, "Ulimits", ulimits, "Mounts", "Type", "bind",
      "Source", workspace, "Target", "/workspace", "ReadOnly", 0, "BindOptions", "Propagation",
      "rprivate", "IpcMode", "private", "LogConfig", "Type", "none", "OomScoreAdj", 500,
      "Privileged", 0, "AutoRemove", 0);
  json_t *env = json_array();
  if (socket_dir)
    json_array_append_new(
        env, json_string(JB_SHIM_SOCKET_ENV "=" JB_IMAGE_SHIM_SOCKET_DIR "/" JB_SHIM_SOCKET_NAME));
  if (socket_dir && spawner) json_array_append_new(env, json_string(JB_SHIM_SPAWNER_ENV "=1"));
  if (host && socket_dir)
    json_array_append_new(json_object_get(host, "Mounts"),
                          json_pack("{s:s, s:s, s:s, s:b, s:{s:s}}", "Type", "bind", "Source",
                                    socket_dir, "Target", JB_IMAGE_SHIM_SOCKET_DIR, "ReadOnly", 1,
                                    "BindOptions", "Propagation", "rprivate"));
  return json_pack(
      "{s:s, s:o, s:n, s:o, s:s, s:s, s:s, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:o, s:o}", "Image",
      cfg->image, "Cmd", container_cmd(bwrap, cfg->jail_tmp_mib), "Entrypoint", "Env", env,
      "WorkingDir", "/", "User", "0:0", "Hostname", "jailbox", "OpenStdin", 1, "StdinOnce", 1,
      "AttachStdin", 1, "AttachStdout", 1, "AttachStderr", 1, "Tty", 0, "NetworkDisabled", 1,
      "Labels", lab, "HostConfig", host);
}

/* Which wall a failure at a given step points at. */
static enum jb_wall blame_start(const char *msg, bool gvisor) {
  /* the image lacks a program the command names */
  if (strstr(msg, "no such file or directory") || strstr(msg, "not found")) return JB_WALL_DOCKER;
  if (strstr(msg, "runtime") || strstr(msg, "runsc") || strstr(msg, "gvisor"))
    return JB_WALL_GVISOR;
  return gvisor ? JB_WALL_GVISOR : JB_WALL_DOCKER;
}

static enum jb_wall blame_output(const char *stderr_tail, bool bwrap) {
  if (strstr(stderr_tail, "bwrap") || strstr(stderr_tail, "setpriv") ||
      strstr(stderr_tail, "jailbox-shim: launch"))
    return bwrap ? JB_WALL_BWRAP : JB_WALL_DOCKER;
  return JB_WALL_COUNT;
}

static int fail_wall(enum jb_wall *failed, enum jb_wall w, jb_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_wall(enum jb_wall *failed, enum jb_wall w, jb_error *err, const char *fmt, ...) {
  char msg[JB_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  *failed = w;
  return jb_fail(err, err && err->code ? err->code : EIO, "%s: %s",
                 w < JB_WALL_COUNT ? jb_wall_names[w] : "walls", msg);
}

static json_t *timings_json(const long t[], const char *const names[], size_t n) {
  json_t *o = json_object();
  for (size_t i = 1; i < n; i++)
    if (t[i]) json_object_set_new(o, names[i], json_integer(t[i] - t[i - 1]));
  return o;
}

/* The contract's exec.memory: each command's memory limit from the session's `limits`
 * (borrowed) and how the spawner holds it (`hello`'s "memory", borrowed; absent: an older
 * spawner, or none came). */
static json_t *exec_memory_contract(const json_t *hello, const json_t *limits) {
  json_t *m = hello ? json_object_get(hello, "memory") : NULL;
  const char *watch = json_string_value(json_object_get(m, "watch"));
  const char *why = json_string_value(json_object_get(m, "reason"));
  json_int_t mib = json_integer_value(json_object_get(limits, "memoryMiB"));
  json_t *o = json_pack(
      "{s:I, s:I, s:b, s:s?, s:O?, s:s}", "perCommandMiB",
      (json_int_t)(jb_exec_memory_limit(limits, 0) >> 20), "containerMiB",
      (json_int_t)(mib > 0 ? mib : 1024), "enforced", watch != NULL, "watch", watch, "intervalMs",
      json_object_get(m, "intervalMs"), "how",
      watch ? "each jail has a memory cgroup of its own in gVisor's kernel, which counts the "
              "memory of every process of the command and of its /tmp; the spawner reads it "
              "every intervalMs and kills the jail (its pid 1, so every process) once it holds "
              "more than the command's limit: that command ends with oom true and the session "
              "goes on. The limit is the container's less max(64 MiB, an eighth of it) kept for "
              "the sandbox itself, 16 MiB at least; an exec's memoryMiB may lower it"
            : "not enforced per command: a command over the container's limit ends the whole "
              "sandbox (the session fails; the command's result says oom)");
  if (o && !watch)
    json_object_set_new(o, "reason", json_string(why ? why : "the spawner does not watch memory"));
  return o;
}

/* The contract's "exec": whether commands can run, what the image gives them, and the jail and
 * filter they run under (`hello`: the spawner's hello, borrowed, NULL when none came;
 * `reason`: borrowed string, NULL when available; `fi`: exec's filter, NULL when none;
 * `limits`: the session's, borrowed). */
static json_t *exec_contract(struct jb_spawner *sp, const json_t *hello, json_t *reason,
                             const struct jb_filter_info *fi, const char *sha,
                             const json_t *limits) {
  bool up = !reason && sp->fd >= 0;
  json_t *o = json_pack("{s:b}", "available", up);
  if (!up)
    json_object_set_new(o, "reason", reason ? json_incref(reason) : json_string("unavailable"));
  if (up && hello)
    json_object_set_new(
        o, "spawner",
        json_pack("{s:O, s:O, s:s}", "protocol", json_object_get(hello, "protocol"), "pid",
                  json_object_get(hello, "pid") ?: json_null(), "what",
                  "the launcher kept alive (root of gVisor's kernel, in no jail): "
                  "takes requests only from the worker's second connection and "
                  "builds one bwrap jail per command, the next one ahead of its request"));
  json_t *image = hello ? json_object_get(hello, "image") : NULL;
  if (json_is_object(image))
    json_object_set_new(
        o, "image",
        json_pack("{s:O*, s:O*, s:s}", "shell", json_object_get(image, "shell"), "programs",
                  json_object_get(image, "programs"), "what",
                  "the image as the spawner found it at the start in the paths each jail binds: "
                  "shell, whether /bin/sh runs for the jail's user (exec is offered only then); "
                  "programs, which of a short list of common ones the jail's PATH finds (any "
                  "program of the image may be run)"));
  json_t *binds = hello ? json_object_get(hello, "binds") : NULL;
  json_t *image_binds = binds ? json_incref(binds) : json_array(); /* taken by the pack */
  json_object_set_new(
      o, "jail",
      json_pack("{s:s, s:[s,s,s,s,s], s:s, s:i, s:i, s:s, s:b, s:s, s:s, s:s, s:o, s:s, s:s, s:s,"
                " s:{s:s, s:s, s:s, s:s, s:s}}",
                "builtBy",
                "bwrap per command, started by the spawner: the next command's jail is built "
                "after the last one ended (and when the session becomes active), its helper "
                "waiting for the command's argv, env, cwd, stdin and limits; it is used by one "
                "command only and killed when the session is paused; a command whose workspace "
                "mode or /tmp size differs from it gets a jail built for it",
                "namespacesNew", "mount",
                "pid (cannot see or signal the shim; its pid 1's death ends every process of it)",
                "ipc", "uts", "cgroup (where the runtime allows)", "privilegeDrop",
                "setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps=-all "
                "--bounding-set=-all --no-new-privs",
                "uid", JB_JAIL_UID, "gid", JB_JAIL_UID, "capabilities", "none", "noNewPrivs", 1,
                "network",
                "loopback only: a network namespace of the command's own (made by the "
                "spawner for each jail) with lo up, 127.0.0.1 and ::1; TCP and UDP sockets "
                "(AF_INET, AF_INET6) and AF_UNIX; no other interface, nothing routed out "
                "(runsc --network=none); another command's ports and the container's loopback "
                "are not reachable",
                "workspace", "/workspace read-only, read-write when the request says writable",
                "tmp", "its own tmpfs at /tmp (limits.tmpBytes, default 128 MiB)", "imageBinds",
                image_binds, "proc", "its own (the command's pid namespace)", "dev",
                "bwrap's minimal /dev (null, zero, full, random, urandom, tty, pts, shm)", "env",
                "PATH, HOME=/tmp, LANG=C.UTF-8, TERM=dumb, then the request's (no LD_*), applied "
                "after setpriv by the static helper jailbox-shim --exec, which also sets the "
                "request's RLIMIT_FSIZE and RLIMIT_NPROC and cwd",
                "limits", "wallClock",
                "timeoutMs: SIGKILL to the jail's pid 1 (the whole tree) at the timeout", "output",
                "maxOutputBytes per stream sent; the rest counted, not sent", "fsize",
                "RLIMIT_FSIZE (default 1 GiB)", "nproc",
                "RLIMIT_NPROC of uid 65534 (default: the container's limit less 4)", "memory",
                "exec.memory: the command's own limit (over it the command is killed, oom), "
                "below the container's"));
  json_object_set_new(o, "memory", exec_memory_contract(hello, limits));
  json_object_set_new(
      o, "checksFromInside",
      json_string(
          "not probed at launch (jailSeenFromInside is the shim's jail); a program run as "
          "a command checks each wall with its expected failure: loopback only (TCP "
          "and UDP on its own lo, lo the only interface), no capability (CapEff, CapPrm, CapBnd), "
          "no_new_privs, read-only "
          "root, /usr and workspace (EROFS; read-write only when writable), the "
          "escape-shaped syscalls killed (SIGSYS, seccomp_kill), the uncommon ones "
          "failing (EPERM, ENOSYS), its own /proc, no /sys, no descriptor above 2, "
          "TIOCSTI killed, the process limit (EAGAIN), oom, gVisor's kernel "
          "(tests/node/exec_checks.test.mjs)"));
  if (fi) {
    json_t *desc = jb_exec_filter_describe();
    json_object_set_new(
        o, "filter",
        json_pack("{s:I, s:I, s:I, s:I, s:s, s:s, s:o}", "syscalls", (json_int_t)fi->syscalls,
                  "rules", (json_int_t)fi->rules, "killRules", (json_int_t)fi->kill_rules,
                  "errnoRules", (json_int_t)fi->errno_rules, "bpfSha256", sha, "compiledWith",
                  "libseccomp (seccomp_export_bpf), handed to each command's bwrap "
                  "--seccomp",
                  "filter", desc ? desc : json_null()));
  }
  return o;
}

/* ---- the launch, stage by stage ----------------------------------------------------------- */

/* The timings a launch records (ms since the epoch; the contract's timingsMs). */
enum { T_START, T_CREATE, T_ATTACH, T_RUN, T_READY, T_STATUS, T_PING, T_N };
static const char *const tnames[] = {"",        "createMs", "attachMs", "startMs",
                                     "readyMs", "statusMs", "pingMs"};

/* One launch in progress (jb_sandbox_launch): its arguments, what each stage found or built
 * (owned here until launch_end, but sb's), and what the contract is written from. */
struct launch {
  const struct jb_walls_config *cfg;
  const struct jb_probe *probe;
  const char *job_id, *workspace;
  const json_t *limits, *labels;
  struct jb_sandbox *sb;
  enum jb_wall *failed;
  jb_error *err;
  long t[T_N];
  bool use[JB_WALL_COUNT]; /* which walls can be built here */
  bool gvisor, bwrap, apparmor;
  struct limits lim;
  json_t *body, *created, *status, *settings; /* new */
  struct check chk;
  unsigned char *bpf; /* Wall 3's filter */
  size_t bpf_len;
  struct jb_filter_info fi;
  char bpf_sha[65];
  /* exec's filter, handed to the spawner (only with the socket channel: its own connection) */
  unsigned char *xbpf;
  size_t xbpf_len;
  struct jb_filter_info xfi;
  char xbpf_sha[65];
  json_t *exec_reason; /* why exec is unavailable (a string), NULL: it is */
  json_t *hello; /* the spawner's hello, kept when its channel was closed (new) */
  /* the shim's channel: a per-session socket when the launcher runs (Wall 3) and it is on */
  struct jb_shim_listener lsn;
  json_t *channel;
  long ready_deadline; /* jb_now_ms by which the shim must be ready */
};

/* The launch's start: `sb` empty, the walls this host can build (the probe; Wall 3 is built
 * with gVisor's capabilities: without gVisor it is not offered here, as bwrap under runc would
 * need unprivileged user namespaces and an unmasked /proc) and the session's limits. */
static void launch_init(struct launch *L) {
  memset(L->sb, 0, sizeof *L->sb);
  jb_spawner_init(&L->sb->spawner);
  snprintf(L->sb->job_id, sizeof L->sb->job_id, "%s", L->job_id);
  *L->failed = JB_WALL_COUNT;
  L->t[T_START] = jb_now_ms();
  for (int w = 0; w < JB_WALL_COUNT; w++) L->chk.problems[w] = json_array();
  for (int w = 0; w < JB_WALL_COUNT; w++) L->use[w] = L->probe ? L->probe->up[w] : true;
  if (!L->use[JB_WALL_GVISOR]) L->use[JB_WALL_BWRAP] = false;
  L->gvisor = L->use[JB_WALL_GVISOR];
  L->bwrap = L->use[JB_WALL_BWRAP];
  L->apparmor = L->probe && L->probe->apparmor_host;
  read_limits(L->limits, L->gvisor, &L->lim);
}

/* Whether the walls this host can build are enough: -1 with Docker down or a required
 * wall missing. */
static int launch_walls_allowed(struct launch *L) {
  if (!L->use[JB_WALL_DOCKER]) {
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "unavailable: %s",
              L->probe ? L->probe->reason[JB_WALL_DOCKER] : "?");
    return -1;
  }
  for (int w = 0; w < JB_WALL_COUNT; w++)
    if (L->cfg->require[w] && !L->use[w]) {
      const char *why = L->probe && !L->probe->up[w] ? L->probe->reason[w]
                        : w == JB_WALL_BWRAP
                            ? "Wall 3 is built only under gVisor, which is unavailable"
                            : "unavailable";
      fail_wall(L->failed, (enum jb_wall)w, L->err, "required but unavailable: %s", why);
      return -1;
    }
  return 0;
}

/* Wall 3's filter compiled, the shim's channel chosen (a per-session socket when the
 * launcher runs and it is on; its listener opened) and exec's filter compiled when the spawner
 * can have its own connection (else why exec is unavailable). -1 when Wall 3's filter does not
 * compile. */
static int launch_filters(struct launch *L) {
  if (L->bwrap) {
    if (jb_filter_compile(&L->bpf, &L->bpf_len, &L->fi, L->err) < 0) {
      fail_wall(L->failed, JB_WALL_BWRAP, L->err, "syscall filter: %s", L->err->msg);
      return -1;
    }
    walls_sha256_hex(L->bpf, L->bpf_len, L->bpf_sha);
  }
  if (!L->bwrap) {
    L->channel = json_pack("{s:s, s:s}", "kind", "attach", "reason",
                           "no launcher without Wall 3: setpriv starts the shim directly");
  } else if (L->cfg->shim_socket_off) {
    L->channel = json_pack("{s:s, s:s}", "kind", "attach", "reason",
                           "socket channel turned off (JAILBOX_SHIM_SOCKET_DIR=none)");
  } else {
    jb_error lerr = {0};
    if (jb_shim_listener_open(&L->lsn, L->cfg->shim_socket_dir, JB_SHIM_SOCKET_NAME, &lerr) < 0)
      L->channel = json_pack("{s:s, s:s+}", "kind", "attach", "reason",
                             "cannot make the session's shim socket: ", lerr.msg);
  }
  if (L->lsn.fd >= 0) {
    jb_error xerr = {0};
    if (jb_exec_filter_compile(&L->xbpf, &L->xbpf_len, &L->xfi, &xerr) < 0)
      L->exec_reason = json_sprintf("exec's syscall filter does not compile: %s", xerr.msg);
    else
      walls_sha256_hex(L->xbpf, L->xbpf_len, L->xbpf_sha);
  } else {
    L->exec_reason = json_string(
        L->bwrap ? "the spawner needs the socket channel, which this session does not have"
                 : "exec runs only inside Wall 3 (bwrap under gVisor), which this session "
                   "does not have");
  }
  return 0;
}

/* The container created (Wall 2's settings, Wall 1's runtime). */
static int launch_create(struct launch *L) {
  L->body = create_body(L->cfg, L->workspace, L->labels, L->gvisor, L->bwrap, L->apparmor, &L->lim,
                        L->lsn.fd >= 0 ? L->lsn.dir : NULL, L->xbpf != NULL);
  if (!L->body) {
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "cannot build the container request");
    return -1;
  }
  if (jb_docker_expect(&L->cfg->docker, "POST", "/containers/create", L->body, 30000, &L->created,
                       L->err) < 0) {
    fail_wall(L->failed, blame_start(L->err->msg, L->gvisor), L->err, "create: %s", L->err->msg);
    return -1;
  }
  snprintf(L->sb->container_id, sizeof L->sb->container_id, "%s",
           json_string_value(json_object_get(L->created, "Id")) ?: "");
  L->t[T_CREATE] = jb_now_ms();
  return 0;
}

/* Its attach stream taken: the shim's stdin and stdout until a socket replaces them. */
static int launch_attach(struct launch *L) {
  struct jb_docker_stream st;
  if (jb_docker_attach(&L->cfg->docker, L->sb->container_id, &st, 10000, L->err) < 0) {
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "attach: %s", L->err->msg);
    return -1;
  }
  if (jb_shimconn_init(&L->sb->conn, &st, L->err) < 0) {
    jb_docker_stream_close(&st);
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "%s", L->err->msg);
    return -1;
  }
  L->sb->conn_open = true;
  L->t[T_ATTACH] = jb_now_ms();
  return 0;
}

/* The container started. */
static int launch_start(struct launch *L) {
  char path[160];
  snprintf(path, sizeof path, "/containers/%s/start", L->sb->container_id);
  if (jb_docker_expect(&L->cfg->docker, "POST", path, NULL, 60000, NULL, L->err) < 0) {
    fail_wall(L->failed, blame_start(L->err->msg, L->gvisor), L->err, "start: %s", L->err->msg);
    return -1;
  }
  L->t[T_RUN] = jb_now_ms();
  return 0;
}

/* Wall 3's filter, then exec's, handed to the launcher on the attach stream (bwrap
 * --seccomp reads them from there). */
static int launch_hand_filters(struct launch *L) {
  if (L->bwrap) {
    char head[64];
    int hn = snprintf(head, sizeof head, JB_SHIM_FILTER_MAGIC " %zu\n", L->bpf_len);
    if (jb_shimconn_send_raw(&L->sb->conn, head, (size_t)hn, 5000, L->err) < 0 ||
        jb_shimconn_send_raw(&L->sb->conn, L->bpf, L->bpf_len, 5000, L->err) < 0) {
      fail_wall(L->failed, JB_WALL_BWRAP, L->err, "handing over the filter: %s", L->err->msg);
      return -1;
    }
    if (L->xbpf) {
      hn = snprintf(head, sizeof head, JB_SHIM_EXEC_FILTER_MAGIC " %zu\n", L->xbpf_len);
      if (jb_shimconn_send_raw(&L->sb->conn, head, (size_t)hn, 5000, L->err) < 0 ||
          jb_shimconn_send_raw(&L->sb->conn, L->xbpf, L->xbpf_len, 5000, L->err) < 0) {
        fail_wall(L->failed, JB_WALL_BWRAP, L->err, "handing over exec's filter: %s", L->err->msg);
        return -1;
      }
    }
  }
  return 0;
}

/* With the socket channel on, the launcher's first line: where the shim will speak (the
 * socket accepted, then the spawner's connection), or that it cannot (the attach stream then).
 * *ready_out (new) receives a first line that was no channel announcement (an older shim's
 * ready line), else NULL. -1 when the announced socket cannot be taken. */
static int launch_channel(struct launch *L, json_t **ready_out) {
  L->ready_deadline = jb_now_ms() + L->cfg->start_timeout_ms;
  json_t *ready = NULL;
  *ready_out = NULL;
  if (L->lsn.fd >= 0) {
    /* the launcher says on the attach stream where the shim will speak */
    ready = jb_shimconn_read(&L->sb->conn, L->cfg->start_timeout_ms, L->err);
    const char *ev = json_string_value(json_object_get(ready, "event")) ?: "";
    if (ready && strcmp(ev, "channel") == 0) {
      const char *kind = json_string_value(json_object_get(ready, "channel")) ?: "";
      if (strcmp(kind, "socket") == 0) {
        long left = L->ready_deadline - jb_now_ms();
        int fd = jb_shim_listener_accept(&L->lsn, left > 0 ? left : 0, L->err);
        if (fd < 0 || jb_shimconn_use_socket(&L->sb->conn, fd, L->err) < 0) {
          jb_shim_listener_close(&L->lsn);
          json_decref(ready);
          fail_wall(L->failed, JB_WALL_COUNT, L->err, "shim socket: %s", L->err->msg);
          return -1;
        }
        /* the spawner's connection comes second, right after the shim's */
        if (json_is_true(json_object_get(ready, "spawner"))) {
          jb_error serr = {0};
          int sfd = jb_shim_listener_accept(&L->lsn, 2000, &serr);
          if (sfd < 0 || jb_spawner_attach(&L->sb->spawner, sfd, 3000, &serr) < 0) {
            L->exec_reason = json_sprintf("the spawner did not come up: %s", serr.msg);
            jb_log(JB_LOG_WARN, "exec unavailable", "job", L->job_id, "reason", serr.msg, NULL);
          } else {
            json_decref(L->exec_reason);
            L->exec_reason = NULL;
          }
        } else if (L->xbpf && !L->exec_reason) {
          const char *why = json_string_value(json_object_get(ready, "spawnerError"));
          L->exec_reason = why ? json_sprintf("the launcher could not connect the spawner: %s", why)
                               : json_string(
                                     "the image's launcher has no spawner (rebuild it: "
                                     "deploy/sandbox-image/build.sh)");
        }
        jb_shim_listener_close(&L->lsn); /* nothing else may connect */
        L->channel = json_pack("{s:s, s:s, s:s}", "kind", "socket", "socket",
                               JB_IMAGE_SHIM_SOCKET_DIR "/" JB_SHIM_SOCKET_NAME, "note",
                               "per-session Unix socket of the worker, bind-mounted read-only into "
                               "the container and connected by the launcher before the jail; the "
                               "jail's filter refuses socket, socketpair and connect");
      } else {
        const char *why = json_string_value(json_object_get(ready, "error")) ?: "no reason given";
        if (!L->exec_reason)
          L->exec_reason = json_string("the launcher could not connect to the session's socket");
        L->channel = json_pack("{s:s, s:s+}", "kind", "attach", "reason",
                               "the launcher could not connect to the session's socket (does the "
                               "runtime have --host-uds=open?): ",
                               why);
        jb_log(JB_LOG_WARN, "shim socket channel unavailable; using the attach stream", "job",
               L->job_id, "reason", why, NULL);
      }
      json_decref(ready);
      ready = NULL;
    } else if (ready) {
      L->channel =
          json_pack("{s:s, s:s}", "kind", "attach", "reason",
                    "the launcher did not announce a channel: the image's jailbox-shim "
                    "predates the socket channel (rebuild it: deploy/sandbox-image/build.sh)");
      jb_log(JB_LOG_WARN, "shim socket channel unavailable; using the attach stream", "job",
             L->job_id, "reason", "the image's jailbox-shim predates the socket channel", NULL);
      if (!L->exec_reason)
        L->exec_reason =
            json_string("the image's launcher predates the socket channel and the spawner");
    }
    jb_shim_listener_close(&L->lsn);
  }
  *ready_out = ready;
  return 0;
}

/* What the image gives a command, as the spawner's hello says. exec is offered only where
 * /bin/sh runs for the jail's user: its `command` form runs through it, and an image without a
 * shell is one made for the file tools (the minimal one holds only the walls' bwrap and
 * setpriv; sandbox/WALLS.md, "What a command can run"). Elsewhere exec is unavailable and the
 * spawner's channel is closed (no jail is built ahead; the spawner stays the container's
 * init), so that a worker taking the session over finds no spawner to take. A hello without
 * "image" (a launcher that predates it) leaves exec as it is. */
static void launch_image_facts(struct launch *L) {
  json_t *image = json_object_get(L->sb->spawner.hello, "image");
  if (L->sb->spawner.fd < 0 || !json_is_false(json_object_get(image, "shell"))) return;
  json_decref(L->exec_reason);
  L->exec_reason = json_string("the image has no /bin/sh: no command can run");
  L->hello = json_incref(L->sb->spawner.hello);
  jb_spawner_close(&L->sb->spawner);
  jb_log(JB_LOG_INFO, "exec unavailable", "job", L->job_id, "reason",
         json_string_value(L->exec_reason), NULL);
}

/* The shim's ready line (`ready`, taken; NULL: read it now) in the protocol this worker
 * speaks. */
static int launch_ready(struct launch *L, json_t *ready) {
  if (!ready) {
    long left = L->ready_deadline - jb_now_ms();
    ready = jb_shimconn_read(&L->sb->conn, left > 0 ? left : 0, L->err);
  }
  if (!ready || strcmp(json_string_value(json_object_get(ready, "event")) ?: "", "ready") != 0) {
    char tail[600];
    jb_shimconn_stderr(&L->sb->conn, tail, sizeof tail);
    enum jb_wall w = blame_output(tail, L->bwrap);
    if (w == JB_WALL_COUNT) w = L->gvisor ? JB_WALL_GVISOR : JB_WALL_DOCKER;
    fail_wall(L->failed, w, L->err, "the jail did not come up: %s",
              ready ? "unexpected first line" : L->err->msg);
    json_decref(ready);
    return -1;
  }
  if (json_integer_value(json_object_get(ready, "protocol")) != JB_SHIM_PROTOCOL) {
    json_decref(ready);
    fail_wall(L->failed, JB_WALL_COUNT, L->err, "shim speaks another protocol version");
    return -1;
  }
  json_decref(ready);
  L->t[T_READY] = jb_now_ms();
  L->sb->ready_ms = L->t[T_READY] - L->t[T_START];
  return 0;
}

/* What the jailed shim sees (status) and that it answers (ping). */
static int launch_inside(struct launch *L) {
  json_t *req = json_pack("{s:s}", "op", "status");
  json_t *ans = jb_shimconn_call(&L->sb->conn, req, L->cfg->call_timeout_ms, L->err);
  json_decref(req);
  if (!ans || !json_is_true(json_object_get(ans, "ok"))) {
    json_decref(ans);
    fail_wall(L->failed, JB_WALL_COUNT, L->err, "shim status: %s", ans ? "refused" : L->err->msg);
    return -1;
  }
  L->status = json_incref(json_object_get(ans, "result"));
  json_decref(ans);
  L->t[T_STATUS] = jb_now_ms();
  req = json_pack("{s:s}", "op", "ping");
  ans = jb_shimconn_call(&L->sb->conn, req, L->cfg->call_timeout_ms, L->err);
  json_decref(req);
  bool pong = ans && json_is_true(json_object_get(json_object_get(ans, "result"), "pong"));
  json_decref(ans);
  if (!pong) {
    fail_wall(L->failed, JB_WALL_COUNT, L->err, "shim ping: %s", L->err->msg);
    return -1;
  }
  L->t[T_PING] = jb_now_ms();
  return 0;
}

/* The walls as they stand (the shim's status, Docker's inspect) against what was asked: a
 * wall that stands but not as specified is a failed wall, required or not — the contract never
 * claims what is not true, and a half-built wall is not offered. */
static int launch_check(struct launch *L) {
  walls_check_status(L->status, L->gvisor, L->bwrap, false, &L->chk);
  L->settings = walls_inspect_settings(L->cfg, L->sb->container_id, L->gvisor, &L->chk, L->err);
  if (!L->settings) {
    fail_wall(L->failed, JB_WALL_DOCKER, L->err, "inspect: %s", L->err->msg);
    return -1;
  }
  for (int w = 0; w < JB_WALL_COUNT; w++)
    L->sb->walls_up[w] = L->use[w] && json_array_size(L->chk.problems[w]) == 0;
  int ret = 0;
  for (int w = 0; w < JB_WALL_COUNT; w++)
    if (L->use[w] && json_array_size(L->chk.problems[w]) > 0) {
      if (ret == 0)
        fail_wall(L->failed, (enum jb_wall)w, L->err, "not as specified: %s",
                  json_string_value(json_array_get(L->chk.problems[w], 0)));
      ret = -1;
    }
  return ret;
}

/* Wall 1 in the contract (new). */
static json_t *contract_gvisor(const struct launch *L) {
  json_t *w1 = json_pack("{s:b, s:b}", "up", L->sb->walls_up[JB_WALL_GVISOR], "required",
                         L->cfg->require[JB_WALL_GVISOR]);
  if (L->gvisor) {
    json_object_set_new(w1, "runtime", json_string(L->cfg->runtime));
    if (L->probe) {
      json_object_set_new(w1, "runtimePath", json_string(L->probe->runsc_path));
      json_object_set_new(w1, "version", json_string(L->probe->runsc_version));
      json_t *ra = json_loads(L->probe->runsc_args, 0, NULL);
      json_object_set_new(w1, "runtimeArgs", ra ? ra : json_null());
    }
    json_object_set_new(w1, "network",
                        json_string("none (runsc --network=none: no network stack but loopback)"));
    json_object_set_new(w1, "seccompEnforcedBy", json_string("gVisor (runsc --oci-seccomp)"));
    if (L->status)
      json_object_set_new(w1, "kernelSeenInside",
                          json_incref(json_object_get(L->status, "kernel")));
  } else {
    json_object_set_new(w1, "runtime", json_string("runc"));
    json_object_set_new(
        w1, "reason",
        json_string(L->probe && !L->probe->up[JB_WALL_GVISOR] ? L->probe->reason[JB_WALL_GVISOR]
                                                              : "not used"));
  }
  return w1;
}

/* Wall 2 in the contract (new), with its seccomp profile counted. */
static json_t *contract_docker(const struct launch *L) {
  json_t *sc = json_pack("{s:s, s:s, s:s, s:s}", "profile", "deploy/seccomp/jailbox.json", "source",
                         L->cfg->profile_source, "sha256", L->cfg->profile_sha256, "defaultAction",
                         "SCMP_ACT_ERRNO (EPERM)");
  json_t *prof = json_loadb(L->cfg->profile, L->cfg->profile_len, 0, NULL);
  if (prof) {
    size_t allowed = 0, i;
    json_t *e;
    json_array_foreach (json_object_get(prof, "syscalls"), i, e) {
      const char *act = json_string_value(json_object_get(e, "action"));
      if (act && strcmp(act, "SCMP_ACT_ALLOW") == 0)
        allowed += json_array_size(json_object_get(e, "names"));
    }
    json_object_set_new(sc, "allowedSyscalls", json_integer((json_int_t)allowed));
    json_decref(prof);
  }
  char tmpsz[32];
  snprintf(tmpsz, sizeof tmpsz, "%ldMiB", L->cfg->container_tmp_mib);
  json_t *w2 = json_pack(
      "{s:b, s:b, s:s, s:s, s:{s:[s], s:o}, s:b, s:o, s:s, s:s, s:b, s:{s:s, s:s, s:s},"
      " s:{s:I, s:I, s:f, s:I, s:I}, s:s, s:s, s:s}",
      "up", L->sb->walls_up[JB_WALL_DOCKER], "required", L->cfg->require[JB_WALL_DOCKER], "engine",
      L->probe ? L->probe->engine : "?", "image", L->cfg->image, "capabilities", "drop", "ALL",
      "add", str_array(container_caps(L->cfg, L->gvisor, L->bwrap)), "noNewPrivileges", 1,
      "seccomp", sc, "apparmor",
      L->apparmor ? "docker-default" : "unavailable (the host kernel has no AppArmor)", "network",
      "none", "readOnlyRootfs", 1, "tmpfs", "path", "/tmp", "size", tmpsz, "purpose",
      L->bwrap ? "bwrap builds the jail's new root there" : "scratch space", "limits",
      "memoryBytes", (json_int_t)L->lim.memory_bytes, "memorySwapBytes",
      (json_int_t)L->lim.memory_bytes, "cpus", (double)L->lim.nano_cpus / 1e9, "pids",
      (json_int_t)L->lim.pids, "hostPids", (json_int_t)L->lim.host_pids, "workspace",
      "bind mount at /workspace (rw, rprivate)", "containerUser",
      "0:0 (root of gVisor's kernel; the jail drops it)", "logDriver",
      "none (nothing the shim prints is kept on disk)");
  if (L->gvisor)
    json_object_set_new(json_object_get(w2, "limits"), "pidsEnforcedAs",
                        json_string("RLIMIT_NPROC of the jail's uid inside gVisor; the host pids "
                                    "cgroup (hostPids) leaves room for the Sentry's threads"));
  if (L->probe && L->probe->image_id[0]) {
    json_object_set_new(w2, "imageId", json_string(L->probe->image_id));
    json_object_set_new(w2, "imageDigest", json_string(L->probe->image_digest));
  }
  if (L->sb->container_id[0])
    json_object_set_new(w2, "containerId", json_string(L->sb->container_id));
  if (L->settings) json_object_set_new(w2, "inspected", json_incref(L->settings));
  return w2;
}

/* Wall 3 in the contract (new). */
static json_t *contract_bwrap(const struct launch *L) {
  json_t *w3 = json_pack("{s:b, s:b}", "up", L->sb->walls_up[JB_WALL_BWRAP], "required",
                         L->cfg->require[JB_WALL_BWRAP]);
  if (L->bwrap) {
    json_t *desc = jb_filter_describe();
    json_t *w3s = json_pack(
        "{s:s, s:[s,s,s,s,s], s:[s,s], s:b, s:b, s:s, s:s, s:s, s:s,"
        " s:{s:I, s:I, s:I, s:s, s:s, s:o}}",
        "bwrap", L->probe && L->probe->bwrap_version[0] ? L->probe->bwrap_version : "bubblewrap",
        "namespacesNew", "mount", "pid", "ipc", "uts", "cgroup (where the runtime allows)",
        "namespacesShared", "net (gVisor's, loopback only)",
        "user (bwrap runs as root of gVisor's kernel)", "dieWithParent", 1, "newSession", 1, "proc",
        "private (new procfs for the jail's pid namespace)", "sys", "absent", "root",
        "tmpfs, remounted read-only", "binds",
        "/lib, /lib64, setpriv, jailbox-shim (read-only); /workspace (read-write); /tmp (tmpfs)",
        "seccomp", "syscalls", (json_int_t)L->fi.syscalls, "rules", (json_int_t)L->fi.rules,
        "killRules", (json_int_t)L->fi.kill_rules, "bpfSha256", L->bpf_sha, "compiledWith",
        "libseccomp (seccomp_export_bpf), handed to bwrap --seccomp", "filter",
        desc ? desc : json_null());
    json_object_update(w3, w3s);
    json_decref(w3s);
    json_object_set_new(w3, "privilegeDrop",
                        json_string("setpriv --reuid 65534 --regid 65534 --clear-groups "
                                    "--inh-caps=-all --bounding-set=-all --no-new-privs"));
  } else {
    json_object_set_new(w3, "reason",
                        json_string(L->probe && !L->probe->up[JB_WALL_BWRAP]
                                        ? L->probe->reason[JB_WALL_BWRAP]
                                        : "not built (needs gVisor on this host)"));
  }
  return w3;
}

/* The jail as the shim saw it from inside (new; JSON null without its status). */
static json_t *contract_jail(const json_t *status) {
  json_t *jail = json_null();
  if (status) {
    json_t *caps = json_object_get(status, "capabilities");
    jail = json_pack("{s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "uid",
                     json_object_get(status, "uid"), "gid", json_object_get(status, "gid"),
                     "capEff", json_object_get(caps, "effective") ?: json_null(), "capPrm",
                     json_object_get(caps, "permitted") ?: json_null(), "capBnd",
                     json_object_get(caps, "bounding") ?: json_null(), "noNewPrivs",
                     json_object_get(status, "noNewPrivs"), "seccompMode",
                     json_object_get(status, "seccomp"), "namespaces",
                     json_object_get(status, "namespaces"), "netdevs",
                     json_object_get(status, "netdevs"), "fds", json_object_get(status, "fds"));
  }
  return jail;
}

/* The session contract (sb->contract): what stands, with its settings, and what remains; on
 * failure too, saying what was found. */
static void contract_build(struct launch *L, int ret) {
  if (!L->channel)
    L->channel = json_pack("{s:s, s:s}", "kind", "none", "reason", "the shim did not come up");
  /* the session contract: what stands, with its settings, and what remains */
  char at[40];
  walls_iso8601(walls_epoch_ms(), at, sizeof at);
  json_t *w1 = contract_gvisor(L), *w2 = contract_docker(L), *w3 = contract_bwrap(L);
  json_t *jail = contract_jail(L->status);
  json_t *problems = json_object();
  for (int w = 0; w < JB_WALL_COUNT; w++)
    if (json_array_size(L->chk.problems[w]))
      json_object_set(problems, jb_wall_names[w], L->chk.problems[w]);
  json_t *req_list = json_array();
  for (int w = 0; w < JB_WALL_COUNT; w++)
    if (L->cfg->require[w]) json_array_append_new(req_list, json_string(jb_wall_names[w]));
  L->sb->contract = json_pack(
      "{s:i, s:s, s:s, s:s, s:o, s:o, s:{s:o, s:o, s:o}, s:o, s:o, s:o, s:o}", "contractVersion", 1,
      "at", at, "worker", L->cfg->worker_id, "status", ret == 0 ? "up" : "failed", "required",
      req_list, "override",
      L->cfg->override
          ? json_pack("{s:s, s:s}", "requireWalls", L->cfg->require_text, "note",
                      "development override: fewer walls required than gvisor,docker,bwrap")
          : json_null(),
      "walls", "gvisor", w1, "docker", w2, "bwrap", w3, "jailSeenFromInside", jail, "problems",
      problems, "timingsMs", timings_json(L->t, tnames, T_N), "residualRisks",
      jb_walls_residual_risks(L->cfg, L->sb->walls_up, L->apparmor));
  if (L->sb->contract) json_object_set(L->sb->contract, "shimChannel", L->channel);
}

/* The contract's exec, image and probe, and the residual risks they bring. */
static void contract_exec_image(struct launch *L, int ret) {
  if (L->sb->contract) {
    if (!L->exec_reason && L->sb->spawner.fd < 0)
      L->exec_reason = json_string(ret == 0 ? "no spawner answered" : "the shim did not come up");
    json_object_set_new(
        L->sb->contract, "exec",
        exec_contract(&L->sb->spawner, L->hello ? L->hello : L->sb->spawner.hello, L->exec_reason,
                      L->xbpf ? &L->xfi : NULL, L->xbpf_sha, L->limits));
    if (L->sb->spawner.fd >= 0 && !L->exec_reason)
      json_array_append_new(
          json_object_get(L->sb->contract, "residualRisks"),
          json_string(
              "exec: a command may connect() to a host Unix socket file in the workspace "
              "(runsc --host-uds=open; the pre-scan flags such files) — exec's filter "
              "allows local sockets, which build and test tools need. A command's memory is "
              "read every few tens of ms (exec.memory): one that allocates faster than the "
              "reserve between two reads, or memory the shim holds beyond it, can still take "
              "the container over its limit, and then the whole sandbox is killed (reported "
              "as oom)."));
  }
  if (L->sb->contract)
    json_object_set_new(
        L->sb->contract, "image",
        L->probe && L->probe->image_id[0]
            ? json_pack("{s:s, s:s, s:s?}", "name", L->cfg->image, "id", L->probe->image_id,
                        "contentDigest", L->probe->image_digest[0] ? L->probe->image_digest : NULL)
            : json_pack("{s:s, s:n, s:n}", "name", L->cfg->image, "id", "contentDigest"));
  if (L->sb->contract && L->gvisor && L->probe && strstr(L->probe->runsc_args, "--host-uds=open"))
    json_array_append_new(
        json_object_get(L->sb->contract, "residualRisks"),
        json_string(L->bwrap
                        ? "runsc runs with --host-uds=open, so a process in the sandbox may "
                          "connect to a host Unix socket visible in its mounts: the workspace "
                          "(a socket file the buyer left there) and the session's shim socket "
                          "directory. Only the launcher connects, as the container's root before "
                          "the jail, once (the worker then removes the socket); the jailed shim "
                          "sees no socket directory and Wall 3's filter refuses socket, "
                          "socketpair and connect (EPERM)."
                        : "runsc runs with --host-uds=open and Wall 3 is missing: the shim may "
                          "connect to a host Unix socket left in the workspace; only Wall 2's "
                          "profile and gVisor stand in the way."));
  if (L->sb->contract && L->probe && L->probe->done)
    json_object_set_new(L->sb->contract, "probe", jb_probe_json(L->probe));
}

/* The launch's end: a failed launch's connection closed, its container removed and its
 * spawner's channel closed; what the stages held freed. */
static void launch_end(struct launch *L, int ret) {
  if (ret < 0) {
    json_object_set_new(L->sb->contract, "failure", json_string(L->err ? L->err->msg : "?"));
    if (L->sb->conn_open) jb_shimconn_close(&L->sb->conn);
    L->sb->conn_open = false;
    if (L->sb->container_id[0]) {
      jb_error rerr = {0};
      (void)jb_container_remove(L->cfg, L->sb->container_id, &rerr);
      L->sb->container_id[0] = '\0';
    }
  }
  for (int w = 0; w < JB_WALL_COUNT; w++) json_decref(L->chk.problems[w]);
  if (ret < 0) jb_spawner_close(&L->sb->spawner);
  json_decref(L->exec_reason);
  json_decref(L->hello);
  free(L->xbpf);
  json_decref(L->channel);
  json_decref(L->status);
  json_decref(L->settings);
  json_decref(L->created);
  json_decref(L->body);
  free(L->bpf);
}

/* The stages in the order the walls need them: which walls, the filters and the channel, the
 * container created, attached and started, the filters handed over, the channel taken, the
 * shim ready, checked from inside, the walls checked as they stand; then the contract (also of
 * a failed launch) and the end. */
int jb_sandbox_launch(const struct jb_walls_config *cfg, const struct jb_probe *probe,
                      const char *job_id, const char *workspace, const json_t *limits,
                      const json_t *labels, struct jb_sandbox *sb, enum jb_wall *failed,
                      jb_error *err) {
  struct launch L = {.cfg = cfg,
                     .probe = probe,
                     .job_id = job_id,
                     .workspace = workspace,
                     .limits = limits,
                     .labels = labels,
                     .sb = sb,
                     .failed = failed,
                     .err = err,
                     .lsn = JB_SHIM_LISTENER_INIT};
  launch_init(&L);
  json_t *ready = NULL;
  int ret = launch_walls_allowed(&L);
  if (ret == 0) ret = launch_filters(&L);
  if (ret == 0) ret = launch_create(&L);
  if (ret == 0) ret = launch_attach(&L);
  if (ret == 0) ret = launch_start(&L);
  if (ret == 0) ret = launch_hand_filters(&L);
  if (ret == 0) ret = launch_channel(&L, &ready);
  if (ret == 0) launch_image_facts(&L);
  if (ret == 0) ret = launch_ready(&L, ready); /* takes ready */
  if (ret == 0) ret = launch_inside(&L);
  if (ret == 0) ret = launch_check(&L);
  jb_shim_listener_close(&L.lsn);
  contract_build(&L, ret);
  contract_exec_image(&L, ret);
  launch_end(&L, ret);
  return ret;
}
