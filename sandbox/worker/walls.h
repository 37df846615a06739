/* walls.h — building the three walls for one session and describing them.
 *
 *   Wall 1  gVisor: the container runs under the runsc runtime (its own kernel, the Sentry).
 *   Wall 2  a hardened Docker container: no network, every capability dropped but the four
 *           bwrap needs inside gVisor's kernel, no-new-privileges, the project's seccomp
 *           profile, read-only root, tmpfs /tmp, memory/CPU/pids limits, the workspace only.
 *   Wall 3  bubblewrap + seccomp: new pid/ipc/uts/mount(/cgroup) namespaces, a minimal mount
 *           tree, the libseccomp filter of filter.c, then setpriv to uid 65534 with empty
 *           capability sets; the program inside is jailbox-shim.
 *
 * The probe (at worker start) finds which walls this host can build; a launch builds them
 * for a session, checks from inside (the shim's status) that each is what it claims, and
 * produces the session contract (sessions.walls). A wall that is required but cannot be
 * built fails the launch with a reason naming it; one that is not required (development
 * override) is left out and the contract says so. */
#ifndef JB_SANDBOX_WALLS_H
#define JB_SANDBOX_WALLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandbox/worker/docker.h"
#include "sandbox/worker/exec.h"
#include "sandbox/worker/shimconn.h"
#include "lib/err.h"
#include "lib/images.h"

#define JB_WALLS_DEFAULT_REQUIRE "gvisor,docker,bwrap"

/* Paths inside the sandbox image (deploy/sandbox-image/build.sh). */
#define JB_IMAGE_SHIM "/opt/jailbox/bin/jailbox-shim"
#define JB_IMAGE_BWRAP "/usr/bin/bwrap"
#define JB_IMAGE_SETPRIV "/usr/bin/setpriv"
#define JB_JAIL_UID 65534
/* Where the per-session shim socket directory appears inside the container (read-only), and
 * the socket's name in it (sandbox/proto/PROTOCOL.md, "Channel"). */
#define JB_IMAGE_SHIM_SOCKET_DIR "/run/jailbox-shim"
#define JB_SHIM_SOCKET_NAME "shim.sock"

enum jb_wall { JB_WALL_GVISOR = 0, JB_WALL_DOCKER = 1, JB_WALL_BWRAP = 2, JB_WALL_COUNT = 3 };
extern const char *const jb_wall_names[JB_WALL_COUNT]; /* "gvisor", "docker", "bwrap" */

struct jb_walls_config {
  struct jb_docker docker;
  char worker_id[512];
  char deployment[17]; /* label jailbox.deployment: names the database (see launch_jobs.h) */
  char image[JB_IMAGE_NAME_MAX + 8]; /* sandbox image, e.g. jailbox-sandbox:latest; a launch
                                      * with the session's image runs with a copy so set */
  char runtime[64]; /* the gVisor runtime's name in Docker, e.g. runsc */
  bool require[JB_WALL_COUNT];
  char require_text[128]; /* as configured */
  bool override; /* require is narrower than the default: development only */
  const char *profile; /* Wall 2 seccomp profile, JSON text (borrowed) */
  size_t profile_len;
  char profile_source[512]; /* where it came from (embedded copy of deploy/seccomp/…, or a file) */
  char profile_sha256[65];
  long container_tmp_mib; /* container /tmp tmpfs size (bwrap builds its root there) */
  long changeset_upper_mib; /* the /jailbox-cs tmpfs (overlay uppers, root only), MiB */
  long jail_tmp_mib; /* the jail's own /tmp */
  long start_timeout_ms; /* container start → shim ready */
  long call_timeout_ms; /* one shim call */
  /* directory for the per-session shim socket directories (absolute; "" with
   * shim_socket_off): the shim's lines then travel over a Unix socket, not the attach stream */
  char shim_socket_dir[256];
  bool shim_socket_off; /* JAILBOX_SHIM_SOCKET_DIR=none: the attach stream only */
};

/* What the worker found at start. Plain data, copied by value. */
struct jb_probe {
  bool done;
  long long at_ms; /* wall-clock time of the probe, ms since the epoch */
  bool up[JB_WALL_COUNT];
  char reason[JB_WALL_COUNT][400]; /* why a wall is down ("" when up) */
  char engine[64], api[16], runsc_path[256], runsc_version[128], runsc_args[256];
  /* the image a launch uses: the worker's JAILBOX_SANDBOX_IMAGE in the probe, the session's
   * image in a launch (jb_probe_set_image) */
  char image_name[JB_IMAGE_NAME_MAX + 8];
  char image_id[80], image_digest[80], shim_sha256[80], bwrap_version[64];
  bool apparmor_host; /* the host kernel has AppArmor and Docker reports it */
  unsigned filter_rules, filter_syscalls;
  char filter_sha256[65];
  long duration_ms;
};

/* One session's walls while they stand. */
struct jb_sandbox {
  char job_id[129];
  char container_id[80];
  struct jb_shimconn conn;
  bool conn_open;
  struct jb_spawner spawner; /* exec's channel (fd -1: none) */
  bool walls_up[JB_WALL_COUNT];
  json_t *contract; /* the session contract (owned) */
  long ready_ms; /* launch start → shim ready */
};

/* A sandbox image as the Docker daemon holds it, with the labels deploy/sandbox-image/
 * build.sh gives it ("" where a label is missing). */
struct jb_image_info {
  char name[JB_IMAGE_NAME_MAX + 8]; /* as asked for, canonical (lib/images.h) */
  char id[80]; /* Docker's image id, sha256:… */
  char digest[80]; /* label jailbox.image.digest: SHA-256 of /etc/jailbox/manifest */
  char shim_sha256[80]; /* label jailbox.shim.sha256 */
  char bwrap_version[64]; /* label jailbox.bwrap.version */
};

/* Looks image `name` up (GET /images/{name}/json) into *out. 0, or -1 with `err`: ENOENT
 * with "image NAME not present on this Docker daemon (build it with …)" when the daemon does
 * not have it, the daemon's status or EIO otherwise. */
int jb_image_inspect(const struct jb_walls_config *cfg, const char *name, struct jb_image_info *out,
                     jb_error *err);

/* Makes `img` the image of probe `p` (name, id, content digest, shim hash, bwrap version):
 * a launch with a copy of the probe so set runs that image and its contract names it. */
void jb_probe_set_image(struct jb_probe *p, const struct jb_image_info *img);

/* Probes the host: Docker reachable, image present, runtime registered with the arguments
 * jailbox relies on, the filter compiles, and a probe container with every wall comes up and
 * passes the checks from inside; when it does not, narrower probes tell which wall fails.
 * Never fails as a whole: the result says per wall. */
void jb_walls_probe(const struct jb_walls_config *cfg, struct jb_probe *out);

/* Builds the walls for session `job_id` over `workspace` (absolute host path) with `limits`
 * ({"memoryMiB","cpus","pids"}; borrowed) from image cfg->image, which probe->image_*
 * describe (jb_probe_set_image; the contract's "image" names it). `labels` (borrowed, may be NULL) are added to the
 * container's. On success `sb` holds the running shim connection and the contract.
 * On failure returns -1 with `err` set (the message begins with the wall that failed,
 * "gvisor: …", "docker: …", "bwrap: …"), *failed_wall set (JB_WALL_COUNT when none applies),
 * `sb->contract` describing what was found (may be NULL), and the container removed. */
int jb_sandbox_launch(const struct jb_walls_config *cfg, const struct jb_probe *probe,
                      const char *job_id, const char *workspace, const json_t *limits,
                      const json_t *labels, struct jb_sandbox *sb, enum jb_wall *failed_wall,
                      jb_error *err);

/* Checks again, on a running sandbox whose `sb->conn` answers and whose `sb->walls_up` say
 * which walls it was built with, what the launch checked: the jailed process's own view (the
 * shim's status) and Wall 2's settings as Docker reports them. 0, or -1 with `err` naming the
 * wall that no longer holds ("bwrap: not as specified any more: …"), or why it could not be
 * asked. */
int jb_sandbox_recheck(const struct jb_walls_config *cfg, struct jb_sandbox *sb, jb_error *err);

/* Closes the shim connection and removes the container (force). Frees the contract. */
void jb_sandbox_destroy(const struct jb_walls_config *cfg, struct jb_sandbox *sb);

/* Removes container `id` (force, with its anonymous volumes). 0, or -1 with `err`; a
 * container that is already gone counts as removed. */
int jb_container_remove(const struct jb_walls_config *cfg, const char *id, jb_error *err);

/* The probe as JSON (new reference) for logs and the contract. */
json_t *jb_probe_json(const struct jb_probe *p);

/* Residual risks that remain with the walls in `up`, AppArmor applied or not (new reference:
 * array of strings). */
json_t *jb_walls_residual_risks(const struct jb_walls_config *cfg, const bool up[JB_WALL_COUNT],
                                bool apparmor);

#endif
