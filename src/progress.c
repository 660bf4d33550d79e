#include "eshard/progress.h"
#include "eshard/clock.h"
#include "eshard/log.h"
#include "eshard/number.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fmt_secs(double secs, char *out, size_t n)
{
	/* Saturated: an ETA of rows left over a tiny rate can pass any integer. */
	long long t = (long long)es_i64_of_double(round(secs > 0 ? secs : 0));
	if (t >= 3600)
		snprintf(out, n, "%lldh%02lldm%02llds", t / 3600, t / 60 % 60, t % 60);
	else if (t >= 60)
		snprintf(out, n, "%lldm%02llds", t / 60, t % 60);
	else if (secs < 10)
		snprintf(out, n, "%.1fs", secs > 0 ? secs : 0);
	else
		snprintf(out, n, "%llds", t);
}

static int add_rate(struct es_buf *out, double v, const char *unit)
{
	if (v < 0)
		return es_buf_printf(out, ", - %s", unit);
	return es_buf_printf(out, v < 10 ? ", %.2f %s" : ", %.1f %s", v, unit);
}

int es_progress_line(const struct es_jobview *v, double window, struct es_buf *out)
{
	const struct es_status *st = &v->st;
	const struct es_status_counts *c = &st->counts;
	struct es_rate r;
	int rc = es_jobview_rate(v, window, &r);
	if (rc)
		return rc;
	size_t retries = 0;
	const struct es_jv_attempt *slow = NULL;
	for (size_t i = 0; i < v->n_a; i++) {
		const struct es_jv_attempt *a = &v->a[i];
		retries += a->number > 1;
		if (a->end_kind == ES_JV_END_LIVE && a->status == ES_JV_RUNNING && (!slow || a->claim < slow->claim))
			slow = a;
	}
	rc = es_buf_printf(out, "Progress: %lld/%lld shards done, rows %lld/%lld (%lld kept)", (long long)c->done,
			   (long long)c->total, (long long)st->rows_done, (long long)st->rows_total,
			   (long long)st->result_rows_done);
	rc |= add_rate(out, r.window_rows_per_sec, "rows/s");
	rc |= add_rate(out, r.window_bytes_per_sec >= 0 ? r.window_bytes_per_sec / 1e6 : -1, "MB/s");
	char d[48];
	if (r.eta_secs >= 0) {
		fmt_secs(r.eta_secs, d, sizeof(d));
		rc |= es_buf_printf(out, ", ETA %s", d);
	} else {
		rc |= es_buf_adds(out, st->complete ? ", complete" : st->terminal ? ", finished with failures" : ", ETA -");
	}
	rc |= es_buf_printf(out, ", running %lld, stale %lld, failed %lld, retries %zu", (long long)c->running,
			    (long long)c->stale, (long long)c->failed, retries);
	if (slow) {
		fmt_secs(v->now - slow->claim, d, sizeof(d));
		rc |= es_buf_printf(out, ", slowest %s on %s %s", slow->shard, slow->host, d);
	}
	return rc ? es_error(ES_ENOMEM, "out of memory writing the progress of %s", v->m.job_dir) : 0;
}

static int dur_desc(const void *x, const void *y)
{
	double a = es_jv_duration(*(const struct es_jv_attempt *const *)x);
	double b = es_jv_duration(*(const struct es_jv_attempt *const *)y);
	return (a < b) - (a > b);
}

static int summary_slowest(const struct es_jobview *v, struct es_buf *out)
{
	const struct es_jv_attempt **d = malloc((v->n_a ? v->n_a : 1) * sizeof(*d));
	size_t n = 0;
	if (!d)
		return ES_ENOMEM;
	for (size_t i = 0; i < v->n_a; i++)
		if (v->a[i].status == ES_JV_DONE && es_jv_duration(&v->a[i]) >= 0)
			d[n++] = &v->a[i];
	qsort(d, n, sizeof(*d), dur_desc);
	int rc = 0;
	if (n) {
		char med[48];
		fmt_secs(v->median, med, sizeof(med));
		rc |= es_buf_printf(out, "Slowest shards (median %s):\n", med);
	}
	for (size_t i = 0; i < n && i < 5; i++) {
		char t[48];
		fmt_secs(es_jv_duration(d[i]), t, sizeof(t));
		rc |= es_buf_printf(out, "  %s on %s %s, %lld rows\n", d[i]->shard, d[i]->host, t, (long long)d[i]->rows_in);
	}
	free(d);
	return rc;
}

int es_progress_summary(const struct es_jobview *v, struct es_buf *out)
{
	const struct es_status *st = &v->st;
	struct es_rate r;
	int rc = es_jobview_rate(v, 60, &r);
	if (rc)
		return rc;
	char wall[48], work[48];
	double wall_secs = v->t1 > v->t0 ? v->t1 - v->t0 : 0;
	fmt_secs(wall_secs, wall, sizeof(wall));
	fmt_secs(r.work_secs, work, sizeof(work));
	rc = es_buf_printf(out, "Summary: %lld/%lld shards done (%lld failed), rows in %lld, rows out %lld, wall time %s, "
			   "work time %s, %zu attempt(s)\n", (long long)st->counts.done, (long long)st->counts.total,
			   (long long)st->counts.failed, (long long)st->rows_done, (long long)st->result_rows_done, wall, work,
			   v->n_a);
	int w = 4;
	for (size_t i = 0; i < v->n_h; i++)
		if ((int)strlen(v->h[i].host) > w)
			w = (int)strlen(v->h[i].host);
	if (v->n_h)
		rc |= es_buf_printf(out, "  %-*s %7s %7s %8s %9s %6s\n", w, "host", "workers", "shards", "attempts", "rows/s",
				    "busy%");
	for (size_t i = 0; i < v->n_h; i++) {
		const struct es_jv_host *h = &v->h[i];
		char rate[32], busy[32];
		if (h->busy_done > 0)
			snprintf(rate, sizeof(rate), "%.1f", (double)h->rows_in / h->busy_done);
		else
			snprintf(rate, sizeof(rate), "-");
		if (wall_secs > 0)
			snprintf(busy, sizeof(busy), "%.0f", 100.0 * h->busy / (wall_secs * (double)h->n_workers));
		else
			snprintf(busy, sizeof(busy), "-");
		rc |= es_buf_printf(out, "  %-*s %7zu %7lld %8lld %9s %6s\n", w, h->host, h->n_workers, (long long)h->done,
				    (long long)h->attempts, rate, busy);
	}
	rc |= summary_slowest(v, out);
	if (!rc)
		rc = es_status_format_problems(st, 20, out);
	return rc ? es_error(ES_ENOMEM, "out of memory writing the summary of %s", v->m.job_dir) : 0;
}

/* ---------------- the thread ---------------- */

struct es_progress {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
	char *job_dir;
	double every;
	int tty;
	/* The thread's view, kept for es_progress_stop_view: written by the thread only until it
	 * is joined. */
	struct es_jobview v;
	int have;
};

/* Wait secs or until stopped; 1 when stopped. */
static int nap(struct es_progress *p, double secs)
{
	struct timespec ts;
	if (secs > ES_SLEEP_MAX_SECS)
		secs = ES_SLEEP_MAX_SECS; /* --progress-secs up to INT64_MAX: end must fit a time_t */
	clock_gettime(CLOCK_REALTIME, &ts);
	double end = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + secs;
	ts.tv_sec = (time_t)end;
	ts.tv_nsec = (long)((end - floor(end)) * 1e9);
	pthread_mutex_lock(&p->mu);
	while (!p->stop && pthread_cond_timedwait(&p->cv, &p->mu, &ts) == 0)
		;
	int stop = p->stop;
	pthread_mutex_unlock(&p->mu);
	return stop;
}

static void *progress_main(void *arg)
{
	struct es_progress *p = arg;
	struct es_buf line = ES_BUF_INIT;
	/* On a terminal the line is redrawn, at most once a second; in a log, one every period. */
	double period = p->tty ? 1 : p->every;
	/* One view for the whole run, refreshed each period: it reads what changed, not every shard
	 * again (issue 29; jobview.h es_jobview_refresh). */
	es_log_quiet_begin();
	while (!nap(p, period)) {
		es_buf_reset(&line);
		int rc = p->have ? 0 : es_jobview_init(p->job_dir, 0, &p->v);
		p->have = 1;
		if (!rc)
			rc = es_jobview_refresh(&p->v, 0);
		if (!rc)
			rc = es_progress_line(&p->v, 60, &line);
		if (rc) {
			es_jobview_free(&p->v); /* a folder seen mid-change: the next period starts again */
			p->have = 0;
			continue;
		}
		if (p->tty)
			es_say_sticky(line.data);
		else
			es_say("%s", line.data);
	}
	es_log_quiet_end();
	es_buf_free(&line);
	return NULL;
}

int es_progress_start(const char *job_dir, double every_secs, int tty, struct es_progress **out)
{
	*out = NULL;
	if (every_secs <= 0)
		return 0;
	struct es_progress *p = calloc(1, sizeof(*p));
	if (!p || !(p->job_dir = strdup(job_dir))) {
		free(p);
		return es_error(ES_ENOMEM, "out of memory starting the progress line");
	}
	p->every = every_secs;
	p->tty = tty;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	/* The thread starts with every signal blocked, so SIGTERM and SIGINT reach the main thread,
	 * whose waits they must interrupt. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int err = pthread_create(&p->th, NULL, progress_main, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		free(p->job_dir);
		free(p);
		return es_error(ES_EIO, "cannot start the progress thread for %s", job_dir);
	}
	*out = p;
	return 0;
}

int es_progress_stop_view(struct es_progress *p, struct es_jobview *out)
{
	if (!p)
		return 0;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->th, NULL);
	if (p->tty)
		es_say_sticky(NULL);
	int kept = p->have && out;
	if (kept)
		*out = p->v;
	else if (p->have)
		es_jobview_free(&p->v);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->job_dir);
	free(p);
	return kept;
}

void es_progress_stop(struct es_progress *p)
{
	es_progress_stop_view(p, NULL);
}
