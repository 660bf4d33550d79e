/*
 * clock: the wall and monotonic clocks, sleeping, and ISO times as Python writes them.
 */
#ifndef ESHARD_CLOCK_H
#define ESHARD_CLOCK_H

#include <time.h>

/* "2026-12-02T08:37:05.108116+00:00" (Python's datetime.isoformat(); ".ffffff" left out when
 * the microsecond is 0). */
void es_time_iso(const struct timespec *ts, char out[40]);
void es_time_now_iso(char out[40]);
/* Parse a Python isoformat() time ("2026-12-02T08:37:05.108116+00:00", any offset, optional
 * fraction, or "Z") into Unix seconds. 0 or ES_EINVAL (no message). */
int es_time_parse_iso(const char *s, double *out);
double es_time_epoch(void);           /* wall clock, seconds */
double es_time_mono(void);            /* monotonic clock, seconds */
/* Sleep secs seconds (retried on EINTR); nothing for secs <= 0 or NaN, at most
 * ES_SLEEP_MAX_SECS (a century: any longer wait is forever, and fits no timespec). */
#define ES_SLEEP_MAX_SECS 3.2e9
void es_sleep(double secs);

#endif
