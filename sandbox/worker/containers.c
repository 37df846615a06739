/* containers.c — a session's containers on this worker's Docker daemon: listing them by the
 * deployment's and the session's labels, removing them, and waiting for one to be gone. Below
 * launch.c, adopt.c and signals.c, which all end sessions this way. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "sandbox/worker/worker.h"

bool container_gone(struct jb_worker *w, const char *cid, long ms) {
  char path[160];
  snprintf(path, sizeof path, "/containers/%s/json", cid);
  for (long waited = 0;; waited += 20) {
    long status = 0;
    json_t *in = NULL;
    jb_error err = {0};
    int rc = jb_docker_call(&w->walls.docker, "GET", path, NULL, 5000, &status, &in, &err);
    json_decref(in);
    if (rc == 0 && status == 404) return true;
    if (waited >= ms) return false;
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* The containers of this deployment on this Docker daemon, running or not, and with `job`
 * (NULL: any) only those of that session (GET /containers/json, filtered by label): the array
 * (new), or NULL with `err`. */
json_t *list_containers(struct jb_worker *w, const char *job, jb_error *err) {
  char l1[200], l2[64], enc[800], path[900];
  snprintf(l1, sizeof l1, "jailbox.session=%s", job ? job : "");
  snprintf(l2, sizeof l2, "jailbox.deployment=%s", w->walls.deployment);
  json_t *f = job ? json_pack("{s:[s,s]}", "label", l2, l1) : json_pack("{s:[s]}", "label", l2);
  cleanup_free char *filt = f ? json_dumps(f, JSON_COMPACT) : NULL;
  json_decref(f);
  if (!filt) return jb_fail(err, ENOMEM, "out of memory"), NULL;
  if (jb_docker_urlencode(filt, enc, sizeof enc) < 0)
    return jb_fail(err, ENAMETOOLONG, "label filter too long"), NULL;
  snprintf(path, sizeof path, "/containers/json?all=1&filters=%s", enc);
  json_t *list = NULL;
  if (jb_docker_expect(&w->walls.docker, "GET", path, NULL, 10000, &list, err) < 0) return NULL;
  return list;
}

void session_remove_containers(struct jb_worker *w, const char *job) {
  jb_error err = {0};
  json_auto_t *list = list_containers(w, job, &err);
  if (!list) {
    slog(w, JB_LOG_WARN, job, "listing containers failed", "error", err.msg, NULL);
    return;
  }
  size_t i;
  json_t *c;
  json_array_foreach (list, i, c) {
    const char *id = json_string_value(json_object_get(c, "Id"));
    if (id && jb_container_remove(&w->walls, id, &err) == 0)
      slog(w, JB_LOG_INFO, job, "container removed", "container", id, NULL);
  }
}
