/* jobview's rate and ETA rule (issue 10, item 3): work time is the union of the attempts'
 * spans, so the downtime between submissions is not counted; the window rate looks at the
 * recent spans only; no ETA for a terminal job or one where nothing runs. A view kept and
 * refreshed (issue 29) equals a fresh load after each change of a job's life, and its status
 * equals es_status_collect's though it reads each attempt.json once. */
#include "eshard/clock.h"
#include "eshard/jobview.h"
#include "eshard/progress.h"
#include "testlib.h"
#include "jobfix.h"

#include <fcntl.h>
#include <math.h>
#include <unistd.h>

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

/* Everything a reader of the view shows: status as JSON and as text with every shard, the
 * progress line, the end summary, the metrics, and each attempt and count of the view. The
 * ages of locks are left out: they are taken from the wall clock when a lock is read. */
static void view_text(struct es_jobview *v, struct es_buf *out)
{
	struct es_buf t = ES_BUF_INIT;
	es_buf_reset(out);
	CHECK_INT_EQ(es_status_format_json(&v->m, &v->st, &t), 0);
	jf_lines_without(out, t.data, "_age_secs");
	CHECK_INT_EQ(es_status_format_text(&v->m, &v->st, 1, out), 0);
	CHECK_INT_EQ(es_progress_line(v, 60, out), 0);
	CHECK_INT_EQ(es_progress_summary(v, out), 0);
	CHECK_INT_EQ(es_jobview_format_prometheus(v, out), 0);
	for (size_t i = 0; i < v->n_a; i++) {
		const struct es_jv_attempt *a = &v->a[i];
		es_buf_printf(out, "attempt %s %d %s %s %s %d %.6f %.6f %.6f %d %.3f %lld %s %d %zu %s\n", a->shard, a->number,
			      a->token, a->host, es_jv_status_names[a->status], a->end_kind, a->claim, a->start, a->end,
			      a->timed_by_events, a->proc_secs, (long long)a->rows_out, a->error ? a->error : "-",
			      a->backup, a->worker, a->dir);
	}
	es_buf_printf(out, "events %zu files %zu bad lines %zu unreadable %zu bad times %zu t %.6f %.6f median %.6f "
		      "workers %zu hosts %zu\n", v->n_ev, v->n_event_files, v->bad_event_lines, v->unreadable_attempts,
		      v->bad_times, v->t0, v->t1, v->median, v->n_w, v->n_h);
	es_buf_free(&t);
}

/* The view reads each attempt.json once and gives its status the claim times of the done
 * shards (status.h claims_by_caller): the status is the one es_status_collect makes, which
 * reads them itself. */
static void check_claims(const struct es_jobview *v, const char *step)
{
	struct es_status st;
	if (CHECK_INT_EQ(es_status_collect(&v->m, 0, &st), 0) && CHECK_INT_EQ(st.n_shards, v->st.n_shards)) {
		int same = near(st.rate_rows_per_sec, v->st.rate_rows_per_sec) && near(st.eta_secs, v->st.eta_secs);
		for (size_t i = 0; i < st.n_shards; i++)
			same &= near(st.shards[i].claimed_at_epoch, v->st.shards[i].claimed_at_epoch);
		if (!CHECK(same))
			fprintf(stderr, "  claims differ after %s: rate %.6f vs %.6f\n", step, st.rate_rows_per_sec,
				v->st.rate_rows_per_sec);
	}
	es_status_free(&st);
}

/* The kept view refreshed and a fresh load at the same now show the same. */
static void check_same(struct es_jobview *kept, const char *dir, double now, const char *step)
{
	struct es_jobview fresh;
	struct es_buf a = ES_BUF_INIT, b = ES_BUF_INIT;
	CHECK_INT_EQ(es_jobview_refresh(kept, now), 0);
	check_claims(kept, step);
	if (CHECK_INT_EQ(es_jobview_load(dir, now, 0, &fresh), 0)) {
		view_text(kept, &a);
		view_text(&fresh, &b);
		if (!CHECK_STR_EQ(a.data, b.data))
			fprintf(stderr, "  after %s\n", step);
	}
	es_jobview_free(&fresh);
	es_buf_free(&a);
	es_buf_free(&b);
}

/* Append lines to state/events/<name>.jsonl, as a worker does. */
static void append_events(struct jf *j, const char *name, const char *text)
{
	char p[2048];
	snprintf(p, sizeof(p), "%s/state/events", j->dir);
	jf_mkdirs(p);
	snprintf(p, sizeof(p), "%s/state/events/%s.jsonl", j->dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
	CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	if (fd >= 0)
		close(fd);
}

/* Shard i's event name at time t (of its last attempt), appended to log. */
static void event_at(struct jf *j, const char *log, int i, const char *name, double t, const char *extra)
{
	struct es_buf b = ES_BUF_INIT;
	char when[40];
	snprintf(when, sizeof(when), "%.6f", t);
	jf_event(&b, j, i, name, when, extra);
	append_events(j, log, b.data);
	es_buf_free(&b);
}

/* A running attempt of shard i (number n on host) claimed at t, its lock held with its token. */
static void claim(struct jf *j, const char *log, int i, int n, const char *host, double t)
{
	char p[2048], text[1024];
	jf_attempt(j, i, n, host, "running", t);
	snprintf(text, sizeof(text), "{\"attempt_dir\": \"%s\", \"attempt_number\": %d, \"claimed_at_epoch\": %.6f, "
		 "\"heartbeat\": 1, \"lease_secs\": 120.0, \"hostname\": \"%s\", \"pid\": 7, \"shard_id\": \"%s\", "
		 "\"token\": \"%s\"}\n", j->attempt[i], n, t, host, j->id[i], jf_token(j, i));
	jf_path(j, p, sizeof(p), "state/locks/%s.lock", j->id[i]);
	jf_writes(p, text);
	event_at(j, log, i, "claim", t, "");
	event_at(j, log, i, "start", t + 1, "");
}

/* Rewrite the attempt.json of shard i's last attempt with another status. */
static void attempt_status(struct jf *j, int i, const char *status)
{
	char p[2048];
	size_t n;
	snprintf(p, sizeof(p), "%s/%s/attempt.json", j->dir, j->attempt[i]);
	char *text = jf_read(p, &n), *at = text ? strstr(text, "\"status\": \"running\"") : NULL;
	if (!CHECK(at != NULL)) {
		free(text);
		return;
	}
	struct es_buf b = ES_BUF_INIT;
	es_buf_printf(&b, "%.*s\"status\": \"%s\"%s", (int)(at - text), text, status, at + strlen("\"status\": \"running\""));
	jf_write(p, b.data, b.len);
	es_buf_free(&b);
	free(text);
}

/* Issue 29: rank 0's progress line and status --watch keep one view and refresh it. Through a
 * job's life (claims, a done shard, a failed one, its retry, a stale takeover, the ends) the
 * refreshed view shows what a fresh load shows. */
static void test_refresh(const char *T)
{
	int rows[] = { 3, 4, 5, 6 };
	struct jf j;
	struct es_jobview v;
	char p[2048], q[2048];
	double now = es_time_epoch();
	jf_make(&j, T, "life", 4, rows, NULL);
	if (!CHECK_INT_EQ(es_jobview_init(j.dir, 0, &v), 0))
		return;
	v.st.threads = 3; /* the kept view reads on threads (par.h), a fresh load on one */
	v.list_whole = 1; /* a retry and the last end write no event: listed at once (see below) */
	check_same(&v, j.dir, now, "nothing");
	claim(&j, "node-a.7.aaaaaaaa", 0, 1, "node-a", now - 50);
	claim(&j, "node-b.8.bbbbbbbb", 1, 1, "node-b", now - 49);
	check_same(&v, j.dir, now, "two claims");
	attempt_status(&j, 0, "superseded"); /* its backup won below */
	jf_done_ex(&j, 0, "node-a", 0, 0, 0, now - 45, now - 30);
	jf_fence(&j, 0, "done");
	event_at(&j, "node-a.7.aaaaaaaa", 0, "done", now - 30, ", \"rows\": 3, \"duration\": 14");
	jf_failed(&j, 1, "node-b", "exit code 2");
	jf_fence(&j, 1, "failed");
	event_at(&j, "node-b.8.bbbbbbbb", 1, "failed", now - 29, ", \"detail\": \"exit code 2\"");
	check_same(&v, j.dir, now, "a done and a failed shard");
	check_same(&v, j.dir, now, "nothing new");
	/* retry: the failed record and the attempts go to state/history, the fence goes. */
	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[1]);
	snprintf(q, sizeof(q), "%s/state/history/failed", j.dir);
	jf_mkdirs(q);
	snprintf(q, sizeof(q), "%s/state/history/failed/%s.1.x.json", j.dir, j.id[1]);
	CHECK_INT_EQ(rename(p, q), 0);
	jf_path(&j, p, sizeof(p), "attempts/%s", j.id[1]);
	snprintf(q, sizeof(q), "%s/state/history/attempts", j.dir);
	jf_mkdirs(q);
	snprintf(q, sizeof(q), "%s/state/history/attempts/%s.1.x", j.dir, j.id[1]);
	CHECK_INT_EQ(rename(p, q), 0);
	jf_path(&j, p, sizeof(p), "state/locks/%s.lock", j.id[1]);
	CHECK_INT_EQ(unlink(p), 0);
	check_same(&v, j.dir, now, "a retry");
	claim(&j, "node-b.8.bbbbbbbb", 1, 1, "node-b", now - 20);
	claim(&j, "node-a.7.aaaaaaaa", 2, 1, "node-a", now - 19);
	check_same(&v, j.dir, now, "claims after the retry");
	/* node-b's worker dies; node-c takes its shard over. */
	attempt_status(&j, 1, "stale");
	event_at(&j, "node-c.9.cccccccc", 1, "stale_takeover", now - 10, "");
	claim(&j, "node-c.9.cccccccc", 1, 2, "node-c", now - 10);
	check_same(&v, j.dir, now, "a takeover");
	attempt_status(&j, 2, "done");
	jf_done_ex(&j, 2, "node-a", 0, 0, 0, now - 19, now - 5);
	jf_fence(&j, 2, "done");
	event_at(&j, "node-a.7.aaaaaaaa", 2, "done", now - 5, ", \"rows\": 5");
	attempt_status(&j, 1, "done");
	jf_done_ex(&j, 1, "node-c", 0, 0, 0, now - 10, now - 2);
	jf_fence(&j, 1, "done");
	check_same(&v, j.dir, now, "the ends");
	check_same(&v, j.dir, now + 30, "a later refresh");
	es_jobview_free(&v);
}

/* Issue 29: init lists the job while it reads the manifest, and a refresh right after uses
 * those listings: a record made in between is not seen (nor opened) yet. A refresh more than a
 * second after init lists again and sees it. */
static void test_init_listings(const char *T)
{
	int rows[] = { 3, 4 };
	struct jf j;
	struct es_jobview v;
	jf_make(&j, T, "pre", 2, rows, NULL);
	for (int late = 0; late < 2; late++) {
		if (!CHECK_INT_EQ(es_jobview_init(j.dir, 0, &v), 0))
			return;
		jf_done(&j, late, "node-a");
		jf_fence(&j, late, "done");
		if (late)
			usleep(1100 * 1000);
		test_watched = "-of-00002.json"; /* the done records, opened relative to a kept folder */
		test_watched_opens = 0;
		CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0);
		int opens = test_watched_opens;
		test_watched = NULL;
		/* Early: neither record is listed. Late: both are, and read. */
		CHECK_INT_EQ((int)v.st.counts.done, late ? 2 : 0);
		CHECK_INT_EQ(opens, late ? 2 : 0);
		es_jobview_free(&v);
	}
}

/* Issue 29: a kept view lists a folder again only when it changed: once a listing two seconds
 * after the folder's stamp was first seen confirmed it (fs.h es_fs_list_dir_if_changed), a
 * refresh of a job where nothing changed lists none of the four folders; a record made after
 * is listed and read at the next refresh, and the view equals a fresh load. */
static void test_unchanged_not_listed(const char *T)
{
	int rows[] = { 3, 4, 5 };
	struct jf j;
	struct es_jobview v;
	jf_make(&j, T, "quiet", 3, rows, NULL);
	jf_done(&j, 0, "node-a");
	jf_fence(&j, 0, "done");
	if (!CHECK_INT_EQ(es_jobview_init(j.dir, 0, &v), 0))
		return;
	CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0); /* init's listings */
	CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0); /* the stamps first seen */
	usleep(2100 * 1000);
	CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0); /* confirmed */
	static const char *const dirs[] = { "/state/done", "/state/failed", "/state/locks", "/attempts" };
	for (int k = 0; k < 4; k++) {
		test_watched = dirs[k];
		test_watched_lists = 0;
		CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0);
		if (!CHECK_INT_EQ(test_watched_lists, 0))
			fprintf(stderr, "  %s listed again unchanged\n", dirs[k]);
	}
	CHECK_INT_EQ((int)v.st.counts.done, 1);
	jf_done(&j, 1, "node-b");
	jf_fence(&j, 1, "done");
	test_watched = "/state/done";
	test_watched_lists = 0;
	CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0);
	CHECK(test_watched_lists > 0);
	test_watched = NULL;
	CHECK_INT_EQ((int)v.st.counts.done, 2);
	check_same(&v, j.dir, 0, "a record made after the stamps were confirmed");
	es_jobview_free(&v);
}

/* getdents64 calls on the four folders a view lists (jobview.c list_job) during one refresh of
 * v: not the events folder, nor a shard's attempt folder (read for what changed). */
static int refresh_listings(struct es_jobview *v)
{
	test_watched = "/state/done$|/state/failed$|/state/locks$|/attempts$";
	test_watched_lists = 0;
	CHECK_INT_EQ(es_jobview_refresh(v, 0), 0);
	test_watched = NULL;
	return test_watched_lists;
}

/* Move shard i's failed record and attempts to state/history and remove its fence, as retry
 * does (it writes no event). */
static void retry_shard(struct jf *j, int i)
{
	char p[2048], q[2048];
	jf_path(j, p, sizeof(p), "state/failed/%s.json", j->id[i]);
	snprintf(q, sizeof(q), "%s/state/history/failed", j->dir);
	jf_mkdirs(q);
	snprintf(q, sizeof(q), "%s/state/history/failed/%s.1.x.json", j->dir, j->id[i]);
	CHECK_INT_EQ(rename(p, q), 0);
	jf_path(j, p, sizeof(p), "attempts/%s", j->id[i]);
	snprintf(q, sizeof(q), "%s/state/history/attempts", j->dir);
	jf_mkdirs(q);
	snprintf(q, sizeof(q), "%s/state/history/attempts/%s.1.x", j->dir, j->id[i]);
	CHECK_INT_EQ(rename(p, q), 0);
	jf_path(j, p, sizeof(p), "state/locks/%s.lock", j->id[i]);
	CHECK_INT_EQ(unlink(p), 0);
}

/* Issue 29: a kept view does not list a folder whose changes new events name: it reads the
 * shards they name by name, and shows them as a fresh load does. What changed without an event
 * while events come (a record published by a worker that writes none) shows once the folder
 * is listed: at once for a reader that sets list_whole (the job's end), else at the next
 * listing (a minute after the last). A shard a new event names is read again even when the
 * view holds it as final: a retried shard claimed again is running, not failed. */
static void test_events_name_changes(const char *T)
{
	int rows[] = { 3, 4, 5, 6 };
	struct jf j;
	struct es_jobview v;
	double now = es_time_epoch();
	jf_make(&j, T, "life2", 4, rows, NULL);
	append_events(&j, "node-a.7.aaaaaaaa", "");
	if (!CHECK_INT_EQ(es_jobview_init(j.dir, 0, &v), 0))
		return;
	usleep(1100 * 1000); /* init's listings too old for the first refresh: it lists */
	CHECK(refresh_listings(&v) > 0);
	claim(&j, "node-a.7.aaaaaaaa", 0, 1, "node-a", now - 20);
	CHECK_INT_EQ(refresh_listings(&v), 0);
	CHECK_INT_EQ((int)v.st.counts.running, 1);
	attempt_status(&j, 0, "done");
	jf_done_ex(&j, 0, "node-a", 0, 0, 0, now - 20, now - 5);
	jf_fence(&j, 0, "done");
	event_at(&j, "node-a.7.aaaaaaaa", 0, "done", now - 5, ", \"rows\": 3");
	CHECK_INT_EQ(refresh_listings(&v), 0);
	CHECK_INT_EQ((int)v.st.counts.done, 1);
	check_same(&v, j.dir, now, "a claim and a done named by events");
	/* Shard 1 done by a worker that writes no events, shard 2 claimed with its event. */
	jf_done(&j, 1, "node-b");
	jf_fence(&j, 1, "done");
	claim(&j, "node-a.7.aaaaaaaa", 2, 1, "node-a", now - 4);
	CHECK_INT_EQ(refresh_listings(&v), 0);
	CHECK_INT_EQ((int)v.st.counts.done, 1);
	CHECK_INT_EQ((int)v.st.counts.running, 1);
	v.list_whole = 1;
	CHECK(refresh_listings(&v) > 0);
	v.list_whole = 0;
	CHECK_INT_EQ((int)v.st.counts.done, 2);
	check_same(&v, j.dir, now, "a record no event named, listed");
	/* Shard 2 fails; a retry requeues it and a worker claims it again. */
	attempt_status(&j, 2, "failed");
	jf_failed(&j, 2, "node-a", "exit code 2");
	jf_fence(&j, 2, "failed");
	event_at(&j, "node-a.7.aaaaaaaa", 2, "failed", now - 3, ", \"detail\": \"exit code 2\"");
	CHECK_INT_EQ(refresh_listings(&v), 0);
	CHECK_INT_EQ((int)v.st.counts.failed, 1);
	retry_shard(&j, 2);
	claim(&j, "node-a.7.aaaaaaaa", 2, 2, "node-a", now - 2);
	CHECK_INT_EQ(refresh_listings(&v), 0);
	CHECK_INT_EQ((int)v.st.counts.failed, 0);
	CHECK_INT_EQ((int)v.st.counts.running, 1);
	check_same(&v, j.dir, now, "a retried shard claimed again");
	/* Shard 3 done without an event, in a refresh that takes none: events came within the
	 * minute, so the listing still waits; list_whole lists. */
	jf_done(&j, 3, "node-b");
	jf_fence(&j, 3, "done");
	CHECK_INT_EQ(refresh_listings(&v), 0);
	CHECK_INT_EQ((int)v.st.counts.done, 2);
	v.list_whole = 1;
	CHECK(refresh_listings(&v) > 0);
	CHECK_INT_EQ((int)v.st.counts.done, 3);
	check_same(&v, j.dir, now, "a record listed at last");
	es_jobview_free(&v);
}

/* Issue 29: the progress thread hands its view over when stopped (es_progress_stop_view), so
 * that rank 0 ends the job with it instead of reading every shard again; a thread stopped
 * before its first refresh, or none, hands nothing. */
static void test_progress_hands_view(const char *T)
{
	int rows[] = { 1, 2, 3 };
	struct jf j;
	struct es_jobview v;
	struct es_progress *p = NULL;
	jf_make(&j, T, "handover", 3, rows, NULL);
	jf_done(&j, 0, "node-a");
	CHECK_INT_EQ(es_progress_stop_view(NULL, &v), 0);
	if (!CHECK_INT_EQ(es_progress_start(j.dir, 3600, 0, &p), 0))
		return;
	CHECK_INT_EQ(es_progress_stop_view(p, &v), 0); /* stopped before its first period */
	if (!CHECK_INT_EQ(es_progress_start(j.dir, 0.02, 0, &p), 0))
		return;
	usleep(300 * 1000); /* several periods, each a refresh and a line */
	if (!CHECK_INT_EQ(es_progress_stop_view(p, &v), 1))
		return;
	CHECK_INT_EQ(v.st.counts.total, 3);
	CHECK_INT_EQ(v.st.counts.done, 1);
	/* The view goes on as the caller's: a refresh reads what changed. */
	jf_done(&j, 1, "node-b");
	CHECK_INT_EQ(es_jobview_refresh(&v, 0), 0);
	CHECK_INT_EQ(v.st.counts.done, 2);
	es_jobview_free(&v);
}

/* How many attempts a view holds for shard i. */
static int attempts_of(const struct es_jobview *v, int i)
{
	int n = 0;
	for (size_t k = 0; k < v->n_a; k++)
		n += v->a[k].shard_index == i;
	return n;
}

/* Issue 29: a done shard whose folder holds one folder, the attempt its record names, is read
 * without a listing of that folder (jobview.c read_published_only: its link count is 3), and
 * shows as a listing shows it, attempts_clean included (merge's sweep passes it by). A folder
 * with two attempts, or with one that is not the record's, is listed; a stray file beside the
 * one attempt changes nothing (no attempt is in a file, and merge sweeps only folders). */
static void test_published_by_name(const char *T)
{
	int rows[] = { 3, 4, 5, 6 };
	struct jf j;
	struct es_jobview v;
	char p[2048];
	jf_make(&j, T, "byname", 4, rows, NULL);
	jf_done(&j, 0, "node-a");
	jf_attempt(&j, 1, 1, "node-a", "failed", es_time_epoch() - 20);
	jf_done(&j, 1, "node-b");
	jf_done(&j, 2, "node-a");
	jf_path(&j, p, sizeof(p), "attempts/%s/stray.tmp", j.id[2]);
	jf_writes(p, "x");
	jf_done(&j, 3, "node-a");
	jf_path(&j, p, sizeof(p), "attempts/%s/0002-other", j.id[3]); /* not the record's */
	jf_mkdirs(p);
	jf_path(&j, p, sizeof(p), "%s/attempt.json", j.attempt[3]);
	CHECK_INT_EQ(unlink(p), 0);
	struct {
		const char *watch;
		int lists;
	} want[4];
	char w[4][128];
	for (int i = 0; i < 4; i++)
		snprintf(w[i], sizeof(w[i]), "/attempts/%s$", j.id[i]);
	want[0] = (typeof(want[0])){ w[0], 0 };
	want[1] = (typeof(want[0])){ w[1], 1 };
	want[2] = (typeof(want[0])){ w[2], 0 };
	want[3] = (typeof(want[0])){ w[3], 1 };
	for (int i = 0; i < 4; i++) {
		test_watched = want[i].watch;
		test_watched_lists = 0;
		if (!CHECK_INT_EQ(es_jobview_load(j.dir, 0, 0, &v), 0))
			return;
		test_watched = NULL;
		if (!CHECK_INT_EQ(test_watched_lists > 0, want[i].lists))
			fprintf(stderr, "  shard %d: its folder listed %d time(s)\n", i, test_watched_lists);
		if (i < 3)
			CHECK_INT_EQ((int)v.st.shards[i].state, ES_SHARD_DONE);
		es_jobview_free(&v);
	}
	CHECK_INT_EQ(es_jobview_load(j.dir, 0, 0, &v), 0);
	CHECK_INT_EQ(attempts_of(&v, 0), 1);
	CHECK_INT_EQ(attempts_of(&v, 1), 2);
	CHECK_INT_EQ(attempts_of(&v, 2), 1);
	CHECK_INT_EQ(attempts_of(&v, 3), 0); /* neither folder holds an attempt.json */
	CHECK_INT_EQ(v.st.shards[0].attempts_clean, 1);
	CHECK_INT_EQ(v.st.shards[1].attempts_clean, 0);
	CHECK_INT_EQ(v.st.shards[2].attempts_clean, 1);
	CHECK_INT_EQ(v.st.shards[3].attempts_clean, 0);
	CHECK(v.st.shards[0].claimed_at_epoch > 0);
	check_claims(&v, "attempts read by name");
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
	test_refresh(test_tmpdir());
	test_progress_hands_view(test_tmpdir());
	test_init_listings(test_tmpdir());
	test_unchanged_not_listed(test_tmpdir());
	test_events_name_changes(test_tmpdir());
	test_published_by_name(test_tmpdir());
	return test_done();
}
