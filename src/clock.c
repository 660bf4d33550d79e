#include "eshard/clock.h"
#include "eshard/errcode.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void es_time_iso(const struct timespec *ts, char out[40])
{
	struct tm tm;
	time_t t = ts->tv_sec;
	gmtime_r(&t, &tm);
	long us = ts->tv_nsec / 1000;
	size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
	if (us)
		snprintf(out + n, 40 - n, ".%06ld+00:00", us);
	else
		snprintf(out + n, 40 - n, "+00:00");
}

void es_time_now_iso(char out[40])
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	es_time_iso(&ts, out);
}

int es_time_parse_iso(const char *s, double *out)
{
	if (!s)
		return ES_EINVAL;
	int Y, M, D, h, mi, sec, n = 0;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &Y, &M, &D, &h, &mi, &sec, &n) != 6 || n != 19)
		return ES_EINVAL;
	const char *p = s + n;
	double frac = 0;
	if (*p == '.') {
		double scale = 0.1;
		p++;
		if (*p < '0' || *p > '9')
			return ES_EINVAL;
		while (*p >= '0' && *p <= '9') {
			frac += (*p - '0') * scale;
			scale /= 10;
			p++;
		}
	}
	long off = 0;
	if (*p == 'Z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int oh, om, k = 0;
		if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5)
			return ES_EINVAL;
		off = (oh * 3600L + om * 60L) * (*p == '-' ? -1 : 1);
		p += 6;
	} else if (*p) {
		return ES_EINVAL;
	}
	if (*p)
		return ES_EINVAL;
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = Y - 1900;
	tm.tm_mon = M - 1;
	tm.tm_mday = D;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	time_t t = timegm(&tm);
	*out = (double)t - (double)off + frac;
	return 0;
}

double es_time_epoch(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

double es_time_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void es_sleep(double secs)
{
	if (!(secs > 0))
		return;
	/* A century is forever here; past time_t's range the cast below would be undefined. */
	if (secs > ES_SLEEP_MAX_SECS)
		secs = ES_SLEEP_MAX_SECS;
	struct timespec ts = { (time_t)secs, (long)((secs - floor(secs)) * 1e9) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}
