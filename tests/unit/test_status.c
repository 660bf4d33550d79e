/*
 * Unit tests of status: the classification of docs/job-folder.md#status-of-a-shard (done,
 * metadata_error, failed, running, stale by lock_timeout and by lease, pending), the counts-only
 * path, the JSON object and the text report (summary, progress, host table, --all lines), exit
 * codes, that status writes nothing, and the errors for a missing or foreign job folder; that
 * a view (es_jobview_load) opens nothing of a pending shard's own (issue 29: the listings tell
 * it), counted by the open calls below.
 */
#include "testlib.h"
#include "jobfix.h"

#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/jobview.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/status.h"
#include "json.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>

static const char *T;

/* A listing of every path with its size and mtime, to prove status changes nothing. */
static void snapshot(const char *dir, struct es_buf *out)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char p[4096];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (lstat(p, &st))
			continue;
		es_buf_printf(out, "%s %lld %lld.%09ld\n", p, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
			      st.st_mtim.tv_nsec);
		if (S_ISDIR(st.st_mode))
			snapshot(p, out);
	}
	closedir(d);
}

static const char *line_of(const char *text, int n, char *out, size_t sz)
{
	const char *p = text;
	for (int i = 0; i < n && p; i++) {
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	if (!p)
		return "";
	const char *e = strchr(p, '\n');
	size_t len = e ? (size_t)(e - p) : strlen(p);
	if (len >= sz)
		len = sz - 1;
	memcpy(out, p, len);
	out[len] = '\0';
	return out;
}

static void test_classification(void)
{
	int rows[] = { 3, 4, 5, 2, 2, 1, 2 };
	struct jf j;
	jf_make(&j, T, "mixed", 7, rows, "\"heartbeat_secs\": 10, \"lease_secs\": 120, ");
	double now = es_time_epoch();
	jf_done_ex(&j, 0, "node-a", 0, 0, 0, now - 100, now - 20);   /* done */
	char p[2048];
	jf_path(&j, p, sizeof(p), "state/done/%s.json", j.id[1]);
	jf_writes(p, "{not json");                                  /* done, metadata_error */
	jf_failed(&j, 2, "node-b", "Data-Juicer returned exit code 1"); /* failed */
	jf_lock(&j, 3, "node-c", 2, 7);                             /* running, fresh heartbeat */
	jf_lock(&j, 4, "node-d", 200, 3);                           /* stale: lease (120 s) */
	/* 5: pending */
	jf_lock(&j, 6, "node-c", 50, -1);                           /* running; stale with timeout 10 */

	struct es_buf before = ES_BUF_INIT, after = ES_BUF_INIT;
	snapshot(j.dir, &before);

	struct es_manifest m;
	CHECK_INT_EQ(es_manifest_load(j.dir, &m), 0);
	struct es_status s;
	CHECK_INT_EQ(es_status_collect(&m, 0, &s), 0);
	CHECK_INT_EQ(s.counts.total, 7);
	CHECK_INT_EQ(s.counts.done, 2);
	CHECK_INT_EQ(s.counts.failed, 1);
	CHECK_INT_EQ(s.counts.running, 2);
	CHECK_INT_EQ(s.counts.stale, 1);
	CHECK_INT_EQ(s.counts.pending, 1);
	CHECK(!s.complete);
	CHECK(!s.terminal);
	CHECK_INT_EQ(es_status_exit_code(&s.counts), 2);
	CHECK_INT_EQ(s.shards[0].state, ES_SHARD_DONE);
	CHECK_STR_EQ(s.shards[0].owner, "node-a");
	CHECK(!s.shards[0].metadata_error);
	CHECK_INT_EQ(s.shards[1].state, ES_SHARD_DONE);
	CHECK(s.shards[1].metadata_error);
	CHECK_INT_EQ(s.shards[2].state, ES_SHARD_FAILED);
	CHECK_STR_EQ(s.shards[2].error, "Data-Juicer returned exit code 1");
	CHECK_STR_EQ(s.shards[2].failed_host, "node-b");
	CHECK_INT_EQ(s.shards[3].state, ES_SHARD_RUNNING);
	CHECK_STR_EQ(s.shards[3].owner, "node-c");
	CHECK(s.shards[3].has_pid && s.shards[3].pid == 4242);
	CHECK(s.shards[3].has_heartbeat && s.shards[3].heartbeat == 7);
	CHECK(s.shards[3].lock_age_secs >= 1 && s.shards[3].lock_age_secs < 60);
	CHECK_INT_EQ(s.shards[4].state, ES_SHARD_STALE);
	CHECK(s.shards[4].lock_age_secs > 199);
	CHECK_INT_EQ(s.shards[5].state, ES_SHARD_PENDING);
	CHECK_INT_EQ(s.shards[6].state, ES_SHARD_RUNNING);
	CHECK(!s.shards[6].has_heartbeat);

	/* Progress: the two done shards' input rows, over [the earliest claim (the 200 s old lock),
	 * the latest completion (20 s ago)]. */
	CHECK_INT_EQ(s.rows_total, 19);
	CHECK_INT_EQ(s.rows_done, 7);
	CHECK_INT_EQ(s.result_rows_done, 3);
	CHECK(fabs(s.rate_rows_per_sec - 7.0 / 180.0) < 0.001);
	CHECK(fabs(s.eta_secs - 12.0 / (7.0 / 180.0)) < 2.0);

	/* Hosts, sorted: a done, b failed (from the last attempt), c two running, d stale, and the
	 * unreadable done record under "(unknown)". */
	CHECK_INT_EQ(s.n_hosts, 5);
	if (s.n_hosts == 5) {
		CHECK_STR_EQ(s.hosts[0].host, "(unknown)");
		CHECK_INT_EQ(s.hosts[0].done, 1);
		CHECK_STR_EQ(s.hosts[1].host, "node-a");
		CHECK_INT_EQ(s.hosts[1].done, 1);
		CHECK_STR_EQ(s.hosts[2].host, "node-b");
		CHECK_INT_EQ(s.hosts[2].failed, 1);
		CHECK_STR_EQ(s.hosts[3].host, "node-c");
		CHECK_INT_EQ(s.hosts[3].running, 2);
		CHECK_STR_EQ(s.hosts[4].host, "node-d");
		CHECK_INT_EQ(s.hosts[4].stale, 1);
	}

	/* Text. */
	struct es_buf text = ES_BUF_INIT;
	char ln[512];
	CHECK_INT_EQ(es_status_format_text(&m, &s, 0, &text), 0);
	CHECK_STR_EQ(line_of(text.data, 0, ln, sizeof(ln)),
		     "Job mixed: executor=ray ray_address=local total=7 pending=1 running=2 stale=1 done=2 failed=1");
	CHECK(!strncmp(line_of(text.data, 1, ln, sizeof(ln)), "Progress: 2/7 shards done, 7/19 rows (36.8%), 0.04 rows/s, ETA 5m", 64));
	CHECK_STR_EQ(line_of(text.data, 2, ln, sizeof(ln)), "Hosts:");
	CHECK_STR_EQ(line_of(text.data, 3, ln, sizeof(ln)), "  host        done  running  stale  failed");
	CHECK_STR_EQ(line_of(text.data, 7, ln, sizeof(ln)), "  node-c         0        2      0       0");
	CHECK(!strstr(text.data, "part-00000"));
	es_buf_reset(&text);
	CHECK_INT_EQ(es_status_format_text(&m, &s, 1, &text), 0);
	CHECK(strstr(text.data, "\n  part-00000-of-00007: done owner=node-a\n"
			       "  part-00001-of-00007: done\n"
			       "  part-00002-of-00007: failed\n"
			       "  part-00003-of-00007: running owner=node-c\n"
			       "  part-00004-of-00007: stale owner=node-d\n"
			       "  part-00005-of-00007: pending\n"
			       "  part-00006-of-00007: running owner=node-c\n") != NULL);

	/* JSON: the reference's object, pretty and sorted (a parse and re-dump gives it back). */
	struct es_buf js = ES_BUF_INIT, again = ES_BUF_INIT;
	CHECK_INT_EQ(es_status_format_json(&m, &s, &js), 0);
	cJSON *doc = es_json_parse(js.data, js.len, "status json");
	CHECK(doc != NULL);
	es_json_dump(doc, 1, &again);
	CHECK_STR_EQ(again.data, js.data);
	const char *head = "{\n  \"complete\": false,\n  \"counts\": {\n    \"done\": 2,\n    \"failed\": 1,\n"
			   "    \"pending\": 1,\n    \"running\": 2,\n    \"stale\": 1\n  },\n  \"execution\": {\n"
			   "    \"executor_type\": \"ray\",\n";
	CHECK(!strncmp(js.data, head, strlen(head)));
	CHECK(cJSON_IsFalse(cJSON_GetObjectItem(doc, "terminal")));
	int64_t v = 0;
	CHECK(!es_json_get_i64(doc, "total", &v) && v == 7);
	CHECK_STR_EQ(es_json_get_str(doc, "job_id"), "mixed");
	CHECK_STR_EQ(es_json_get_str(doc, "job_dir"), m.job_dir);
	cJSON *sh = cJSON_GetObjectItem(doc, "shards");
	CHECK_INT_EQ(cJSON_GetArraySize(sh), 7);
	cJSON *s0 = cJSON_GetArrayItem(sh, 0), *s1 = cJSON_GetArrayItem(sh, 1), *s2 = cJSON_GetArrayItem(sh, 2);
	cJSON *s3 = cJSON_GetArrayItem(sh, 3), *s5 = cJSON_GetArrayItem(sh, 5), *s6 = cJSON_GetArrayItem(sh, 6);
	CHECK_STR_EQ(es_json_get_str(s0, "owner"), "node-a");
	CHECK_STR_EQ(es_json_get_str(s0, "status"), "done");
	CHECK(!es_json_get_i64(s0, "rows", &v) && v == 3);
	CHECK(cJSON_IsTrue(cJSON_GetObjectItem(s1, "metadata_error")));
	CHECK_STR_EQ(es_json_get_str(s2, "error"), "Data-Juicer returned exit code 1");
	CHECK(!es_json_get_i64(s3, "pid", &v) && v == 4242);
	CHECK(!es_json_get_i64(s3, "heartbeat", &v) && v == 7);
	CHECK(cJSON_IsNumber(cJSON_GetObjectItem(s3, "lock_age_secs")));
	CHECK(cJSON_IsNumber(cJSON_GetObjectItem(s3, "lease_age_secs")));
	CHECK(cJSON_GetObjectItem(s6, "heartbeat") == NULL);
	CHECK(cJSON_GetArraySize(s5) == 3); /* rows, shard_id, status */
	cJSON *prog = cJSON_GetObjectItem(doc, "progress");
	CHECK(!es_json_get_i64(prog, "rows_done", &v) && v == 7);
	CHECK(cJSON_IsArray(cJSON_GetObjectItem(doc, "hosts")));
	cJSON_Delete(doc);

	/* --lock-timeout-secs 10 makes the 50 s old lock stale by the reference rule. */
	struct es_status s10;
	CHECK_INT_EQ(es_status_collect(&m, 10, &s10), 0);
	CHECK_INT_EQ(s10.shards[6].state, ES_SHARD_STALE);
	CHECK_INT_EQ(s10.shards[3].state, ES_SHARD_RUNNING);
	CHECK_INT_EQ(s10.counts.stale, 2);
	struct es_status_counts c;
	CHECK_INT_EQ(es_status_count(&m, 10, &c), 0);
	CHECK(!memcmp(&c, &s10.counts, sizeof(c)));
	CHECK_INT_EQ(es_status_count(&m, 0, &c), 0);
	CHECK(!memcmp(&c, &s.counts, sizeof(c)));
	es_status_free(&s10);

	/* Read on three threads (par.h): the same status, down to each shard's error message
	 * (kept per thread), but for the ages of the locks, taken from the clock as read. */
	struct es_status st3 = { .threads = 3 };
	struct es_buf one = ES_BUF_INIT, three = ES_BUF_INIT;
	CHECK_INT_EQ(es_status_refresh(&m, 0, NULL, &st3), 0);
	CHECK_INT_EQ(es_status_threads(&st3), 3);
	CHECK_INT_EQ(es_status_threads(&s), 1);
	struct es_buf js1 = ES_BUF_INIT, js3 = ES_BUF_INIT;
	CHECK_INT_EQ(es_status_format_json(&m, &s, &js1), 0);
	CHECK_INT_EQ(es_status_format_json(&m, &st3, &js3), 0);
	jf_lines_without(&one, js1.data, "_age_secs");
	jf_lines_without(&three, js3.data, "_age_secs");
	CHECK(one.len > 0);
	CHECK_STR_EQ(three.data, one.data);
	es_buf_free(&js1);
	es_buf_free(&js3);
	CHECK(st3.shards[1].record_error && strstr(st3.shards[1].record_error, "Invalid JSON"));
	es_status_free(&st3);
	es_buf_free(&one);
	es_buf_free(&three);

	snapshot(j.dir, &after);
	CHECK_STR_EQ(after.data, before.data);

	es_status_free(&s);
	es_manifest_free(&m);
	es_buf_free(&text);
	es_buf_free(&js);
	es_buf_free(&again);
	es_buf_free(&before);
	es_buf_free(&after);
}

/* A long lease leaves only the reference rule; without lease_secs in the manifest the default
 * (120 s) applies. */
static void test_lease_and_timeout(void)
{
	int rows[] = { 1, 1 };
	struct jf j;
	jf_make(&j, T, "lease", 2, rows, "\"lease_secs\": 100000, ");
	jf_lock(&j, 0, "h", 500, 2);
	jf_lock(&j, 1, "h", 200000, 9);
	struct es_manifest m;
	struct es_status_counts c;
	CHECK_INT_EQ(es_manifest_load(j.dir, &m), 0);
	CHECK_INT_EQ(es_status_count(&m, 0, &c), 0);
	CHECK_INT_EQ(c.running, 1);   /* 500 s: inside both the lease and the timeout */
	CHECK_INT_EQ(c.stale, 1);     /* 200000 s: past the reference's 126000 s timeout */
	es_manifest_free(&m);

	jf_make(&j, T, "lease-default", 2, rows, NULL);
	jf_lock(&j, 0, "h", 30, 1);
	jf_lock(&j, 1, "h", 130, 1);
	CHECK_INT_EQ(es_manifest_load(j.dir, &m), 0);
	CHECK_INT_EQ(es_status_count(&m, 0, &c), 0);
	CHECK_INT_EQ(c.running, 1);
	CHECK_INT_EQ(c.stale, 1);
	CHECK_INT_EQ(es_status_exit_code(&c), 1);
	es_manifest_free(&m);
}

static void test_exit_codes(void)
{
	int rows[] = { 2, 2 };
	struct jf j;
	jf_make(&j, T, "codes", 2, rows, NULL);
	struct es_manifest m;
	struct es_status s;
	CHECK_INT_EQ(es_manifest_load(j.dir, &m), 0);
	CHECK_INT_EQ(es_status_collect(&m, 0, &s), 0);
	CHECK_INT_EQ(es_status_exit_code(&s.counts), 1);
	CHECK(s.rate_rows_per_sec < 0 && s.eta_secs < 0);
	struct es_buf t = ES_BUF_INIT;
	es_status_format_text(&m, &s, 0, &t);
	CHECK(strstr(t.data, "rate unknown, ETA unknown\n") != NULL);
	CHECK(!strstr(t.data, "Hosts:"));
	es_status_free(&s);
	jf_done(&j, 0, "a");
	jf_done(&j, 1, "b");
	CHECK_INT_EQ(es_status_collect(&m, 0, &s), 0);
	CHECK_INT_EQ(es_status_exit_code(&s.counts), 0);
	CHECK(s.complete && s.terminal);
	CHECK(s.eta_secs == 0);
	es_buf_reset(&t);
	es_status_format_text(&m, &s, 0, &t);
	CHECK(strstr(t.data, "Progress: 2/2 shards done, 4/4 rows (100.0%), ") != NULL);
	CHECK(strstr(t.data, ", complete\n") != NULL);
	es_status_free(&s);
	es_buf_free(&t);
	es_manifest_free(&m);
}

static void test_missing_and_foreign(void)
{
	struct es_manifest m;
	char p[2048];
	snprintf(p, sizeof(p), "%s/nothing-here", T);
	CHECK_INT_EQ(es_manifest_load(p, &m), ES_ENOENT);
	CHECK(strstr(es_last_error(), "Job manifest not found") != NULL);
	snprintf(p, sizeof(p), "%s/foreign", T);
	es_fs_mkdirs(p, 0755);
	snprintf(p, sizeof(p), "%s/foreign/manifest.json", T);
	jf_writes(p, "{\"schema_version\": 3, \"shards\": [{\"id\": \"a\", \"path\": \"shards/a.jsonl\"}]}\n");
	snprintf(p, sizeof(p), "%s/foreign", T);
	CHECK(es_manifest_load(p, &m) < 0);
	CHECK(strstr(es_last_error(), "schema_version") != NULL);
}

/* Terminal fences: a done shard keeps its lock as a fence, which is no running lock; a fence
 * whose record this client cannot see still tells the state (the record's details are then a
 * metadata error). */
static void test_fences(void)
{
	int rows[] = { 2, 2, 2, 2 };
	struct jf j;
	jf_make(&j, T, "fences", 4, rows, NULL);
	jf_done(&j, 0, "node-a");
	jf_fence(&j, 0, "done");
	jf_fence(&j, 1, "done");          /* its record out of sight */
	jf_failed(&j, 2, "node-b", "boom");
	jf_fence(&j, 2, "failed");
	jf_fence(&j, 3, "failed");        /* its record out of sight */
	struct es_manifest m;
	CHECK_INT_EQ(es_manifest_load(j.dir, &m), 0);
	struct es_status_counts c;
	CHECK_INT_EQ(es_status_count(&m, 0, &c), 0);
	CHECK_INT_EQ(c.done, 2);
	CHECK_INT_EQ(c.failed, 2);
	CHECK_INT_EQ(c.running + c.stale + c.pending, 0);
	struct es_status s;
	CHECK_INT_EQ(es_status_collect(&m, 0, &s), 0);
	CHECK_INT_EQ(s.counts.done, 2);
	CHECK_INT_EQ(s.counts.failed, 2);
	CHECK(s.terminal && !s.complete);
	CHECK_INT_EQ(s.shards[0].state, ES_SHARD_DONE);
	CHECK(!s.shards[0].metadata_error);
	CHECK_STR_EQ(s.shards[0].owner, "node-a");
	CHECK_INT_EQ(s.shards[1].state, ES_SHARD_DONE);
	CHECK(s.shards[1].metadata_error);
	CHECK_INT_EQ(s.shards[2].state, ES_SHARD_FAILED);
	CHECK_STR_EQ(s.shards[2].error, "boom");
	CHECK_INT_EQ(s.shards[3].state, ES_SHARD_FAILED);
	CHECK(s.shards[3].metadata_error);
	es_status_free(&s);
	/* Listings made before shards 0 and 2 were published (they show the locks only), read
	 * after their fences: the records are looked for, not reported missing (a --watch of a
	 * job ending ended on such a "bad done record"). */
	unsigned char seen[4] = { ES_SEEN_LOCK, ES_SEEN_LOCK, ES_SEEN_LOCK, ES_SEEN_LOCK };
	struct es_status s2;
	memset(&s2, 0, sizeof(s2));
	CHECK_INT_EQ(es_status_refresh(&m, 0, seen, &s2), 0);
	CHECK_INT_EQ(s2.shards[0].state, ES_SHARD_DONE);
	CHECK(!s2.shards[0].metadata_error && !s2.shards[0].record_error);
	CHECK_STR_EQ(s2.shards[0].owner, "node-a");
	CHECK_INT_EQ(s2.shards[2].state, ES_SHARD_FAILED);
	CHECK(!s2.shards[2].metadata_error);
	CHECK_STR_EQ(s2.shards[2].error, "boom");
	CHECK(s2.shards[1].metadata_error && s2.shards[3].metadata_error); /* still out of sight */
	CHECK_INT_EQ(s2.counts.done, 2);
	CHECK(!s2.complete);
	es_status_free(&s2);
	es_manifest_free(&m);
}

/* The idle loop's count: a shard found done is not looked at again (done is final); the
 * others are looked at every time. */
static void test_count_cached(void)
{
	int rows[] = { 2, 2, 2 };
	struct jf j;
	jf_make(&j, T, "cached", 3, rows, NULL);
	jf_done(&j, 0, "node-a");
	jf_failed(&j, 1, "node-b", "boom");
	struct es_manifest m;
	CHECK_INT_EQ(es_manifest_load(j.dir, &m), 0);
	unsigned char seen[3] = { 0, 0, 0 };
	struct es_status_counts c;
	CHECK_INT_EQ(es_status_count_cached(&m, 0, seen, NULL, &c), 0);
	CHECK_INT_EQ(c.done, 1);
	CHECK_INT_EQ(c.failed, 1);
	CHECK_INT_EQ(c.pending, 1);
	CHECK(seen[0] && !seen[1] && !seen[2]);
	/* Shard 0's record goes out of sight and shard 1's failed record goes (a retry): the
	 * cached count still has 0 done without looking, and sees 1 pending again. */
	char p[2048];
	jf_path(&j, p, sizeof(p), "state/done/%s.json", j.id[0]);
	CHECK(unlink(p) == 0);
	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[1]);
	CHECK(unlink(p) == 0);
	CHECK_INT_EQ(es_status_count_cached(&m, 0, seen, NULL, &c), 0);
	CHECK_INT_EQ(c.done, 1);
	CHECK_INT_EQ(c.failed, 0);
	CHECK_INT_EQ(c.pending, 2);
	CHECK_INT_EQ(es_status_count(&m, 0, &c), 0);
	CHECK_INT_EQ(c.done, 0);
	CHECK_INT_EQ(c.pending, 3);
	/* A shard the caller has just seen running counts as running without its lock (it has
	 * none here), unless a record of it is visible. */
	unsigned char run[3] = { 1, 0, 1 };
	memset(seen, 0, sizeof(seen));
	jf_done(&j, 2, "node-a");
	CHECK_INT_EQ(es_status_count_cached(&m, 0, seen, run, &c), 0);
	CHECK_INT_EQ(c.running, 1);
	CHECK_INT_EQ(c.done, 1);
	CHECK_INT_EQ(c.pending, 1);
	es_manifest_free(&m);
}

/* Issue 35, item 3: status of a job whose logs hold what bad clocks write (jobfix.h
 * jf_bad_clock): the rate is the good times' (60 rows in the 20 s of work within the last
 * minute), and the ignored times are counted in the text and in --json's progress.bad_times. */
static void test_bad_clock(void)
{
	struct jf j;
	struct es_jobview v;
	int bad = jf_bad_clock(&j, T, "clock", es_time_epoch());
	if (!CHECK_INT_EQ(es_jobview_load(j.dir, 0, 0, &v), 0))
		return;
	CHECK_INT_EQ(es_jobview_rate_status(&v), 0);
	struct es_buf t = ES_BUF_INIT;
	char want[160];
	CHECK_INT_EQ(es_status_format_text(&v.m, &v.st, 0, &t), 0);
	/* 60 rows over the 20 s of work in the last minute: 3.00 rows/s when read at once; the
	 * window moves with the clock while the test runs (3.01 after 0.07 s on a loaded machine),
	 * so the second decimal is free. The bad times would give 0.00. */
	static const char rate[] = "Progress: 1/2 shards done, 60/100 rows (60.0%), 3.0";
	const char *at = strstr(t.data, rate);
	if (!CHECK(at && at[sizeof(rate) - 1] >= '0' && at[sizeof(rate) - 1] <= '9' &&
		   !strncmp(at + sizeof(rate), " rows/s, finished with failures\n", 32)))
		fprintf(stderr, "  status text:\n%s", t.data);
	snprintf(want, sizeof(want), "\nIgnored %d recorded time(s) that are not finite or lie outside the job's span "
		 "(a node's clock may be wrong)\n", bad);
	CHECK(strstr(t.data, want) != NULL);
	es_buf_reset(&t);
	CHECK_INT_EQ(es_status_format_json(&v.m, &v.st, &t), 0);
	cJSON *o = es_json_parse(t.data, t.len, "status");
	int64_t n = -1;
	CHECK(!es_json_get_i64(cJSON_GetObjectItem(o, "progress"), "bad_times", &n) && n == bad);
	cJSON_Delete(o);
	es_buf_free(&t);
	es_jobview_free(&v);
	/* A clean job says nothing of clocks, and --json says 0. */
	int rows[] = { 2 };
	jf_make(&j, T, "clean", 1, rows, NULL);
	jf_done(&j, 0, "node-a");
	CHECK_INT_EQ(es_jobview_load(j.dir, 0, 0, &v), 0);
	es_buf_reset(&t);
	CHECK_INT_EQ(es_status_format_text(&v.m, &v.st, 0, &t), 0);
	CHECK(t.data && !strstr(t.data, "Ignored"));
	es_buf_reset(&t);
	CHECK_INT_EQ(es_status_format_json(&v.m, &v.st, &t), 0);
	CHECK(t.data && strstr(t.data, "\n  \"progress\": {\n    \"bad_times\": 0,\n"));
	es_buf_free(&t);
	es_jobview_free(&v);
}

/* A running lock of shard i at attempt number n (written as a worker writes it). */
static void lock_at(struct jf *j, int i, int n)
{
	char p[2048], text[1024];
	snprintf(text, sizeof(text), "{\"attempt_dir\": \"attempts/%s/%04d-x\", \"attempt_number\": %d, "
		 "\"claimed_at\": \"2026-12-02T08:00:00+00:00\", \"claimed_at_epoch\": %.6f, \"heartbeat\": 1, "
		 "\"lease_secs\": 120.0, \"hostname\": \"h\", \"pid\": 4242, \"shard_id\": \"%s\", \"token\": \"%032d\"}\n",
		 j->id[i], n, n, es_time_epoch(), j->id[i], i);
	jf_path(j, p, sizeof(p), "state/locks/%s.lock", j->id[i]);
	jf_writes(p, text);
}

/* A preempted attempt (a stop signal, not counted toward the retries) is no problem to show:
 * no "Retried ... (no error recorded)"; a failure before it still is. */
static void test_preempted_not_a_problem(void)
{
	int rows[] = { 1, 1 };
	struct jf j;
	jf_make(&j, T, "stops", 2, rows, NULL);
	jf_attempt(&j, 0, 1, "h", "preempted", es_time_epoch() - 9);
	lock_at(&j, 0, 2);
	jf_attempt(&j, 1, 1, "h", "failed", es_time_epoch() - 9);
	jf_attempt(&j, 1, 2, "h", "preempted", es_time_epoch() - 5);
	lock_at(&j, 1, 3);
	struct es_manifest m;
	struct es_status s;
	CHECK_INT_EQ(es_manifest_load(j.dir, &m), 0);
	CHECK_INT_EQ(es_status_collect(&m, 0, &s), 0);
	CHECK_INT_EQ(s.shards[0].state, ES_SHARD_RUNNING);
	CHECK(!s.shards[0].has_problem);
	CHECK(s.shards[1].has_problem);
	CHECK_INT_EQ(s.shards[1].problem.attempt, 1);
	struct es_buf out = ES_BUF_INIT;
	CHECK_INT_EQ(es_status_format_problems(&s, 0, &out), 0);
	CHECK(out.data && !strstr(out.data, "preempted"));
	CHECK(out.data && strstr(out.data, "Retried part-00001-of-00002 (now running at attempt 3; attempt 1 failed on h)"));
	es_buf_free(&out);
	es_status_free(&s);
	es_manifest_free(&m);
}

/* Issue 29: a pending shard costs status nothing of its own. Before, each one cost three opens
 * (its done record, its failed record, its lock: three round trips to a distributed file
 * system's server, where a missing name is never cached for long). The shards with a record or
 * a lock are still read: a done or failed one once by a view that is refreshed, a running one's
 * lock each time. */
static void test_pending_costs_nothing(void)
{
	int rows[] = { 1, 1, 1, 1 };
	struct jf j;
	struct es_jobview v;
	jf_make(&j, T, "listed", 4, rows, NULL);
	jf_done(&j, 0, "node-a");
	jf_failed(&j, 1, "node-b", "exit code 1");
	jf_attempt(&j, 2, 1, "h", "running", es_time_epoch() - 5);
	lock_at(&j, 2, 1);
	/* The hook itself: an open of the watched name is counted. */
	test_watched = j.id[3];
	test_watched_opens = 0;
	char p[2048];
	jf_path(&j, p, sizeof(p), "state/done/%s.json", j.id[3]);
	CHECK_INT_EQ(es_fs_exists_fresh(p), 0);
	CHECK_INT_EQ(test_watched_opens, 1);
	test_watched_opens = 0;
	CHECK_INT_EQ(es_jobview_load(j.dir, 0, 0, &v), 0);
	if (!CHECK_INT_EQ(test_watched_opens, 0))
		fprintf(stderr, "  %d open(s) of a pending shard's names\n", test_watched_opens);
	test_watched = NULL;
	CHECK_INT_EQ(v.st.counts.done, 1);
	CHECK_INT_EQ(v.st.counts.failed, 1);
	CHECK_INT_EQ(v.st.counts.running, 1);
	CHECK_INT_EQ(v.st.counts.pending, 1);
	CHECK_STR_EQ(v.st.shards[0].owner, "node-a");
	CHECK(v.st.shards[1].error && strstr(v.st.shards[1].error, "exit code 1"));
	CHECK_STR_EQ(v.st.shards[2].owner, "h");
	/* A kept view refreshed reads a final shard no more: its record, attempts and log were
	 * read once. */
	for (int i = 0; i < 2; i++) {
		test_watched = j.id[i];
		test_watched_opens = 0;
		CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0);
		if (!CHECK_INT_EQ(test_watched_opens, 0))
			fprintf(stderr, "  %d open(s) of final shard %s's names\n", test_watched_opens, j.id[i]);
	}
	/* A running shard: its lock and its attempt folder's listing, once each (its attempt.json
	 * has not changed: a stat tells). */
	test_watched = j.id[2];
	test_watched_opens = 0;
	CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0);
	if (!CHECK_INT_EQ(test_watched_opens, 2))
		fprintf(stderr, "  %d open(s) of running shard %s's names\n", test_watched_opens, j.id[2]);
	test_watched = NULL;
	CHECK_INT_EQ(v.st.counts.done, 1);
	CHECK_INT_EQ(v.st.counts.failed, 1);
	CHECK_INT_EQ(v.st.counts.running, 1);
	es_jobview_free(&v);
}

int main(void)
{
	T = test_tmpdir();
	test_bad_clock();
	test_count_cached();
	test_classification();
	test_fences();
	test_lease_and_timeout();
	test_exit_codes();
	test_missing_and_foreign();
	test_preempted_not_a_problem();
	test_pending_costs_nothing();
	return test_done();
}
