/* jobview's rate and ETA rule (issue 10, item 3): work time is the union of the attempts'
 * spans, so the downtime between submissions is not counted; the window rate looks at the
 * recent spans only; no ETA for a terminal job or one where nothing runs. */
#include "eshard/clock.h"
#include "eshard/jobview.h"
#include "testlib.h"
#include "jobfix.h"

#include <math.h>

static int near(double a, double b)
{
	return fabs(a - b) < 1e-9;
}

/* Issue 35, item 3: times a bad clock wrote (0, 1e300, NaN, ...) or far outside the job's span
 * are ignored and counted; the rates and the span come from the good ones. */
static void test_bad_clock(const char *T)
{
	struct jf j;
	struct es_jobview v;
	double now = es_time_epoch(), made = now - 600;
	int bad = jf_bad_clock(&j, T, "clock", now);
	if (!CHECK_INT_EQ(es_jobview_load(j.dir, now, 0, &v), 0))
		return;
	CHECK_INT_EQ(v.bad_times, bad);
	CHECK_INT_EQ(v.st.bad_times, bad);
	CHECK(fabs(v.time_lo - (made - ES_JV_SKEW_BEFORE)) < 1 && near(v.time_hi, now + ES_JV_SKEW_AFTER));
	if (CHECK_INT_EQ(v.n_a, 2)) {
		/* Shard 0: the claim of attempt.json (every claim event was bad), the events' end. */
		CHECK(fabs(v.a[0].claim - (now - 100)) < 1e-3 && fabs(v.a[0].end - (now - 40)) < 1e-3);
		CHECK(fabs(v.a[0].start - (now - 90)) < 1e-3);
		CHECK(v.a[0].proc_secs < 0);
		/* Shard 1: the claim event an hour before the job was made is clock skew, kept. */
		CHECK(fabs(v.a[1].claim - (made - 3600)) < 1e-3);
		CHECK(v.a[1].end >= v.a[1].claim && v.a[1].end <= now);
	}
	CHECK(fabs(v.t0 - (made - 3600)) < 1e-3 && fabs(v.t1 - (now - 40)) < 1e-3);
	/* 60 rows in 60 s of work: a time of 0 would have made it 60 rows in 56 years. */
	struct es_rate r;
	CHECK_INT_EQ(es_jobview_rate(&v, 60, &r), 0);
	CHECK(fabs(r.work_secs - 60) < 1e-3 && fabs(r.rows_per_sec - 1.0) < 1e-3);
	struct es_buf prom = ES_BUF_INIT;
	CHECK_INT_EQ(es_jobview_format_prometheus(&v, &prom), 0);
	char want[64];
	snprintf(want, sizeof(want), "\neshard_bad_times{job=\"clock\"} %d\n", bad);
	CHECK(prom.data && strstr(prom.data, want) != NULL);
	CHECK(prom.data && strstr(prom.data, "# TYPE eshard_bad_times gauge\n") != NULL);
	es_buf_free(&prom);
	es_jobview_free(&v);

	/* A manifest without created_at: times before 2024 are still refused. */
	int rows[] = { 5 };
	char t[64];
	struct es_buf ev = ES_BUF_INIT;
	jf_make(&j, T, "floor", 1, rows, NULL);
	jf_done_ex(&j, 0, "node-a", 0, 0, 0, now - 50, now - 20);
	jf_event(&ev, &j, 0, "claim", "0", "");
	jf_event(&ev, &j, 0, "claim", "1703980800", ""); /* 2023-12-31 */
	snprintf(t, sizeof(t), "%.6f", now - 45);
	jf_event(&ev, &j, 0, "start", t, "");
	jf_events(&j, "node-a.7.12345678", ev.data);
	es_buf_free(&ev);
	if (CHECK_INT_EQ(es_jobview_load(j.dir, now, 0, &v), 0)) {
		CHECK_INT_EQ(v.bad_times, 2);
		CHECK(near(v.time_lo, ES_JV_TIME_FLOOR));
		CHECK(v.n_a == 1 && fabs(v.a[0].claim - (now - 50)) < 1e-3);
	}
	es_jobview_free(&v);
}

int main(void)
{
	struct es_rate r;
	/* Two submissions: work in [0, 10] and [1000, 1010], a downtime of 990 s between them.
	 * Overlapping spans count once: [0, 6] and [4, 10] are 10 s of work. */
	struct es_work_span s[] = {
		{ 0, 6, 1, 100, 1000 }, { 4, 10, 1, 100, 1000 },
		{ 1000, 1010, 1, 200, 2000 }, { 1005, 1020, 0, 0, 0 } /* running at now = 1020 */
	};
	es_rate_compute(s, 4, 1020, 60, 400, 1, 0, &r);
	CHECK(near(r.work_secs, 10 + 20));
	CHECK(near(r.rows_per_sec, 400.0 / 30));
	CHECK(near(r.bytes_per_sec, 4000.0 / 30));
	/* The window [960, 1020]: 200 rows in 20 s of work. */
	CHECK(near(r.window_rows_per_sec, 10));
	CHECK(near(r.window_bytes_per_sec, 100));
	CHECK(near(r.eta_secs, 40));
	/* The naive rate, rows / (last end - first start), would be 400 / 1020: the downtime counted. */
	CHECK(r.rows_per_sec > 10 * 400.0 / 1020);

	/* Terminal (done + failed = total): no ETA, whatever is left. */
	es_rate_compute(s, 4, 1020, 60, 400, 1, 1, &r);
	CHECK(r.eta_secs < 0);
	CHECK(near(r.rows_per_sec, 400.0 / 30));
	/* Stopped (not terminal, nothing runs): no ETA. */
	es_rate_compute(s, 3, 5000, 60, 400, 0, 0, &r);
	CHECK(r.eta_secs < 0);
	/* Nothing done in the window: the overall rate stands in for it. */
	CHECK(near(r.window_rows_per_sec, 400.0 / 20));
	/* No work at all: every figure unknown. */
	es_rate_compute(NULL, 0, 10, 60, 5, 1, 0, &r);
	CHECK(r.work_secs == 0 && r.rows_per_sec < 0 && r.window_rows_per_sec < 0 && r.eta_secs < 0);
	/* A span that ends before it starts is no work. */
	struct es_work_span bad[] = { { 10, 5, 1, 7, 7 } };
	es_rate_compute(bad, 1, 20, 60, 0, 0, 1, &r);
	CHECK(r.work_secs == 0 && r.rows_per_sec < 0);
	test_bad_clock(test_tmpdir());
	return test_done();
}
