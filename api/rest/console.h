/* console.h — the buyer's web console: its static files, embedded at build time from the
 * console/ folder (cmake/embed_console.cmake), and the sign-in that turns a token or a
 * one-time code into a short-lived HttpOnly cookie (api/rest/console.c). */
#ifndef JB_REST_CONSOLE_H
#define JB_REST_CONSOLE_H

#include <stddef.h>

struct jb_console_file {
  const char *path; /* relative to console/, e.g. "index.html", "vendor/socket.io.min.js" */
  const unsigned char *data; /* the bytes, NUL-terminated */
  size_t len; /* bytes, without the NUL */
};

extern const struct jb_console_file jb_console_files[];
extern const size_t jb_console_files_count;

#define JB_CONSOLE_CODE_TTL_S 300 /* a one-time console code is good for 5 minutes */
#define JB_CONSOLE_COOKIE_TTL_S 28800 /* a console sign-in lasts 8 hours */

#endif
