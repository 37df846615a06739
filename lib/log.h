/* log.h — structured logging: one JSON object per line on stderr, written with one write(2)
 * so that lines from several threads never interleave. */
#ifndef JB_LOG_H
#define JB_LOG_H

#include <jansson.h>
#include <time.h>

enum jb_log_level { JB_LOG_DEBUG = 0, JB_LOG_INFO, JB_LOG_WARN, JB_LOG_ERROR, JB_LOG_FATAL };

/* Sets the least severe level written; "debug", "info", "warn" or "error". Unknown: info. */
void jb_log_set_level(const char *name);

/* Writes {"ts":ISO-8601 UTC with ms,"level":…,"msg":msg, …fields}. `fields` may be NULL;
 * it is a *stolen* reference (the call releases it). Never fails visibly. */
void jb_log_json(enum jb_log_level lvl, const char *msg, json_t *fields);

/* Convenience: string key/value pairs ending in NULL, e.g.
 * jb_log(JB_LOG_INFO, "listening", "addr", "127.0.0.1:8080", NULL). */
void jb_log(enum jb_log_level lvl, const char *msg, ...) __attribute__((sentinel));

/* Writes the current time as ISO 8601 UTC with milliseconds ("2026-01-02T03:04:05.678Z")
 * into `buf` (at least 25 bytes). */
void jb_iso8601_now(char *buf, size_t len);

/* The same for the CLOCK_REALTIME time `ts` (milliseconds truncated). */
void jb_iso8601_at(const struct timespec *ts, char *buf, size_t len);

#endif
