/* oomwatch.h — one session's watch for the kernel's OOM killer in its sandbox's memory cgroup
 * (memcg.h): a thread waits on the kernel's notification and reads the counters the moment it
 * comes, while the cgroup still exists; what it saw is kept for the session, so that the end
 * of the sandbox is classified from it even when the cgroup went with the container. Where the
 * notification cannot be registered, the counters are sampled instead (jb_oomwatch_sample). */
#ifndef JB_WORKER_OOMWATCH_H
#define JB_WORKER_OOMWATCH_H

#include <stdbool.h>

#include "lib/err.h"
#include "sandbox/worker/memcg.h"

/* How an OOM was first known. */
enum jb_oom_source {
  JB_OOM_NONE = 0, /* not seen */
  JB_OOM_EVENT, /* from the kernel's notification */
  JB_OOM_SAMPLE, /* from counters read at a sample or at the end */
};

/* What a watch saw in the cgroup: `source`, `at_ms` (jb_now_ms() when first known; 0 when not
 * seen), `last_ms` (jb_now_ms() when an OOM was last newly seen: a counter grew, or a
 * notification said OOM without counters), `counts` (the highest value of each counter read),
 * `counted` (the counters were read at least once), `notified` (the watch had the kernel's
 * notification, not samples). A sandbox outlives an OOM that kills one command in it, so
 * what the watch saw says when, and the end is judged by the OOMs just before it. */
struct jb_oom_record {
  enum jb_oom_source source;
  long long at_ms, last_ms;
  struct jb_memcg_counts counts;
  bool counted, notified;
};

/* An OOM seen at most this long (ms) before a sandbox's end may have caused it. */
#define JB_OOM_END_WINDOW_MS 15000

struct jb_oomwatch;

/* Starts watching the memory cgroup `m` (taken: m->dirfd -1 on return; a cgroup not open,
 * dirfd -1, gives a watch that sees nothing). 0 with *out watching by notification (one
 * thread); 1 with *out sampling only and `err` saying why the notification could not be had;
 * -1 with `err` when there is no memory or no thread (*out NULL, the cgroup closed). */
int jb_oomwatch_start(struct jb_memcg *m, struct jb_oomwatch **out, jb_error *err);

/* Reads the counters now when `w` samples (no notification); nothing when it is notified. */
void jb_oomwatch_sample(struct jb_oomwatch *w);

/* What `w` saw, into *rec, once the sandbox ended (any thread). A notification the kernel
 * delivered that the watch's thread has not taken yet is taken here, at once (the kernel
 * signals before it kills, so one that ended the sandbox is there); nothing is waited for.
 * Then the counters are read once more if the cgroup is still there. Whether an OOM was seen
 * (rec->source != JB_OOM_NONE). */
bool jb_oomwatch_seen(struct jb_oomwatch *w, struct jb_oom_record *rec);

/* Whether a sandbox's end at `ended_ms` (jb_now_ms()) with exit code `code` (-1: the container
 * could not be read, or was gone) was out of memory, `seen` and *rec being what
 * jb_oomwatch_seen gave and `docker_oom` Docker's State.OOMKilled: any end but the syscall
 * filter's (128 + SIGSYS) with an OOM seen at most JB_OOM_END_WINDOW_MS before it, or with
 * Docker's flag where the kernel's notification could not be had. The exit code says little
 * more: under runsc the end of an OOM is 137, or 1 when the process killed was the shim's
 * child. The one rule for a session's end and for a command
 * its sandbox's end killed. */
bool jb_oom_ended_it(bool seen, const struct jb_oom_record *rec, long long ended_ms, long long code,
                     bool docker_oom);

/* "event", "sample" or "none". */
const char *jb_oom_source_name(enum jb_oom_source s);

/* Wakes and joins the thread, closes every descriptor and the cgroup, frees `w` (NULL: no-op). */
void jb_oomwatch_stop(struct jb_oomwatch *w);

#endif
