#include "eshard/report.h"
#include "eshard/claim.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/status.h"
#include "eshard/util.h"
#include "json.h"
#include "utf8.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------- the data ---------------- */

enum { ST_DONE, ST_FAILED, ST_SUPERSEDED, ST_STALE, ST_LOST, ST_PREEMPTED, ST_RUNNING, ST_BACKUP_FAILED,
       ST_NOT_STARTED, ST_N };
static const char *const status_names[ST_N] = { "done", "failed", "superseded", "stale", "lost", "preempted",
						"running", "backup_failed", "not_started" };
static const char *const status_colors[ST_N] = { "#2e9e44", "#d62728", "#a0a0a0", "#f0a020", "#8c564b",
						 "#9467bd", "#1f77b4", "#e377c2", "#7f7f7f" };

/* How an attempt's end is known: recorded (event or attempt.json), live (its lock is held:
 * drawn to now), or unknown (drawn to the last time the job shows). */
enum { END_RECORDED, END_LIVE, END_UNKNOWN };

struct rattempt {
	char *shard;
	long shard_index;          /* in the manifest, -1 when not there */
	int number;
	char token[33];
	char *host;
	int64_t pid;
	int status;
	char *raw_status;          /* what attempt.json says, when it is not one of status_names */
	double claim, start, end;  /* epoch seconds, < 0 when unknown */
	double finished_at, stale_at; /* what attempt.json says of the end, < 0 when absent */
	int end_kind;
	double proc_secs;          /* the processor's own run time (duration_secs), < 0 unknown */
	int64_t rows_in, rows_out; /* < 0 unknown */
	int has_rc;
	int64_t rc;
	char *error;
	char *dir;                 /* absolute attempt folder */
	int timed_by_events;
	int backup;                /* a backup attempt (attempt.json "backup": true) */
	size_t worker;             /* index into report.w */
};

struct revent {
	char token[33];
	char name[24];
	double time;
	int64_t rows;
	double duration;
	char *detail;
};

struct rworker {
	const char *host;          /* points at an attempt's host */
	int64_t pid;
	double first_claim;
	size_t host_index;
};

struct rhost {
	const char *host;
	size_t n_workers;
	int64_t attempts, done, failed, rows_in, rows_out;
	double busy, busy_done, first_claim;
};

struct report {
	const struct es_report_opts *o;
	struct es_manifest m;
	int have_manifest;
	struct es_status st;
	int have_status;
	struct rattempt *a;
	size_t n_a, cap_a;
	struct revent *ev;
	size_t n_ev, cap_ev;
	size_t n_event_files, bad_event_lines, unreadable_attempts;
	struct rworker *w;
	size_t n_w;
	struct rhost *h;
	size_t n_h;
	double t0, t1, now;
	double median;             /* of the durations of done attempts, < 0 when none */
	size_t by_status[ST_N];
	size_t n_backups, n_backups_won;
};

static int oom(const char *what)
{
	return es_error(ES_ENOMEM, "out of memory making the report (%s)", what);
}

static char *xstrdup(const char *s)
{
	return strdup(s ? s : "");
}

static double dur_of(const struct rattempt *a)
{
	return a->end >= a->claim && a->claim >= 0 ? a->end - a->claim : -1;
}

/* ---------------- reading the job folder ---------------- */

/* The entries of a folder but "." and "..", sorted; a missing folder has none. */
static int list_dir(const char *path, struct es_strv *out)
{
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT || errno == ENOTDIR ? 0 : es_error_errno(ES_EIO, "cannot read folder '%s'", path);
	struct dirent *e;
	int rc = 0;
	while (!rc && (e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			rc = es_strv_push(out, strdup(e->d_name));
	closedir(d);
	if (rc)
		return oom("folder listing");
	es_strv_sort_unique(out);
	return 0;
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static cJSON *load_object_quiet(const char *path)
{
	cJSON *doc = NULL;
	es_log_quiet_begin();
	int rc = es_json_load(path, &doc);
	es_log_quiet_end();
	if (rc || !cJSON_IsObject(doc)) {
		cJSON_Delete(doc);
		return NULL;
	}
	return doc;
}

static double iso_of(const cJSON *doc, const char *key)
{
	double t;
	return es_time_parse_iso(es_json_get_str(doc, key), &t) ? -1 : t;
}

static int status_index(const char *s)
{
	for (int i = 0; s && i < ST_N; i++)
		if (!strcmp(s, status_names[i]))
			return i;
	return -1;
}

/* "0003-<token>": the attempt number and the token of an attempt folder's name. */
static void parse_leaf(const char *name, struct rattempt *a)
{
	const char *dash = strchr(name, '-');
	char num[16];
	int64_t n = 0;
	if (dash && dash - name < (long)sizeof(num)) {
		memcpy(num, name, (size_t)(dash - name));
		num[dash - name] = '\0';
		if (es_parse_i64(num, &n) || n < 0 || n > 1000000)
			n = 0;
		snprintf(a->token, sizeof(a->token), "%s", dash + 1);
	}
	a->number = (int)n;
}

/* The fields of attempt.json (REFERENCE.md §2.5); the end waits for the events (resolve). */
static void fill_from_json(struct rattempt *a, const cJSON *doc)
{
	const char *host = es_json_get_str(doc, "hostname");
	a->host = xstrdup(host && *host ? host : "(unknown)");
	es_json_get_i64(doc, "pid", &a->pid);
	const char *st = es_json_get_str(doc, "status");
	a->backup = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "backup"));
	a->status = status_index(st);
	if (a->status < 0) {
		/* Only the values of §5.7 are known; an attempt.json without one is still an attempt. */
		a->status = st ? ST_LOST : ST_RUNNING;
		a->raw_status = st ? strdup(st) : NULL;
	}
	if (es_json_get_num(doc, "claimed_at_epoch", &a->claim))
		a->claim = iso_of(doc, "claimed_at");
	a->finished_at = iso_of(doc, "finished_at");
	a->stale_at = iso_of(doc, "stale_at");
	if (es_json_get_num(doc, "duration_secs", &a->proc_secs))
		a->proc_secs = -1;
	a->has_rc = !es_json_get_i64(doc, "return_code", &a->rc);
	const char *err = es_json_get_str(doc, "error");
	if (err)
		a->error = strdup(err);
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(doc, "result");
	if (es_json_get_i64(res, "rows", &a->rows_out))
		a->rows_out = -1;
}

static struct rattempt *new_attempt(struct report *r)
{
	if (r->n_a == r->cap_a) {
		size_t cap = r->cap_a ? 2 * r->cap_a : 64;
		struct rattempt *p = realloc(r->a, cap * sizeof(*p));
		if (!p)
			return NULL;
		r->a = p;
		r->cap_a = cap;
	}
	struct rattempt *a = &r->a[r->n_a++];
	memset(a, 0, sizeof(*a));
	a->claim = a->start = a->end = a->proc_secs = a->finished_at = a->stale_at = -1;
	a->rows_in = a->rows_out = -1;
	a->shard_index = -1;
	return a;
}

/* The manifest index of a shard id: the index its name carries ("part-00007-of-00016"), checked,
 * else a search. */
static long shard_index(const struct es_manifest *m, const char *id)
{
	int64_t i;
	char num[24];
	const char *p = strncmp(id, "part-", 5) ? NULL : id + 5, *e = p ? strchr(p, '-') : NULL;
	if (e && e - p < (long)sizeof(num)) {
		memcpy(num, p, (size_t)(e - p));
		num[e - p] = '\0';
		if (!es_parse_i64(num, &i) && i >= 0 && (size_t)i < m->n_shards && !strcmp(m->shards[i].id, id))
			return (long)i;
	}
	return es_manifest_find(m, id);
}

/* One attempt folder with an attempt.json. */
static int add_attempt(struct report *r, const char *shard, const char *leaf, const char *dir)
{
	struct rattempt *a = new_attempt(r);
	if (!a)
		return oom("attempts");
	a->shard = strdup(shard);
	a->dir = strdup(dir);
	if (!a->shard || !a->dir)
		return oom("attempts");
	parse_leaf(leaf, a);
	a->shard_index = shard_index(&r->m, shard);
	if (a->shard_index >= 0)
		a->rows_in = r->m.shards[a->shard_index].rows;
	struct es_buf p = ES_BUF_INIT;
	es_buf_printf(&p, "%s/attempt.json", dir);
	cJSON *doc = load_object_quiet(p.data);
	es_buf_free(&p);
	if (doc) {
		fill_from_json(a, doc);
	} else {
		r->unreadable_attempts++;
		a->host = xstrdup("(unknown)");
		a->status = ST_LOST;
		a->error = strdup("attempt.json cannot be read");
	}
	cJSON_Delete(doc);
	return a->host ? 0 : oom("attempts");
}

/* Every attempts/<shard>/<leaf>/ that holds an attempt.json, in name order. */
static int collect_attempts(struct report *r)
{
	struct es_strv shards = ES_STRV_INIT, leaves = ES_STRV_INIT;
	struct es_buf base = ES_BUF_INIT, sdir = ES_BUF_INIT, adir = ES_BUF_INIT, aj = ES_BUF_INIT;
	int rc = es_buf_printf(&base, "%s/attempts", r->m.job_dir);
	if (!rc)
		rc = list_dir(base.data, &shards);
	for (size_t i = 0; !rc && i < shards.n; i++) {
		es_buf_reset(&sdir);
		es_buf_printf(&sdir, "%s/%s", base.data, shards.v[i]);
		if (!is_dir(sdir.data))
			continue;
		es_strv_free(&leaves);
		rc = list_dir(sdir.data, &leaves);
		for (size_t k = 0; !rc && k < leaves.n; k++) {
			es_buf_reset(&adir);
			es_buf_reset(&aj);
			es_buf_printf(&adir, "%s/%s", sdir.data, leaves.v[k]);
			es_buf_printf(&aj, "%s/attempt.json", adir.data);
			if (is_dir(adir.data) && es_fs_exists(aj.data) == 1)
				rc = add_attempt(r, shards.v[i], leaves.v[k], adir.data);
		}
	}
	es_strv_free(&shards);
	es_strv_free(&leaves);
	es_buf_free(&base);
	es_buf_free(&sdir);
	es_buf_free(&adir);
	es_buf_free(&aj);
	return rc;
}

static int add_event(struct report *r, const cJSON *o)
{
	const char *tok = es_json_get_str(o, "token"), *name = es_json_get_str(o, "event");
	double t;
	if (!tok || !name || es_json_get_num(o, "time", &t))
		return 0; /* not an attempt's event */
	if (r->n_ev == r->cap_ev) {
		size_t cap = r->cap_ev ? 2 * r->cap_ev : 256;
		struct revent *p = realloc(r->ev, cap * sizeof(*p));
		if (!p)
			return oom("events");
		r->ev = p;
		r->cap_ev = cap;
	}
	struct revent *e = &r->ev[r->n_ev++];
	memset(e, 0, sizeof(*e));
	snprintf(e->token, sizeof(e->token), "%s", tok);
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->time = t;
	if (es_json_get_i64(o, "rows", &e->rows))
		e->rows = -1;
	if (es_json_get_num(o, "duration", &e->duration))
		e->duration = -1;
	const char *d = es_json_get_str(o, "detail");
	if (d && !(e->detail = strdup(d)))
		return oom("events");
	return 0;
}

/* One event log: a line that does not parse (the one a crash cut short) is counted, not fatal. */
static int read_event_file(struct report *r, const char *path)
{
	struct es_buf text = ES_BUF_INIT;
	es_log_quiet_begin();
	int rc = es_fs_read_file(path, &text, (size_t)1 << 30);
	es_log_quiet_end();
	if (rc) {
		es_buf_free(&text);
		r->bad_event_lines++;
		return 0;
	}
	r->n_event_files++;
	const char *p = text.data, *end = text.data + text.len;
	while (!rc && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (len) {
			es_log_quiet_begin();
			cJSON *o = es_json_parse(p, len, path);
			es_log_quiet_end();
			if (cJSON_IsObject(o))
				rc = add_event(r, o);
			else
				r->bad_event_lines++;
			cJSON_Delete(o);
		}
		p += len + 1;
	}
	es_buf_free(&text);
	return rc;
}

static int event_cmp(const void *x, const void *y)
{
	const struct revent *a = x, *b = y;
	int c = strcmp(a->token, b->token);
	return c ? c : (a->time > b->time) - (a->time < b->time);
}

static int collect_events(struct report *r)
{
	struct es_strv files = ES_STRV_INIT;
	struct es_buf dir = ES_BUF_INIT, p = ES_BUF_INIT;
	int rc = es_buf_printf(&dir, "%s/state/events", r->m.job_dir);
	if (!rc)
		rc = list_dir(dir.data, &files);
	for (size_t i = 0; !rc && i < files.n; i++) {
		size_t n = strlen(files.v[i]);
		if (n < 6 || strcmp(files.v[i] + n - 6, ".jsonl") || files.v[i][0] == '.')
			continue;
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/%s", dir.data, files.v[i]);
		rc = read_event_file(r, p.data);
	}
	es_strv_free(&files);
	es_buf_free(&dir);
	es_buf_free(&p);
	if (!rc && r->n_ev > 1)
		qsort(r->ev, r->n_ev, sizeof(*r->ev), event_cmp);
	return rc;
}

/* ---------------- making sense of it ---------------- */

static int is_end_event(const char *name)
{
	static const char *const ends[] = { "done", "superseded", "failed", "lost", "preempted", "backup_failed",
					    "not_started" };
	for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
		if (!strcmp(name, ends[i]))
			return 1;
	return 0;
}

/* The times of one attempt: events (matched by token) first, attempt.json otherwise. */
static void resolve_times(struct report *r, struct rattempt *a)
{
	double ev_end = -1, ev_taken = -1;
	struct revent key;
	memset(&key, 0, sizeof(key));
	snprintf(key.token, sizeof(key.token), "%s", a->token);
	size_t lo = 0, hi = r->n_ev;
	while (lo < hi) { /* the first event of the token */
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(r->ev[mid].token, key.token) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; a->token[0] && i < r->n_ev && !strcmp(r->ev[i].token, a->token); i++) {
		const struct revent *e = &r->ev[i];
		a->timed_by_events = 1;
		if (!strcmp(e->name, "claim") || !strcmp(e->name, "backup")) {
			a->claim = e->time;
		} else if (!strcmp(e->name, "start")) {
			a->start = e->time;
		} else if (!strcmp(e->name, "stale_takeover")) {
			ev_taken = e->time;
		} else if (is_end_event(e->name)) {
			ev_end = e->time;
			if (e->rows >= 0 && (!strcmp(e->name, "done") || !strcmp(e->name, "superseded")))
				a->rows_out = e->rows;
			if (a->proc_secs < 0 && e->duration >= 0)
				a->proc_secs = e->duration;
			if (!a->error && e->detail)
				a->error = strdup(e->detail);
		}
	}
	if (a->claim < 0)
		a->claim = a->start;
	/* Its own worker's end first; a takeover only ends an attempt whose worker said nothing. */
	a->end = ev_end >= 0 ? ev_end : a->finished_at >= 0 ? a->finished_at : ev_taken >= 0 ? ev_taken : a->stale_at;
	if (a->end < 0 && a->claim >= 0 && a->proc_secs >= 0 && a->status != ST_RUNNING)
		a->end = a->claim + a->proc_secs;
	a->end_kind = a->end >= 0 ? END_RECORDED : END_UNKNOWN;
}

/* A running attempt whose shard lock still holds its token is live: it is drawn up to now. */
static int attempt_is_live(const struct report *r, const struct rattempt *a)
{
	char path[4096];
	struct es_lock_info li;
	if (es_claim_lock_path(&r->m, a->shard, path, sizeof(path)))
		return 0;
	es_log_quiet_begin();
	int rc = es_claim_lock_read(path, &li);
	es_log_quiet_end();
	return !rc && li.exists && !li.terminal && !strcmp(li.token, a->token);
}

static void resolve(struct report *r)
{
	r->t0 = r->t1 = -1;
	for (size_t i = 0; i < r->n_a; i++) {
		struct rattempt *a = &r->a[i];
		resolve_times(r, a);
		/* A done attempt without finished_at ended when its done record was completed. */
		if (a->end < 0 && a->status == ST_DONE && a->shard_index >= 0 &&
		    r->st.shards[a->shard_index].state == ES_SHARD_DONE)
			a->end = r->st.shards[a->shard_index].completed_at_epoch;
		if (a->end >= 0)
			a->end_kind = END_RECORDED;
		double ts[3] = { a->claim, a->start, a->end };
		for (int k = 0; k < 3; k++) {
			if (ts[k] < 0)
				continue;
			if (r->t0 < 0 || ts[k] < r->t0)
				r->t0 = ts[k];
			if (ts[k] > r->t1)
				r->t1 = ts[k];
		}
	}
	if (r->t0 < 0)
		r->t0 = r->t1 = r->now; /* no time known at all: every attempt is drawn at now */
	for (size_t i = 0; i < r->n_a; i++) {
		struct rattempt *a = &r->a[i];
		if (a->status == ST_RUNNING && a->end < 0 && attempt_is_live(r, a)) {
			a->end = r->now;
			a->end_kind = END_LIVE;
			if (r->now > r->t1)
				r->t1 = r->now;
		}
	}
	for (size_t i = 0; i < r->n_a; i++) {
		struct rattempt *a = &r->a[i];
		if (a->claim < 0)
			a->claim = a->end >= 0 ? a->end : r->t0;
		if (a->end < 0)
			a->end = a->status == ST_RUNNING && r->t1 > a->claim ? r->t1 : a->claim;
		r->by_status[a->status]++;
		r->n_backups += a->backup;
		r->n_backups_won += a->backup && a->status == ST_DONE;
	}
}

static int worker_cmp(const void *x, const void *y)
{
	const struct rworker *a = x, *b = y;
	int c = strcmp(a->host, b->host);
	if (c)
		return c;
	if (a->first_claim != b->first_claim)
		return a->first_claim < b->first_claim ? -1 : 1;
	return (a->pid > b->pid) - (a->pid < b->pid);
}

static size_t find_worker(const struct report *r, const char *host, int64_t pid)
{
	for (size_t i = 0; i < r->n_w; i++)
		if (r->w[i].pid == pid && !strcmp(r->w[i].host, host))
			return i;
	return (size_t)-1;
}

/* Workers (host + pid, sorted by host, then first claim) and hosts, with their sums. */
static int group(struct report *r)
{
	r->w = calloc(r->n_a ? r->n_a : 1, sizeof(*r->w));
	r->h = calloc(r->n_a ? r->n_a : 1, sizeof(*r->h));
	if (!r->w || !r->h)
		return oom("hosts");
	for (size_t i = 0; i < r->n_a; i++) {
		struct rattempt *a = &r->a[i];
		size_t k = find_worker(r, a->host, a->pid);
		if (k == (size_t)-1) {
			k = r->n_w++;
			r->w[k] = (struct rworker){ a->host, a->pid, a->claim, 0 };
		} else if (a->claim < r->w[k].first_claim) {
			r->w[k].first_claim = a->claim;
		}
	}
	if (r->n_w > 1)
		qsort(r->w, r->n_w, sizeof(*r->w), worker_cmp);
	for (size_t k = 0; k < r->n_w; k++) {
		if (!r->n_h || strcmp(r->h[r->n_h - 1].host, r->w[k].host)) {
			r->h[r->n_h] = (struct rhost){ .host = r->w[k].host, .first_claim = r->w[k].first_claim };
			r->n_h++;
		}
		struct rhost *h = &r->h[r->n_h - 1];
		h->n_workers++;
		if (r->w[k].first_claim < h->first_claim)
			h->first_claim = r->w[k].first_claim;
		r->w[k].host_index = r->n_h - 1;
	}
	for (size_t i = 0; i < r->n_a; i++) {
		struct rattempt *a = &r->a[i];
		a->worker = find_worker(r, a->host, a->pid);
		struct rhost *h = &r->h[r->w[a->worker].host_index];
		double d = dur_of(a);
		h->attempts++;
		h->busy += d > 0 ? d : 0;
		if (a->status == ST_FAILED)
			h->failed++;
		if (a->status == ST_DONE) {
			h->done++;
			h->busy_done += d > 0 ? d : 0;
			h->rows_in += a->rows_in > 0 ? a->rows_in : 0;
			h->rows_out += a->rows_out > 0 ? a->rows_out : 0;
		}
	}
	return 0;
}

static int dbl_cmp(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

/* The durations of the done attempts, sorted (malloc'd; *n of them). */
static double *done_durations(const struct report *r, size_t *n)
{
	double *d = malloc((r->n_a ? r->n_a : 1) * sizeof(*d));
	*n = 0;
	for (size_t i = 0; d && i < r->n_a; i++)
		if (r->a[i].status == ST_DONE && dur_of(&r->a[i]) >= 0)
			d[(*n)++] = dur_of(&r->a[i]);
	if (d && *n > 1)
		qsort(d, *n, sizeof(*d), dbl_cmp);
	return d;
}

/* ---------------- HTML output ---------------- */

struct html {
	struct es_buf *b;
	int rc;
};

static void h_adds(struct html *h, const char *s)
{
	if (!h->rc)
		h->rc = es_buf_adds(h->b, s);
}

static void h_printf(struct html *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void h_printf(struct html *h, const char *fmt, ...)
{
	if (h->rc)
		return;
	va_list ap;
	va_start(ap, fmt);
	h->rc = es_buf_vprintf(h->b, fmt, ap);
	va_end(ap);
}

/* Text for an element or an attribute: & < > " ' as entities, control characters but tab and
 * newline and bytes that are not UTF-8 as U+FFFD, so no byte of a log can end markup. */
static void h_escn(struct html *h, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (!h->rc && i < n) {
		unsigned char c = p[i];
		size_t adv = 1;
		const char *rep = NULL;
		char one[2] = { (char)c, 0 };
		switch (c) {
		case '&': rep = "&amp;"; break;
		case '<': rep = "&lt;"; break;
		case '>': rep = "&gt;"; break;
		case '"': rep = "&quot;"; break;
		case '\'': rep = "&#39;"; break;
		default:
			if (c >= 0x80) {
				es_utf8_next(p + i, n - i, &adv);
				if (adv == 1)
					rep = "\xEF\xBF\xBD";
			} else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
				rep = "\xEF\xBF\xBD";
			} else {
				rep = one;
			}
		}
		h->rc = rep ? es_buf_adds(h->b, rep) : es_buf_add(h->b, p + i, adv);
		i += adv;
	}
}

static void h_esc(struct html *h, const char *s)
{
	if (s)
		h_escn(h, s, strlen(s));
}

/* "2026-12-02 08:37:05.108 UTC" */
static void fmt_time(double t, char *out, size_t n)
{
	if (t < 0) {
		snprintf(out, n, "unknown");
		return;
	}
	time_t s = (time_t)floor(t);
	struct tm tm;
	gmtime_r(&s, &tm);
	char day[32];
	strftime(day, sizeof(day), "%Y-%m-%d %H:%M:%S", &tm);
	int ms = (int)((t - floor(t)) * 1000.0);
	snprintf(out, n, "%s.%03d UTC", day, ms > 999 ? 999 : ms);
}

/* "0.42 s", "12.3 s", "4m05s", "2h03m10s" */
static void fmt_dur(double secs, char *out, size_t n)
{
	if (secs < 0) {
		snprintf(out, n, "unknown");
		return;
	}
	if (secs < 10) {
		snprintf(out, n, "%.2f s", secs);
		return;
	}
	if (secs < 60) {
		snprintf(out, n, "%.1f s", secs);
		return;
	}
	long long t = (long long)llround(secs);
	if (t < 3600)
		snprintf(out, n, "%lldm%02llds", t / 60, t % 60);
	else
		snprintf(out, n, "%lldh%02lldm%02llds", t / 3600, t / 60 % 60, t % 60);
}

/* An axis label for v seconds on an axis whose ticks are step apart. */
static void fmt_tick(double v, double step, char *out, size_t n)
{
	long long t = (long long)llround(v);
	if (step < 1)
		snprintf(out, n, "%.1f s", v);
	else if (t < 60)
		snprintf(out, n, "%lld s", t);
	else if (t < 3600)
		snprintf(out, n, t % 60 ? "%lldm%02llds" : "%lldm", t / 60, t % 60);
	else
		snprintf(out, n, "%lldh%02lldm", t / 3600, t / 60 % 60);
}

/* A readable step for about `want` ticks over span seconds. */
static double nice_step(double span, int want)
{
	static const double steps[] = { 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
					3600, 7200, 10800, 21600, 43200, 86400 };
	double raw = span / (want > 0 ? want : 1);
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if (steps[i] >= raw)
			return steps[i];
	return 86400.0 * ceil(raw / 86400.0);
}

/* A readable step for a count axis. */
static double nice_count(double max, int want)
{
	double raw = max / (want > 0 ? want : 1);
	if (raw <= 1)
		return 1;
	double mag = pow(10, floor(log10(raw))), norm = raw / mag;
	return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
}

static const char css[] =
	"body{font-family:sans-serif;margin:24px;color:#222;background:#fff;max-width:1400px}\n"
	"h1{font-size:22px;margin:0 0 4px}h3{font-size:14px;margin:16px 0 4px}p{font-size:14px;margin:6px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc;padding-bottom:4px}\n"
	".sub{color:#555;font-size:13px}.note{color:#555;font-size:12px;margin:4px 0}\n"
	".cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}\n"
	".card{border:1px solid #ccc;border-radius:6px;padding:8px 14px;min-width:150px}\n"
	".card b{display:block;font-size:20px}.card span{color:#555;font-size:12px}\n"
	"table{border-collapse:collapse;font-size:13px;margin:6px 0}\n"
	"th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f2f2f2}\n"
	"td.n{text-align:right;font-variant-numeric:tabular-nums}tr.slow td{background:#fff3d6}\n"
	".legend span{display:inline-block;margin-right:14px;font-size:13px}\n"
	".legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px;border-radius:2px}\n"
	"pre{background:#f6f6f6;border:1px solid #ddd;padding:6px;font-size:12px;overflow-x:auto;white-space:pre-wrap;max-height:320px}\n"
	"svg{display:block;margin:6px 0}svg text{font-family:sans-serif;font-size:11px;fill:#333}\n"
	"svg .lab{font-size:12px}svg .ax{stroke:#888;stroke-width:1}svg .grid{stroke:#e4e4e4;stroke-width:1}\n"
	"svg .in{fill:#fff;font-size:10px}svg .bar{fill:#4a78b5}svg .hot{fill:#f0a020}\n"
	"svg .cum{fill:none;stroke:#d62728;stroke-width:2}\n";

static void put_style(struct html *h)
{
	h_adds(h, "<style>\n");
	h_adds(h, css);
	for (int s = 0; s < ST_N; s++)
		h_printf(h, "g.attempt[data-status=\"%s\"] rect{fill:%s}\n", status_names[s], status_colors[s]);
	h_adds(h, "g.attempt[data-backup=\"1\"] rect{stroke:#222;stroke-width:1.5;stroke-dasharray:3 2}\n");
	h_adds(h, "</style>\n");
}

static void card(struct html *h, const char *value, const char *label)
{
	h_adds(h, "<div class=\"card\"><b>");
	h_esc(h, value);
	h_adds(h, "</b><span>");
	h_esc(h, label);
	h_adds(h, "</span></div>\n");
}

static void put_summary(struct html *h, const struct report *r)
{
	const struct es_status_counts *c = &r->st.counts;
	char v[128], l[256], d[48];
	h_adds(h, "<h2>Summary</h2>\n<div class=\"cards\">\n");
	snprintf(v, sizeof(v), "%lld / %lld", (long long)c->done, (long long)c->total);
	snprintf(l, sizeof(l), "shards done (failed %lld, pending %lld, running %lld, stale %lld)", (long long)c->failed,
		 (long long)c->pending, (long long)c->running, (long long)c->stale);
	card(h, v, l);
	snprintf(v, sizeof(v), "%lld", (long long)c->failed);
	card(h, v, "shards failed");
	snprintf(v, sizeof(v), "%zu", r->n_a);
	snprintf(l, sizeof(l), "attempts (%zu failed, %zu stale, %zu lost, %zu preempted; %zu backups, %zu of them won)",
		 r->by_status[ST_FAILED], r->by_status[ST_STALE], r->by_status[ST_LOST], r->by_status[ST_PREEMPTED],
		 r->n_backups, r->n_backups_won);
	card(h, v, l);
	snprintf(v, sizeof(v), "%lld", (long long)r->m.total_rows);
	snprintf(l, sizeof(l), "rows in (%lld in done shards)", (long long)r->st.rows_done);
	card(h, v, l);
	snprintf(v, sizeof(v), "%lld", (long long)r->st.result_rows_done);
	card(h, v, "rows out (results of done shards)");
	fmt_dur(r->t0 >= 0 ? r->t1 - r->t0 : -1, d, sizeof(d));
	card(h, d, "wall time (first claim to last end)");
	snprintf(v, sizeof(v), "%zu / %zu", r->n_h, r->n_w);
	card(h, v, "hosts / workers");
	h_adds(h, "</div>\n");
	char a[48], b[48];
	fmt_time(r->t0, a, sizeof(a));
	fmt_time(r->t1, b, sizeof(b));
	h_printf(h, "<p class=\"note\">From %s to %s. ", a, b);
	if (r->n_event_files)
		h_printf(h, "Times from %zu event log(s) (%zu events) where an attempt has events, else from attempt.json.",
			 r->n_event_files, r->n_ev);
	else
		h_adds(h, "No event logs (a job folder of the reference implementation, or one that no eshard-mpi "
			  "worker ran): times from attempt.json.");
	if (r->bad_event_lines)
		h_printf(h, " %zu event line(s) or file(s) could not be read.", r->bad_event_lines);
	if (r->unreadable_attempts)
		h_printf(h, " %zu attempt.json file(s) could not be read.", r->unreadable_attempts);
	h_adds(h, "</p>\n");
}

static void put_hosts(struct html *h, const struct report *r)
{
	double wall = r->t0 >= 0 ? r->t1 - r->t0 : 0;
	h_adds(h, "<h2>Hosts</h2>\n<table><tr><th>host</th><th>workers</th><th>attempts</th><th>shards done</th>"
		  "<th>failed attempts</th><th>rows in (done)</th><th>rows out</th><th>busy</th><th>rows/s</th>"
		  "<th>busy %</th><th>first claim</th></tr>\n");
	for (size_t i = 0; i < r->n_h; i++) {
		const struct rhost *x = &r->h[i];
		char busy[48], first[48];
		fmt_dur(x->busy, busy, sizeof(busy));
		fmt_dur(x->first_claim - r->t0, first, sizeof(first));
		h_adds(h, "<tr><td>");
		h_esc(h, x->host);
		h_printf(h, "</td><td class=\"n\">%zu</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
			    "<td class=\"n\">%lld</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td><td class=\"n\">%s</td>",
			 x->n_workers, (long long)x->attempts, (long long)x->done, (long long)x->failed,
			 (long long)x->rows_in, (long long)x->rows_out, busy);
		if (x->busy_done > 0)
			h_printf(h, "<td class=\"n\">%.1f</td>", (double)x->rows_in / x->busy_done);
		else
			h_adds(h, "<td class=\"n\">-</td>");
		if (wall > 0)
			h_printf(h, "<td class=\"n\">%.0f%%</td>", 100.0 * x->busy / (wall * (double)x->n_workers));
		else
			h_adds(h, "<td class=\"n\">-</td>");
		h_printf(h, "<td class=\"n\">+%s</td></tr>\n", first);
	}
	h_adds(h, "</table>\n<p class=\"note\">A worker is one process (host and pid). busy: time inside attempts; "
		  "rows/s: input rows of the done shards per second inside done attempts; busy %: busy / (workers &times; "
		  "wall time); first claim: after the earliest claim of the job.</p>\n");
}

/* ---- SVG pieces ---- */

#define SVG_W 1320
#define SVG_LEFT 210
#define SVG_RIGHT 30

struct xaxis {
	double t0, span;      /* seconds since r->t0 at the left edge, and the width in seconds */
	double left, width;   /* pixels */
};

static double ax_x(const struct xaxis *x, double secs)
{
	return x->left + (secs - x->t0) / x->span * x->width;
}

/* Vertical grid lines from y0 to y1 and tick labels below y1. */
static void put_time_axis(struct html *h, const struct xaxis *x, double y0, double y1, const char *caption)
{
	double step = nice_step(x->span, 10);
	char lab[48];
	h_printf(h, "<line class=\"ax\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x->left, y1,
		 x->left + x->width, y1);
	for (double v = ceil(x->t0 / step) * step; v <= x->t0 + x->span + 1e-9; v += step) {
		double px = ax_x(x, v);
		fmt_tick(v, step, lab, sizeof(lab));
		h_printf(h, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			    "<line class=\"ax\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
			 px, y0, px, y1, px, y1, px, y1 + 4, px, y1 + 16, lab);
	}
	h_printf(h, "<text class=\"lab\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x->left + x->width / 2, y1 + 32);
	h_esc(h, caption);
	h_adds(h, "</text>\n");
}

static void put_legend(struct html *h, const struct report *r)
{
	h_adds(h, "<div class=\"legend\">");
	for (int s = 0; s < ST_N; s++)
		h_printf(h, "<span><i style=\"background:%s\"></i>%s (%zu)</span>", status_colors[s], status_names[s],
			 r->by_status[s]);
	if (r->n_backups)
		h_printf(h, "<span><i style=\"border:1.5px dashed #222\"></i>backup attempts (%zu, %zu won)</span>",
			 r->n_backups, r->n_backups_won);
	h_adds(h, "</div>\n");
}

/* The tooltip of one attempt. */
static void put_tooltip(struct html *h, const struct report *r, const struct rattempt *a)
{
	char t1[48], t2[48], d[48], p[48];
	fmt_time(a->claim, t1, sizeof(t1));
	fmt_time(a->end, t2, sizeof(t2));
	fmt_dur(a->end - a->claim, d, sizeof(d));
	h_adds(h, "<title>");
	h_esc(h, a->shard);
	h_printf(h, " attempt %d (%.8s)\nhost ", a->number, a->token);
	h_esc(h, a->host);
	h_printf(h, ", pid %lld\nstatus %s%s", (long long)a->pid, status_names[a->status], a->backup ? " (a backup attempt)" : "");
	if (a->raw_status) {
		h_adds(h, " (attempt.json: ");
		h_esc(h, a->raw_status);
		h_adds(h, ")");
	}
	h_printf(h, "\nstart %s\nend %s%s\nduration %s", t1, t2,
		 a->end_kind == END_LIVE ? " (still running: now)" :
		 a->end_kind == END_UNKNOWN ? " (not recorded)" : "", d);
	if (a->proc_secs >= 0) {
		fmt_dur(a->proc_secs, p, sizeof(p));
		h_printf(h, " (processor %s)", p);
	}
	h_printf(h, "\n+%.3f s after the first claim", a->claim - r->t0);
	if (a->rows_in >= 0)
		h_printf(h, "\nrows in %lld", (long long)a->rows_in);
	if (a->rows_out >= 0)
		h_printf(h, ", rows out %lld", (long long)a->rows_out);
	if (a->has_rc)
		h_printf(h, "\nexit code %lld", (long long)a->rc);
	if (a->error) {
		size_t n = strlen(a->error);
		h_adds(h, "\nerror: ");
		h_escn(h, a->error, n > 600 ? 600 : n);
		if (n > 600)
			h_adds(h, "...");
	}
	h_printf(h, "\ntimes from %s</title>", a->timed_by_events ? "the event log" : "attempt.json");
}

#define ROW_H 20

static void put_timeline(struct html *h, const struct report *r)
{
	h_adds(h, "<h2>Timeline</h2>\n");
	put_legend(h, r);
	if (!r->n_a) {
		h_adds(h, "<p>No attempt yet.</p>\n");
		return;
	}
	double top = 8, height = top + (double)r->n_w * ROW_H;
	struct xaxis x = { 0, r->t1 - r->t0 > 1e-3 ? r->t1 - r->t0 : 1e-3, SVG_LEFT, SVG_W - SVG_LEFT - SVG_RIGHT };
	h_printf(h, "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\">\n", SVG_W,
		 height + 46);
	for (size_t k = 0; k < r->n_w; k++) {
		const struct rworker *w = &r->w[k];
		double y = top + (double)k * ROW_H;
		int first = !k || r->w[k - 1].host_index != w->host_index;
		if (w->host_index % 2 == 0)
			h_printf(h, "<rect x=\"0\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#f4f6fa\"/>\n", y, SVG_W,
				 ROW_H);
		if (first && k)
			h_printf(h, "<line x1=\"0\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#bbb\"/>\n", y, SVG_W, y);
		h_printf(h, "<text class=\"lab\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", SVG_LEFT - 8, y + 14);
		if (first) {
			h_adds(h, "<tspan font-weight=\"bold\">");
			h_escn(h, w->host, strlen(w->host) > 24 ? 24 : strlen(w->host));
			h_adds(h, "</tspan> ");
		}
		h_printf(h, "pid %lld</text>\n", (long long)w->pid);
	}
	put_time_axis(h, &x, top, height, "seconds since the first claim");
	for (size_t i = 0; i < r->n_a; i++) {
		const struct rattempt *a = &r->a[i];
		double x0 = ax_x(&x, a->claim - r->t0), x1 = ax_x(&x, a->end - r->t0);
		double y = top + (double)a->worker * ROW_H + 3, wpx = x1 - x0 < 2 ? 2 : x1 - x0;
		h_adds(h, "<g class=\"attempt\" data-shard=\"");
		h_esc(h, a->shard);
		h_adds(h, "\" data-host=\"");
		h_esc(h, a->host);
		h_printf(h, "\" data-status=\"%s\" data-attempt=\"%d\" data-pid=\"%lld\"%s>", status_names[a->status],
			 a->number, (long long)a->pid, a->backup ? " data-backup=\"1\"" : "");
		put_tooltip(h, r, a);
		h_printf(h, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" rx=\"2\"/>", x0, y, wpx, ROW_H - 6);
		if (wpx > 34 && a->shard_index >= 0)
			h_printf(h, "<text class=\"in\" x=\"%.2f\" y=\"%.1f\">%ld</text>", x0 + 3, y + 11, a->shard_index);
		h_adds(h, "</g>\n");
	}
	h_adds(h, "</svg>\n<p class=\"note\">One row per worker process, grouped by host; one bar per attempt from its "
		  "claim to its end, labelled with the shard's index when it is wide enough. Hover a bar for its "
		  "times, rows and error.</p>\n");
}

/* A count axis on the left from y_base (0) up by height pixels for values 0..max. */
static void put_count_axis(struct html *h, double left, double right, double y_base, double height, double max,
			   const char *fmt_unit)
{
	double step = nice_count(max, 4);
	for (double v = 0; v <= max + 1e-9; v += step) {
		double y = y_base - v / max * height;
		h_printf(h, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n",
			 left, y, right, y, left - 6, y + 4, v);
	}
	h_printf(h, "<text class=\"lab\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
		 left - 48, y_base - height / 2, left - 48, y_base - height / 2, fmt_unit);
}

static void put_throughput(struct html *h, const struct report *r)
{
	h_adds(h, "<h2>Throughput</h2>\n");
	if (!r->by_status[ST_DONE]) {
		h_adds(h, "<p>No shard done yet.</p>\n");
		return;
	}
	double span = r->t1 - r->t0 > 1e-3 ? r->t1 - r->t0 : 1e-3;
	double step = nice_step(span, 40);
	size_t nb = (size_t)ceil(span / step);
	if (nb < 1)
		nb = 1;
	double *rows = calloc(nb, sizeof(*rows)), max = 0, total = 0;
	if (!rows) {
		h->rc = oom("throughput");
		return;
	}
	for (size_t i = 0; i < r->n_a; i++) {
		const struct rattempt *a = &r->a[i];
		if (a->status != ST_DONE || a->rows_in < 0)
			continue;
		size_t b = (size_t)floor((a->end - r->t0) / step);
		rows[b < nb ? b : nb - 1] += (double)a->rows_in;
		total += (double)a->rows_in;
	}
	for (size_t b = 0; b < nb; b++)
		max = rows[b] > max ? rows[b] : max;
	if (max <= 0)
		max = 1;
	double top = 14, base = 214, ph = base - top;
	struct xaxis x = { 0, (double)nb * step, SVG_LEFT, SVG_W - SVG_LEFT - SVG_RIGHT };
	h_printf(h, "<svg id=\"throughput\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\">\n", SVG_W,
		 base + 46);
	put_count_axis(h, x.left, x.left + x.width, base, ph, max, "rows per bucket");
	put_time_axis(h, &x, top, base, "seconds since the first claim");
	struct es_buf pts = ES_BUF_INIT;
	double cum = 0;
	es_buf_printf(&pts, "%.1f,%.1f", x.left, base);
	for (size_t b = 0; b < nb; b++) {
		double x0 = ax_x(&x, (double)b * step), x1 = ax_x(&x, (double)(b + 1) * step);
		double bh = rows[b] / max * ph;
		if (rows[b] > 0)
			h_printf(h, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\">"
				    "<title>%.0f rows in [%.1f s, %.1f s)</title></rect>\n",
				 x0 + 1, base - bh, x1 - x0 - 2 > 1 ? x1 - x0 - 2 : 1, bh, rows[b], (double)b * step,
				 (double)(b + 1) * step);
		cum += rows[b];
		es_buf_printf(&pts, " %.1f,%.1f", x1, base - cum / total * ph);
	}
	h_printf(h, "<polyline class=\"cum\" points=\"%s\"/>\n", pts.data);
	h_printf(h, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#d62728\" style=\"fill:#d62728\">"
		    "cumulative: %.0f rows</text>\n", x.left + x.width, top - 2, total);
	es_buf_free(&pts);
	free(rows);
	char st[48];
	fmt_dur(step, st, sizeof(st));
	h_printf(h, "</svg>\n<p class=\"note\">Bars: input rows of the shards whose done attempt ended in each %s "
		    "bucket. Line: rows done so far, up to %.0f (its scale is its own). Mean: %.1f rows/s over the wall time.</p>\n",
		 st, total, total / span);
}

static void put_histogram(struct html *h, const struct report *r, const double *d, size_t n)
{
	h_adds(h, "<h2>Shard durations</h2>\n");
	if (!n) {
		h_adds(h, "<p>No shard done yet.</p>\n");
		return;
	}
	double maxd = d[n - 1] > 1e-3 ? d[n - 1] : 1e-3;
	double bw = nice_step(maxd, 15);
	size_t nb = (size_t)floor(maxd / bw) + 1, *cnt = calloc(nb, sizeof(*cnt)), maxc = 1;
	if (!cnt) {
		h->rc = oom("histogram");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		size_t b = (size_t)floor(d[i] / bw);
		cnt[b < nb ? b : nb - 1]++;
	}
	for (size_t b = 0; b < nb; b++)
		maxc = cnt[b] > maxc ? cnt[b] : maxc;
	double top = 18, base = 200, ph = base - top;
	struct xaxis x = { 0, (double)nb * bw, SVG_LEFT, SVG_W - SVG_LEFT - SVG_RIGHT };
	h_printf(h, "<svg id=\"durations\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\">\n", SVG_W,
		 base + 46);
	put_count_axis(h, x.left, x.left + x.width, base, ph, (double)maxc, "done attempts");
	put_time_axis(h, &x, top, base, "duration of the done attempt (claim to end)");
	for (size_t b = 0; b < nb; b++) {
		double x0 = ax_x(&x, (double)b * bw), x1 = ax_x(&x, (double)(b + 1) * bw);
		double bh = (double)cnt[b] / (double)maxc * ph;
		int hot = r->median > 0 && (double)b * bw > 2 * r->median;
		if (!cnt[b])
			continue;
		h_printf(h, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\">"
			    "<title>%zu attempt(s) of [%.2f s, %.2f s)</title></rect>"
			    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%zu</text>\n",
			 hot ? "hot" : "bar", x0 + 1, base - bh, x1 - x0 - 2 > 1 ? x1 - x0 - 2 : 1, bh, cnt[b],
			 (double)b * bw, (double)(b + 1) * bw, (x0 + x1) / 2, base - bh - 3, cnt[b]);
	}
	free(cnt);
	char md[48], mx[48];
	fmt_dur(r->median, md, sizeof(md));
	fmt_dur(d[n - 1], mx, sizeof(mx));
	h_printf(h, "</svg>\n<p class=\"note\">%zu done attempts; median %s, longest %s. Orange bins start past twice "
		    "the median.</p>\n", n, md, mx);
}

static void put_skew(struct html *h, const struct report *r)
{
	h_adds(h, "<h2>Start-up skew</h2>\n");
	if (!r->n_w) {
		h_adds(h, "<p>No claim yet.</p>\n");
		return;
	}
	double maxo = 0;
	size_t last = 0;
	for (size_t k = 0; k < r->n_w; k++)
		if (r->w[k].first_claim - r->t0 > maxo) {
			maxo = r->w[k].first_claim - r->t0;
			last = k;
		}
	char d[48];
	fmt_dur(maxo, d, sizeof(d));
	h_printf(h, "<p>The first claims of the %zu worker(s) on %zu host(s) were %s apart", r->n_w, r->n_h, d);
	if (r->n_w > 1 && maxo > 0) {
		h_adds(h, " (the last: ");
		h_esc(h, r->w[last].host);
		h_printf(h, " pid %lld)", (long long)r->w[last].pid);
	}
	h_adds(h, ".</p>\n");
	/* At least one second wide, so that milliseconds of skew do not look like a long wait. */
	double top = 6, bottom = top + (double)r->n_w * ROW_H;
	struct xaxis x = { 0, maxo * 1.15 > 1 ? maxo * 1.15 : 1, SVG_LEFT, SVG_W - SVG_LEFT - SVG_RIGHT };
	h_printf(h, "<svg id=\"skew\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\">\n", SVG_W,
		 bottom + 46);
	put_time_axis(h, &x, top, bottom, "first claim, seconds after the earliest claim of the job");
	h_printf(h, "<line class=\"ax\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", SVG_LEFT, top, SVG_LEFT,
		 bottom);
	for (size_t k = 0; k < r->n_w; k++) {
		const struct rworker *w = &r->w[k];
		double y = top + (double)k * ROW_H, off = w->first_claim - r->t0, bw = ax_x(&x, off) - x.left;
		h_printf(h, "<text class=\"lab\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", SVG_LEFT - 8, y + 14);
		h_escn(h, w->host, strlen(w->host) > 24 ? 24 : strlen(w->host));
		h_printf(h, " pid %lld</text><rect class=\"bar\" x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\"/>"
			    "<text x=\"%.1f\" y=\"%.1f\">+%.3f s</text>\n",
			 (long long)w->pid, SVG_LEFT, y + 3, bw, ROW_H - 6, SVG_LEFT + bw + 6, y + 14, off);
	}
	h_adds(h, "</svg>\n<p class=\"note\">Each worker's first claim after the earliest claim of the job "
		  "(the hosts' own clocks: skew between their clocks shows here too).</p>\n");
}

static int att_dur_desc(const void *x, const void *y)
{
	double a = dur_of(*(const struct rattempt *const *)x), b = dur_of(*(const struct rattempt *const *)y);
	return (a < b) - (a > b);
}

static void put_stragglers(struct html *h, const struct report *r, size_t n_done)
{
	h_adds(h, "<h2>Stragglers</h2>\n");
	if (!n_done) {
		h_adds(h, "<p>No shard done yet.</p>\n");
		return;
	}
	const struct rattempt **v = malloc(n_done * sizeof(*v));
	size_t n = 0, over = 0;
	if (!v) {
		h->rc = oom("stragglers");
		return;
	}
	for (size_t i = 0; i < r->n_a && n < n_done; i++)
		if (r->a[i].status == ST_DONE && dur_of(&r->a[i]) >= 0)
			v[n++] = &r->a[i];
	qsort(v, n, sizeof(*v), att_dur_desc);
	for (size_t i = 0; i < n; i++)
		over += r->median > 0 && dur_of(v[i]) > 2 * r->median;
	char md[48];
	fmt_dur(r->median, md, sizeof(md));
	h_printf(h, "<p>Median duration of a done attempt: %s; %zu shard(s) took more than twice that.</p>\n", md, over);
	h_adds(h, "<table><tr><th>shard</th><th>host</th><th>pid</th><th>attempt</th><th>duration</th>"
		  "<th>&times; median</th><th>rows in</th></tr>\n");
	size_t show = n < 10 ? n : 10;
	if (over > show)
		show = over < 50 ? over : 50;
	for (size_t i = 0; i < show; i++) {
		char d[48];
		double du = dur_of(v[i]);
		fmt_dur(du, d, sizeof(d));
		h_printf(h, "<tr%s><td>", r->median > 0 && du > 2 * r->median ? " class=\"slow\"" : "");
		h_esc(h, v[i]->shard);
		h_adds(h, "</td><td>");
		h_esc(h, v[i]->host);
		h_printf(h, "</td><td class=\"n\">%lld</td><td class=\"n\">%d</td><td class=\"n\">%s</td>"
			    "<td class=\"n\">%.2f</td><td class=\"n\">%lld</td></tr>\n",
			 (long long)v[i]->pid, v[i]->number, d, r->median > 0 ? du / r->median : 0,
			 (long long)v[i]->rows_in);
	}
	h_adds(h, "</table>\n<p class=\"note\">The slowest done attempts; highlighted: over twice the median.</p>\n");
	free(v);
}

/* The last lines of a log, at most o->log_tail_bytes of it, into out; 1 when cut. */
static int log_tail(const struct report *r, const char *path, struct es_buf *out, int *missing)
{
	size_t maxb = r->o->log_tail_bytes ? r->o->log_tail_bytes : 4096;
	int lines = r->o->log_tail_lines > 0 ? r->o->log_tail_lines : 20;
	int cut = es_fs_read_tail(path, lines, maxb, out);
	*missing = cut < 0;
	return cut > 0;
}

static void put_one_failure(struct html *h, const struct report *r, const struct rattempt *a, struct es_buf *tail)
{
	char t[48], p[4200];
	fmt_time(a->end, t, sizeof(t));
	h_adds(h, "<h3>");
	h_esc(h, a->shard);
	h_printf(h, " attempt %d on ", a->number);
	h_esc(h, a->host);
	h_printf(h, " (pid %lld), ended %s</h3>\n<p>", (long long)a->pid, t);
	if (a->has_rc)
		h_printf(h, "Exit code %lld. ", (long long)a->rc);
	h_esc(h, a->error ? a->error : "(no error recorded)");
	h_adds(h, "</p>\n");
	snprintf(p, sizeof(p), "%s/process.log", a->dir);
	int missing = 0, cut = log_tail(r, p, tail, &missing);
	if (missing) {
		h_adds(h, "<p class=\"note\">No process.log.</p>\n");
		return;
	}
	h_printf(h, "<p class=\"note\">%s of process.log:</p>\n<pre>", cut ? "The last lines" : "All");
	h_escn(h, tail->data, tail->len);
	h_adds(h, "</pre>\n");
}

static void put_failures(struct html *h, const struct report *r)
{
	size_t maxn = r->o->max_failed_logs ? r->o->max_failed_logs : 50, shown = 0;
	h_printf(h, "<h2>Failed attempts (%zu)</h2>\n", r->by_status[ST_FAILED]);
	if (r->st.counts.failed) {
		h_adds(h, "<p>Failed shards:</p>\n<ul>\n");
		for (size_t i = 0; i < r->st.n_shards; i++) {
			const struct es_shard_status *s = &r->st.shards[i];
			if (s->state != ES_SHARD_FAILED)
				continue;
			h_adds(h, "<li>");
			h_esc(h, s->shard_id);
			h_adds(h, ": ");
			h_esc(h, s->error ? s->error : "(no last_error in the failed record)");
			h_adds(h, "</li>\n");
		}
		h_adds(h, "</ul>\n");
	}
	if (!r->by_status[ST_FAILED]) {
		h_adds(h, "<p>No failed attempt.</p>\n");
		return;
	}
	struct es_buf tail = ES_BUF_INIT;
	for (size_t i = 0; i < r->n_a && !h->rc; i++) {
		const struct rattempt *a = &r->a[i];
		if (a->status != ST_FAILED)
			continue;
		if (shown++ < maxn)
			put_one_failure(h, r, a, &tail);
	}
	es_buf_free(&tail);
	if (shown > maxn)
		h_printf(h, "<p class=\"note\">%zu more failed attempts are not shown.</p>\n", shown - maxn);
}

static void put_page(struct html *h, const struct report *r, const double *durs, size_t n_durs)
{
	char now[48];
	fmt_time(r->now, now, sizeof(now));
	h_adds(h, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>eshard-mpi report: ");
	h_esc(h, r->m.job_id);
	h_adds(h, "</title>\n");
	put_style(h);
	h_adds(h, "</head>\n<body>\n<h1>eshard-mpi report: ");
	h_esc(h, r->m.job_id);
	h_adds(h, "</h1>\n<div class=\"sub\">");
	h_esc(h, r->m.job_dir);
	h_printf(h, " &middot; %lld shards &middot; made %s &middot; %s</div>\n", (long long)r->m.n_shards, now,
		 r->st.complete ? "complete" : r->st.terminal ? "finished with failures" : "not finished");
	put_summary(h, r);
	put_hosts(h, r);
	put_timeline(h, r);
	put_throughput(h, r);
	put_histogram(h, r, durs, n_durs);
	put_skew(h, r);
	put_stragglers(h, r, n_durs);
	put_failures(h, r);
	h_adds(h, "</body>\n</html>\n");
}

/* ---------------- the entry points ---------------- */

static void report_free(struct report *r)
{
	for (size_t i = 0; i < r->n_a; i++) {
		free(r->a[i].shard);
		free(r->a[i].host);
		free(r->a[i].raw_status);
		free(r->a[i].error);
		free(r->a[i].dir);
	}
	free(r->a);
	for (size_t i = 0; i < r->n_ev; i++)
		free(r->ev[i].detail);
	free(r->ev);
	free(r->w);
	free(r->h);
	if (r->have_status)
		es_status_free(&r->st);
	if (r->have_manifest)
		es_manifest_free(&r->m);
}

static int collect(struct report *r, const char *job_dir)
{
	int rc = es_manifest_load(job_dir, &r->m);
	if (rc)
		return rc;
	r->have_manifest = 1;
	rc = es_status_collect(&r->m, 0, &r->st);
	r->have_status = 1;
	if (!rc)
		rc = collect_attempts(r);
	if (!rc)
		rc = collect_events(r);
	if (!rc) {
		resolve(r);
		rc = group(r);
	}
	return rc;
}

int es_report_render(const char *job_dir, const struct es_report_opts *opts, struct es_buf *out,
		     struct es_report_info *info)
{
	static const struct es_report_opts defaults;
	struct report r;
	memset(&r, 0, sizeof(r));
	r.o = opts ? opts : &defaults;
	r.now = r.o->now > 0 ? r.o->now : es_time_epoch();
	r.median = -1;
	int rc = collect(&r, job_dir);
	if (!rc) {
		size_t n = 0;
		double *durs = done_durations(&r, &n);
		if (!durs) {
			rc = oom("durations");
		} else {
			if (n)
				r.median = n % 2 ? durs[n / 2] : (durs[n / 2 - 1] + durs[n / 2]) / 2;
			struct html h = { out, 0 };
			put_page(&h, &r, durs, n);
			if (h.rc)
				rc = es_error(ES_ENOMEM, "out of memory writing the report of %s", r.m.job_dir);
		}
		free(durs);
	}
	if (!rc && info) {
		*info = (struct es_report_info){ r.n_a, r.n_h, r.n_w, r.n_ev, r.st.counts.total, r.st.counts.done,
						 r.st.counts.failed };
	}
	report_free(&r);
	return rc;
}

/* The output must name a file in a folder that exists. */
static int check_output(const char *output)
{
	struct stat st;
	if (!output || !*output)
		return es_error(ES_EUSAGE, "the report needs an output file name");
	size_t n = strlen(output);
	if (output[n - 1] == '/' || (stat(output, &st) == 0 && S_ISDIR(st.st_mode)))
		return es_error(ES_EUSAGE, "Report output is a folder: %s (give the name of an .html file)", output);
	const char *slash = strrchr(output, '/');
	struct es_buf dir = ES_BUF_INIT;
	int rc = slash ? es_buf_add(&dir, output, slash == output ? 1 : (size_t)(slash - output)) : es_buf_adds(&dir, ".");
	if (!rc && !is_dir(dir.data))
		rc = es_error(ES_EUSAGE, "Report output folder does not exist: %s", dir.data);
	es_buf_free(&dir);
	return rc;
}

int es_report_write(const char *job_dir, const char *output, const struct es_report_opts *opts,
		    struct es_report_info *info)
{
	int rc = check_output(output);
	if (rc)
		return rc;
	struct es_buf html = ES_BUF_INIT;
	rc = es_report_render(job_dir, opts, &html, info);
	if (!rc)
		rc = es_fs_write_atomic(output, html.data, html.len);
	es_buf_free(&html);
	return rc;
}
