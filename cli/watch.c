/* watch.c — `jailboxctl watch JOB`: the session's events as they happen, over the buyer's
 * Socket.IO connection (cli/sio_client.c; events in api/events.md), one line per event for
 * a person or one JSON object per line with --json. When the socket cannot be reached (or
 * with --poll) it polls the REST API instead and reports state changes, new ops and pending
 * approvals. With --decide the buyer decides approval requests from stdin (one line each,
 * sent as the REST approve/reject of api/openapi.yaml), and each request is followed by the
 * choices it offers, allow-similar keys included. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/ctl.h"
#include "cli/sio_client.h"

struct watch {
  struct jb_ctl *o;
  const char *job;
  bool until_end;
  bool decide; /* --decide: decisions are read from stdin */
  bool ended; /* the session reached a final state */
  bool over; /* it had ended before the watch began: nothing more will come */
  bool connected; /* the socket got as far as CONNECT */
  bool refused;
  char why[512];
};

static const char *s_(const json_t *o, const char *k) {
  return jb_ctl_text(json_string_value(json_object_get(o, k)));
}

static bool final_state(const char *st) {
  return st &&
         (strcmp(st, "accepted") == 0 || strcmp(st, "aborted") == 0 || strcmp(st, "failed") == 0);
}

static void stamp(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  printf("%02d:%02d:%02d.%03ld ", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

/* Prints a preview or diff text indented, at most 40 lines. */
static void print_block(const char *title, const char *text) {
  printf("    %s:\n", title);
  int lines = 0;
  for (const char *p = text; *p && lines < 40; lines++) {
    const char *nl = strchr(p, '\n');
    int n = nl ? (int)(nl - p) : (int)strlen(p);
    char line[520];
    snprintf(line, sizeof line, "%.*s", n < 512 ? n : 512, p);
    printf("    | %s\n", jb_ctl_text(line)); /* the agent wrote this: no control characters */
    p = nl ? nl + 1 : p + n;
    if (lines == 39 && *p) printf("    | …\n");
  }
}

/* Prints `s` whole (it may be longer than jb_ctl_text keeps: a move names two paths of up to
 * 4 KiB), control characters (C0, DEL, C1) as '?'. */
static void print_whole(const char *s) {
  for (const unsigned char *p = (const unsigned char *)(s ? s : "-"); *p; p++) {
    if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
      putchar('?');
      p++;
    } else {
      putchar(*p < 0x20 || *p == 0x7f ? '?' : *p);
    }
  }
}

/* ---------- an exec's live output, a whole line at a time ----------
 * jailbox:exec_output cuts the output where the 50 ms tick falls, so a line may come in two
 * events ("checking for gcc... " and, once the check has run, "gcc"). The end of an event's
 * text that has no newline yet waits here, per op and stream, for the rest of its line; it is
 * printed when the line ends, when it grows past PART_MAX, when the op ends (jailbox:op with
 * a result), when the live view is capped, and when watch ends. */
#define PART_SLOTS 16
#define PART_MAX 2048
static struct part {
  long long op; /* 0: free */
  int stream; /* 0 stdout, 1 stderr */
  size_t len;
  char text[PART_MAX];
} parts[PART_SLOTS];
static const char *const stream_names[2] = {"stdout", "stderr"};

/* Prints one output line of op `op` (its stamp first): `n` bytes at `p`, safe text. */
static void print_output_line(long long op, int stream, const char *p, size_t n) {
  stamp();
  char *line = strndup(p, n);
  printf("op #%lld %s| ", op, stream_names[stream]);
  print_whole(line ? line : "(out of memory)");
  putchar('\n');
  free(line);
}

static void part_flush(struct part *pt) {
  if (pt->op && pt->len) print_output_line(pt->op, pt->stream, pt->text, pt->len);
  pt->op = 0;
  pt->len = 0;
}

/* Prints what waits of op `op` (both streams; every op when `op` is 0). */
static void parts_flush(long long op) {
  for (int i = 0; i < PART_SLOTS; i++)
    if (parts[i].op && (op == 0 || parts[i].op == op)) part_flush(&parts[i]);
}

/* The slot of (op, stream), a free one, or the first one flushed to make room. */
static struct part *part_slot(long long op, int stream) {
  struct part *free_slot = NULL;
  for (int i = 0; i < PART_SLOTS; i++) {
    if (parts[i].op == op && parts[i].stream == stream) return &parts[i];
    if (!parts[i].op && !free_slot) free_slot = &parts[i];
  }
  if (!free_slot) {
    part_flush(&parts[0]);
    free_slot = &parts[0];
  }
  free_slot->op = op;
  free_slot->stream = stream;
  free_slot->len = 0;
  return free_slot;
}

/* One jailbox:exec_output event for a person: its complete lines, each with its stamp. */
static void print_exec_output(const json_t *d) {
  long long op = (long long)json_integer_value(json_object_get(d, "opId"));
  const char *data = json_string_value(json_object_get(d, "data"));
  int stream = strcmp(s_(d, "stream"), "stderr") == 0;
  if (op <= 0) op = -1; /* a malformed event still prints, under an op no real one has */
  if (json_is_true(json_object_get(d, "capped"))) {
    parts_flush(op);
    stamp();
    printf("op #%lld output: cut (the live view's limit; the agent's result has it)\n", op);
    return;
  }
  struct part *pt = part_slot(op, stream);
  for (const char *p = data ? data : ""; *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    if (!nl) { /* the start of a line: it waits for its end */
      if (pt->len + n > PART_MAX) {
        part_flush(pt);
        pt = part_slot(op, stream);
      }
      if (n > PART_MAX) {
        print_output_line(op, stream, p, n);
      } else {
        memcpy(pt->text + pt->len, p, n);
        pt->len += n;
      }
      break;
    }
    if (pt->len) { /* the end of the line that waited */
      size_t room = PART_MAX - pt->len, m = n < room ? n : room;
      memcpy(pt->text + pt->len, p, m);
      pt->len += m;
      print_output_line(op, stream, pt->text, pt->len);
      if (m < n) print_output_line(op, stream, p + m, n - m);
      pt->len = 0;
    } else {
      print_output_line(op, stream, p, n);
    }
    p = nl + 1;
  }
  if (!pt->len) pt->op = 0;
  if (json_integer_value(json_object_get(d, "skipped")) > 0) {
    stamp();
    printf("op #%lld %s| (%lld bytes not shown)\n", op, stream_names[stream],
           (long long)json_integer_value(json_object_get(d, "skipped")));
  }
}

/* One event for a person. `payload` borrowed. */
static void print_event(const char *name, const json_t *d) {
  if (strcmp(name, "jailbox:exec_output") == 0) {
    print_exec_output(d);
    return;
  }
  /* an op that has ended: the last of its output first */
  if (strcmp(name, "jailbox:op") == 0 && json_is_object(json_object_get(d, "result")))
    parts_flush((long long)json_integer_value(json_object_get(d, "opId")));
  stamp();
  if (strcmp(name, "jailbox:state") == 0) {
    if (json_is_true(json_object_get(d, "snapshot")))
      printf(
          "state %s (mode %s, %lld pending, audit head %lld)\n", s_(d, "state"), s_(d, "mode"),
          (long long)json_integer_value(json_object_get(d, "pendingOps")),
          (long long)json_integer_value(json_object_get(json_object_get(d, "auditHead"), "seq")));
    else
      printf("state %s -> %s%s%s%s%s\n", s_(d, "previous"), s_(d, "state"),
             json_is_string(json_object_get(d, "actor")) ? " by " : "",
             json_is_string(json_object_get(d, "actor")) ? s_(d, "actor") : "",
             json_is_string(json_object_get(d, "reason")) ? ": " : "",
             json_is_string(json_object_get(d, "reason")) ? s_(d, "reason") : "");
  } else if (strcmp(name, "jailbox:op") == 0) {
    json_t *res = json_object_get(d, "result");
    printf("op #%lld %s %s: %s", (long long)json_integer_value(json_object_get(d, "opId")),
           s_(d, "tool"), s_(d, "path"), s_(d, "state"));
    if (json_is_string(json_object_get(d, "decision"))) printf(" (%s)", s_(d, "decision"));
    if (json_is_string(json_object_get(d, "reason"))) printf(" — %s", s_(d, "reason"));
    if (json_is_object(res) && json_is_string(json_object_get(res, "error")))
      printf(" — %s", s_(res, "error"));
    if (json_is_object(res) && json_is_integer(json_object_get(res, "exitCode")))
      printf(" — exit %lld", (long long)json_integer_value(json_object_get(res, "exitCode")));
    else if (json_is_object(res) && json_is_string(json_object_get(res, "signal")))
      printf(" — %s", s_(res, "signal"));
    putchar('\n');
  } else if (strcmp(name, "jailbox:approval_request") == 0 && strcmp(s_(d, "tool"), "exec") == 0) {
    /* what the command is, where it runs, the names of the variables it sets (never their
     * values), and whether it may write the workspace — each printed as text, control
     * characters as '?' */
    printf("APPROVAL REQUESTED op #%lld: exec\n    argv:",
           (long long)json_integer_value(json_object_get(d, "opId")));
    size_t i;
    json_t *x;
    json_array_foreach (json_object_get(d, "argv"), i, x) {
      printf(" [");
      print_whole(json_string_value(x));
      putchar(']');
    }
    printf("\n    cwd: ");
    print_whole(json_string_value(json_object_get(d, "cwd")));
    printf("\n    env:");
    json_array_foreach (json_object_get(d, "envNames"), i, x) { /* NAME=value, masked */
      putchar(' ');
      print_whole(json_string_value(x));
      const char *val =
          json_string_value(json_object_get(json_object_get(d, "env"), json_string_value(x) ?: ""));
      if (val) {
        printf("=[");
        print_whole(val);
        putchar(']');
      }
    }
    if (json_array_size(json_object_get(d, "envNames")) == 0) printf(" (none added)");
    printf("\n    workspace: %s, timeout %lld s\n",
           json_is_true(json_object_get(d, "writable")) ? "WRITABLE" : "read-only",
           (long long)json_integer_value(json_object_get(d, "timeoutMs")) / 1000);
    /* what it is fed on stdin (a script for a shell, say): its first lines, as safe text */
    long long in = (long long)json_integer_value(json_object_get(d, "stdinBytes"));
    const char *pv = json_string_value(json_object_get(d, "stdinPreview"));
    if (in > 0 && pv) {
      printf("    stdin: %lld bytes (sha256 %.16s…)%s\n", in, s_(d, "stdinSha256"),
             json_is_true(json_object_get(d, "stdinPreviewTruncated")) ? ", starts:" : ":");
      int lines = 0;
      const char *p = pv;
      for (; *p && lines < 20; lines++) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char line[256];
        size_t shown = n < sizeof line - 1 ? n : sizeof line - 1;
        while (shown < n && shown > 0 && ((unsigned char)p[shown] & 0xC0) == 0x80) shown--;
        snprintf(line, sizeof line, "%.*s", (int)shown, p);
        printf("      | ");
        print_whole(line);
        if (shown < n) printf(" …(%zu more bytes on this line)", n - shown); /* never hidden */
        putchar('\n');
        p += n + (nl ? 1 : 0);
      }
      if (*p) {
        size_t more = 0;
        for (const char *q = p; *q; q++) more += *q == '\n';
        printf("      …(%zu more lines)\n", more + (p[strlen(p) - 1] != '\n'));
      }
    }
  } else if (strcmp(name, "jailbox:approval_request") == 0 &&
             json_is_string(json_object_get(d, "description"))) {
    /* mkdir, move, delete: what the op will do, whole (destination, recursive) */
    printf("APPROVAL REQUESTED op #%lld: ",
           (long long)json_integer_value(json_object_get(d, "opId")));
    print_whole(json_string_value(json_object_get(d, "description")));
    putchar('\n');
  } else if (strcmp(name, "jailbox:approval_request") == 0) {
    printf("APPROVAL REQUESTED op #%lld: %s %s (%lld bytes, sha256 %.16s…, %s)\n",
           (long long)json_integer_value(json_object_get(d, "opId")), s_(d, "tool"), s_(d, "path"),
           (long long)json_integer_value(json_object_get(d, "size")), s_(d, "sha256"),
           json_is_true(json_object_get(d, "exists")) ? "replaces a file" : "new file");
    /* the diff preview {format:"unified", text, truncated, bytes} (api/events.md), else the
     * first bytes of the content */
    json_t *diff = json_object_get(d, "diff");
    const char *dt = json_is_string(diff) ? json_string_value(diff)
                                          : json_string_value(json_object_get(diff, "text"));
    const char *prev = json_string_value(json_object_get(d, "preview"));
    if (dt)
      print_block(json_is_true(json_object_get(diff, "truncated")) ? "diff (cut short)" : "diff",
                  dt);
    else if (prev)
      print_block("content (no diff preview)", prev);
  } else if (strcmp(name, "jailbox:security_alert") == 0) {
    printf("SECURITY ALERT %s: %s (%lld bytes) refused, rules:", s_(d, "kind"), s_(d, "path"),
           (long long)json_integer_value(json_object_get(d, "size")));
    size_t i;
    json_t *r;
    json_array_foreach (json_object_get(d, "rules"), i, r) {
      printf(" %s", json_is_string(r) ? jb_ctl_text(json_string_value(r)) : s_(r, "id"));
    }
    putchar('\n');
  } else if (strcmp(name, "jailbox:pre_scan") == 0) {
    json_t *p = json_object_get(d, "prescan");
    printf("pre-scan: %lld files, %lld directories, %lld bytes, %lld symlinks, %lld flagged%s\n",
           (long long)json_integer_value(json_object_get(p, "files")),
           (long long)json_integer_value(json_object_get(p, "dirs")),
           (long long)json_integer_value(json_object_get(p, "bytes")),
           (long long)json_integer_value(json_object_get(p, "symlinks")),
           (long long)json_integer_value(json_object_get(p, "flaggedCount")),
           json_is_true(json_object_get(p, "truncated")) ? " (truncated)" : "");
    size_t i;
    json_t *f;
    json_array_foreach (json_object_get(p, "flagged"), i, f) {
      if (i == 20) {
        printf("    …\n");
        break;
      }
      printf("    flagged %s: %s\n", s_(f, "path"), s_(f, "kind"));
    }
  } else if (strcmp(name, "jailbox:audit_head") == 0) {
    printf("audit head %lld:%.16s…\n", (long long)json_integer_value(json_object_get(d, "seq")),
           s_(d, "hash"));
  } else if (strcmp(name, "jailbox:abort") == 0) {
    printf("ABORTED by %s%s%s\n", s_(d, "actor"),
           json_is_string(json_object_get(d, "reason")) ? ": " : "",
           json_is_string(json_object_get(d, "reason")) ? s_(d, "reason") : "");
  } else {
    char *t = json_dumps(d, JSON_COMPACT | JSON_ENCODE_ANY);
    printf("%s %s\n", name, t ? t : "");
    free(t);
  }
  if (strcmp(name, "jailbox:approval_request") == 0) { /* who asked, what the reviewer said */
    const char *by = json_string_value(json_object_get(d, "askedBy"));
    if (by && strncmp(by, "rule:", 5) == 0) {
      printf("    asked by rule ");
      print_whole(by + 5);
      putchar('\n');
    }
    json_t *rv = json_object_get(d, "reviewer");
    if (json_is_object(rv)) {
      printf("    reviewer %s: ",
             json_is_true(json_object_get(rv, "failed")) ? "failed" : "says ask");
      print_whole(json_string_value(json_object_get(rv, "reason")));
      putchar('\n');
    }
  }
}

/* Every line on stdout, and jb_ctl_text's ring, are shared by the event handlers and the
 * thread reading decisions: one at a time. */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static long long newest_request; /* the op of the newest approval request (under out_lock) */

/* The choices an approval request `d` offers a buyer deciding from stdin: approve, reject,
 * and the allow-similar keys that fit the op (api/openapi.yaml ApproveRequest.allowSimilar:
 * directory and extension for an op on a path, extension only when its name has one, command
 * for exec, session for every op). */
static void print_choices(const json_t *d) {
  long long op = (long long)json_integer_value(json_object_get(d, "opId"));
  const char *tool = s_(d, "tool");
  const char *path = json_string_value(json_object_get(d, "path"));
  printf("    decide: a %lld = approve | r %lld REASON = reject", op, op);
  if (!strcmp(tool, "exec")) {
    printf(" | a %lld command = approve, allow this command from now on", op);
  } else if (path && path[0]) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    printf(" | a %lld directory = approve, allow %s in its directory", op, tool);
    if (dot && dot != base && dot[1])
      printf(" | a %lld extension = approve, allow %s of *%s there", op, tool, jb_ctl_text(dot));
  }
  printf(" | a %lld session = approve, allow every %s this session\n", op, tool);
}

static void emit_line(struct watch *w, const char *name, json_t *data, bool polled) {
  pthread_mutex_lock(&out_lock);
  bool request = strcmp(name, "jailbox:approval_request") == 0;
  if (request && json_is_integer(json_object_get(data, "opId")))
    newest_request = (long long)json_integer_value(json_object_get(data, "opId"));
  if (w->o->json) {
    json_t *l = json_pack("{s:s,s:O,s:b}", "event", name, "data", data ? data : json_null(),
                          "polled", polled);
    char *t = l ? json_dumps(l, JSON_COMPACT) : NULL;
    if (t) puts(t);
    free(t);
    json_decref(l);
  } else {
    print_event(name, data);
    if (request && w->decide) print_choices(data);
  }
  fflush(stdout);
  pthread_mutex_unlock(&out_lock);
  if (strcmp(name, "jailbox:state") == 0 &&
      final_state(json_string_value(json_object_get(data, "state")))) {
    w->ended = true;
    if (json_is_true(json_object_get(data, "snapshot")) && !w->over) {
      w->over = true;
      fprintf(stderr, "%s: session %s had ended (%s): nothing more will come\n", w->o->verb,
              jb_ctl_text(w->job), s_(data, "state"));
    }
  }
}

/* Whether the watch is done: the session ended and --until-end asked to stop there, or it had
 * ended before the watch began. */
static bool watch_done(const struct watch *w) { return w->ended && (w->until_end || w->over); }

/* ---------- decisions from stdin (--decide) ----------
 * A line is `a [OP] [directory|extension|command|session]` (approve, optionally adding the
 * narrowest rule that matches the op by that key), `r [OP] [REASON…]` (reject) or `?`; OP
 * defaults to the newest approval request. Each is one REST call (POST …/approve/OP or
 * …/reject/OP); its outcome, or the server's refusal, is printed. */
static const char *similar_key(const char *w) {
  static const char *const keys[] = {"directory", "extension", "command", "session"};
  for (size_t i = 0; i < 4; i++)
    if (!strcmp(w, keys[i]) || (w[0] == keys[i][0] && !w[1])) return keys[i];
  return NULL;
}

static void decide_line(struct watch *w, char *line) {
  char *save = NULL, *verb = strtok_r(line, " \t", &save);
  if (!verb) return;
  bool approve = !strcmp(verb, "a") || !strcmp(verb, "approve");
  bool reject = !strcmp(verb, "r") || !strcmp(verb, "reject");
  pthread_mutex_lock(&out_lock);
  long long op = newest_request;
  pthread_mutex_unlock(&out_lock);
  char *rest = save ? save + strspn(save, " \t") : NULL;
  if (approve || reject) { /* an explicit op number first */
    char *end;
    errno = 0;
    long long v = rest && *rest ? strtoll(rest, &end, 10) : 0;
    if (!errno && v > 0 && (*end == '\0' || *end == ' ' || *end == '\t')) {
      op = v;
      rest = end + strspn(end, " \t");
    }
  }
  json_t *body = json_object();
  const char *key = NULL;
  if (approve && rest && *rest && !(key = similar_key(rest))) {
    pthread_mutex_lock(&out_lock);
    fprintf(stderr,
            "%s: '%s' is not an allow-similar key (directory, extension, command, session)\n",
            w->o->verb, jb_ctl_text(rest));
    pthread_mutex_unlock(&out_lock);
    json_decref(body);
    return;
  }
  if (key) json_object_set_new(body, "allowSimilar", json_string(key));
  if (reject && rest && *rest) json_object_set_new(body, "reason", json_string(rest));
  if ((!approve && !reject) || op <= 0) {
    pthread_mutex_lock(&out_lock);
    fprintf(stderr,
            "%s: %s; a line is: a [OP] [directory|extension|command|session]  or  "
            "r [OP] [REASON]\n",
            w->o->verb, op <= 0 && (approve || reject) ? "no approval request yet" : "decide");
    pthread_mutex_unlock(&out_lock);
    json_decref(body);
    return;
  }
  char suffix[64];
  snprintf(suffix, sizeof suffix, "/%s/%lld", approve ? "approve" : "reject", op);
  char *path = jb_ctl_job_path(w->job, suffix);
  pthread_mutex_lock(&out_lock); /* jb_ctl_http prints a refusal through jb_ctl_text */
  struct jb_ctl_reply r = {0};
  int rc = path ? jb_ctl_http(w->o, "POST", path, body, &r) : JB_CTL_FAILED;
  json_t *o = rc == JB_CTL_OK ? jb_ctl_reply_json(w->o, &r) : NULL;
  if (o) {
    printf("decided op #%lld: %s (%s)\n", op, s_(o, "state"), s_(o, "decision"));
    json_t *rule = json_object_get(o, "rule");
    if (json_is_object(rule)) {
      char *t = json_dumps(rule, JSON_COMPACT);
      printf("    allowed from now on by rule %s: %s\n", s_(rule, "id"), t ? jb_ctl_text(t) : "");
      free(t);
    }
    fflush(stdout);
  }
  pthread_mutex_unlock(&out_lock);
  json_decref(o);
  jb_ctl_reply_free(&r);
  free(path);
  json_decref(body);
}

static void *decide_thread(void *arg) {
  struct watch *w = arg;
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, stdin)) >= 0) {
    if (n > 4096) continue; /* not a decision */
    line[strcspn(line, "\r\n")] = '\0';
    decide_line(w, line);
  }
  free(line);
  return NULL;
}

/* ---------- over the socket ---------- */

static void on_connected(void *ctx, struct jb_sio *s, const char *sid) {
  struct watch *w = ctx;
  w->connected = true;
  if (!w->o->json)
    fprintf(stderr, "%s: connected (Socket.IO sid %s)\n", w->o->verb, jb_ctl_text(sid));
}

static void on_event(void *ctx, struct jb_sio *s, const char *name, json_t *args, uint64_t ack) {
  struct watch *w = ctx;
  json_t *d = json_array_get(args, 0);
  const char *job = json_string_value(json_object_get(d, "jobId"));
  if (job && strcmp(job, w->job) != 0) {
    fprintf(stderr, "%s: the token belongs to session %s, not %s\n", w->o->verb, jb_ctl_text(job),
            jb_ctl_text(w->job));
    w->refused = true;
    jb_sio_stop(s);
    return;
  }
  emit_line(w, name, d, false);
  if (watch_done(w)) jb_sio_stop(s);
}

static void on_lost(void *ctx, struct jb_sio *s, const char *why) {
  struct watch *w = ctx;
  fprintf(stderr, "%s: connection lost (%s); reconnecting\n", w->o->verb, jb_ctl_text(why));
}

static void on_closed(void *ctx, struct jb_sio *s, bool refused, const char *why) {
  struct watch *w = ctx;
  if (refused) w->refused = true;
  snprintf(w->why, sizeof w->why, "%s", jb_ctl_text(why));
}

/* ---------- polling ---------- */

static int get_json(struct jb_ctl *o, const char *path, json_t **out) {
  struct jb_ctl_reply r;
  int rc = jb_ctl_http(o, "GET", path, NULL, &r);
  *out = NULL;
  if (rc == JB_CTL_OK && !(*out = jb_ctl_reply_json(o, &r))) rc = JB_CTL_FAILED;
  jb_ctl_reply_free(&r);
  return rc;
}

static int poll_loop(struct watch *w, long interval_ms) {
  char *sp = jb_ctl_job_path(w->job, "");
  if (!sp) return JB_CTL_FAILED;
  char state[32] = "", path[700];
  long long head = -1, last_op = 0;
  long long pending_seen[512];
  size_t npend = 0;
  int rc = JB_CTL_OK;
  for (bool first = true;; first = false) {
    json_t *sess;
    if ((rc = get_json(w->o, sp, &sess)) != JB_CTL_OK) break;
    const char *st = json_string_value(json_object_get(sess, "state"));
    if (st && strcmp(st, state) != 0) {
      json_t *d = json_pack("{s:s,s:s?,s:O?,s:O?,s:O?,s:b}", "jobId", w->job, "state", st, "mode",
                            json_object_get(sess, "mode"), "pendingOps",
                            json_object_get(sess, "pendingOps"), "auditHead",
                            json_object_get(sess, "auditHead"), "snapshot", 1);
      if (!first && d) json_object_set_new(d, "previous", json_string(state));
      if (!first && d) json_object_del(d, "snapshot");
      if (d) emit_line(w, "jailbox:state", d, true);
      json_decref(d);
      snprintf(state, sizeof state, "%s", st);
    }
    json_t *ah = json_object_get(sess, "auditHead");
    long long seq = json_integer_value(json_object_get(ah, "seq"));
    if (!first && seq != head) emit_line(w, "jailbox:audit_head", ah, true);
    head = seq;
    json_decref(sess);
    /* new ops since the last poll */
    for (;;) {
      json_t *page;
      snprintf(path, sizeof path, "%s/ops?limit=500&after=%lld", sp, last_op);
      if ((rc = get_json(w->o, path, &page)) != JB_CTL_OK) break;
      size_t i;
      json_t *op;
      json_array_foreach (json_object_get(page, "ops"), i, op) {
        emit_line(w, "jailbox:op", op, true);
        last_op = json_integer_value(json_object_get(op, "opId"));
      }
      bool more = json_is_integer(json_object_get(page, "next"));
      json_decref(page);
      if (!more) break;
    }
    if (rc != JB_CTL_OK) break;
    /* pending ops: a new one is an approval request */
    json_t *pend;
    snprintf(path, sizeof path, "%s/ops?state=pending&limit=500", sp);
    if ((rc = get_json(w->o, path, &pend)) != JB_CTL_OK) break;
    size_t i, n = 0;
    json_t *op;
    long long now[512];
    json_array_foreach (json_object_get(pend, "ops"), i, op) {
      long long id = json_integer_value(json_object_get(op, "opId"));
      bool seen = false;
      for (size_t k = 0; k < npend; k++) seen |= pending_seen[k] == id;
      if (!seen) emit_line(w, "jailbox:approval_request", op, true);
      if (n < 512) now[n++] = id;
    }
    memcpy(pending_seen, now, n * sizeof now[0]);
    npend = n;
    json_decref(pend);
    if (watch_done(w)) break;
    usleep((useconds_t)interval_ms * 1000);
  }
  free(sp);
  return rc;
}

int jb_ctl_watch(struct jb_ctl *o, int argc, char **argv) {
  static struct watch w; /* static: the decisions thread may outlive this call until exit */
  w = (struct watch){.o = o};
  bool poll = false;
  long long interval = 1000;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--poll") == 0)
      poll = true;
    else if (strcmp(argv[i], "--until-end") == 0)
      w.until_end = true;
    else if (strcmp(argv[i], "--decide") == 0)
      w.decide = true;
    else if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc) {
      char *end;
      errno = 0;
      interval = strtoll(argv[++i], &end, 10);
      if (errno || *end || interval < 50 || interval > 3600000) {
        fprintf(stderr, "%s: --interval takes 50 to 3600000 ms\n", o->verb);
        return JB_CTL_USAGE;
      }
    } else if (argv[i][0] != '-' && !w.job)
      w.job = argv[i];
    else {
      fprintf(stderr, "%s: unexpected or incomplete argument '%s' (see --help)\n", o->verb,
              argv[i]);
      return JB_CTL_USAGE;
    }
  }
  if (!w.job) {
    fprintf(stderr, "%s: JOB is required (see --help)\n", o->verb);
    return JB_CTL_USAGE;
  }
  if (!o->token || !o->token[0]) {
    fprintf(stderr, "%s: a buyer token is needed (JAILBOX_TOKEN or --token)\n", o->verb);
    return JB_CTL_USAGE;
  }
  if (w.decide) { /* reads stdin until its end; the process ends without waiting for it */
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &at, decide_thread, &w);
    pthread_attr_destroy(&at);
    if (e) {
      fprintf(stderr, "%s: cannot read decisions: %s\n", o->verb, strerror(e));
      return JB_CTL_FAILED;
    }
  }
  if (!poll) {
    char base[512];
    if (jb_ctl_ws_base(o, base, sizeof base) < 0) return JB_CTL_USAGE;
    struct jb_sio_settings set = {.base_url = base,
                                  .token = o->token,
                                  .max_message = 8u << 20,
                                  .connect_timeout_ms = 10000,
                                  .reconnect_max = 8};
    struct jb_sio_handlers h = {.ctx = &w,
                                .connected = on_connected,
                                .event = on_event,
                                .closed = on_closed,
                                .lost = on_lost};
    struct jb_sio *s;
    jb_error err = {0};
    if (jb_sio_open(&s, &set, &h, &err) < 0) {
      fprintf(stderr, "%s: %s\n", o->verb, err.msg);
      return JB_CTL_USAGE;
    }
    jb_sio_run(s);
    jb_sio_free(s);
    if (!o->json) { /* output lines still waiting for their end */
      parts_flush(0);
      fflush(stdout);
    }
    if (w.refused && !w.connected) {
      /* a token the socket refuses but the REST API accepts (a service token): poll */
      json_t *probe = NULL;
      char *sp = jb_ctl_job_path(w.job, "");
      long quiet = o->quiet_status;
      o->quiet_status = 401;
      int prc = sp ? get_json(o, sp, &probe) : JB_CTL_FAILED;
      o->quiet_status = quiet;
      free(sp);
      json_decref(probe);
      if (prc != JB_CTL_OK) {
        fprintf(stderr, "%s: refused by the server: %s\n", o->verb, w.why);
        return JB_CTL_REFUSED;
      }
      fprintf(stderr, "%s: the socket refused this token (%s); polling the REST API instead\n",
              o->verb, w.why);
      return poll_loop(&w, (long)interval);
    }
    if (w.refused) {
      fprintf(stderr, "%s: refused by the server: %s\n", o->verb, w.why);
      return JB_CTL_REFUSED;
    }
    if (watch_done(&w)) return JB_CTL_OK;
    if (w.connected) {
      fprintf(stderr, "%s: %s\n", o->verb, w.why);
      return w.ended ? JB_CTL_OK : JB_CTL_FAILED;
    }
    fprintf(stderr, "%s: Socket.IO at %s: %s; polling the REST API instead\n", o->verb, base,
            w.why);
  }
  return poll_loop(&w, (long)interval);
}
