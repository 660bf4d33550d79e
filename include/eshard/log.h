/*
 * log: error codes and the one-line ERROR:/WARNING: messages on stderr.
 *
 * Contract: library functions never exit. They return 0 or a negative ES_E* code, and the
 * function that knows what failed reports it once through es_error(), which prints
 * "ERROR: <message>" (prefixed with "[rank R host H] " when a prefix is set) and keeps the
 * message so that a caller can record it (for example in attempt.json). Inside an
 * es_log_quiet_begin()/end() pair the message is kept but not printed.
 */
#ifndef ESHARD_LOG_H
#define ESHARD_LOG_H

#include "eshard/errcode.h"

#include <stddef.h>


/* Report an error once: prints it (unless quiet) and keeps it; returns code. */
int es_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like es_error, but appends ": <strerror(errno)>" with the errno at the call. */
int es_error_errno(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void es_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The text of the last es_error() of this thread, without the "ERROR: " prefix ("" if none). */
const char *es_last_error(void);
/* The errno of the last es_error_errno() of this thread; 0 after a plain es_error(). It tells
 * a caller what kind of system failure the code ES_EIO stands for (es_fs_transient). */
int es_last_errno(void);
void es_clear_error(void);
/* Nested: while the depth is > 0, es_error() keeps the message but does not print it. */
void es_log_quiet_begin(void);
void es_log_quiet_end(void);
/* Whether this thread is inside a quiet pair (a helper thread then begins one too). */
int es_log_is_quiet(void);
/* Keep msg and err as this thread's last error, without printing: an error another thread
 * reported (par.h), handed to the thread that returns it. */
void es_log_adopt_error(const char *msg, int err);
/* Prefix for every line, e.g. "[rank 1 node2] "; NULL or "" for none. */
void es_log_set_prefix(const char *prefix);

/* Add the time since mono_t0 (an es_time_mono() reading) to every stderr line's prefix:
 * "[+12.3s] [rank 1 node2] " (the time first, so the prefix itself stays as it was). 0: no time. */
void es_log_set_clock(double mono_t0);
/* A log line on stderr with the prefix, no "ERROR:"/"WARNING:" (a newline is added). */
void es_log_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A line on stdout (a newline is added), flushed. Lines of es_say, es_error, es_warning and
 * es_log_note are whole even when two threads print, and they move a sticky line out of the
 * way: the line is cleared, the new one printed, the sticky line drawn again below it. */
void es_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The sticky line on stdout (for a terminal: the progress line redrawn in place, no newline);
 * NULL clears it. Only for a terminal: elsewhere print whole lines with es_say. */
void es_say_sticky(const char *line);

#endif
