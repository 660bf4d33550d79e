#include "eshard/log.h"
#include "eshard/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local char last_msg[4096];
static _Thread_local int quiet_depth;
static _Thread_local int last_errno;
static char prefix[256];
static double clock_t0;       /* > 0: the elapsed time since it leads the prefix */
/* stdout's sticky line (a terminal's redrawn progress line) and the lock that keeps the lines
 * of the progress thread and of the main thread whole. */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static char sticky[1024];
static int sticky_shown;

static void sticky_hide(void)
{
	if (sticky_shown) {
		fputs("\r\033[K", stdout);
		fflush(stdout);
	}
}

static void sticky_redraw(void)
{
	if (sticky_shown) {
		fputs(sticky, stdout);
		fflush(stdout);
	}
}

/* One line, prefixed or not, in one write. Under MPICH a rank's stdout is unbuffered and the
 * launcher forwards each rank's stream as it comes, so a line written in pieces (its text, then
 * its "\n") could be cut by another rank's line; stderr is unbuffered everywhere. The prefix
 * starts with the elapsed time, "[+12.3s] [rank R host] ": the prefix itself stays as it was, for
 * whoever looks for "[rank R host] ERROR:". */
static void put_linev(FILE *f, int prefixed, const char *fmt, va_list ap)
{
	char stack[4608];
	char *buf = stack;
	size_t head = 0;
	if (prefixed && clock_t0 > 0) {
		double e = es_time_mono() - clock_t0;
		int k = snprintf(stack, sizeof(stack), "[+%.1fs] ", e > 0 ? e : 0);
		head = k > 0 ? (size_t)k : 0;
	}
	if (prefixed)
		head += (size_t)snprintf(stack + head, sizeof(stack) - head, "%s", prefix);
	va_list aq;
	va_copy(aq, ap);
	int k = vsnprintf(stack + head, sizeof(stack) - head, fmt, aq);
	va_end(aq);
	size_t body = k > 0 ? (size_t)k : 0;
	if (head + body + 1 >= sizeof(stack)) {
		char *big = malloc(head + body + 2);
		if (big) {
			memcpy(big, stack, head);
			vsnprintf(big + head, body + 1, fmt, ap);
			buf = big;
		} else {
			body = sizeof(stack) - head - 2; /* no memory: the line, cut */
		}
	}
	buf[head + body] = '\n';
	fwrite(buf, 1, head + body + 1, f);
	fflush(f);
	if (buf != stack)
		free(buf);
}

/* One whole line under the output lock, the sticky line moved out of its way. */
static void emit_linev(FILE *f, int prefixed, const char *fmt, va_list ap)
{
	pthread_mutex_lock(&out_lock);
	sticky_hide();
	put_linev(f, prefixed, fmt, ap);
	sticky_redraw();
	pthread_mutex_unlock(&out_lock);
}

static void emit_line(FILE *f, int prefixed, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void emit_line(FILE *f, int prefixed, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit_linev(f, prefixed, fmt, ap);
	va_end(ap);
}

static void vreport(const char *kind, int keep, const char *fmt, va_list ap, const char *suffix)
{
	char msg[4096];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (suffix) {
		size_t n = strlen(msg);
		snprintf(msg + n, sizeof(msg) - n, ": %s", suffix);
	}
	/* One line: a message never carries a raw newline onto stderr. */
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	if (keep)
		memcpy(last_msg, msg, sizeof(last_msg));
	if (!keep || quiet_depth == 0)
		emit_line(stderr, 1, "%s: %s", kind, msg);
}

int es_error(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport("ERROR", 1, fmt, ap, NULL);
	va_end(ap);
	last_errno = 0;
	return code;
}

int es_error_errno(int code, const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	vreport("ERROR", 1, fmt, ap, strerror(e));
	va_end(ap);
	last_errno = e;
	errno = e;
	return code;
}

void es_warning(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport("WARNING", 0, fmt, ap, NULL);
	va_end(ap);
}

const char *es_last_error(void) { return last_msg; }
int es_last_errno(void) { return last_errno; }
void es_clear_error(void) { last_msg[0] = '\0'; }
void es_log_quiet_begin(void) { quiet_depth++; }
void es_log_quiet_end(void) { if (quiet_depth > 0) quiet_depth--; }
int es_log_is_quiet(void) { return quiet_depth > 0; }

void es_log_adopt_error(const char *msg, int err)
{
	snprintf(last_msg, sizeof(last_msg), "%s", msg);
	last_errno = err;
}

void es_log_set_prefix(const char *p)
{
	snprintf(prefix, sizeof(prefix), "%s", p ? p : "");
}

void es_log_set_clock(double mono_t0)
{
	clock_t0 = mono_t0;
}

void es_log_note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit_linev(stderr, 1, fmt, ap);
	va_end(ap);
}

void es_say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit_linev(stdout, 0, fmt, ap);
	va_end(ap);
}

void es_say_sticky(const char *line)
{
	pthread_mutex_lock(&out_lock);
	sticky_hide();
	sticky_shown = line != NULL;
	if (line) {
		/* One terminal line: what does not fit is cut rather than wrapped onto a second. */
		snprintf(sticky, sizeof(sticky), "\r%s", line);
		sticky_redraw();
	}
	pthread_mutex_unlock(&out_lock);
}
