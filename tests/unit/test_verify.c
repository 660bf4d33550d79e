/*
 * Unit tests of verify (docs/design.md#verify, docs/design.md#reference-tests 12): two owners
 * pass with --expect-nodes 2 and J/merged.jsonl equals the concatenated shards; too few owners
 * fail with exit code 2; an incomplete job stops with status's exit code; a done record without a
 * hostname is an error; an output inside the job folder (but merged.jsonl) is refused before
 * anything is printed. stdout is captured to check the printed lines.
 */
#include "testlib.h"

#include <pthread.h>
#include "jobfix.h"

#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/jobview.h"
#include "eshard/log.h"
#include "eshard/merge.h"
#include "eshard/verify.h"

static const char *T;
static char cap_path[2048];
static int saved_fd = -1;

static void capture_begin(void)
{
	fflush(stdout);
	snprintf(cap_path, sizeof(cap_path), "%s/stdout.txt", T);
	int fd = open(cap_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	saved_fd = dup(1);
	dup2(fd, 1);
	close(fd);
}

static char *capture_end(void)
{
	fflush(stdout);
	dup2(saved_fd, 1);
	close(saved_fd);
	return jf_read(cap_path, NULL);
}

static void test_two_owners(void)
{
	int rows[] = { 2, 1, 3, 2 };
	struct jf j;
	jf_make(&j, T, "two", 4, rows, NULL);
	for (int i = 0; i < 4; i++)
		jf_done(&j, i, i % 2 ? "node-b" : "node-a");
	struct es_verify_result r;
	capture_begin();
	int rc = es_verify_run(j.dir, NULL, 2, &r);
	char *out = capture_end();
	CHECK_INT_EQ(rc, 0);
	CHECK_INT_EQ(r.exit_code, 0);
	CHECK_INT_EQ(r.n_hosts, 2);
	CHECK_INT_EQ(r.rows, 8);
	CHECK_INT_EQ(r.num_shards, 4);
	char merged[2048], want[8192];
	snprintf(merged, sizeof(merged), "%s/merged.jsonl", j.dir);
	CHECK_STR_EQ(r.output, merged);
	size_t lc, lo;
	char *cat = jf_concat(&j, &lc), *got = jf_read(merged, &lo);
	CHECK_MEM_EQ(got, lo, cat, lc);
	snprintf(want, sizeof(want), "Shard owners:\n  node-a: 2 shard(s)\n  node-b: 2 shard(s)\n"
		 "Merged 4 shards and 8 rows into %s\n"
		 "PASS: 4 shards were completed by 2 node(s); merged 8 rows into %s\n", merged, merged);
	CHECK(out && strstr(out, want) != NULL);
	CHECK(out && !strncmp(out, "Job two: executor=ray ray_address=local total=4 pending=0 running=0 "
			      "stale=0 done=4 failed=0\n", 91));
	CHECK(out && strstr(out, "\n  part-00003-of-00004: done owner=node-b\n") != NULL);
	free(out);
	free(r.output);

	/* Three expected: exit 2 with the reference's message; an explicit output. */
	capture_begin();
	rc = es_verify_run(j.dir, NULL, 3, &r);
	out = capture_end();
	CHECK(rc < 0);
	CHECK_INT_EQ(r.exit_code, 2);
	CHECK_STR_EQ(es_last_error(), "Verification failed: expected at least 3 distinct hostnames, found 2.");
	CHECK(out && strstr(out, "Shard owners:\n") && !strstr(out, "PASS"));
	free(out);
	char other[2048];
	snprintf(other, sizeof(other), "%s/v/out.jsonl", T);
	capture_begin();
	rc = es_verify_run(j.dir, other, 1, &r);
	free(capture_end());
	CHECK_INT_EQ(rc, 0);
	CHECK_STR_EQ(r.output, other);
	free(r.output);
	free(got);
	free(cat);
}

static void test_incomplete_and_bad_records(void)
{
	int rows[] = { 1, 1 };
	struct jf j;
	struct es_verify_result r;
	jf_make(&j, T, "inc", 2, rows, NULL);
	jf_done(&j, 0, "node-a");
	capture_begin();
	int rc = es_verify_run(j.dir, NULL, 1, &r);
	free(capture_end());
	CHECK(rc < 0);
	CHECK_INT_EQ(r.exit_code, 1);
	/* The reference's words, then what to do. */
	CHECK(!strncmp(es_last_error(), "Verification stopped: not all shards are complete. 1 shard(s) not finished (pending 1, "
		       "running 0, stale 0): run the same 'eshard-mpi run' (or 'worker') command again",
		       strlen("Verification stopped: not all shards are complete. 1 shard(s) not finished (pending 1, "
			      "running 0, stale 0): run the same 'eshard-mpi run' (or 'worker') command again")));
	jf_failed(&j, 1, "node-a", "boom");
	capture_begin();
	rc = es_verify_run(j.dir, NULL, 1, &r);
	free(capture_end());
	CHECK_INT_EQ(r.exit_code, 2);

	char p[2048];
	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[1]);
	unlink(p);
	jf_done(&j, 1, "");
	capture_begin();
	rc = es_verify_run(j.dir, NULL, 1, &r);
	free(capture_end());
	CHECK(rc < 0);
	CHECK_INT_EQ(r.exit_code, 2);
	CHECK(strstr(es_last_error(), "Done record for part-00001-of-00002 has no hostname") != NULL);
	snprintf(p, sizeof(p), "%s/merged.jsonl", j.dir);
	CHECK(!jf_exists(p));

	snprintf(p, sizeof(p), "%s/missing", T);
	rc = es_verify_run(p, NULL, 1, &r);
	CHECK_INT_EQ(rc, ES_ENOENT);
	CHECK_INT_EQ(r.exit_code, 2);
}

static void test_output_in_job_folder(void)
{
	int rows[] = { 1, 2 };
	struct jf j;
	struct es_verify_result r;
	jf_make(&j, T, "inside", 2, rows, NULL);
	jf_done(&j, 0, "node-a");
	jf_done(&j, 1, "node-a");
	char p[2100], rec[2100];
	jf_path(&j, rec, sizeof(rec), "state/done/%s.json", j.id[1]);
	char *before = jf_read(rec, NULL);
	capture_begin();
	es_log_quiet_begin();
	int rc = es_verify_run(j.dir, rec, 1, &r);
	es_log_quiet_end();
	char *out = capture_end();
	CHECK_INT_EQ(rc, ES_EUSAGE);
	CHECK_INT_EQ(r.exit_code, 2);
	CHECK(strstr(es_last_error(), "is inside the job folder") != NULL);
	CHECK_STR_EQ(out, ""); /* refused before the status is printed */
	char *after = jf_read(rec, NULL);
	CHECK_STR_EQ(after, before);
	free(out);
	free(after);
	free(before);
	snprintf(p, sizeof(p), "%s/shards/../merged.jsonl", j.dir);
	capture_begin();
	rc = es_verify_run(j.dir, p, 1, &r);
	free(capture_end());
	CHECK_INT_EQ(rc, 0);
	snprintf(p, sizeof(p), "%s/merged.jsonl", j.dir);
	CHECK_STR_EQ(r.output, p);
	free(r.output);
}

/* Puts a result back after a delay: another node's result that this client's cache hid. */
struct restore {
	char from[2048], to[2048];
	double delay;
};

static void *restore_later(void *arg)
{
	struct restore *r = arg;
	es_sleep(r->delay);
	if (rename(r->from, r->to) != 0)
		perror("rename");
	return NULL;
}

/* Every shard done, a result not visible: verify waits for it (up to the settle time) and
 * passes when it shows; one that never shows fails after the wait, naming it; a problem that
 * no cache explains (the result is a folder) fails at once. */
static void test_results_settle(void)
{
	int rows[] = { 1, 2 };
	struct jf j;
	struct es_verify_result r;
	jf_make(&j, T, "settle", 2, rows, NULL);
	jf_done(&j, 0, "node-a");
	jf_done(&j, 1, "node-b");
	struct restore back;
	jf_path(&j, back.to, sizeof(back.to), "%s/processed.jsonl", j.attempt[1]);
	snprintf(back.from, sizeof(back.from), "%s/hidden.jsonl", T);
	CHECK_INT_EQ(rename(back.to, back.from), 0);
	back.delay = 1.2;
	pthread_t th;
	es_verify_set_settle_secs(30);
	double t0 = es_time_mono();
	CHECK_INT_EQ(pthread_create(&th, NULL, restore_later, &back), 0);
	capture_begin();
	int rc = es_verify_run(j.dir, NULL, 1, &r);
	free(capture_end());
	pthread_join(th, NULL);
	double took = es_time_mono() - t0;
	CHECK_INT_EQ(rc, 0);
	CHECK_INT_EQ(r.exit_code, 0);
	CHECK_INT_EQ(r.rows, 3);
	CHECK(took >= 1.0);
	free(r.output);

	/* Never shows: the wait ends, the error names the result. */
	char merged[2048];
	snprintf(merged, sizeof(merged), "%s/merged.jsonl", j.dir);
	unlink(merged);
	CHECK_INT_EQ(rename(back.to, back.from), 0);
	es_verify_set_settle_secs(1.5);
	t0 = es_time_mono();
	capture_begin();
	rc = es_verify_run(j.dir, NULL, 1, &r);
	free(capture_end());
	took = es_time_mono() - t0;
	CHECK(rc < 0);
	CHECK_INT_EQ(r.exit_code, 2);
	CHECK(took >= 1.4);
	char want[4096];
	snprintf(want, sizeof(want), "1 done record(s) cannot be merged, the first: Result of %s not found: %s", j.id[1], back.to);
	CHECK(strstr(es_last_error(), want) != NULL);
	CHECK(!jf_exists(merged));

	/* A folder in its place is no cache's doing: no wait. */
	CHECK_INT_EQ(mkdir(back.to, 0755), 0);
	es_verify_set_settle_secs(30);
	t0 = es_time_mono();
	capture_begin();
	rc = es_verify_run(j.dir, NULL, 1, &r);
	free(capture_end());
	took = es_time_mono() - t0;
	CHECK(rc < 0);
	CHECK(took < 5);
	CHECK(strstr(es_last_error(), "is not a regular file") != NULL);
	es_verify_set_settle_secs(60);
}

/* Opens of the done records during one verify of j (4 shards done by two hosts), with view or
 * without; the merged output is removed after. */
static int record_opens(struct jf *j, struct es_jobview *view)
{
	struct es_verify_result r;
	char merged[2048];
	snprintf(merged, sizeof(merged), "%s/merged.jsonl", j->dir);
	test_watched = "-of-00004.json"; /* a record, whole path or walked to (fs.h) */
	test_watched_opens = 0;
	capture_begin();
	int rc = es_verify_run_follow(j->dir, NULL, 2, NULL, 1, view, &r);
	free(capture_end());
	test_watched = NULL;
	CHECK_INT_EQ(rc, 0);
	CHECK_INT_EQ(r.exit_code, 0);
	CHECK_INT_EQ(r.rows, 8);
	CHECK_INT_EQ(r.n_hosts, 2);
	free(r.output);
	unlink(merged);
	return test_watched_opens;
}

/* Issue 29: run's rank 0 ends a job with its progress line's view (es_progress_stop_view):
 * verify takes the manifest and the status from it, reads no done record the view holds as
 * final (only merge looks each one up and reads it, to merge it), and reads again every shard
 * the view does not hold as final. Without a view verify reads each record once for its
 * status (the owners are the status's: before, it read every record a second time for them). */
static void test_kept_view(void)
{
	int rows[] = { 2, 1, 3, 2 };
	struct jf j;
	struct es_jobview v;
	jf_make(&j, T, "view", 4, rows, NULL);
	for (int i = 0; i < 3; i++)
		jf_done(&j, i, i % 2 ? "node-b" : "node-a");
	CHECK_INT_EQ(es_jobview_load(j.dir, 0, 0, &v), 0);
	CHECK_INT_EQ(v.st.counts.done, 3);
	/* The last shard is done after the view was read: verify reads it, and passes. */
	jf_done(&j, 3, "node-b");
	int with = record_opens(&j, &v);
	CHECK_INT_EQ(v.st.counts.done, 4);
	CHECK_STR_EQ(v.st.shards[3].owner, "node-b");
	int again = record_opens(&j, &v), without = record_opens(&j, NULL);
	if (!CHECK(with <= 2 * 4 + 2) || !CHECK(again <= 2 * 4) || !CHECK(without >= again + 4))
		fprintf(stderr, "  done record opens: %d with the view (one shard new), %d with it again, %d without\n", with,
			again, without);
	/* The view's summary still reads: a refresh after verify. */
	CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0);
	CHECK_INT_EQ(v.st.counts.done, 4);
	es_jobview_free(&v);

	/* A view that holds a shard as pending, which still is: verify stops, as without one. */
	struct jf k;
	jf_make(&k, T, "view-incomplete", 4, rows, NULL);
	for (int i = 0; i < 3; i++)
		jf_done(&k, i, "node-a");
	CHECK_INT_EQ(es_jobview_load(k.dir, 0, 0, &v), 0);
	struct es_verify_result r;
	capture_begin();
	int rc = es_verify_run_follow(k.dir, NULL, 1, NULL, 1, &v, &r);
	free(capture_end());
	CHECK(rc < 0);
	CHECK_INT_EQ(r.exit_code, 1);
	CHECK(strstr(es_last_error(), "Verification stopped: not all shards are complete.") != NULL);
	es_jobview_free(&v);
}

/* A temporary with a gone maker (this host, a pid that exited) named like an atomic write's of
 * attempt.json, in shard i's attempt folder; its path into out. */
static void dead_temp(const struct jf *j, int i, char *out, size_t n)
{
	char tok[33];
	test_gone_token(tok);
	snprintf(out, n, "%s/%s/.attempt.json.%s.tmp", j->dir, j->attempt[i], tok);
	jf_writes(out, "{");
}

/* Issue 29: at the end of run, merge's sweep lists only the attempt folders of the shards that
 * rank 0's view did not see clean (status.h attempts_clean): a shard with one attempt folder,
 * that of its record, whose attempt.json says done. A killed writer's temporary is removed
 * where the view could not rule one out: an attempt.json still "running" (its writer died after
 * publishing), a second folder. The merge command, without a view, sweeps every folder. */
static void test_sweep_by_view(void)
{
	int rows[] = { 1, 2, 3 };
	struct jf j;
	struct es_jobview v;
	jf_make(&j, T, "sweep", 3, rows, NULL);
	for (int i = 0; i < 3; i++)
		jf_done(&j, i, "node-a");
	char p[2048], t[3][2048];
	snprintf(p, sizeof(p), "%s/%s/attempt.json", j.dir, j.attempt[1]);
	char *a = jf_read(p, NULL);
	char *st = a ? strstr(a, "\"done\"") : NULL;
	if (!CHECK(st != NULL))
		return;
	memcpy(st, "\"lost\"", 6); /* not done: its writer's last write may not have happened */
	jf_writes(p, a);
	free(a);
	jf_path(&j, p, sizeof(p), "attempts/%s/0002-x", j.id[2]);
	CHECK_INT_EQ(mkdir(p, 0755), 0); /* a claim that died before its attempt.json */
	for (int i = 0; i < 3; i++)
		dead_temp(&j, i, t[i], sizeof(t[i]));
	CHECK_INT_EQ(es_jobview_load(j.dir, 0, 0, &v), 0);
	CHECK_INT_EQ(v.st.shards[0].attempts_clean, 1);
	CHECK_INT_EQ(v.st.shards[1].attempts_clean, 0);
	CHECK_INT_EQ(v.st.shards[2].attempts_clean, 0);
	char out[2048];
	snprintf(out, sizeof(out), "%s/sweep-out.jsonl", T);
	struct es_merge_follow *f = NULL;
	if (!CHECK_INT_EQ(es_merge_follow_start(j.dir, out, 0.05, &f), 0))
		return;
	struct es_verify_result r;
	capture_begin();
	int rc = es_verify_run_follow(j.dir, out, 1, f, 1, &v, &r);
	free(capture_end());
	CHECK_INT_EQ(rc, 0);
	CHECK_INT_EQ(r.rows, 6);
	free(r.output);
	CHECK(jf_exists(t[0])); /* passed by */
	CHECK(!jf_exists(t[1]));
	CHECK(!jf_exists(t[2]));
	es_jobview_free(&v);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_verify_run(j.dir, out, 1, &r), 0);
	es_log_quiet_end();
	free(r.output);
	CHECK(!jf_exists(t[0]));
}

int main(void)
{
	T = test_tmpdir();
	test_two_owners();
	test_incomplete_and_bad_records();
	test_output_in_job_folder();
	test_results_settle();
	test_kept_view();
	test_sweep_by_view();
	return test_done();
}
