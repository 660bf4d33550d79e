/*
 * libFuzzer target: the event-log reader (src/jobview.c, es_jobview_load() of a job folder's
 * state/events/<log>.jsonl) and what draws its times: the rates, status's text and JSON, the
 * Prometheus metrics, the progress line and summary, and the HTML report (src/report.c).
 *
 * The input is one event log of a fixed job folder: a manifest made at T_MADE with two shards,
 * attempt folders whose tokens the seeds' events name (shard 0 done, with its done record;
 * shard 1 failed), read at now = T_NOW. Properties:
 * - the load succeeds whatever the log holds (a bad line is counted, never fatal);
 * - every time the view keeps is finite and inside [time_lo, time_hi], so the spans, the
 *   wall time and the work time are bounded by that range (issue 35: a time of 0, 1e300 or
 *   NaN must be ignored and counted, never stretch a rate or reach an integer cast);
 * - every output is made (UBSan stops a double cast out of an integer's range), and the
 *   report names no INT64_MIN and no time of 1970.
 */
#include "fuzzlib.h"

#include "eshard/buf.h"
#include "eshard/jobview.h"
#include "eshard/log.h"
#include "eshard/progress.h"
#include "eshard/report.h"
#include "eshard/status.h"

#include <math.h>
#include <string.h>

#define T_MADE 1767225600.0 /* 2026-01-01T00:00:00Z, the manifest's created_at */
#define T_NOW (T_MADE + 7200)
#define TOK_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOK_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define ID0 "part-00000-of-00002"
#define ID1 "part-00001-of-00002"

static char job[512], events[600];

static void put(const char *rel, const char *text)
{
	char p[700];
	snprintf(p, sizeof(p), "%s/%s", job, rel);
	fuzz_write(p, (const uint8_t *)text, strlen(text));
}

static void setup(void)
{
	char p[700];
	snprintf(job, sizeof(job), "%s/job", fuzz_scratch());
	const char *dirs[] = { "shards", "state/done", "state/failed", "state/locks", "state/events",
			       "attempts/" ID0 "/0001-" TOK_A, "attempts/" ID1 "/0001-" TOK_B };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", job, dirs[i]);
		fuzz_mkdirs(p);
	}
	put("manifest.json",
	    "{\"created_at\": \"2026-01-01T00:00:00+00:00\", \"execution\": {\"executor_type\": \"ray\", "
	    "\"ray_address\": \"local\"}, \"job_id\": \"job\", \"num_shards\": 2, \"policy\": "
	    "{\"lock_timeout_secs\": 126000, \"max_retries\": 3, \"poll_interval_secs\": 20}, \"schema_version\": 2, "
	    "\"shards\": [{\"id\": \"" ID0 "\", \"index\": 0, \"path\": \"shards/" ID0 ".jsonl\", \"rows\": 3, "
	    "\"sha256\": \"\", \"size_bytes\": 24}, {\"id\": \"" ID1 "\", \"index\": 1, \"path\": \"shards/" ID1
	    ".jsonl\", \"rows\": 2, \"sha256\": \"\", \"size_bytes\": 16}], \"total_rows\": 5, "
	    "\"total_size_bytes\": 40}\n");
	put("attempts/" ID0 "/0001-" TOK_A "/attempt.json",
	    "{\"attempt_number\": 1, \"claimed_at_epoch\": 1767225700.5, \"duration_secs\": 12.5, \"hostname\": \"node-a\", "
	    "\"pid\": 7, \"result\": {\"rows\": 3}, \"shard_id\": \"" ID0 "\", \"status\": \"done\", \"token\": \"" TOK_A "\"}\n");
	put("attempts/" ID0 "/0001-" TOK_A "/processed.jsonl", "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n");
	put("state/done/" ID0 ".json",
	    "{\"attempt_number\": 1, \"completed_at\": \"2026-01-01T00:02:00+00:00\", \"hostname\": \"node-a\", "
	    "\"output_path\": \"attempts/" ID0 "/0001-" TOK_A "/processed.jsonl\", \"rows\": 3, \"sha256\": \"x\", "
	    "\"shard_id\": \"" ID0 "\", \"size_bytes\": 24, \"status\": \"done\", \"token\": \"" TOK_A "\"}\n");
	put("attempts/" ID1 "/0001-" TOK_B "/attempt.json",
	    "{\"attempt_number\": 1, \"claimed_at\": \"2026-01-01T00:03:00+00:00\", \"error\": \"exit code 3\", "
	    "\"finished_at\": \"2026-01-01T00:03:30+00:00\", \"hostname\": \"node-b\", \"pid\": 8, \"shard_id\": \""
	    ID1 "\", \"status\": \"failed\", \"token\": \"" TOK_B "\"}\n");
	put("state/failed/" ID1 ".json",
	    "{\"failures\": 1, \"last_attempt\": 1, \"last_error\": \"exit code 3\", \"shard_id\": \"" ID1 "\", "
	    "\"status\": \"failed\"}\n");
	snprintf(events, sizeof(events), "%s/state/events/node-a.7.12345678.jsonl", job);
	es_log_quiet_begin();
}

static int in_range(const struct es_jobview *v, double t)
{
	return isfinite(t) && t >= v->time_lo && t <= v->time_hi;
}

static void check_view(const struct es_jobview *v)
{
	double range = v->time_hi - v->time_lo;
	FUZZ_CHECK(isfinite(v->time_lo) && isfinite(v->time_hi) && range > 0);
	for (size_t i = 0; i < v->n_ev; i++) {
		FUZZ_CHECK(in_range(v, v->ev[i].time));
		FUZZ_CHECK(v->ev[i].duration < 0 || (isfinite(v->ev[i].duration) && v->ev[i].duration <= range));
	}
	for (size_t i = 0; i < v->n_a; i++) {
		const struct es_jv_attempt *a = &v->a[i];
		FUZZ_CHECK(in_range(v, a->claim) && in_range(v, a->end));
		FUZZ_CHECK(a->start < 0 || in_range(v, a->start));
		FUZZ_CHECK(a->proc_secs < 0 || (isfinite(a->proc_secs) && a->proc_secs <= range));
	}
	FUZZ_CHECK(in_range(v, v->t0) && in_range(v, v->t1) && v->t1 >= v->t0);
	struct es_rate r;
	FUZZ_CHECK(es_jobview_rate(v, 60, &r) == 0);
	FUZZ_CHECK(isfinite(r.work_secs) && r.work_secs >= 0 && r.work_secs <= range);
}

static void check_outputs(struct es_jobview *v)
{
	struct es_buf out = ES_BUF_INIT;
	FUZZ_CHECK(es_jobview_rate_status(v) == 0);
	FUZZ_CHECK(es_status_format_text(&v->m, &v->st, 1, &out) == 0);
	FUZZ_CHECK(es_status_format_json(&v->m, &v->st, &out) == 0);
	FUZZ_CHECK(es_jobview_format_prometheus(v, &out) == 0);
	FUZZ_CHECK(es_progress_line(v, 60, &out) == 0);
	FUZZ_CHECK(es_progress_summary(v, &out) == 0);
	es_buf_free(&out);
	struct es_report_opts o = { T_NOW, 0, 0, 0, NULL };
	FUZZ_CHECK(es_report_render(job, &o, &out, NULL) == 0);
	FUZZ_CHECK(out.data && strstr(out.data, "</html>\n"));
	FUZZ_CHECK(!strstr(out.data, "-9223372036854775808") && !strstr(out.data, "1970-"));
	es_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!job[0])
		setup();
	fuzz_write(events, data, size);
	struct es_jobview v;
	int rc = es_jobview_load(job, T_NOW, 0, &v);
	FUZZ_CHECK(rc == 0 || rc == ES_ENOMEM);
	if (!rc) {
		check_view(&v);
		check_outputs(&v);
	}
	es_jobview_free(&v);
	return 0;
}
