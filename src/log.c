#include "eshard/log.h"
#include "eshard/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_msg[4096];
static _Thread_local int quiet_depth;
static char prefix[256];

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
		fprintf(stderr, "%s%s: %s\n", prefix, kind, msg);
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

int es_exit_code(int rc)
{
	if (rc == 0)
		return 0;
	int sig = es_stop_signal();
	return rc == ES_EINTR && sig > 0 ? 128 + sig : 2;
}
