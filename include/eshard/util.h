/*
 * util: clocks, host names and strict number parsing shared by every module.
 */
#ifndef ESHARD_UTIL_H
#define ESHARD_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* "2026-12-02T08:37:05.108116+00:00" (Python's datetime.isoformat(); ".ffffff" left out when
 * the microsecond is 0). */
void es_time_iso(const struct timespec *ts, char out[40]);
void es_time_now_iso(char out[40]);
double es_time_epoch(void);           /* wall clock, seconds */
double es_time_mono(void);            /* monotonic clock, seconds */
void es_sleep(double secs);
const char *es_hostname(void);        /* cached gethostname() */
/* Strict decimal parse of the whole string; 0 or ES_EUSAGE (no message). */
int es_parse_i64(const char *s, int64_t *out);
int es_parse_double(const char *s, double *out);
/* Test builds: ESHARD_TEST_CRASH_AT=<name> makes the process _exit(99) at that point. */
void es_crash_point(const char *name);

#endif
