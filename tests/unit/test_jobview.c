/* jobview's rate and ETA rule (issue 10, item 3): work time is the union of the attempts'
 * spans, so the downtime between submissions is not counted; the window rate looks at the
 * recent spans only; no ETA for a terminal job or one where nothing runs. */
#include "eshard/jobview.h"
#include "testlib.h"

#include <math.h>

static int near(double a, double b)
{
	return fabs(a - b) < 1e-9;
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
	return test_done();
}
