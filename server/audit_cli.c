/* audit_cli.c — jailboxctl, the command line for buyers and operators. This file holds the
 * audit verbs: offline verification of an exported chain with the published keys (no server
 * needed), export and key download over HTTP (libcurl), and signing-key rotation.
 *
 *   jailboxctl audit verify FILE --keys KEYS.json [--head SEQ:HASH] [--sealed] [--session JOB] [--json]
 *   jailboxctl audit export JOB          (JAILBOX_URL, JAILBOX_TOKEN)
 *   jailboxctl audit keys                (JAILBOX_URL)
 *   jailboxctl keys rotate [--key-file FILE | --state-dir DIR]
 *
 * Exit status: 0 intact / done; 1 tampered (verify) or the server refused (export, keys);
 * 2 usage error or an input that cannot be read. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/explain.h"
#include "server/ctl.h"
#include "server/audit.h"
#include "server/keys.h"

#define MAX_KEYS_BYTES (1L << 20)

static void usage(FILE *out) {
  fputs("usage:\n"
        "  jailboxctl audit verify FILE --keys KEYS.json [--head SEQ:HASH] [--sealed]\n"
        "                          [--session JOB] [--json]\n"
        "      verify an exported chain (FILE, or - for stdin) offline; KEYS.json is the body\n"
        "      of GET /v1/audit/keys; --head: a head kept earlier (jailbox:audit_head) the\n"
        "      chain must still reach; --sealed: the session has ended, the chain must end\n"
        "      with its seal. Exit 0 intact, 1 tampered, 2 usage or unreadable input.\n"
        "  jailboxctl audit export JOB   print the chain of JOB as JSON Lines\n"
        "  jailboxctl audit keys         print the published verification keys\n"
        "      (both read JAILBOX_URL, default http://127.0.0.1:8080, and JAILBOX_TOKEN)\n"
        "  jailboxctl keys rotate [--key-file FILE | --state-dir DIR]\n"
        "      replace the signing key file with a new key (JAILBOX_SIGNING_KEY_FILE, else\n"
        "      JAILBOX_STATE_DIR/audit-signing.key); jailboxd signs with it after a restart\n"
        "  jailboxctl explain JOB [--json]\n"
        "      the session contract of JOB: which walls stand, their settings, what was checked\n"
        "      from inside, and the residual risks (JAILBOX_URL, JAILBOX_TOKEN: service or buyer)\n"
        "  jailboxctl token create --role service [--label L] [--database-url URL | --state-dir DIR]\n"
        "      mint a service token (printed once; only its SHA-256 is stored) in the database\n"
        "      of JAILBOX_DATABASE_URL, else the embedded one of JAILBOX_STATE_DIR (./var)\n",
        out);
}

/* Reads all of `path` ("-": stdin), at most `max` bytes. New buffer in *out (free it). */
static int slurp(const char *path, long max, char **out, size_t *len) {
  int fd = strcmp(path, "-") == 0 ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "jailboxctl: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (n == cap) {
      if ((long)cap >= max) {
        fprintf(stderr, "jailboxctl: %s: larger than %ld bytes\n", path, max);
        free(buf);
        buf = NULL;
        break;
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      fprintf(stderr, "jailboxctl: %s: %s\n", path, strerror(errno));
      free(buf);
      buf = NULL;
      break;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (!buf) return -1;
  *out = buf;
  *len = n;
  return 0;
}

static int audit_verify(int argc, char **argv) {
  const char *file = NULL, *keys_path = NULL, *head = NULL, *session = NULL;
  bool sealed = false, as_json = false;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--keys") == 0 && i + 1 < argc) keys_path = argv[++i];
    else if (strcmp(a, "--head") == 0 && i + 1 < argc) head = argv[++i];
    else if (strcmp(a, "--session") == 0 && i + 1 < argc) session = argv[++i];
    else if (strcmp(a, "--sealed") == 0) sealed = true;
    else if (strcmp(a, "--json") == 0) as_json = true;
    else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "jailboxctl: unknown or incomplete option %s\n", a);
      return 2;
    } else if (!file) file = a;
    else {
      fprintf(stderr, "jailboxctl: unexpected argument %s\n", a);
      return 2;
    }
  }
  if (!file || !keys_path) {
    usage(stderr);
    return 2;
  }
  jb_error err = {0};
  struct jb_audit_head known;
  if (head && jb_audit_head_parse(head, &known, &err) < 0) {
    fprintf(stderr, "jailboxctl: --head: %s\n", err.msg);
    return 2;
  }
  char *kbuf = NULL;
  size_t klen = 0;
  if (slurp(keys_path, MAX_KEYS_BYTES, &kbuf, &klen) < 0) return 2;
  struct jb_audit_pubkey *keys = NULL;
  size_t nkeys = 0;
  int rc = jb_audit_keys_parse(kbuf, klen, &keys, &nkeys, &err);
  free(kbuf);
  if (rc < 0) {
    fprintf(stderr, "jailboxctl: %s: %s\n", keys_path, err.msg);
    return 2;
  }
  /* read line by line: memory stays one line and one entry, whatever the file's size */
  FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "re");
  if (!in) {
    free(keys);
    fprintf(stderr, "jailboxctl: %s: %s\n", file, strerror(errno));
    return 2;
  }
  struct jb_audit_verify_opts opts = {.session = session, .known_head = head ? &known : NULL,
                                      .require_seal = sealed};
  struct jb_audit_result res;
  rc = jb_audit_verify_file(in, keys, nkeys, &opts, &res, &err);
  if (in != stdin) fclose(in);
  free(keys);
  if (rc < 0) {
    fprintf(stderr, "jailboxctl: %s: %s\n", file, err.msg);
    return 2;
  }
  char hex[2 * JB_AUDIT_HASH_LEN + 1];
  jb_audit_hex(res.head.hash, JB_AUDIT_HASH_LEN, hex);
  if (as_json) {
    json_t *j = jb_audit_result_json(&res);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
      fprintf(stderr, "jailboxctl: out of memory\n");
      return 2;
    }
    puts(s);
    free(s);
  } else if (res.ok) {
    /* what came from the file reaches the terminal without control characters */
    char q[4 * sizeof res.session + 1];
    jb_audit_quote(q, sizeof q, res.session, sizeof res.session);
    printf("intact: %lld entries%s, session %s, head %lld:%s\n", res.entries,
           res.sealed ? ", sealed" : "", q[0] ? q : "-", res.head.seq, res.head.seq ? hex : "-");
  } else {
    char q[4 * sizeof res.detail + 1];
    jb_audit_quote(q, sizeof q, res.detail, sizeof res.detail);
    printf("TAMPERED at seq %lld: %s (%s)\n", res.first_bad_seq,
           jb_audit_reason_name(res.reason), q);
  }
  if (fflush(stdout) != 0) return 2;
  return res.ok ? 0 : 1;
}

static size_t to_file(char *p, size_t size, size_t n, void *ctx) {
  return fwrite(p, size, n, ctx) * size;
}

static int http_get_to(const char *path, bool auth, FILE *out);

/* GET JAILBOX_URL + `path`, body to stdout. 0, 1 when the server answered an error, 2 when
 * it could not be reached. */
static int http_get(const char *path, bool auth) { return http_get_to(path, auth, stdout); }

/* As http_get, the body written to `out`. */
static int http_get_to(const char *path, bool auth, FILE *out) {
  const char *base = getenv("JAILBOX_URL");
  const char *token = getenv("JAILBOX_TOKEN");
  if (!base || !base[0]) base = "http://127.0.0.1:8080";
  if (auth && (!token || !token[0])) {
    fprintf(stderr, "jailboxctl: JAILBOX_TOKEN is not set\n");
    return 2;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return 2;
  CURL *h = curl_easy_init();
  char *url = NULL, *hdr = NULL;
  struct curl_slist *headers = NULL;
  int rc = 2;
  if (!h || asprintf(&url, "%s%s", base, path) < 0) goto out;
  if (auth) {
    if (asprintf(&hdr, "Authorization: Bearer %s", token) < 0) goto out;
    headers = curl_slist_append(headers, hdr);
    if (!headers) goto out;
  }
  char errbuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, to_file);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
  CURLcode cc = curl_easy_perform(h);
  if (cc == CURLE_HTTP_RETURNED_ERROR) {
    fprintf(stderr, "jailboxctl: %s: %s\n", url, errbuf);
    rc = 1;
  } else if (cc != CURLE_OK) {
    fprintf(stderr, "jailboxctl: %s: %s\n", url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
  } else {
    rc = fflush(out) == 0 ? 0 : 2;
  }
out:
  curl_slist_free_all(headers);
  if (h) curl_easy_cleanup(h);
  free(url);
  free(hdr);
  curl_global_cleanup();
  return rc;
}

static int audit_export(int argc, char **argv) {
  if (argc != 1) {
    usage(stderr);
    return 2;
  }
  CURL *h = curl_easy_init();
  char *esc = h ? curl_easy_escape(h, argv[0], 0) : NULL;
  char *path = NULL;
  int rc = 2;
  if (esc && asprintf(&path, "/v1/jailbox/%s/audit", esc) > 0) rc = http_get(path, true);
  free(path);
  curl_free(esc);
  if (h) curl_easy_cleanup(h);
  return rc;
}

static int keys_rotate(int argc, char **argv) {
  const char *file = getenv("JAILBOX_SIGNING_KEY_FILE"), *dir = getenv("JAILBOX_STATE_DIR");
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--key-file") == 0 && i + 1 < argc) file = argv[++i];
    else if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc) {
      dir = argv[++i];
      file = NULL;
    } else {
      usage(stderr);
      return 2;
    }
  }
  char path[4096];
  if (file && file[0]) snprintf(path, sizeof path, "%s", file);
  else snprintf(path, sizeof path, "%s/%s", dir && dir[0] ? dir : "./var", JB_KEY_FILE_NAME);
  char nid[JB_AUDIT_KEY_ID_LEN + 1], oid[JB_AUDIT_KEY_ID_LEN + 1];
  jb_error err = {0};
  if (jb_keyring_rotate(path, nid, oid, &err) < 0) {
    fprintf(stderr, "jailboxctl: %s\n", err.msg);
    return 2;
  }
  printf("rotated %s: new key %s%s%s; restart jailboxd to sign with it (the old key stays "
         "published)\n", path, nid, oid[0] ? ", replaced " : "", oid);
  return 0;
}

/* explain JOB [--json]: the session contract of JOB (GET /v1/jailbox/JOB) for a person, or
 * its `walls` JSON as it is with --json. */
static int explain(int argc, char **argv) {
  bool as_json = argc == 2 && strcmp(argv[1], "--json") == 0;
  if (argc < 1 || argc > 2 || (argc == 2 && !as_json)) {
    usage(stderr);
    return 2;
  }
  CURL *esc_h = curl_easy_init();
  char *esc = esc_h ? curl_easy_escape(esc_h, argv[0], 0) : NULL;
  char *path = NULL, *body = NULL;
  size_t len = 0;
  int rc = 2;
  FILE *mem = open_memstream(&body, &len);
  if (esc && mem && asprintf(&path, "/v1/jailbox/%s", esc) >= 0) rc = http_get_to(path, true, mem);
  if (mem) fclose(mem);
  if (rc == 0) {
    json_t *sess = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    json_t *walls = json_object_get(sess, "walls");
    if (!json_is_object(walls)) {
      fprintf(stderr, "jailboxctl explain: session %s has no contract yet (state %s)\n", argv[0],
              json_string_value(json_object_get(sess, "state")) ? json_string_value(json_object_get(sess, "state")) : "?");
      rc = 1;
    } else if (as_json) {
      rc = json_dumpf(walls, stdout, JSON_INDENT(2)) == 0 && puts("") >= 0 ? 0 : 2;
    } else {
      rc = jb_contract_explain(sess, stdout) == 0 ? 0 : 1;
    }
    json_decref(sess);
  }
  free(body);
  free(path);
  curl_free(esc);
  if (esc_h) curl_easy_cleanup(esc_h);
  return rc;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "explain") == 0) return explain(argc - 2, argv + 2);
  if (argc >= 3 && strcmp(argv[1], "audit") == 0) {
    if (strcmp(argv[2], "verify") == 0) return audit_verify(argc - 3, argv + 3);
    if (strcmp(argv[2], "export") == 0) return audit_export(argc - 3, argv + 3);
    if (strcmp(argv[2], "keys") == 0 && argc == 3) return http_get("/v1/audit/keys", false);
  }
  if (argc >= 3 && strcmp(argv[1], "token") == 0 && strcmp(argv[2], "create") == 0)
    return jb_ctl_token_create(argc - 3, argv + 3);
  if (argc >= 3 && strcmp(argv[1], "keys") == 0 && strcmp(argv[2], "rotate") == 0)
    return keys_rotate(argc - 3, argv + 3);
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  usage(stderr);
  return 2;
}
