/* audit_export.c — the export line of an audit entry (JSON Lines, api/audit.md "Export
 * line"): writing it, reading it (jb_audit_line_read, the one reader of the format, with
 * jansson), splitting a text into lines, and recognising
 * a line in the exporter's own form without parsing all of it (why: below, "the exporter's
 * own form"). Pure: no database, no files. */
#include "lib/audit.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/audit_private.h"

/* The members of a line, in the order the exporter writes them. */
enum {
  M_SEQ,
  M_SESSION,
  M_OPERATION,
  M_PATH,
  M_TIMESTAMP,
  M_DETAILS,
  M_PREV_HASH,
  M_HASH,
  M_SIGNATURE,
  M_KEY_ID,
  M_CANONICAL,
  LINE_MEMBERS
};
#define MEMBER(name) \
  { name, sizeof name - 1 }
static const struct {
  const char *name;
  size_t len;
} line_members[LINE_MEMBERS] = {MEMBER("seq"),      MEMBER("session"),   MEMBER("operation"),
                                MEMBER("path"),     MEMBER("timestamp"), MEMBER("details"),
                                MEMBER("prevHash"), MEMBER("hash"),      MEMBER("signature"),
                                MEMBER("keyId"),    MEMBER("canonical")};

/* The members of the canonical bytes, in their order there (ascending byte order). */
#define CANONICAL_MEMBERS 6
static const int canonical_members[CANONICAL_MEMBERS] = {M_DETAILS, M_OPERATION, M_PATH,
                                                         M_SEQ,     M_SESSION,   M_TIMESTAMP};

static const char *member_str(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k)); /* NULL unless a string */
}

/* --- writing ------------------------------------------------------------------------------ */

/* A copy of `details` whose members, at every depth, stand in ascending byte order of their
 * keys, as in the canonical bytes (jansson keeps the order in which a text lists members).
 * New reference; when it cannot be made (OOM, or a value jansson cannot write back), a new
 * reference to `details` itself, whose order is then as given. */
static json_t *details_sorted(const json_t *details) {
  char *text = json_dumps(details, JSON_COMPACT | JSON_SORT_KEYS);
  json_t *sorted = text ? json_loads(text, JSON_ALLOW_NUL, NULL) : NULL;
  free(text);
  return sorted ? sorted : json_incref((json_t *)details);
}

char *jb_audit_entry_line(const struct jb_audit_entry *e) {
  char prev[2 * JB_AUDIT_HASH_LEN + 1], hash[2 * JB_AUDIT_HASH_LEN + 1];
  jb_audit_hex(e->prev_hash, JB_AUDIT_HASH_LEN, prev);
  jb_audit_hex(e->hash, JB_AUDIT_HASH_LEN, hash);
  char *sig = jb_audit_base64(e->signature, JB_AUDIT_SIG_LEN);
  char *canon = jb_audit_base64(e->canonical, e->canonical_len);
  json_t *details = e->details ? details_sorted(e->details) : NULL;
  json_t *o = NULL;
  if (sig && canon)
    o = json_pack("{s:I,s:s,s:s,s:s?,s:s,s:O,s:s,s:s,s:s,s:s,s:s}", "seq", (json_int_t)e->seq,
                  "session", e->session ? e->session : "", "operation",
                  e->operation ? e->operation : "", "path", e->path, "timestamp",
                  e->timestamp ? e->timestamp : "", "details", details, "prevHash", prev, "hash",
                  hash, "signature", sig, "keyId", e->key_id, "canonical", canon);
  json_decref(details);
  free(sig);
  free(canon);
  if (!o) return NULL;
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!s) return NULL;
  size_t n = strlen(s);
  char *line = realloc(s, n + 2);
  if (!line) {
    free(s);
    return NULL;
  }
  line[n] = '\n';
  line[n + 1] = '\0';
  return line;
}

/* --- reading (jansson) ---------------------------------------------------------------------- */

void jb_audit_entry_malformed(struct jb_audit_entry *e, const char *why) {
  memset(e, 0, sizeof *e);
  e->malformed = true;
  snprintf(e->error, sizeof e->error, "%s", why);
}

/* Fills `e` from the parsed line `o`. 0, or -1 with the reason in `why` (`cap` bytes); e->seq
 * is set whenever the line states an integer seq. */
static int read_members(struct jb_audit_entry *e, const json_t *o, char *why, size_t cap) {
  json_t *seq = json_object_get(o, "seq");
  if (json_is_integer(seq)) e->seq = json_integer_value(seq);
  /* every member below is required; with exactly as many members there is no other one */
  if (json_object_size(o) != LINE_MEMBERS) {
    const char *k;
    json_t *v;
    json_object_foreach ((json_t *)o, k, v) {
      bool known = false;
      for (size_t i = 0; i < LINE_MEMBERS; i++)
        if (strcmp(k, line_members[i].name) == 0) known = true;
      if (!known) {
        char q[4 * 32 + 1];
        jb_audit_quote(q, sizeof q, k, 32);
        snprintf(why, cap, "unknown member '%s'", q);
        return -1;
      }
    }
  }
  json_t *path = json_object_get(o, "path"), *details = json_object_get(o, "details"),
         *canon = json_object_get(o, "canonical");
  const char *session = member_str(o, "session"), *op = member_str(o, "operation"),
             *ts = member_str(o, "timestamp"), *prev = member_str(o, "prevHash"),
             *hash = member_str(o, "hash"), *sig = member_str(o, "signature"),
             *kid = member_str(o, "keyId");
  if (!json_is_integer(seq) || !session || !op || !ts || !prev || !hash || !sig || !kid ||
      !json_is_string(canon) || !(json_is_string(path) || json_is_null(path)) ||
      !json_is_object(details)) {
    snprintf(why, cap, "a member is missing or has the wrong type");
    return -1;
  }
  if (jb_audit_unhex(prev, strlen(prev), e->prev_hash, JB_AUDIT_HASH_LEN) < 0 ||
      jb_audit_unhex(hash, strlen(hash), e->hash, JB_AUDIT_HASH_LEN) < 0) {
    snprintf(why, cap, "prevHash/hash must be 64 hex characters");
    return -1;
  }
  size_t n = 0;
  if (jb_audit_unbase64(sig, strlen(sig), e->signature, JB_AUDIT_SIG_LEN, &n) < 0 ||
      n != JB_AUDIT_SIG_LEN) {
    snprintf(why, cap, "signature must be base64 of 64 bytes");
    return -1;
  }
  if (strlen(kid) != JB_AUDIT_KEY_ID_LEN) {
    snprintf(why, cap, "keyId must be 16 characters");
    return -1;
  }
  memcpy(e->key_id, kid, JB_AUDIT_KEY_ID_LEN + 1);
  /* refused by its length before anything is decoded or allocated for it */
  size_t clen = json_string_length(canon);
  if (clen >
      sodium_base64_ENCODED_LEN(JB_AUDIT_MAX_CANONICAL, sodium_base64_VARIANT_ORIGINAL) - 1) {
    snprintf(why, cap, "canonical must be base64 of at most 64 KiB");
    return -1;
  }
  size_t max = clen / 4 * 3 < JB_AUDIT_MAX_CANONICAL ? clen / 4 * 3 : JB_AUDIT_MAX_CANONICAL;
  e->canonical = malloc(max + 1);
  if (!e->canonical) {
    snprintf(why, cap, "out of memory");
    return -1;
  }
  if (jb_audit_unbase64(json_string_value(canon), clen, e->canonical, max, &n) < 0) {
    snprintf(why, cap, "canonical must be base64 of at most 64 KiB");
    return -1;
  }
  e->canonical[n] = '\0';
  e->canonical_len = n;
  e->session = strdup(session);
  e->operation = strdup(op);
  e->path = json_is_string(path) ? strdup(json_string_value(path)) : NULL;
  e->timestamp = strdup(ts);
  e->details = json_incref(details);
  if (!e->session || !e->operation || (json_is_string(path) && !e->path) || !e->timestamp) {
    snprintf(why, cap, "out of memory");
    return -1;
  }
  return 0;
}

int jb_audit_entry_parse_line(struct jb_audit_entry *e, const char *line, size_t len,
                              jb_error *err) {
  char why[sizeof e->error];
  memset(e, 0, sizeof *e);
  if (len > JB_AUDIT_MAX_LINE) {
    snprintf(why, sizeof why, "line longer than the limit");
  } else {
    json_error_t je;
    json_t *o = jb_audit_json_load(line, len, 0, &je);
    if (!o) {
      snprintf(why, sizeof why, "not JSON: %s", je.text);
    } else {
      int rc = -1;
      if (json_is_object(o))
        rc = read_members(e, o, why, sizeof why);
      else
        snprintf(why, sizeof why, "line is not a JSON object");
      json_decref(o);
      if (rc == 0) return 0;
    }
  }
  /* keep only what the verifier needs to place the line: seq and the reason */
  long long seq = e->seq;
  jb_audit_entry_clear(e);
  jb_audit_entry_malformed(e, why);
  e->seq = seq;
  return jb_fail(err, EINVAL, "%s", why);
}

/* The length of `line` without its "\n", if it ends with one. */
static size_t without_newline(const char *line, size_t len) {
  return len > 0 && line[len - 1] == '\n' ? len - 1 : len;
}

/* Whether the `len` bytes at `p` are only spaces and tabs. */
static bool only_blanks(const char *p, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (p[i] != ' ' && p[i] != '\t') return false;
  return true;
}

bool jb_audit_line_blank(const char *line, size_t len) {
  len = without_newline(line, len);
  if (len > JB_AUDIT_MAX_LINE) return false;
  if (len > 0 && line[len - 1] == '\r') len--;
  return only_blanks(line, len);
}

enum jb_audit_line jb_audit_line_read(struct jb_audit_entry *e, const char *line, size_t len,
                                      jb_error *err) {
  len = without_newline(line, len);
  if (len > JB_AUDIT_MAX_LINE) {
    jb_audit_entry_malformed(e, "line longer than the limit");
    jb_fail(err, EINVAL, "line longer than the limit");
    return JB_AUDIT_LINE_MALFORMED;
  }
  if (len > 0 && line[len - 1] == '\r') len--;
  if (only_blanks(line, len)) {
    memset(e, 0, sizeof *e);
    return JB_AUDIT_LINE_BLANK;
  }
  return jb_audit_entry_parse_line(e, line, len, err) < 0 ? JB_AUDIT_LINE_MALFORMED
                                                          : JB_AUDIT_LINE_ENTRY;
}

int jb_audit_parse_lines(const char *buf, size_t len, size_t max_entries,
                         struct jb_audit_entry **out, size_t *n, jb_error *err) {
  size_t cap = 0, cnt = 0;
  struct jb_audit_entry *v = NULL;
  size_t pos = 0;
  while (pos < len) {
    const char *start = buf + pos;
    const char *nl = memchr(start, '\n', len - pos);
    size_t l = nl ? (size_t)(nl - start) : len - pos;
    pos += l + (nl ? 1 : 0);
    if (jb_audit_line_blank(start, l)) continue;
    if (cnt == max_entries) {
      jb_audit_entries_free(v, cnt);
      return jb_fail(err, E2BIG, "more than %zu entries", max_entries);
    }
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 64;
      struct jb_audit_entry *nv = realloc(v, nc * sizeof *nv);
      if (!nv) {
        jb_audit_entries_free(v, cnt);
        return jb_fail(err, ENOMEM, "out of memory");
      }
      v = nv;
      cap = nc;
    }
    jb_audit_line_read(&v[cnt], start, l, NULL);
    cnt++;
  }
  *out = v;
  *n = cnt;
  return 0;
}

/* --- the exporter's own form -----------------------------------------------------------------
 *
 * jb_audit_verify_file reads a line here before it tries jb_audit_entry_parse_line. This is
 * hand-written for time alone, and only where the libraries cannot give it (measured on
 * jailboxctl audit verify, about 700,000 instructions a line, nine tenths of them Ed25519):
 *  - jansson lexes a string at about 12 ns a byte: the parse of a whole line (about 900
 *    bytes, two thirds of them hex and base64) takes about 18 us, a quarter of what the
 *    Ed25519 check of the line costs, and the canonical bytes would then still have to be
 *    parsed, or made again from the stated fields, to be compared with them;
 *  - libsodium's base64 is constant-time, about 50 instructions a character: checking the
 *    canonical text and decoding the signature with it adds 3.5 % to the whole verification.
 * A line in exactly the form jb_audit_entry_line writes needs neither. Its members stand in
 * a fixed order, and each value but `details` is a number or a plain string (printable ASCII
 * without '"' or '\'), whose bytes are its value. So the line is cut at the members' names;
 * jansson parses `details` alone (JSON_REJECT_DUPLICATES, as for the whole line) and says
 * where it ends; the hashes go through the hex decoder of the full parse (libsodium); and the
 * canonical object is put together from the very tokens cut. When the base64 of that object
 * is the line's `canonical`, character for character, the canonical bytes are that object
 * (padded base64 has one text for given bytes, the only text jb_audit_unbase64 takes for
 * them), so the stated fields are the canonical ones without parsing either; the signature
 * is taken the same way (its digits read, then their base64 compared with the text). The
 * hash and the signature are checked over those bytes as over any others. Any other line
 * (whitespace, another order, an escape, a byte outside printable ASCII, details that
 * jb_audit_details_check refuses, a seq of more than 18 digits, canonical bytes in another
 * form) is declined and read by the full parse: no verdict is decided here
 * (tests/fuzz/fuzz_audit.c checks that both ways agree). */

/* A member's value as the line states it: `n` bytes at `p`, a string with its quotes. */
struct tok {
  const char *p;
  size_t n;
};

/* Length of the plain string at `p` (see above) with its quotes, 0 when there is none. */
static size_t plain_len(const char *p, const char *end) {
  if (p == end || *p != '"') return 0;
  for (const char *q = p + 1; q < end; q++) {
    if (*q == '"') return (size_t)(q + 1 - p);
    if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e || *q == '\\') return 0;
  }
  return 0;
}

/* Characters of the base64 of a signature. */
#define SIG_BASE64_LEN \
  (sodium_base64_ENCODED_LEN(JB_AUDIT_SIG_LEN, sodium_base64_VARIANT_ORIGINAL) - 1)

/* Length of a string of `n` characters at `p` with its quotes, 0 when there is none there.
 * The characters are left to their decoder, which takes neither '"' nor '\\'. */
static size_t fixed_len(const char *p, const char *end, size_t n) {
  return (size_t)(end - p) > n + 1 && p[0] == '"' && p[n + 1] == '"' ? n + 2 : 0;
}

/* Length of the value of member `i` at `p` as the exporter writes it, 0 when it is not so.
 * `details` is parsed on the way into *d (new reference). */
static size_t value_len(int i, const char *p, const char *end, json_t **d) {
  size_t n = 0;
  switch (i) {
    case M_PREV_HASH:
    case M_HASH:
      return fixed_len(p, end, 2 * JB_AUDIT_HASH_LEN);
    case M_SIGNATURE:
      return fixed_len(p, end, SIG_BASE64_LEN);
    case M_SEQ: /* 1..18 digits, no leading zero: within int64 */
      while (p + n < end && n < 18 && p[n] >= '0' && p[n] <= '9' && (n || p[n] != '0')) n++;
      return n;
    case M_PATH:
      return end - p >= 4 && memcmp(p, "null", 4) == 0 ? 4 : plain_len(p, end);
    case M_DETAILS: {
      if (p == end || *p != '{') return 0;
      json_error_t je;
      *d = json_loadb(p, (size_t)(end - p), JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &je);
      if (!json_is_object(*d) || je.position <= 0 || (size_t)je.position > (size_t)(end - p) ||
          jb_audit_details_check(*d, NULL) < 0)
        return 0;
      return (size_t)je.position;
    }
    case M_CANONICAL: { /* only the closing quote is looked for: the text is compared below */
      const char *q = p < end && *p == '"' ? memchr(p + 1, '"', (size_t)(end - p - 1)) : NULL;
      return q ? (size_t)(q + 1 - p) : 0;
    }
    default:
      return plain_len(p, end);
  }
}

/* Cuts `line` into the values of its members (t) when they stand as the exporter writes
 * them. *d receives the parsed details, also when the line is then declined. */
static bool cut(const char *line, size_t len, struct tok t[LINE_MEMBERS], json_t **d) {
  const char *at = line, *end = line + len;
  for (int i = 0; i < LINE_MEMBERS; i++) {
    size_t k = line_members[i].len;
    if ((size_t)(end - at) < k + 4 || at[0] != (i ? ',' : '{') || at[1] != '"' ||
        memcmp(at + 2, line_members[i].name, k) != 0 || at[k + 2] != '"' || at[k + 3] != ':')
      return false;
    at += k + 4;
    t[i] = (struct tok){at, value_len(i, at, end, d)};
    if (!t[i].n) return false;
    at += t[i].n;
  }
  return end - at == 1 && *at == '}';
}

/* Puts the canonical object of the values `t` together in `canon`: its length, or 0 when it
 * would be longer than JB_AUDIT_MAX_CANONICAL. */
static size_t canonical_of(const struct tok t[LINE_MEMBERS], unsigned char *canon) {
  size_t o = 0;
  for (int k = 0; k < CANONICAL_MEMBERS; k++) {
    const char *name = line_members[canonical_members[k]].name;
    const struct tok *v = &t[canonical_members[k]];
    size_t nl = line_members[canonical_members[k]].len;
    if (o + nl + 4 + v->n + 1 > JB_AUDIT_MAX_CANONICAL) return 0;
    canon[o++] = k ? ',' : '{';
    canon[o++] = '"';
    memcpy(canon + o, name, nl);
    o += nl;
    canon[o++] = '"';
    canon[o++] = ':';
    memcpy(canon + o, v->p, v->n);
    o += v->n;
  }
  canon[o++] = '}';
  return o;
}

/* The digits of standard base64 (RFC 4648 §4), in the order of their values. */
static const char base64_digit[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* true when the `tlen` characters at `text` are the padded standard base64 of the `n` bytes
 * at `bin`: the one text jb_audit_unbase64 decodes into those bytes (the unit test checks
 * this function against libsodium's encoder). */
static bool is_base64_of(const char *text, size_t tlen, const unsigned char *bin, size_t n) {
  const unsigned char *t = (const unsigned char *)text;
  const unsigned char *d = (const unsigned char *)base64_digit;
  unsigned char last[3] = {0};
  size_t whole = n / 3 * 3;
  unsigned diff = 0;
  if (tlen != (n + 2) / 3 * 4) return false;
  for (size_t i = 0; i < whole; i += 3, t += 4) {
    unsigned long v = (unsigned long)bin[i] << 16 | bin[i + 1] << 8 | bin[i + 2];
    diff |= (t[0] ^ d[v >> 18]) | (t[1] ^ d[v >> 12 & 63]) | (t[2] ^ d[v >> 6 & 63]) |
            (t[3] ^ d[v & 63]);
  }
  if (n > whole) { /* one or two bytes left: two or three digits and padding */
    memcpy(last, bin + whole, n - whole);
    unsigned long v = (unsigned long)last[0] << 16 | last[1] << 8;
    diff |= (t[0] ^ d[v >> 18]) | (t[1] ^ d[v >> 12 & 63]) |
            (t[2] ^ (n - whole == 2 ? d[v >> 6 & 63] : '=')) | (t[3] ^ '=');
  }
  return diff == 0;
}

/* Decodes the `tlen` characters at `text` into the `n` bytes at `out` when they are the
 * padded standard base64 of `n` bytes: each digit is read for its value, whatever the
 * characters are, and is_base64_of then says whether the text is the base64 of what came
 * out, so that nothing but that one text is taken (as by jb_audit_unbase64). */
static bool from_base64(const char *text, size_t tlen, unsigned char *out, size_t n) {
  unsigned char value[256] = {0};
  if (tlen != (n + 2) / 3 * 4) return false;
  for (unsigned char d = 0; d < 64; d++) value[(unsigned char)base64_digit[d]] = d;
  for (size_t i = 0, o = 0; o < n; i += 4) {
    const unsigned char *g = (const unsigned char *)text + i;
    unsigned long v =
        (unsigned long)value[g[0]] << 18 | value[g[1]] << 12 | value[g[2]] << 6 | value[g[3]];
    out[o++] = (unsigned char)(v >> 16);
    if (o < n) out[o++] = (unsigned char)(v >> 8);
    if (o < n) out[o++] = (unsigned char)v;
  }
  return is_base64_of(text, tlen, out, n);
}

/* The value of the plain string `t` of `line`, made a C string in place: its closing quote
 * becomes NUL. */
static char *plain_value(char *line, const struct tok *t) {
  char *v = line + (t->p - line);
  v[t->n - 1] = '\0';
  return v + 1;
}

bool jb_audit_line_read_exact(char *line, size_t len, unsigned char *canon,
                              struct jb_audit_entry *e) {
  struct tok t[LINE_MEMBERS];
  json_t *d = NULL;
  char ts[JB_AUDIT_TS_LEN + 1] = "";
  size_t clen = 0;
  memset(e, 0, sizeof *e);
  if (cut(line, len, t, &d) && t[M_TIMESTAMP].n == JB_AUDIT_TS_LEN + 2)
    memcpy(ts, t[M_TIMESTAMP].p + 1, JB_AUDIT_TS_LEN);
  if (!ts[0] || !jb_audit_timestamp_ok(ts) || t[M_KEY_ID].n != JB_AUDIT_KEY_ID_LEN + 2 ||
      jb_audit_unhex(t[M_PREV_HASH].p + 1, t[M_PREV_HASH].n - 2, e->prev_hash, JB_AUDIT_HASH_LEN) <
          0 ||
      jb_audit_unhex(t[M_HASH].p + 1, t[M_HASH].n - 2, e->hash, JB_AUDIT_HASH_LEN) < 0 ||
      !from_base64(t[M_SIGNATURE].p + 1, t[M_SIGNATURE].n - 2, e->signature, JB_AUDIT_SIG_LEN) ||
      !(clen = canonical_of(t, canon)) ||
      !is_base64_of(t[M_CANONICAL].p + 1, t[M_CANONICAL].n - 2, canon, clen)) {
    json_decref(d);
    memset(e, 0, sizeof *e);
    return false;
  }
  /* accepted: from here on nothing fails */
  for (size_t i = 0; i < t[M_SEQ].n; i++) e->seq = e->seq * 10 + (t[M_SEQ].p[i] - '0');
  e->session = plain_value(line, &t[M_SESSION]);
  e->operation = plain_value(line, &t[M_OPERATION]);
  e->path = *t[M_PATH].p == 'n' ? NULL : plain_value(line, &t[M_PATH]);
  e->timestamp = plain_value(line, &t[M_TIMESTAMP]);
  e->details = d;
  canon[clen] = '\0';
  e->canonical = canon;
  e->canonical_len = clen;
  memcpy(e->key_id, t[M_KEY_ID].p + 1, JB_AUDIT_KEY_ID_LEN);
  e->key_id[JB_AUDIT_KEY_ID_LEN] = '\0';
  return true;
}
