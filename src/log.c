#include "eshard/log.h"
#include "eshard/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static _Thread_local char last_msg[4096];
static _Thread_local int quiet_depth;
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

/* The elapsed time before the prefix, "[+12.3s] [rank R host] ": the prefix itself stays as
 * it was, for whoever looks for "[rank R host] ERROR:". */
static void put_prefix(FILE *f)
{
	if (clock_t0 > 0) {
		double e = es_time_mono() - clock_t0;
		fprintf(f, "[+%.1fs] ", e > 0 ? e : 0);
	}
	fputs(prefix, f);
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
	if (!keep || quiet_depth == 0) {
		pthread_mutex_lock(&out_lock);
		sticky_hide();
		put_prefix(stderr);
		fprintf(stderr, "%s: %s\n", kind, msg);
		fflush(stderr);
		sticky_redraw();
		pthread_mutex_unlock(&out_lock);
	}
}

int es_error(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport("ERROR", 1, fmt, ap, NULL);
	va_end(ap);
	return code;
}

int es_error_errno(int code, const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	vreport("ERROR", 1, fmt, ap, strerror(e));
	va_end(ap);
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
void es_clear_error(void) { last_msg[0] = '\0'; }
void es_log_quiet_begin(void) { quiet_depth++; }
void es_log_quiet_end(void) { if (quiet_depth > 0) quiet_depth--; }

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
	pthread_mutex_lock(&out_lock);
	sticky_hide();
	put_prefix(stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	sticky_redraw();
	pthread_mutex_unlock(&out_lock);
}

void es_say(const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&out_lock);
	sticky_hide();
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
	sticky_redraw();
	pthread_mutex_unlock(&out_lock);
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

int es_exit_code(int rc)
{
	if (rc == 0)
		return 0;
	int sig = es_stop_signal();
	return rc == ES_EINTR && sig > 0 ? 128 + sig : 2;
}
