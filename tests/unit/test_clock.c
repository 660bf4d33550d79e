/*
 * Unit tests of src/clock.c: ISO times (Python's datetime.isoformat() with a UTC offset),
 * their parser, the clocks and es_sleep.
 */
#include "testlib.h"

#include "eshard/clock.h"

#include <signal.h>
#include <stdio.h>
#include <math.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static void iso_at(time_t sec, long nsec, const char *want, const char *file, int line)
{
	struct timespec ts = { sec, nsec };
	char out[40];
	memset(out, 'Z', sizeof(out));
	es_time_iso(&ts, out);
	if (!test_check_str(out, want, "es_time_iso", "want", file, line))
		fprintf(stderr, "  at %lld.%09ld\n", (long long)sec, nsec);
}
#define ISO(sec, nsec, want) iso_at((sec), (nsec), (want), __FILE__, __LINE__)

/* Values checked with Python: datetime.fromtimestamp(s, timezone.utc).isoformat(). */
static void test_time_iso(void)
{
	ISO(1796200661, 108116000, "2026-12-02T08:37:41.108116+00:00");
	ISO(1796200661, 1000, "2026-12-02T08:37:41.000001+00:00");
	ISO(1796200661, 10000000, "2026-12-02T08:37:41.010000+00:00"); /* six digits, zeros kept */
	ISO(1709251199, 999999000, "2024-02-29T23:59:59.999999+00:00"); /* leap day */
	ISO(4102444800, 500000000, "2100-01-01T00:00:00.500000+00:00"); /* past 2038 */
}

/* Microsecond 0: the ".ffffff" part is left out, like datetime.isoformat(). */
static void test_time_iso_whole_second(void)
{
	ISO(0, 0, "1970-01-01T00:00:00+00:00");
	ISO(1796200661, 0, "2026-12-02T08:37:41+00:00");
	ISO(4102444800, 0, "2100-01-01T00:00:00+00:00");
}

/* Parse "YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00" to epoch seconds; -1 when it does not match. */
static double parse_iso(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return -1;
	double frac = 0;
	if (*p == '.') {
		int digits = 0;
		long us = 0;
		for (p++; *p >= '0' && *p <= '9'; p++, digits++)
			us = us * 10 + (*p - '0');
		if (digits != 6)
			return -1;
		frac = us / 1e6;
	}
	if (strcmp(p, "+00:00") != 0)
		return -1;
	return (double)timegm(&tm) + frac;
}

static void test_time_now(void)
{
	char iso[40];
	double before = es_time_epoch();
	es_time_now_iso(iso);
	double after = es_time_epoch();
	double t = parse_iso(iso);
	if (!CHECK(t > 0))
		fprintf(stderr, "  iso: %s\n", iso);
	/* The ISO time lies between the two epoch readings (to the microsecond). */
	CHECK(t >= before - 1e-6 && t <= after + 1e-6);
	CHECK(before > 1.6e9); /* after 2020: seconds, not milli- or nanoseconds */
	double wall = (double)time(NULL);
	CHECK(after - wall < 2 && wall - after < 2);

	double m1 = es_time_mono(), m2 = es_time_mono();
	CHECK(m1 > 0);
	CHECK(m2 >= m1);
}

static void on_alarm(int sig) { (void)sig; }

static void test_sleep(void)
{
	double t0 = es_time_mono();
	es_sleep(0.2);
	double dt = es_time_mono() - t0;
	CHECK(dt >= 0.2);
	CHECK(dt < 2.0);

	/* Whole seconds and a fraction. */
	t0 = es_time_mono();
	es_sleep(1.25);
	dt = es_time_mono() - t0;
	CHECK(dt >= 1.25);
	CHECK(dt < 3.0);

	/* Zero and negative return at once. */
	t0 = es_time_mono();
	es_sleep(0);
	es_sleep(-5);
	CHECK(es_time_mono() - t0 < 0.1);

	/* A signal does not cut the sleep short. */
	struct sigaction sa, old;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm; /* no SA_RESTART: nanosleep returns EINTR */
	sigemptyset(&sa.sa_mask);
	CHECK_INT_EQ(sigaction(SIGALRM, &sa, &old), 0);
	struct itimerval it = { { 0, 50000 }, { 0, 50000 } }; /* every 50 ms */
	CHECK_INT_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
	t0 = es_time_mono();
	es_sleep(0.3);
	dt = es_time_mono() - t0;
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	CHECK(dt >= 0.3);
	CHECK(dt < 3.0);
}

static void test_parse_iso(void)
{
	double t;
	CHECK_INT_EQ(es_time_parse_iso("1970-01-01T00:00:10+00:00", &t), 0);
	CHECK(t == 10);
	CHECK_INT_EQ(es_time_parse_iso("2026-12-02T08:37:05.108116+00:00", &t), 0);
	CHECK(fabs(t - 1796200625.108116) < 1e-5);
	CHECK_INT_EQ(es_time_parse_iso("2026-12-02T10:37:05.5+02:00", &t), 0);
	CHECK(fabs(t - 1796200625.5) < 1e-6);
	CHECK_INT_EQ(es_time_parse_iso("2026-12-02T08:37:05Z", &t), 0);
	CHECK(es_time_parse_iso("2026-12-02 08:37:05", &t) != 0);
	CHECK(es_time_parse_iso("2026-12-02T08:37:05+0000", &t) != 0);
	CHECK(es_time_parse_iso(NULL, &t) != 0);
}

int main(void)
{
	test_time_iso();
	test_parse_iso();
	test_time_iso_whole_second();
	test_time_now();
	test_sleep();
	return test_done();
}
