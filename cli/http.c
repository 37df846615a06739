/* http.c — jailboxd's REST client of jailboxctl (libcurl): requests with the bearer token,
 * answers up to 64 MiB (or streamed to a file), the server's refusals printed, the Socket.IO
 * address, the paths of a session's resources, and text from the server made safe for a
 * terminal, diff text too (see ctl.h). Every verb's file calls into this one; it calls none of them. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/utf8.h"
#include "cli/ctl.h"

#define MAX_REPLY_BYTES (64L << 20)

/* ---------- REST ---------- */

struct sink {
  char *buf;
  size_t len, cap;
  bool over;
  CURL *h;
  FILE *out; /* a 2xx body goes here as it arrives (NULL: into buf) */
  bool write_failed;
};

static size_t to_sink(char *p, size_t size, size_t n, void *ctx) {
  struct sink *s = ctx;
  size_t add = size * n;
  if (s->out) {
    long status = 0;
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) {
      if (fwrite(p, 1, add, s->out) != add) {
        s->write_failed = true;
        return 0;
      }
      return add;
    }
  }
  if (s->len + add + 1 > (size_t)MAX_REPLY_BYTES) {
    s->over = true;
    return 0; /* curl aborts the transfer */
  }
  if (s->len + add + 1 > s->cap) {
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->len + add + 1) cap *= 2;
    char *nb = realloc(s->buf, cap);
    if (!nb) return 0;
    s->buf = nb;
    s->cap = cap;
  }
  memcpy(s->buf + s->len, p, add);
  s->len += add;
  s->buf[s->len] = '\0';
  return add;
}

void jb_ctl_reply_free(struct jb_ctl_reply *r) {
  free(r->body);
  r->body = NULL;
  r->len = 0;
}

char *jb_ctl_escape(const char *s) {
  size_t n = strlen(s);
  char *out = malloc(3 * n + 1), *w = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~')
      *w++ = (char)c;
    else {
      static const char hex[] = "0123456789ABCDEF";
      *w++ = '%';
      *w++ = hex[c >> 4];
      *w++ = hex[c & 15];
    }
  }
  *w = '\0';
  return out;
}

/* Prints the server's {error:{code,message}} (or the raw status) for a refused request. */
static void print_refusal(const struct jb_ctl *o, const struct jb_ctl_reply *r) {
  json_t *doc = r->body ? json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  json_t *e = json_object_get(doc, "error");
  const char *code = json_string_value(json_object_get(e, "code"));
  const char *msg = json_string_value(json_object_get(e, "message"));
  if (code)
    fprintf(stderr, "%s: %s by the server (HTTP %ld %s): %s\n", o->verb,
            r->status >= 500 ? "failed" : "refused", r->status, jb_ctl_text(code),
            jb_ctl_text(msg ? msg : ""));
  else
    fprintf(stderr, "%s: the server answered HTTP %ld\n", o->verb, r->status);
  json_decref(doc);
}

/* jb_ctl_http, a 2xx body written to `out` as it arrives when `out` is not NULL. */
static int http(const struct jb_ctl *o, const char *method, const char *path, const json_t *body,
                FILE *out, struct jb_ctl_reply *r) {
  memset(r, 0, sizeof *r);
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return JB_CTL_FAILED;
  CURL *h = curl_easy_init();
  char *url = NULL, *auth = NULL, *payload = NULL;
  struct curl_slist *hdrs = NULL;
  struct sink sink = {.h = h, .out = out};
  int rc = JB_CTL_FAILED;
  char errbuf[CURL_ERROR_SIZE] = "";
  if (!h || asprintf(&url, "%s%s", o->url, path) < 0) goto out;
  if (o->token && o->token[0]) {
    if (asprintf(&auth, "Authorization: Bearer %s", o->token) < 0) goto out;
    if (!(hdrs = curl_slist_append(hdrs, auth))) goto out;
  }
  if (body) {
    payload = json_dumps(body, JSON_COMPACT);
    struct curl_slist *t =
        payload ? curl_slist_append(hdrs, "Content-Type: application/json") : NULL;
    if (!t) goto out;
    hdrs = t;
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
  } else if (strcmp(method, "POST") == 0) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
  }
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, to_sink);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  CURLcode cc = curl_easy_perform(h);
  if (cc != CURLE_OK) {
    fprintf(stderr, "%s: %s: %s\n", o->verb, url,
            sink.over           ? "answer larger than 64 MiB"
            : sink.write_failed ? strerror(errno)
            : errbuf[0]         ? errbuf
                                : curl_easy_strerror(cc));
    goto out;
  }
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
  r->body = sink.buf ? sink.buf : strdup("");
  r->len = sink.len;
  sink.buf = NULL;
  if (!r->body) goto out;
  if (r->status >= 200 && r->status < 300) {
    rc = JB_CTL_OK;
  } else {
    if (r->status != o->quiet_status) print_refusal(o, r);
    rc = r->status >= 400 && r->status < 500 ? JB_CTL_REFUSED : JB_CTL_FAILED;
  }
out:
  free(sink.buf);
  curl_slist_free_all(hdrs);
  if (h) curl_easy_cleanup(h);
  free(url);
  if (auth) explicit_bzero(auth, strlen(auth));
  free(auth);
  free(payload);
  curl_global_cleanup();
  return rc;
}

int jb_ctl_http(const struct jb_ctl *o, const char *method, const char *path, const json_t *body,
                struct jb_ctl_reply *r) {
  return http(o, method, path, body, NULL, r);
}

int jb_ctl_http_stream(const struct jb_ctl *o, const char *path, FILE *out) {
  struct jb_ctl_reply r;
  int rc = http(o, "GET", path, NULL, out, &r);
  jb_ctl_reply_free(&r);
  if (rc == JB_CTL_OK && fflush(out) != 0) {
    fprintf(stderr, "%s: %s\n", o->verb, strerror(errno));
    rc = JB_CTL_FAILED;
  }
  return rc;
}

json_t *jb_ctl_reply_json(const struct jb_ctl *o, const struct jb_ctl_reply *r) {
  jb_error err = {0};
  json_t *doc = jb_json_parse_object(r->body, r->len, JB_JSON_MAX_DEPTH, &err);
  if (!doc) fprintf(stderr, "%s: malformed answer from the server: %s\n", o->verb, err.msg);
  return doc;
}

int jb_ctl_ws_base(const struct jb_ctl *o, char *buf, size_t size) {
  if (o->ws_url && o->ws_url[0]) {
    snprintf(buf, size, "%s", o->ws_url);
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '/') buf[--n] = '\0';
    return 0;
  }
  /* http://host:port → ws://host:(port+1): JAILBOX_LISTEN and JAILBOX_WS_LISTEN default pair */
  CURLU *u = curl_url();
  char *host = NULL, *port = NULL, *scheme = NULL;
  int rc = -1;
  if (u && curl_url_set(u, CURLUPART_URL, o->url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
    long p = strtol(port, NULL, 10);
    if (p > 0 && p < 65535) {
      snprintf(buf, size, "%s://%s:%ld", strcmp(scheme, "https") == 0 ? "wss" : "ws", host, p + 1);
      rc = 0;
    }
  }
  if (rc < 0)
    fprintf(stderr,
            "%s: cannot derive the Socket.IO address from '%s'; set JAILBOX_WS_URL or "
            "--ws-url\n",
            o->verb, o->url);
  curl_free(host);
  curl_free(port);
  curl_free(scheme);
  curl_url_cleanup(u);
  return rc;
}

/* ---------- output ---------- */

int jb_ctl_print_json(const json_t *v) {
  char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!s) return JB_CTL_FAILED;
  int ok = puts(s) >= 0 && fflush(stdout) == 0;
  free(s);
  return ok ? JB_CTL_OK : JB_CTL_FAILED;
}

bool jb_ctl_write_diff_text(const char *s, size_t n) {
  if (!isatty(STDOUT_FILENO)) return fwrite(s, 1, n, stdout) == n;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
        (unsigned char)s[i + 1] <= 0x9f) { /* U+0080..U+009F (C1) */
      i++;
      c = '?';
    } else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      c = '?';
    }
    if (putchar(c) == EOF) return false;
  }
  return true;
}

const char *jb_ctl_text(const char *s) {
  static char pool[16][520];
  static unsigned next;
  if (!s) return "-";
  char *out = pool[next++ % 16];
  size_t w = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (w >= 512) {
      memcpy(out + w, "\xe2\x80\xa6", 3); /* … */
      w += 3;
      break;
    }
    size_t hidden = jb_utf8_hidden_mark(p, strnlen((const char *)p, 3));
    if (hidden) { /* C1, bidi controls, zero-width and separator characters */
      out[w++] = '?';
      p += hidden - 1;
    } else {
      out[w++] = (*p < 0x20 || *p == 0x7f) ? '?' : (char)*p;
    }
  }
  out[w] = '\0';
  return out;
}

char *jb_ctl_job_path(const char *job, const char *suffix) {
  char *e = jb_ctl_escape(job), *p = NULL;
  if (e && asprintf(&p, "/v1/jailbox/%s%s", e, suffix) < 0) p = NULL;
  free(e);
  return p;
}
