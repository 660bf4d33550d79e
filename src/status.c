#include "eshard/status.h"
#include "eshard/buf.h"
#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/par.h"
#include "json.h"
#include "record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *es_shard_state_name(enum es_shard_state s)
{
	switch (s) {
	case ES_SHARD_PENDING: return "pending";
	case ES_SHARD_RUNNING: return "running";
	case ES_SHARD_STALE: return "stale";
	case ES_SHARD_DONE: return "done";
	case ES_SHARD_FAILED: return "failed";
	}
	return "unknown";
}

int es_status_exit(const struct es_status *s)
{
	if (s->complete)
		return 0;
	return s->counts.failed > 0 || s->bad_records > 0 ? 2 : 1;
}

int es_status_exit_code(const struct es_status_counts *c)
{
	if (c->done == c->total)
		return 0;
	return c->failed > 0 ? 2 : 1;
}

static double effective_timeout(const struct es_manifest *m, double lock_timeout)
{
	return lock_timeout > 0 ? lock_timeout : (double)m->policy.lock_timeout_secs;
}

/* The state a lock tells: a terminal fence its own (done or failed), a running lock running or
 * stale for a one-shot observer (its mtime age is all it can see). */
static enum es_shard_state lock_state(const struct es_manifest *m, const struct es_lock_info *li, double timeout,
				      double *age)
{
	struct es_policy p = m->policy;
	p.lock_timeout_secs = es_i64_of_double(timeout); /* (double)INT64_MAX does not cast back */
	double a = es_time_epoch() - (double)li->mtime_ns / 1e9;
	*age = a > 0 ? a : 0;
	if (li->terminal)
		return !strcmp(li->state, "done") ? ES_SHARD_DONE : ES_SHARD_FAILED;
	return es_claim_lock_stale(li, *age, *age, &p) ? ES_SHARD_STALE : ES_SHARD_RUNNING;
}

/* Load a JSON object quietly: 0 with *doc, ES_ENOENT when missing, another code when
 * unreadable (no message: the caller records metadata_error). */
static int load_quiet(const char *path, cJSON **doc)
{
	es_log_quiet_begin();
	int rc = es_json_load(path, doc);
	es_log_quiet_end();
	if (!rc && !cJSON_IsObject(*doc)) {
		cJSON_Delete(*doc);
		*doc = NULL;
		rc = ES_EINVAL;
	}
	return rc;
}

static char *dup_str(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* A path recorded in a record, relative to the job folder, that must name something inside
 * attempts/<id>/; anything else (absolute, "..", another shard) is ignored: status only reads. */
static int attempt_dir_of(const char *job_dir, const char *id, const char *rel, struct es_buf *out)
{
	if (!rel || rel[0] == '/' || strstr(rel, ".."))
		return -1;
	static const char prefix[] = ES_JOB_ATTEMPTS "/";
	size_t lp = sizeof(prefix) - 1, lid = strlen(id);
	if (strncmp(rel, prefix, lp) || strncmp(rel + lp, id, lid) || rel[lp + lid] != '/')
		return -1;
	const char *slash = strrchr(rel, '/');
	es_buf_reset(out);
	es_buf_printf(out, "%s/%.*s", job_dir, (int)(slash - rel), rel);
	return 0;
}

static cJSON *load_attempt(const char *dir)
{
	struct es_buf p = ES_BUF_INIT;
	cJSON *a = NULL;
	es_buf_printf(&p, "%s/" ES_ATTEMPT_JSON, dir);
	if (load_quiet(p.data, &a))
		a = NULL;
	es_buf_free(&p);
	return a;
}

/* The folder of attempt number n of a shard, attempts/<id>/<NNNN>-*, into dir; 0 when found. */
static int attempt_dir_by_number(const char *job_dir, const char *id, int64_t n, struct es_buf *dir)
{
	char prefix[32];
	int found = -1;
	snprintf(prefix, sizeof(prefix), "%04lld-", (long long)n);
	DIR *d = es_jobpath_attempts(dir, job_dir, id) ? NULL : opendir(dir->data);
	if (!d)
		return -1;
	struct dirent *e;
	while (found && (e = readdir(d)) != NULL)
		if (!strncmp(e->d_name, prefix, strlen(prefix))) {
			es_buf_adds(dir, "/");
			es_buf_adds(dir, e->d_name);
			found = 0;
		}
	closedir(d);
	return found;
}

/* What the attempt folder dir tells of attempt n: host, status, error (unless known) and the
 * path of its log. */
static void problem_from_dir(const char *dir, int64_t n, struct es_shard_problem *p)
{
	cJSON *a = load_attempt(dir);
	const char *h = es_json_get_str(a, "hostname"), *st = es_json_get_str(a, "status");
	const char *err = es_json_get_str(a, "error");
	p->attempt = n > 0 && n <= INT32_MAX ? (int)n : 0;
	if (h && *h)
		p->host = strdup(h);
	if (st)
		p->status = strdup(st);
	if (!p->error && err)
		p->error = strdup(err);
	struct es_buf log = ES_BUF_INIT;
	if (!es_buf_printf(&log, "%s/" ES_ATTEMPT_LOG, dir))
		p->log_path = es_buf_detach(&log, NULL);
	es_buf_free(&log);
	cJSON_Delete(a);
}

/* A failed shard: its last attempt, beside the record's last_log, else attempts/<id>/<NNNN>-*. */
static void explain_failed(const char *job_dir, const char *id, const cJSON *rec, struct es_shard_status *r)
{
	struct es_buf dir = ES_BUF_INIT;
	int64_t last = 0;
	es_json_get_i64(rec, "last_attempt", &last);
	r->attempt_number = last > 0 ? last : 0;
	r->has_problem = 1;
	r->problem.error = dup_str(r->error);
	if (!attempt_dir_of(job_dir, id, es_json_get_str(rec, "last_log"), &dir) ||
	    (last > 0 && !attempt_dir_by_number(job_dir, id, last, &dir))) {
		problem_from_dir(dir.data, last, &r->problem);
		r->failed_host = dup_str(r->problem.host);
	}
	es_buf_free(&dir);
}

/* An attempt that ended without a result through no fault of the shard: preempted (a stop
 * signal) is not a problem to show, as it does not count toward the retry limit either. */
static int is_problem_status(const char *st)
{
	return st && strcmp(st, "done") && strcmp(st, "superseded") && strcmp(st, "running") && strcmp(st, "preempted");
}

/* A shard on a later attempt (done, running or stale with attempt_number > 1): the latest earlier
 * attempt that ended without a result. Looks back at most 16 attempts. */
static void explain_retried(const char *job_dir, const char *id, struct es_shard_status *r)
{
	struct es_buf dir = ES_BUF_INIT;
	for (int64_t n = r->attempt_number - 1; n >= 1 && n >= r->attempt_number - 16; n--) {
		if (attempt_dir_by_number(job_dir, id, n, &dir))
			continue;
		cJSON *a = load_attempt(dir.data);
		int is = is_problem_status(es_json_get_str(a, "status"));
		cJSON_Delete(a);
		if (is) {
			r->has_problem = 1;
			problem_from_dir(dir.data, n, &r->problem);
			break;
		}
	}
	es_buf_free(&dir);
}

/* The bounded tail of a problem's log; a missing log leaves it NULL. */
static void read_problem_tail(struct es_shard_problem *p)
{
	struct es_buf t = ES_BUF_INIT;
	int cut = p->log_path ? es_fs_read_tail(p->log_path, ES_STATUS_TAIL_LINES, ES_STATUS_TAIL_BYTES, &t) : -1;
	if (cut >= 0) {
		p->log_cut = cut;
		p->log_tail = es_buf_detach(&t, NULL);
	}
	es_buf_free(&t);
}

static int shard_paths(const struct es_manifest *m, const char *id, struct es_buf *done,
		       struct es_buf *failed, struct es_buf *lock)
{
	int rc = es_jobpath_record(done, m->job_dir, "done", id);
	if (!rc)
		rc = es_jobpath_record(failed, m->job_dir, "failed", id);
	if (!rc)
		rc = es_jobpath_lock(lock, m->job_dir, id);
	return rc;
}

static void count_state(struct es_status_counts *c, enum es_shard_state s)
{
	switch (s) {
	case ES_SHARD_PENDING: c->pending++; break;
	case ES_SHARD_RUNNING: c->running++; break;
	case ES_SHARD_STALE: c->stale++; break;
	case ES_SHARD_DONE: c->done++; break;
	case ES_SHARD_FAILED: c->failed++; break;
	}
}

int es_status_count(const struct es_manifest *m, double lock_timeout, struct es_status_counts *c)
{
	return es_status_count_cached(m, lock_timeout, NULL, NULL, c);
}

int es_status_count_cached(const struct es_manifest *m, double lock_timeout, unsigned char *done_seen,
			   const unsigned char *running_now, struct es_status_counts *c)
{
	struct es_buf done = ES_BUF_INIT, failed = ES_BUF_INIT, lock = ES_BUF_INIT;
	double timeout = effective_timeout(m, lock_timeout);
	int rc = 0;
	memset(c, 0, sizeof(*c));
	c->total = (int64_t)m->n_shards;
	for (size_t i = 0; !rc && i < m->n_shards; i++) {
		enum es_shard_state s = ES_SHARD_PENDING;
		if (done_seen && done_seen[i]) {
			count_state(c, ES_SHARD_DONE);
			continue;
		}
		if ((rc = shard_paths(m, m->shards[i].id, &done, &failed, &lock)))
			break;
		if ((rc = es_fs_exists_fresh(done.data)) < 0)
			break;
		if (rc == 1) {
			s = ES_SHARD_DONE;
			if (done_seen)
				done_seen[i] = 1;
		} else if ((rc = es_fs_exists_fresh(failed.data)) < 0) {
			break;
		} else if (rc == 1) {
			s = ES_SHARD_FAILED;
		} else if (running_now && running_now[i]) {
			s = ES_SHARD_RUNNING;
		} else {
			struct es_lock_info li;
			double age;
			if ((rc = es_claim_lock_read(lock.data, &li)))
				break;
			if (li.exists)
				s = lock_state(m, &li, timeout, &age);
		}
		rc = 0;
		count_state(c, s);
	}
	es_buf_free(&done);
	es_buf_free(&failed);
	es_buf_free(&lock);
	return rc;
}

/* merge's checks of a done record, without reading the result's lines: its fields, a result
 * path inside the job folder, and a result file of the recorded size. A record merge would
 * refuse gets record_error, and the job is then not complete. A result that looks absent or of
 * another size is also what a client that caches metadata (NFS's actimeo and lookupcache) shows
 * for a while after another node wrote it: record_unseen says so, and verify waits for it. */
static void check_done_record(const struct es_manifest *m, const char *id, const cJSON *doc, struct es_shard_status *r)
{
	struct es_buf out = ES_BUF_INIT, why = ES_BUF_INIT;
	struct es_done_fields f;
	struct stat st;
	es_log_quiet_begin();
	int rc = es_record_check_done(m, id, doc, &out, &f, &st);
	es_log_quiet_end();
	if (!rc) {
		r->result_path = dup_str(out.data);
		r->result_sha256 = dup_str(f.sha256);
	}
	if (rc) {
		es_buf_adds(&why, es_last_error());
	} else if (!st.st_mode) {
		es_buf_printf(&why, "Result of %s not found: %s", id, out.data);
		r->record_unseen = 1;
	} else if (!S_ISREG(st.st_mode)) {
		es_buf_printf(&why, "Result of %s is not a regular file: %s", id, out.data);
	} else if (f.size_bytes >= 0 && (int64_t)st.st_size != f.size_bytes) {
		es_buf_printf(&why, "Result of %s has %lld bytes, its done record says %lld: %s", id,
			      (long long)st.st_size, (long long)f.size_bytes, out.data);
		r->record_unseen = 1;
	}
	if (why.len)
		r->record_error = es_buf_detach(&why, NULL);
	es_buf_free(&why);
	es_buf_free(&out);
}

/* Classify one shard with everything the full report shows. */
static int collect_one(const struct es_manifest *m, const struct es_shard *sh, double timeout, unsigned seen,
		       int by_caller, struct es_buf *done, struct es_buf *failed, struct es_buf *lock,
		       struct es_shard_status *r)
{
	cJSON *doc = NULL;
	int rc;
	r->shard_id = sh->id;
	r->rows = sh->rows;
	r->claimed_at_epoch = r->completed_at_epoch = r->claim_age_secs = -1;
	r->done_rows = -1;
	if ((rc = shard_paths(m, sh->id, done, failed, lock)))
		return rc;

	/* A name no listing shows is not looked up (es_status_seen): a lookup of an absent name is a
	 * round trip to the server on a distributed file system, three per pending shard. */
again:
	rc = ES_ENOENT;
	if (seen & ES_SEEN_DONE) {
		es_log_quiet_begin();
		rc = es_record_load(m, "done", sh->id, &doc);
		es_log_quiet_end();
	}
	if (rc != ES_ENOENT) {
		r->state = ES_SHARD_DONE;
		if (rc) {
			r->metadata_error = 1;
			r->record_error = dup_str(es_last_error());
			return 0;
		}
		check_done_record(m, sh->id, doc, r);
		r->owner = dup_str(es_json_get_str(doc, "hostname"));
		es_json_get_i64(doc, "attempt_number", &r->attempt_number);
		es_json_get_i64(doc, "rows", &r->done_rows);
		double t;
		if (!es_time_parse_iso(es_json_get_str(doc, "completed_at"), &t))
			r->completed_at_epoch = t;
		struct es_buf dir = ES_BUF_INIT;
		if (!attempt_dir_of(m->job_dir, sh->id, es_json_get_str(doc, "output_path"), &dir)) {
			if (by_caller) {
				r->published_dir = es_buf_detach(&dir, NULL);
			} else {
				cJSON *a = load_attempt(dir.data);
				if (a)
					r->claimed_at_epoch = es_json_get_epoch(a, "claimed_at_epoch", "claimed_at");
				cJSON_Delete(a);
			}
		}
		es_buf_free(&dir);
		cJSON_Delete(doc);
		return 0;
	}

	rc = ES_ENOENT;
	if (seen & ES_SEEN_FAILED) {
		es_log_quiet_begin();
		rc = es_record_load(m, "failed", sh->id, &doc);
		es_log_quiet_end();
	}
	if (rc != ES_ENOENT) {
		r->state = ES_SHARD_FAILED;
		if (rc) {
			r->metadata_error = 1;
			return 0;
		}
		r->error = dup_str(es_json_get_str(doc, "last_error"));
		explain_failed(m->job_dir, sh->id, doc, r);
		cJSON_Delete(doc);
		return 0;
	}

	struct es_lock_info li;
	if (!(seen & ES_SEEN_LOCK)) {
		r->state = ES_SHARD_PENDING;
		return 0;
	}
	if ((rc = es_claim_lock_read(lock->data, &li)))
		return rc;
	if (!li.exists) {
		r->state = ES_SHARD_PENDING;
		return 0;
	}
	r->state = lock_state(m, &li, timeout, &r->lock_age_secs);
	if (li.terminal && (seen & (ES_SEEN_DONE | ES_SEEN_FAILED)) != (ES_SEEN_DONE | ES_SEEN_FAILED)) {
		/* A fence whose record the listings did not show: the shard was published between
		 * the listing and this read (the record comes before the fence), or a caching
		 * client's listing lags. Its record is looked for, once, rather than reported
		 * missing: a --watch of a job ending then ended on a bad record that was there. */
		seen |= ES_SEEN_DONE | ES_SEEN_FAILED;
		goto again;
	}
	if (!li.readable || li.terminal) {
		/* A fence whose record this client cannot see (and that has no copy of it): the
		 * state is known, the record's details are not, and merge could not use it. */
		r->metadata_error = 1;
		if (r->state == ES_SHARD_DONE) {
			struct es_buf why = ES_BUF_INIT;
			es_buf_printf(&why, "Done record not found: %s (the lock is a done fence)", done->data);
			r->record_error = es_buf_detach(&why, NULL);
			r->record_unseen = 1;
		}
		return 0;
	}
	r->owner = li.hostname[0] ? strdup(li.hostname) : NULL;
	snprintf(r->lock_token, sizeof(r->lock_token), "%s", li.token);
	r->attempt_number = li.attempt_number > 0 ? li.attempt_number : 0;
	r->has_pid = li.has_pid;
	r->pid = li.pid;
	r->has_heartbeat = li.has_heartbeat;
	r->heartbeat = li.heartbeat;
	double c = li.claimed_at_epoch;
	if (c >= 0) {
		double age = es_time_epoch() - c;
		r->claim_age_secs = age > 0 ? age : 0;
		r->claimed_at_epoch = c; /* where the progress starts, as a done shard's claim */
	}
	return 0;
}

static int host_cmp(const void *a, const void *b)
{
	return strcmp(((const struct es_status_host *)a)->host, ((const struct es_status_host *)b)->host);
}

/* The slot of host in s, added when new; NULL when out of memory (reported). */
static struct es_status_host *host_slot(struct es_status *s, const char *host)
{
	if (!host || !*host)
		host = "(unknown)";
	for (size_t i = 0; i < s->n_hosts; i++)
		if (!strcmp(s->hosts[i].host, host))
			return &s->hosts[i];
	if (es_grow(&s->hosts, &s->cap_hosts, s->n_hosts + 1, sizeof(*s->hosts)))
		return NULL;
	struct es_status_host *h = &s->hosts[s->n_hosts];
	memset(h, 0, sizeof(*h));
	if (!(h->host = strdup(host))) {
		es_error(ES_ENOMEM, "out of memory collecting the status of host %s", host);
		return NULL;
	}
	s->n_hosts++;
	return h;
}

/* The flag bits of shard id from the sorted listings of state/done, state/failed and
 * state/locks. */
static unsigned listed(const char *id, const struct es_strv *done, const struct es_strv *failed,
		       const struct es_strv *locks, struct es_buf *name)
{
	unsigned seen = 0;
	es_buf_reset(name);
	if (es_buf_printf(name, "%s.json", id))
		return ES_SEEN_ALL; /* out of memory: the names are looked up instead */
	seen |= es_strv_has_sorted(done, name->data) ? ES_SEEN_DONE : 0;
	seen |= es_strv_has_sorted(failed, name->data) ? ES_SEEN_FAILED : 0;
	es_buf_reset(name);
	if (es_buf_printf(name, "%s.lock", id))
		return ES_SEEN_ALL;
	seen |= es_strv_has_sorted(locks, name->data) ? ES_SEEN_LOCK : 0;
	return seen;
}

struct list_ctx {
	const struct es_manifest *m;
	struct es_strv v[3]; /* the listings of state/done, state/failed, state/locks */
	unsigned char *seen;
};

/* The flags of shards [begin, end) from the listings. */
static int seen_part(void *ctx, size_t part, size_t begin, size_t end)
{
	struct list_ctx *c = ctx;
	struct es_buf name = ES_BUF_INIT;
	(void)part;
	for (size_t i = begin; i < end; i++)
		c->seen[i] = (unsigned char)listed(c->m->shards[i].id, &c->v[0], &c->v[1], &c->v[2], &name);
	es_buf_free(&name);
	return 0;
}

int es_status_seen(const struct es_manifest *m, const struct es_strv v[3], unsigned char *seen)
{
	struct list_ctx c = { m, { v[0], v[1], v[2] }, seen };
	return es_par_run(m->n_shards, es_par_parts(m->n_shards, ES_STATUS_PART, ES_STATUS_THREADS), seen_part, &c);
}

static void shard_free(struct es_shard_status *r)
{
	free(r->owner);
	free(r->error);
	free(r->failed_host);
	free(r->record_error);
	free(r->published_dir);
	free(r->result_path);
	free(r->result_sha256);
	struct es_shard_problem *p = &r->problem;
	free(p->status);
	free(p->error);
	free(p->host);
	free(p->log_path);
	free(p->log_tail);
	memset(r, 0, sizeof(*r));
}

/* A shard that nothing but a retry changes: done with a record merge accepts, or failed, and
 * still listed so. Its details are kept from the last refresh. */
static int shard_final(const struct es_shard_status *r, unsigned seen)
{
	if (r->metadata_error || r->record_error || !r->shard_id || (seen & ES_SEEN_AGAIN))
		return 0;
	return (r->state == ES_SHARD_DONE && (seen & ES_SEEN_DONE)) ||
	       (r->state == ES_SHARD_FAILED && (seen & ES_SEEN_FAILED) && !(seen & ES_SEEN_DONE));
}

/* The log tails of the first ES_STATUS_MAX_TAILS shards with a problem, in manifest order: read
 * for a shard that has come into that range, dropped for one that has left it. */
static void tail_slot(struct es_shard_status *r, size_t *tails)
{
	if (!r->has_problem)
		return;
	if (*tails >= ES_STATUS_MAX_TAILS) {
		free(r->problem.log_tail);
		r->problem.log_tail = NULL;
		r->problem.log_cut = 0;
		r->tail_read = 0;
		return;
	}
	if (!r->tail_read) {
		read_problem_tail(&r->problem);
		r->tail_read = 1;
	}
	(*tails)++;
}

/* Read again what can have changed of shard i: everything unless it is final. */
static int refresh_one(const struct es_manifest *m, size_t i, double timeout, unsigned seen, int by_caller,
		       struct es_buf *b[3], struct es_shard_status *r)
{
	if (shard_final(r, seen))
		return 0;
	shard_free(r);
	int rc = collect_one(m, &m->shards[i], timeout, seen, by_caller, b[0], b[1], b[2], r);
	if (!rc && r->state != ES_SHARD_FAILED && r->state != ES_SHARD_PENDING && r->attempt_number > 1)
		explain_retried(m->job_dir, r->shard_id, r);
	return rc;
}

/* The sums over the shards: counts, rows, hosts, the simple rate. */
int es_status_sum(struct es_status *out)
{
	double t0 = -1, t1 = -1;
	memset(&out->counts, 0, sizeof(out->counts));
	out->counts.total = (int64_t)out->n_shards;
	out->bad_records = out->unseen_records = out->rows_total = out->rows_done = out->result_rows_done = 0;
	out->rate_rows_per_sec = out->eta_secs = -1;
	for (size_t i = 0; i < out->n_hosts; i++)
		free(out->hosts[i].host);
	out->n_hosts = 0;
	for (size_t i = 0; i < out->n_shards; i++) {
		struct es_shard_status *r = &out->shards[i];
		count_state(&out->counts, r->state);
		out->bad_records += r->record_error != NULL;
		out->unseen_records += r->record_error && r->record_unseen;
		out->rows_total += r->rows;
		const char *host = NULL;
		if (r->state == ES_SHARD_DONE) {
			out->rows_done += r->rows;
			if (r->done_rows > 0)
				out->result_rows_done += r->done_rows;
			if (r->completed_at_epoch > t1)
				t1 = r->completed_at_epoch;
			host = r->owner;
		} else if (r->state == ES_SHARD_RUNNING || r->state == ES_SHARD_STALE) {
			host = r->owner;
		} else if (r->state == ES_SHARD_FAILED) {
			host = r->failed_host;
		}
		if (r->state != ES_SHARD_FAILED && r->state != ES_SHARD_PENDING && r->claimed_at_epoch >= 0 &&
		    (t0 < 0 || r->claimed_at_epoch < t0))
			t0 = r->claimed_at_epoch;
		if (r->state == ES_SHARD_PENDING)
			continue;
		struct es_status_host *h = host_slot(out, host);
		if (!h)
			return ES_ENOMEM; /* reported by host_slot */
		switch (r->state) {
		case ES_SHARD_DONE: h->done++; break;
		case ES_SHARD_RUNNING: h->running++; break;
		case ES_SHARD_STALE: h->stale++; break;
		case ES_SHARD_FAILED: h->failed++; break;
		case ES_SHARD_PENDING: break;
		}
	}
	if (out->n_hosts > 1)
		qsort(out->hosts, out->n_hosts, sizeof(*out->hosts), host_cmp);
	out->complete = out->counts.done == out->counts.total && !out->bad_records;
	out->terminal = out->counts.done + out->counts.failed == out->counts.total;
	if (out->rows_done > 0 && t0 >= 0 && t1 > t0) {
		out->rate_rows_per_sec = (double)out->rows_done / (t1 - t0);
		/* No ETA for a finished job, nor for a stopped one (nothing runs). */
		if (!out->terminal && out->counts.running > 0)
			out->eta_secs = (double)(out->rows_total - out->rows_done) / out->rate_rows_per_sec;
	}
	if (out->complete)
		out->eta_secs = 0;
	return 0;
}

struct refresh_ctx {
	const struct es_manifest *m;
	const unsigned char *seen;
	struct es_status *out;
};

/* es_status_refresh's shards [begin, end), on one thread (par.h). */
static int refresh_part(void *ctx, size_t part, size_t begin, size_t end)
{
	struct refresh_ctx *c = ctx;
	struct es_buf done = ES_BUF_INIT, failed = ES_BUF_INIT, lock = ES_BUF_INIT;
	struct es_buf *b[3] = { &done, &failed, &lock };
	int rc = 0;
	(void)part;
	es_fs_walk_cache_begin(); /* the records, locks and attempts of every shard: a walk each */
	for (size_t i = begin; !rc && i < end; i++)
		rc = refresh_one(c->m, i, c->out->lock_timeout_secs, c->seen ? c->seen[i] : ES_SEEN_ALL,
				 c->out->claims_by_caller, b, &c->out->shards[i]);
	es_fs_walk_cache_end();
	es_buf_free(&done);
	es_buf_free(&failed);
	es_buf_free(&lock);
	return rc;
}

size_t es_status_threads(const struct es_status *s)
{
	return s->threads ? s->threads : es_par_parts(s->n_shards, ES_STATUS_PART, ES_STATUS_THREADS);
}

int es_status_refresh(const struct es_manifest *m, double lock_timeout, const unsigned char *seen,
		      struct es_status *out)
{
	if (!out->shards) {
		int by_caller = out->claims_by_caller;
		unsigned threads = out->threads;
		memset(out, 0, sizeof(*out));
		out->claims_by_caller = by_caller;
		out->threads = threads;
		out->shards = calloc(m->n_shards ? m->n_shards : 1, sizeof(*out->shards));
		if (!out->shards)
			return es_error(ES_ENOMEM, "out of memory collecting the status of %s", m->job_dir);
		out->n_shards = m->n_shards;
	}
	out->lock_timeout_secs = effective_timeout(m, lock_timeout);
	out->lease_secs = m->policy.lease_secs;
	struct refresh_ctx c = { m, seen, out };
	int rc = es_par_run(m->n_shards, es_status_threads(out), refresh_part, &c);
	/* The log tails in manifest order, the first ES_STATUS_MAX_TAILS problems' only. */
	size_t tails = 0;
	for (size_t i = 0; !rc && i < m->n_shards; i++)
		tail_slot(&out->shards[i], &tails);
	return rc ? rc : es_status_sum(out);
}

int es_status_collect(const struct es_manifest *m, double lock_timeout, struct es_status *out)
{
	memset(out, 0, sizeof(*out));
	return es_status_refresh(m, lock_timeout, NULL, out);
}

void es_status_free(struct es_status *s)
{
	for (size_t i = 0; s->shards && i < s->n_shards; i++)
		shard_free(&s->shards[i]);
	free(s->shards);
	for (size_t i = 0; i < s->n_hosts; i++)
		free(s->hosts[i].host);
	free(s->hosts);
	memset(s, 0, sizeof(*s));
}

/* ---- output ---- */

static double round3(double v)
{
	return round(v * 1000.0) / 1000.0;
}

static cJSON *str_or_null(const char *s)
{
	return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

/* Whole numbers are written as JSON integers (1 not 1.0), like the reference's int policy. */
static cJSON *num_node(double v)
{
	if (v == floor(v) && fabs(v) < 9e15)
		return es_json_new_int((int64_t)v);
	return cJSON_CreateNumber(v);
}

static cJSON *problem_json(const struct es_shard_problem *p)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	int rc = es_json_set(o, "attempt", p->attempt > 0 ? es_json_new_int(p->attempt) : cJSON_CreateNull());
	rc |= es_json_set(o, "status", str_or_null(p->status));
	rc |= es_json_set(o, "error", str_or_null(p->error));
	rc |= es_json_set(o, "host", str_or_null(p->host));
	rc |= es_json_set(o, "log_path", str_or_null(p->log_path));
	rc |= es_json_set(o, "log_tail", str_or_null(p->log_tail));
	rc |= es_json_set_bool(o, "log_tail_cut", p->log_cut);
	if (rc) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static cJSON *shard_json(const struct es_shard_status *r)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	int rc = es_json_set_str(o, "shard_id", r->shard_id);
	rc |= es_json_set_int(o, "rows", r->rows);
	rc |= es_json_set_str(o, "status", es_shard_state_name(r->state));
	switch (r->state) {
	case ES_SHARD_DONE:
		if (r->metadata_error)
			rc |= es_json_set_bool(o, "metadata_error", 1);
		else
			rc |= es_json_set(o, "owner", str_or_null(r->owner));
		if (r->record_error)
			rc |= es_json_set_str(o, "record_error", r->record_error);
		break;
	case ES_SHARD_FAILED:
		rc |= es_json_set(o, "error", str_or_null(r->error));
		if (r->metadata_error)
			rc |= es_json_set_bool(o, "metadata_error", 1);
		break;
	case ES_SHARD_RUNNING:
	case ES_SHARD_STALE:
		rc |= es_json_set_float(o, "lock_age_secs", round3(r->lock_age_secs));
		if (r->metadata_error) {
			rc |= es_json_set_bool(o, "metadata_error", 1);
			break;
		}
		rc |= es_json_set(o, "owner", str_or_null(r->owner));
		rc |= es_json_set(o, "pid", r->has_pid ? es_json_new_int(r->pid) : cJSON_CreateNull());
		if (r->has_heartbeat) {
			/* With leases the mtime is the last refresh, so the lock age is the lease age. */
			rc |= es_json_set_int(o, "heartbeat", r->heartbeat);
			rc |= es_json_set_float(o, "lease_age_secs", round3(r->lock_age_secs));
		}
		if (r->claim_age_secs >= 0)
			rc |= es_json_set_float(o, "claim_age_secs", round3(r->claim_age_secs));
		break;
	case ES_SHARD_PENDING:
		break;
	}
	if (r->attempt_number > 0)
		rc |= es_json_set_int(o, "attempt_number", r->attempt_number);
	if (r->has_problem)
		rc |= es_json_set(o, "problem", problem_json(&r->problem));
	if (rc) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

int es_status_format_json(const struct es_manifest *m, const struct es_status *s, struct es_buf *out)
{
	cJSON *o = cJSON_CreateObject(), *counts = cJSON_CreateObject(), *shards = cJSON_CreateArray();
	cJSON *progress = cJSON_CreateObject(), *hosts = cJSON_CreateArray();
	int rc = (!o || !counts || !shards || !progress || !hosts) ? ES_ENOMEM : 0;
	if (rc) {
		cJSON_Delete(counts);
		cJSON_Delete(shards);
		cJSON_Delete(progress);
		cJSON_Delete(hosts);
		goto out;
	}
	rc |= es_json_set_int(counts, "done", s->counts.done);
	rc |= es_json_set_int(counts, "failed", s->counts.failed);
	rc |= es_json_set_int(counts, "pending", s->counts.pending);
	rc |= es_json_set_int(counts, "running", s->counts.running);
	rc |= es_json_set_int(counts, "stale", s->counts.stale);
	rc |= es_json_set(o, "counts", counts);
	rc |= es_json_set_bool(o, "complete", s->complete);
	cJSON *ex = cJSON_CreateObject();
	rc |= es_json_set_str(ex, "executor_type", m->executor_type);
	rc |= es_json_set_str(ex, "ray_address", m->ray_address);
	if (m->recipe_executor_type)
		rc |= es_json_set_str(ex, "recipe_executor_type", m->recipe_executor_type);
	rc |= es_json_set(o, "execution", ex);
	if (m->unsharded) /* only then: the reference's status object has no such key */
		rc |= es_json_set_bool(o, "unsharded", 1);
	if (m->bad_lines > 0) /* only when prepare --bad-lines skip left lines out, likewise */
		rc |= es_json_set_int(o, "bad_lines_skipped", m->bad_lines);
	rc |= es_json_set_str(o, "job_dir", m->job_dir);
	rc |= es_json_set_str(o, "job_id", m->job_id);
	for (size_t i = 0; i < s->n_shards; i++) {
		cJSON *r = shard_json(&s->shards[i]);
		if (!r || !cJSON_AddItemToArray(shards, r)) {
			cJSON_Delete(r);
			rc = ES_ENOMEM;
			break;
		}
	}
	rc |= es_json_set(o, "shards", shards);
	rc |= es_json_set_bool(o, "terminal", s->terminal);
	rc |= es_json_set_int(o, "total", s->counts.total);
	/* eshard-mpi additions; the reference's keys above keep their meaning. */
	rc |= es_json_set(o, "lock_timeout_secs", num_node(s->lock_timeout_secs));
	rc |= es_json_set(o, "lease_secs", num_node(s->lease_secs));
	rc |= es_json_set_int(o, "record_errors", s->bad_records);
	rc |= es_json_set_int(progress, "shards_done", s->counts.done);
	rc |= es_json_set_int(progress, "shards_total", s->counts.total);
	rc |= es_json_set_int(progress, "rows_done", s->rows_done);
	rc |= es_json_set_int(progress, "rows_total", s->rows_total);
	rc |= es_json_set_int(progress, "result_rows_done", s->result_rows_done);
	rc |= es_json_set_int(progress, "bad_times", s->bad_times);
	rc |= es_json_set(progress, "rows_per_sec", s->rate_rows_per_sec >= 0 ?
			  cJSON_CreateNumber(round3(s->rate_rows_per_sec)) : cJSON_CreateNull());
	rc |= es_json_set(progress, "eta_secs", s->eta_secs >= 0 ?
			  cJSON_CreateNumber(round3(s->eta_secs)) : cJSON_CreateNull());
	rc |= es_json_set(o, "progress", progress);
	for (size_t i = 0; i < s->n_hosts; i++) {
		cJSON *h = cJSON_CreateObject();
		if (!h || !cJSON_AddItemToArray(hosts, h)) {
			cJSON_Delete(h);
			rc = ES_ENOMEM;
			break;
		}
		rc |= es_json_set_str(h, "host", s->hosts[i].host);
		rc |= es_json_set_int(h, "done", s->hosts[i].done);
		rc |= es_json_set_int(h, "running", s->hosts[i].running);
		rc |= es_json_set_int(h, "stale", s->hosts[i].stale);
		rc |= es_json_set_int(h, "failed", s->hosts[i].failed);
	}
	rc |= es_json_set(o, "hosts", hosts);
	if (!rc)
		rc = es_json_dump(o, 1, out);
out:
	cJSON_Delete(o);
	return rc ? es_error(ES_ENOMEM, "out of memory writing the status of %s", m->job_dir) : 0;
}

static void fmt_duration(double secs, char *out, size_t n)
{
	/* Saturated: an ETA of rows left over a tiny rate can pass any integer. */
	long long t = (long long)es_i64_of_double(round(secs));
	if (t >= 3600)
		snprintf(out, n, "%lldh%02lldm%02llds", t / 3600, t / 60 % 60, t % 60);
	else if (t >= 60)
		snprintf(out, n, "%lldm%02llds", t / 60, t % 60);
	else
		snprintf(out, n, "%llds", t);
}

int es_status_format_text(const struct es_manifest *m, const struct es_status *s, int all,
			  struct es_buf *out)
{
	const char *et = m->executor_type;
	const struct es_status_counts *c = &s->counts;
	/* A command processor uses no Ray: its job shows the command it runs instead. */
	int rc = m->processor.kind == ES_PROC_COMMAND
		 ? es_buf_printf(out, "Job %s: processor=command (%s)", m->job_id,
				 m->processor.command ? m->processor.command : "unknown")
		 : es_buf_printf(out, "Job %s: executor=%s ray_address=%s", m->job_id, et ? et : "ray", m->ray_address);
	rc |= es_buf_printf(out, " total=%lld pending=%lld running=%lld stale=%lld done=%lld failed=%lld\n",
			    (long long)c->total, (long long)c->pending, (long long)c->running,
			    (long long)c->stale, (long long)c->done, (long long)c->failed);
	if (m->unsharded)
		rc |= es_buf_adds(out, "Unsharded: the recipe is not shard-safe; one shard, the whole dataset, runs once "
				  "(--allow-unsharded; manifest unsharded.reasons)\n");
	if (m->bad_lines > 0)
		rc |= es_buf_printf(out, "Bad lines: %lld input line(s) left out at prepare (--bad-lines skip; manifest "
				    "bad_lines lists where)\n", (long long)m->bad_lines);
	double pct = s->rows_total > 0 ? 100.0 * (double)s->rows_done / (double)s->rows_total : 0;
	rc |= es_buf_printf(out, "Progress: %lld/%lld shards done, %lld/%lld rows (%.1f%%)",
			    (long long)c->done, (long long)c->total, (long long)s->rows_done,
			    (long long)s->rows_total, pct);
	if (s->rate_rows_per_sec >= 0)
		rc |= es_buf_printf(out, s->rate_rows_per_sec < 10 ? ", %.2f rows/s" : ", %.1f rows/s",
				    s->rate_rows_per_sec);
	else
		rc |= es_buf_adds(out, ", rate unknown");
	if (s->complete) {
		rc |= es_buf_adds(out, ", complete\n");
	} else if (s->terminal) {
		rc |= es_buf_adds(out, ", finished with failures\n");
	} else if (s->eta_secs >= 0) {
		char d[48];
		fmt_duration(s->eta_secs, d, sizeof(d));
		rc |= es_buf_printf(out, ", ETA %s\n", d);
	} else {
		rc |= es_buf_adds(out, ", ETA unknown\n");
	}
	if (s->bad_times)
		rc |= es_buf_printf(out, "Ignored %lld recorded time(s) that are not finite or lie outside the job's span "
				    "(a node's clock may be wrong)\n", (long long)s->bad_times);
	if (s->n_hosts) {
		int w = 4;
		for (size_t i = 0; i < s->n_hosts; i++)
			if ((int)strlen(s->hosts[i].host) > w)
				w = (int)strlen(s->hosts[i].host);
		/* No ':' in these lines, so a reader of the "  <id>: <status>" lines is not misled. */
		rc |= es_buf_printf(out, "Hosts:\n  %-*s %6s %8s %6s %7s\n", w, "host", "done", "running",
				    "stale", "failed");
		for (size_t i = 0; i < s->n_hosts; i++) {
			const struct es_status_host *h = &s->hosts[i];
			rc |= es_buf_printf(out, "  %-*s %6lld %8lld %6lld %7lld\n", w, h->host,
					    (long long)h->done, (long long)h->running, (long long)h->stale,
					    (long long)h->failed);
		}
	}
	/* Records merge would refuse are named whatever the options: they keep the job from
	 * completing. */
	for (size_t i = 0; i < s->n_shards; i++)
		if (s->shards[i].record_error)
			rc |= es_buf_printf(out, "Bad done record of %s: %s\n", s->shards[i].shard_id, s->shards[i].record_error);
	rc |= es_status_format_problems(s, 20, out);
	for (size_t i = 0; all && i < s->n_shards; i++) {
		const struct es_shard_status *r = &s->shards[i];
		rc |= es_buf_printf(out, "  %s: %s", r->shard_id, es_shard_state_name(r->state));
		if (r->owner && *r->owner)
			rc |= es_buf_printf(out, " owner=%s", r->owner);
		rc |= es_buf_addc(out, '\n');
	}
	return rc ? es_error(ES_ENOMEM, "out of memory writing the status of %s", m->job_dir) : 0;
}

/* A log line as it is shown on a terminal: control bytes (but tab) become '?'. */
static int add_shown_line(struct es_buf *out, const char *p, size_t n)
{
	int rc = es_buf_adds(out, "  | ");
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)p[i];
		rc |= es_buf_addc(out, ch < 0x20 && ch != '\t' ? '?' : ch == 0x7f ? '?' : (char)ch);
	}
	return rc | es_buf_addc(out, '\n');
}

static int format_problem(const struct es_shard_status *r, struct es_buf *out)
{
	const struct es_shard_problem *p = &r->problem;
	int rc;
	if (r->state == ES_SHARD_FAILED)
		rc = es_buf_printf(out, "Failed %s (attempt %d", r->shard_id, p->attempt);
	else
		rc = es_buf_printf(out, "Retried %s (now %s at attempt %lld; attempt %d %s", r->shard_id,
				   es_shard_state_name(r->state), (long long)r->attempt_number, p->attempt,
				   p->status ? p->status : "ended");
	if (p->host)
		rc |= es_buf_printf(out, " on %s", p->host);
	rc |= es_buf_printf(out, "): %s\n", p->error && *p->error ? p->error : "(no error recorded)");
	if (!p->log_path)
		return rc;
	if (!p->log_tail) {
		rc |= es_buf_printf(out, "  log %s (not readable)\n", p->log_path);
		return rc;
	}
	if (!*p->log_tail)
		return rc | es_buf_printf(out, "  log %s (empty)\n", p->log_path);
	rc |= es_buf_printf(out, "  log %s, %s\n", p->log_path, p->log_cut ? "last lines" : "all of it");
	for (const char *l = p->log_tail; *l;) {
		const char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		rc |= add_shown_line(out, l, n);
		l += n + (nl != NULL);
	}
	return rc;
}

int es_status_format_problems(const struct es_status *s, size_t max_shards, struct es_buf *out)
{
	size_t shown = 0, more = 0;
	int rc = 0;
	for (size_t i = 0; i < s->n_shards; i++) {
		if (!s->shards[i].has_problem)
			continue;
		if (max_shards && shown >= max_shards) {
			more++;
			continue;
		}
		rc |= format_problem(&s->shards[i], out);
		shown++;
	}
	if (more)
		rc |= es_buf_printf(out, "... and %zu more failed or retried shard(s) (status --json lists every one)\n", more);
	return rc ? es_error(ES_ENOMEM, "out of memory writing the failures of a status") : 0;
}

int es_status_advice(const struct es_status_counts *c, const char *job_dir, struct es_buf *out)
{
	int64_t unfinished = c->pending + c->running + c->stale;
	int rc = 0;
	if (c->failed)
		rc |= es_buf_printf(out, "%lld shard(s) failed: see why with 'eshard-mpi status --job-dir %s', requeue them with "
				    "'eshard-mpi retry --job-dir %s --all-failed' (or run with --retry-failed), then run the same command again",
				    (long long)c->failed, job_dir, job_dir);
	if (unfinished)
		rc |= es_buf_printf(out, "%s%lld shard(s) not finished (pending %lld, running %lld, stale %lld): run the same "
				    "'eshard-mpi run' (or 'worker') command again, it resumes the job", c->failed ? "; " : "",
				    (long long)unfinished, (long long)c->pending, (long long)c->running, (long long)c->stale);
	return rc ? es_error(ES_ENOMEM, "out of memory") : 0;
}
