/* clockshim.c — LD_PRELOAD shim for tests/integration/audit_group.sh: CLOCK_REALTIME is moved by
 * SHIM_OFFSET_MS milliseconds (may be negative), only while the file SHIM_TRIGGER exists when
 * that is set (so that a process can step its own clock back at a chosen moment).
 *   cc -shared -fPIC -O2 clockshim.c -o clockshim.so -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int clock_gettime(clockid_t id, struct timespec *ts) {
  static int (*real)(clockid_t, struct timespec *);
  if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
  int rc = real(id, ts);
  if (rc != 0 || id != CLOCK_REALTIME) return rc;
  const char *off = getenv("SHIM_OFFSET_MS"), *trig = getenv("SHIM_TRIGGER");
  if (!off || (trig && access(trig, F_OK) != 0)) return rc;
  long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + atoll(off) * 1000000LL;
  ts->tv_sec = (time_t)(ns / 1000000000LL);
  ts->tv_nsec = (long)(ns % 1000000000LL);
  return rc;
}
