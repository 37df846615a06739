/* fuzz_redis.c — libFuzzer harness for what jailboxd reads from Redis: the RESP stream of the
 * subscription (hiredis' reader) and every pmessage in it through jb_fanout_accept (channel,
 * size, depth and envelope checks). Any crash, leak, sanitizer report or allocation over
 * libFuzzer's limit (an array header stating a huge count) is a bug. */
#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/fanout.h"

static void check(const char *channel, const char *msg, size_t len) {
  json_t *doc, *payload;
  const char *job;
  enum jb_event_kind kind;
  if (jb_fanout_accept(channel, msg, len, &doc, &job, &kind, &payload) == 0) {
    /* an accepted message names a known event kind for the channel's session */
    if (!jb_event_kind_key(kind) || !json_is_object(payload) ||
        strcmp(channel + strlen("jailbox:session:"), job) != 0)
      abort();
    json_decref(doc);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* 1. the bytes as one message on a fixed channel, and split "channel\nmessage" */
  check("jailbox:session:job-1", (const char *)data, size);
  const uint8_t *nl = memchr(data, '\n', size);
  if (nl) {
    size_t clen = (size_t)(nl - data);
    char *ch = malloc(clen + 1); /* not strndup: the fuzzer's bytes carry no terminating NUL */
    if (ch) {
      memcpy(ch, data, clen);
      ch[clen] = '\0';
      check(ch, (const char *)nl + 1, size - clen - 1);
    }
    free(ch);
  }
  /* 2. the bytes as a RESP stream: every pmessage reply goes through the same check */
  redisReader *r = redisReaderCreate();
  if (!r) return 0;
  jb_redis_reader_limit(r); /* as fanout.c's connections have it */
  if (redisReaderFeed(r, (const char *)data, size) == REDIS_OK) {
    void *reply;
    while (redisReaderGetReply(r, &reply) == REDIS_OK && reply) {
      redisReply *x = reply;
      if (x->type == REDIS_REPLY_ARRAY && x->elements == 4 &&
          x->element[2]->type == REDIS_REPLY_STRING && x->element[3]->type == REDIS_REPLY_STRING)
        check(x->element[2]->str, x->element[3]->str, x->element[3]->len);
      freeReplyObject(reply);
    }
  }
  redisReaderFree(r);
  return 0;
}
