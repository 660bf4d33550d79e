#include "eshard/jobview.h"
#include "eshard/buf.h"
#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/par.h"
#include "json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const es_jv_status_names[ES_JV_N] = { "done", "failed", "superseded", "stale", "lost", "preempted",
						"running", "backup_failed", "not_started" };

static int oom(const char *what)
{
	return es_error(ES_ENOMEM, "out of memory reading the job folder (%s)", what);
}

static char *xstrdup(const char *s)
{
	return strdup(s ? s : "");
}

double es_jv_duration(const struct es_jv_attempt *a)
{
	return a->end >= a->claim && a->claim >= 0 ? a->end - a->claim : -1;
}

/* ---------------- reading the job folder ---------------- */

/* The JSON object that text (read from path) holds, or NULL. */
static cJSON *parse_object_quiet(const struct es_buf *text, const char *path)
{
	es_log_quiet_begin();
	cJSON *doc = es_json_parse(text->data ? text->data : "", text->len, path);
	es_log_quiet_end();
	if (!cJSON_IsObject(doc)) {
		cJSON_Delete(doc);
		return NULL;
	}
	return doc;
}

/* The JSON object in the file at path, or NULL when it cannot be read or is none. */
static cJSON *load_object_quiet(const char *path)
{
	struct es_buf text = ES_BUF_INIT;
	es_log_quiet_begin();
	int rc = es_fs_read_file(path, &text, 0);
	es_log_quiet_end();
	cJSON *doc = rc ? NULL : parse_object_quiet(&text, path);
	es_buf_free(&text);
	return doc;
}

/* ---------------- recorded times (jobview.h "Clocks") ---------------- */

static void set_time_range(struct es_jobview *r)
{
	double made = r->m.created_at;
	r->time_hi = r->now + ES_JV_SKEW_AFTER;
	r->time_lo = ES_JV_TIME_FLOOR;
	if (made - ES_JV_SKEW_BEFORE > r->time_lo && made <= r->time_hi)
		r->time_lo = made - ES_JV_SKEW_BEFORE;
}

/* t when it is a time the view can use, else -1 (unknown), counted in bad_times. */
static double take_time(struct es_jobview *r, double t)
{
	if (isfinite(t) && t >= r->time_lo && t <= r->time_hi)
		return t;
	r->bad_times++;
	return -1;
}

/* The same for a length of time: finite, not negative, not longer than the range. */
static double take_secs(struct es_jobview *r, double d)
{
	if (isfinite(d) && d >= 0 && d <= r->time_hi - r->time_lo)
		return d;
	r->bad_times++;
	return -1;
}

/* A number field that holds a length of time (take_secs), or -1 when absent. */
static double num_secs(struct es_jobview *r, const cJSON *doc, const char *key)
{
	double d;
	return es_json_get_num(doc, key, &d) ? -1 : take_secs(r, d);
}

/* An ISO time field (take_time), or -1 when absent or not an ISO time. */
static double iso_of(struct es_jobview *r, const cJSON *doc, const char *key)
{
	double t;
	return es_time_parse_iso(es_json_get_str(doc, key), &t) ? -1 : take_time(r, t);
}

static int status_index(const char *s)
{
	for (int i = 0; s && i < ES_JV_N; i++)
		if (!strcmp(s, es_jv_status_names[i]))
			return i;
	return -1;
}

/* "0003-<token>": the attempt number and the token of an attempt folder's name. */
static void parse_leaf(const char *name, struct es_jv_attempt *a)
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

/* The fields of attempt.json (docs/job-folder.md#attempt-records); the end waits for the events
 * (resolve). */
static void fill_from_json(struct es_jobview *r, struct es_jv_attempt *a, const cJSON *doc)
{
	const char *host = es_json_get_str(doc, "hostname");
	a->host = xstrdup(host && *host ? host : "(unknown)");
	es_json_get_i64(doc, "pid", &a->pid);
	const char *st = es_json_get_str(doc, "status");
	a->backup = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "backup"));
	a->status = status_index(st);
	if (a->status < 0) {
		/* Only the values of docs/job-folder.md#attempt-states are known; an attempt.json
		 * without one is still an attempt. */
		a->status = st ? ES_JV_LOST : ES_JV_RUNNING;
		a->raw_status = st ? strdup(st) : NULL;
	}
	a->json_claim = es_json_get_epoch(doc, "claimed_at_epoch", "claimed_at");
	double t;
	a->claim = es_json_get_num(doc, "claimed_at_epoch", &t) ? iso_of(r, doc, "claimed_at") : take_time(r, t);
	a->finished_at = iso_of(r, doc, "finished_at");
	a->stale_at = iso_of(r, doc, "stale_at");
	a->proc_secs = num_secs(r, doc, "duration_secs");
	a->has_rc = !es_json_get_i64(doc, "return_code", &a->rc);
	const char *err = es_json_get_str(doc, "error");
	if (err)
		a->error = strdup(err);
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(doc, "result");
	if (es_json_get_i64(res, "rows", &a->rows_out))
		a->rows_out = -1;
}

static struct es_jv_attempt *new_attempt(struct es_jobview *r)
{
	if (es_grow(&r->a, &r->cap_a, r->n_a + 1, sizeof(*r->a)))
		return NULL;
	struct es_jv_attempt *a = &r->a[r->n_a++];
	memset(a, 0, sizeof(*a));
	a->claim = a->start = a->end = a->proc_secs = a->finished_at = a->stale_at = -1;
	a->rows_in = a->rows_out = -1;
	a->shard_index = -1;
	a->json_claim = -1;
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
/* An attempt folder's attempt.json, as text already read (text; NULL: read it now). */
static int add_attempt(struct es_jobview *r, const char *shard, const char *leaf, const char *dir,
		       const struct es_buf *text)
{
	struct es_jv_attempt *a = new_attempt(r);
	if (!a)
		return ES_ENOMEM; /* reported by es_grow */
	a->shard = strdup(shard);
	a->dir = strdup(dir);
	if (!a->shard || !a->dir)
		return oom("attempts");
	parse_leaf(leaf, a);
	a->shard_index = shard_index(&r->m, shard);
	if (a->shard_index >= 0)
		a->rows_in = r->m.shards[a->shard_index].rows;
	struct es_buf p = ES_BUF_INIT;
	es_buf_printf(&p, "%s/" ES_ATTEMPT_JSON, dir);
	cJSON *doc = text ? parse_object_quiet(text, p.data) : load_object_quiet(p.data);
	es_buf_free(&p);
	size_t bad = r->bad_times;
	if (doc) {
		fill_from_json(r, a, doc);
	} else {
		a->unreadable = 1;
		a->host = xstrdup("(unknown)");
		a->status = ES_JV_LOST;
		a->error = strdup("attempt.json cannot be read");
	}
	cJSON_Delete(doc);
	/* What resolve changes, as read, so that a refresh resolves a kept attempt again. */
	a->read_bad_times = r->bad_times - bad;
	a->read_claim = a->claim;
	a->read_proc_secs = a->proc_secs;
	a->read_rows_out = a->rows_out;
	return a->host ? 0 : oom("attempts");
}

/* What es_jobview_refresh keeps between two calls. */
struct es_jv_cache {
	unsigned char *seen;           /* es_status_seen, per shard */
	unsigned char *attempts_final; /* per shard: its attempts were read while it was final */
	unsigned char *one_leaf;       /* per shard: its folder held one entry when last listed */
	/* The listings of state/done, state/failed, state/locks and attempts/ made while
	 * es_jobview_init read the manifest, for a first refresh that follows at once (within
	 * ES_JV_PRE_SECS of pre_mono, when they began: a slow manifest read leaves them unused). */
	struct es_strv pre[4];
	int have_pre;
	double pre_mono;
	/* The last whole listing of each of the four folders (have_kept; listed_mono: when it
	 * began), with the names that the events taken since imply (named), for the refreshes that
	 * find the folder unchanged (es_fs_list_dir_if_changed: a job's tail lists nothing) or that
	 * defer its listing (list_job_part). */
	struct es_fs_dirstamp stamp[4];
	struct es_strv kept[4];
	int have_kept[4];
	double listed_mono[4];
	struct es_strv named[4];       /* implied by the events taken in this refresh (name_event) */
	unsigned char *named_shard;    /* per shard: an event taken in this refresh named it */
	size_t n_named;                /* events taken in this refresh that named a shard */
	int have_named;                /* some refresh took such events, the last at named_mono */
	double named_mono;
	struct es_strv ev_files;       /* the event logs taken, sorted */
	int64_t *ev_off;               /* of each, the bytes taken: up to its last newline */
	size_t ev_bad_times;           /* times of the events taken that were ignored */
	size_t ev_bad_lines;           /* lines taken that did not parse */
};

static void free_attempt(struct es_jv_attempt *a)
{
	free(a->shard);
	free(a->host);
	free(a->raw_status);
	free(a->error);
	free(a->dir);
}

/* The attempt of old (n of them) read from attempt.json when it had the identity of st; NULL
 * when there is none. */
static struct es_jv_attempt *same_attempt(struct es_jv_attempt *old, size_t n, const char *dir, const struct stat *st)
{
	for (size_t i = 0; i < n; i++)
		if (old[i].dir && !strcmp(old[i].dir, dir) && old[i].json_ino == (int64_t)st->st_ino &&
		    old[i].json_size == (int64_t)st->st_size &&
		    old[i].json_mtime_ns == (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec)
			return &old[i];
	return NULL;
}

/* One attempt folder whose attempt.json has the identity st: the attempt read before when the
 * file is the same (moved out of old), else read now. */
static int take_attempt(struct es_jobview *r, const char *shard, const char *leaf, const char *dir,
			const struct stat *st, struct es_jv_attempt *old, size_t n_old, const struct es_buf *text)
{
	struct es_jv_attempt *o = same_attempt(old, n_old, dir, st), *a;
	if (o) {
		if (!(a = new_attempt(r)))
			return ES_ENOMEM; /* reported by es_grow */
		*a = *o;
		memset(o, 0, sizeof(*o));
		r->bad_times += a->read_bad_times;
		return 0;
	}
	int rc = add_attempt(r, shard, leaf, dir, text);
	if (rc)
		return rc;
	a = &r->a[r->n_a - 1];
	a->json_ino = (int64_t)st->st_ino;
	a->json_size = (int64_t)st->st_size;
	a->json_mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	return 0;
}

/* A done shard read for the first time whose folder holds one folder (its link count is 3: its
 * own entry, its ".", the one folder's ".."), that its record names: that attempt is read
 * without a listing of the shard's folder (a stat from the walk cache's attempts/ in place of an
 * open, two reads and a close; at a file server, a lookup in place of OPENDIR, READDIRP and
 * RELEASEDIR). A file system whose folders do not count their sub-folders so (btrfs, an overlay
 * of two, a count past its limit) shows 1, and is listed. A client that caches attributes (NFS,
 * a FUSE client) can show a count from before a second attempt's folder was made, as its
 * listing can be from before: the view then shows one attempt, and merge's sweep passes the
 * folder by (temporaries a killed writer left there stay); the record decides the result
 * either way. 0 when taken, 1 when the listing must do (nothing reported), an error code (out of
 * memory). Only folders count: a listing finds no attempt in another kind of entry, and merge
 * sweeps only folders (its attempts_clean). */
static int read_published_only(struct es_jobview *r, const char *sdir, const char *shard, long idx, struct es_buf *text)
{
	const struct es_shard_status *s = &r->st.shards[idx];
	size_t n = strlen(sdir);
	if (s->state != ES_SHARD_DONE || !s->published_dir || strncmp(s->published_dir, sdir, n) ||
	    s->published_dir[n] != '/')
		return 1;
	const char *leaf = s->published_dir + n + 1;
	struct stat st, jst;
	if (!*leaf || !strcmp(leaf, ".") || strchr(leaf, '/') || es_fs_lstat_beneath(sdir, &st) || !S_ISDIR(st.st_mode) ||
	    st.st_nlink != 3)
		return 1;
	struct es_buf aj = ES_BUF_INIT;
	es_buf_printf(&aj, "%s/" ES_ATTEMPT_JSON, s->published_dir);
	es_log_quiet_begin();
	int rc = es_fs_read_file_stat(aj.data, text, 0, &jst);
	es_log_quiet_end();
	es_buf_free(&aj);
	if (rc)
		return 1;
	if ((rc = take_attempt(r, shard, leaf, s->published_dir, &jst, NULL, 0, text)) == 0)
		r->cache->one_leaf[idx] = 1;
	return rc;
}

/* Every attempts/<shard>/<leaf>/ of one shard that holds an attempt.json, in name order. An
 * attempt.json of the same identity (inode, size, mtime) as one of old is not read again: a
 * stat, which a client that caches metadata answers itself, instead of an open and a read.
 * A shard with no attempt read before has its attempt.json files read at once, their identity
 * taken from the read (no stat first: status of a finished job reads every one). */
static int read_shard_attempts(struct es_jobview *r, const char *base, const char *shard, long idx,
			       struct es_jv_attempt *old, size_t n_old)
{
	struct es_strv leaves = ES_STRV_INIT;
	struct es_buf sdir = ES_BUF_INIT, adir = ES_BUF_INIT, aj = ES_BUF_INIT, text = ES_BUF_INIT;
	struct stat st;
	int rc = 0;
	es_buf_printf(&sdir, "%s/%s", base, shard);
	if (!n_old && idx >= 0 && (rc = read_published_only(r, sdir.data, shard, idx, &text)) != 1) {
		es_buf_free(&sdir);
		es_buf_free(&text);
		return rc;
	}
	rc = es_fs_list_dir(sdir.data, &leaves); /* not a folder: none (no stat first) */
	if (!rc && idx >= 0)
		r->cache->one_leaf[idx] = leaves.n == 1;
	for (size_t k = 0; !rc && k < leaves.n; k++) {
		es_buf_reset(&adir);
		es_buf_reset(&aj);
		es_buf_printf(&adir, "%s/%s", sdir.data, leaves.v[k]);
		es_buf_printf(&aj, "%s/" ES_ATTEMPT_JSON, adir.data);
		if (!n_old) {
			es_log_quiet_begin();
			int read = es_fs_read_file_stat(aj.data, &text, 0, &st);
			es_log_quiet_end();
			if (!read) {
				rc = take_attempt(r, shard, leaves.v[k], adir.data, &st, old, n_old, &text);
				continue;
			}
			if (read == ES_ENOENT)
				continue; /* no attempt.json, or adir is no folder */
		}
		if (lstat(aj.data, &st) == 0) /* fails unless adir is a folder: no stat of it first */
			rc = take_attempt(r, shard, leaves.v[k], adir.data, &st, old, n_old, NULL);
	}
	es_strv_free(&leaves);
	es_buf_free(&sdir);
	es_buf_free(&adir);
	es_buf_free(&aj);
	es_buf_free(&text);
	return rc;
}

/* Done with a record merge accepts, or failed: nothing but a retry changes the shard. */
static int status_final(const struct es_shard_status *s)
{
	return !s->metadata_error && ((s->state == ES_SHARD_DONE && !s->record_error) || s->state == ES_SHARD_FAILED);
}

/* The attempts of a final shard none of which says it runs are read once: they change no more. */
static void mark_final(struct es_jobview *r, long idx, size_t from)
{
	int final = status_final(&r->st.shards[idx]);
	for (size_t i = from; final && i < r->n_a; i++)
		final = r->a[i].status != ES_JV_RUNNING;
	r->cache->attempts_final[idx] = (unsigned char)final;
}

/* Keep the attempts old[0..n) of a shard as they are. */
static int take_old(struct es_jobview *r, struct es_jv_attempt *old, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct es_jv_attempt *a = new_attempt(r);
		if (!a)
			return ES_ENOMEM; /* reported by es_grow */
		*a = old[i];
		memset(&old[i], 0, sizeof(old[i]));
		r->bad_times += a->read_bad_times;
	}
	return 0;
}

/* One shard of attempts/ for refresh_attempts: its name, its manifest index, and the attempts
 * of the last refresh that are its (old[k..end)). */
struct att_shard {
	const char *name;
	long idx;
	size_t k, end;
};

/* What one part of refresh_attempts read: its attempts, and the times it ignored. */
struct att_part {
	struct es_jv_attempt *a;
	size_t n_a, bad_times;
};

struct att_ctx {
	struct es_jobview *r;
	const char *base;              /* <job>/attempts */
	struct att_shard *sh;
	struct es_jv_attempt *old;
	struct att_part *parts;
};

/* refresh_attempts's shards [begin, end), on one thread (par.h). The part collects into a
 * shallow copy of the view: it shares what no part writes (the manifest, the status, the time
 * range) and the per-shard flags of the cache, of which it writes its own shards' only. */
static int attempts_part(void *ctx, size_t part, size_t begin, size_t end)
{
	struct att_ctx *c = ctx;
	struct es_jobview sub = *c->r;
	int rc = 0;
	sub.a = NULL;
	sub.n_a = sub.cap_a = 0;
	sub.bad_times = 0;
	es_fs_walk_cache_begin();
	for (size_t i = begin; !rc && i < end; i++) {
		const struct att_shard *t = &c->sh[i];
		int keep = t->idx >= 0 && sub.cache->attempts_final[t->idx] && !sub.cache->named_shard[t->idx] &&
			   status_final(&sub.st.shards[t->idx]) && t->end > t->k;
		size_t from = sub.n_a;
		/* No arithmetic on a NULL array (a first refresh has none read before). */
		struct es_jv_attempt *prev = c->old ? c->old + t->k : NULL;
		rc = keep ? take_old(&sub, prev, t->end - t->k) : read_shard_attempts(&sub, c->base, t->name, t->idx, prev, t->end - t->k);
		if (!rc && t->idx >= 0)
			mark_final(&sub, t->idx, from);
	}
	es_fs_walk_cache_end();
	c->parts[part] = (struct att_part){ sub.a, sub.n_a, sub.bad_times };
	return rc;
}

/* The attempt folders: from shards, the listing of attempts/ (with what new events name there;
 * freed here), each shard's folder but for a shard whose attempts were read while it was final,
 * that is final still and that no new event named (kept as they were). The shards are read on
 * the status's threads (status.h threads), each part's attempts put after the last part's. A
 * shard whose folder was made after the listing is read at the next listing, or once an event
 * names it: not attempts_clean till then (fill_claims), which merge sweeps. */
static int refresh_attempts(struct es_jobview *r, struct es_strv shards)
{
	struct es_buf base = ES_BUF_INIT;
	struct es_jv_attempt *old = r->a;
	size_t n_old = r->n_a, k = 0, parts = 0;
	struct att_shard *sh = NULL;
	struct att_ctx c = { 0 };
	r->a = NULL;
	r->n_a = r->cap_a = 0;
	int rc = es_jobpath_join(&base, r->m.job_dir, ES_JOB_ATTEMPTS);
	if (!rc && shards.n) {
		parts = es_status_threads(&r->st);
		parts = parts < shards.n ? parts : shards.n;
		sh = calloc(shards.n, sizeof(*sh));
		c = (struct att_ctx){ r, base.data, sh, old, calloc(parts, sizeof(*c.parts)) };
		if (!sh || !c.parts)
			rc = oom("attempts");
	}
	for (size_t i = 0; !rc && i < shards.n; i++) {
		sh[i].name = shards.v[i];
		while (k < n_old && strcmp(old[k].shard, sh[i].name) < 0)
			k++;
		sh[i].k = sh[i].end = k; /* old[k..end): this shard's attempts read before */
		while (sh[i].end < n_old && !strcmp(old[sh[i].end].shard, sh[i].name))
			sh[i].end++;
		sh[i].idx = shard_index(&r->m, sh[i].name);
		k = sh[i].end;
	}
	if (!rc && shards.n)
		rc = es_par_run(shards.n, parts, attempts_part, &c);
	size_t total = 0;
	for (size_t p = 0; c.parts && p < parts; p++)
		total += c.parts[p].n_a;
	if (!rc && total)
		rc = es_grow(&r->a, &r->cap_a, total, sizeof(*r->a)); /* reports itself */
	for (size_t p = 0; c.parts && p < parts; p++) {
		struct att_part *t = &c.parts[p];
		if (!rc) {
			memcpy(r->a + r->n_a, t->a, t->n_a * sizeof(*t->a));
			r->n_a += t->n_a;
		} else {
			for (size_t i = 0; i < t->n_a; i++)
				free_attempt(&t->a[i]);
		}
		r->bad_times += t->bad_times;
		free(t->a);
	}
	for (k = 0; k < n_old; k++)
		free_attempt(&old[k]); /* those not taken over */
	free(old);
	free(c.parts);
	free(sh);
	for (size_t i = 0; i < r->n_a; i++)
		r->unreadable_attempts += r->a[i].unreadable;
	es_strv_free(&shards);
	es_buf_free(&base);
	return rc;
}

/* The folders of list_job, in its order. */
enum { JV_DONE, JV_FAILED, JV_LOCKS, JV_ATTEMPTS };

/* The entries that an event of a shard says are there (or changed) in list_job's folders, into
 * the cache's named: its attempt folder and its lock for every event (a claim made them; an end
 * changed the lock), its done record for done and superseded, its failed record for failed. A
 * name that turns out absent costs a lookup; only a shard of the manifest names anything. */
static int name_event(struct es_jobview *r, const char *event, const char *shard)
{
	struct es_jv_cache *c = r->cache;
	long idx = shard_index(&r->m, shard);
	if (idx < 0)
		return 0;
	c->named_shard[idx] = 1;
	c->n_named++;
	if (!c->have_kept[JV_DONE] && !c->have_kept[JV_FAILED] && !c->have_kept[JV_LOCKS] && !c->have_kept[JV_ATTEMPTS])
		return 0; /* every folder is listed (a first refresh: every log read from its start) */
	struct es_strv *n = c->named;
	int rc = es_strv_pushf(&n[JV_ATTEMPTS], "%s", shard);
	if (!rc)
		rc = es_strv_pushf(&n[JV_LOCKS], "%s.lock", shard);
	if (!rc && (!strcmp(event, "done") || !strcmp(event, "superseded")))
		rc = es_strv_pushf(&n[JV_DONE], "%s.json", shard);
	else if (!rc && !strcmp(event, "failed"))
		rc = es_strv_pushf(&n[JV_FAILED], "%s.json", shard);
	return rc;
}

static int add_event(struct es_jobview *r, const cJSON *o)
{
	const char *tok = es_json_get_str(o, "token"), *name = es_json_get_str(o, "event");
	const char *shard = es_json_get_str(o, "shard");
	double t;
	/* Where the event says to look, whatever its time says. */
	if (name && shard && name_event(r, name, shard))
		return ES_ENOMEM; /* reported by es_strv_pushf */
	if (!tok || !name || es_json_get_num(o, "time", &t))
		return 0; /* not an attempt's event */
	if (take_time(r, t) < 0)
		return 0; /* a bad clock's event: ignored whole, counted */
	int rc = es_grow(&r->ev, &r->cap_ev, r->n_ev + 1, sizeof(*r->ev));
	if (rc)
		return rc;
	struct es_jv_event *e = &r->ev[r->n_ev++];
	memset(e, 0, sizeof(*e));
	snprintf(e->token, sizeof(e->token), "%s", tok);
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->time = t;
	if (es_json_get_i64(o, "rows", &e->rows))
		e->rows = -1;
	e->duration = num_secs(r, o, "duration");
	const char *d = es_json_get_str(o, "detail");
	if (d && !(e->detail = strdup(d)))
		return oom("events");
	return 0;
}

/* The complete lines of text (a log's bytes from where the last read ended): a line that does
 * not parse is counted, not fatal. Returns the bytes taken in *used: up to the last newline, as a
 * line without one may be a line being written. */
static int take_event_lines(struct es_jobview *r, const struct es_buf *text, const char *path, size_t *used)
{
	const char *p = text->data, *end = text->data + text->len;
	int rc = 0;
	*used = 0;
	while (!rc && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			break;
		size_t len = (size_t)(nl - p);
		if (len) {
			es_log_quiet_begin();
			cJSON *o = es_json_parse(p, len, path);
			es_log_quiet_end();
			if (cJSON_IsObject(o))
				rc = add_event(r, o);
			else
				r->cache->ev_bad_lines++;
			cJSON_Delete(o);
		}
		p = nl + 1;
	}
	*used = (size_t)(p - text->data);
	/* A last line without its newline is a line a crash cut short or one being written: bad
	 * for now, and read again next time. */
	r->bad_event_lines += *used < text->len;
	return rc;
}

/* One event log from byte *off on. Its size first (a stat, which a client that caches metadata
 * answers itself while nothing changed), then only the new bytes. 1 when it is shorter than what
 * was taken (rewritten: every log must be read again), 0 otherwise; a log that cannot be read is
 * counted, not fatal. */
static int read_event_file(struct es_jobview *r, const char *path, int64_t *off)
{
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
		r->bad_event_lines++;
		return 0;
	}
	if (st.st_size < *off)
		return 1;
	if (st.st_size == *off)
		return 0;
	struct es_buf text = ES_BUF_INIT;
	int fd = -1;
	es_log_quiet_begin();
	int rc = es_fs_open_read(path, O_RDONLY | O_NOFOLLOW, &fd);
	if (!rc && lseek(fd, (off_t)*off, SEEK_SET) != (off_t)*off)
		rc = ES_EIO;
	if (!rc)
		rc = es_fs_read_fd_sized(fd, &text, (size_t)1 << 30, st.st_size - (off_t)*off, path);
	es_log_quiet_end();
	if (fd >= 0)
		close(fd);
	size_t used = 0;
	if (rc) {
		r->bad_event_lines++;
		rc = 0;
	} else {
		rc = take_event_lines(r, &text, path, &used);
		*off += (int64_t)used;
	}
	es_buf_free(&text);
	return rc < 0 ? rc : 0;
}

/* Forget every event taken: the logs are read again from their start. */
static void drop_events(struct es_jobview *r)
{
	for (size_t i = 0; i < r->n_ev; i++)
		free(r->ev[i].detail);
	r->n_ev = 0;
	r->bad_event_lines = r->n_event_files = 0;
	r->cache->ev_bad_times = r->cache->ev_bad_lines = 0;
	es_strv_free(&r->cache->ev_files);
	free(r->cache->ev_off);
	r->cache->ev_off = NULL;
}

static int is_event_log(const char *name)
{
	size_t n = strlen(name);
	return n >= 6 && !strcmp(name + n - 6, ".jsonl") && name[0] != '.';
}

/* The offset of each log of files (sorted) that was taken before, 0 for a new one; 1 when a log
 * taken before is gone (then nothing is kept). */
static int carry_offsets(struct es_jv_cache *c, const struct es_strv *files, int64_t *off)
{
	size_t k = 0;
	for (size_t i = 0; i < files->n; i++) {
		off[i] = 0;
		while (k < c->ev_files.n && strcmp(c->ev_files.v[k], files->v[i]) < 0)
			return 1;
		if (k < c->ev_files.n && !strcmp(c->ev_files.v[k], files->v[i]))
			off[i] = c->ev_off[k++];
	}
	return k < c->ev_files.n;
}

static int event_cmp(const void *x, const void *y)
{
	const struct es_jv_event *a = x, *b = y;
	int c = strcmp(a->token, b->token);
	return c ? c : (a->time > b->time) - (a->time < b->time);
}

/* Each log of files from its offset on: 1 as soon as one is shorter than what was taken. */
static int read_logs(struct es_jobview *r, const char *dir, const struct es_strv *files, int64_t *off)
{
	struct es_buf p = ES_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; !rc && i < files->n; i++) {
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/%s", dir, files->v[i]);
		rc = read_event_file(r, p.data, &off[i]);
	}
	es_buf_free(&p);
	return rc;
}

/* The event logs of state/events, each from where the last refresh ended; all of them again
 * when one taken before is gone or shorter. */
static int refresh_events(struct es_jobview *r)
{
	struct es_strv files = ES_STRV_INIT, all = ES_STRV_INIT;
	struct es_buf dir = ES_BUF_INIT;
	struct es_jv_cache *c = r->cache;
	size_t bad = r->bad_times, n_ev = r->n_ev;
	int64_t *off = NULL;
	r->bad_event_lines = 0;
	int rc = es_jobpath_join(&dir, r->m.job_dir, ES_JOB_EVENTS);
	if (!rc)
		rc = es_fs_list_dir(dir.data, &all);
	for (size_t i = 0; !rc && i < all.n; i++)
		if (is_event_log(all.v[i]))
			rc = es_strv_push(&files, strdup(all.v[i]));
	if (!rc && !(off = calloc(files.n ? files.n : 1, sizeof(*off))))
		rc = oom("events");
	if (!rc && (carry_offsets(c, &files, off) || (rc = read_logs(r, dir.data, &files, off)) > 0)) {
		drop_events(r);
		r->bad_times = bad;
		n_ev = 0;
		memset(off, 0, (files.n ? files.n : 1) * sizeof(*off));
		rc = read_logs(r, dir.data, &files, off);
		rc = rc > 0 ? 0 : rc; /* rewritten again meanwhile: the next refresh sees it */
	}
	if (!rc) {
		es_strv_free(&c->ev_files);
		free(c->ev_off);
		c->ev_files = files;
		c->ev_off = off;
		files = (struct es_strv)ES_STRV_INIT;
		off = NULL;
		r->n_event_files = c->ev_files.n;
		c->ev_bad_times += r->bad_times - bad;
		r->bad_times = bad + c->ev_bad_times;
		r->bad_event_lines += c->ev_bad_lines;
		if (r->n_ev > n_ev && r->n_ev > 1)
			qsort(r->ev, r->n_ev, sizeof(*r->ev), event_cmp);
	}
	free(off);
	es_strv_free(&files);
	es_strv_free(&all);
	es_buf_free(&dir);
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
static void resolve_times(struct es_jobview *r, struct es_jv_attempt *a)
{
	double ev_end = -1, ev_taken = -1;
	/* From what attempt.json said: a refresh resolves an attempt it kept again. */
	a->claim = a->read_claim;
	a->proc_secs = a->read_proc_secs;
	a->rows_out = a->read_rows_out;
	a->start = a->end = -1;
	a->timed_by_events = 0;
	if (a->error_from_event) {
		free(a->error);
		a->error = NULL;
		a->error_from_event = 0;
	}
	struct es_jv_event key;
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
		const struct es_jv_event *e = &r->ev[i];
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
			if (!a->error && e->detail) {
				a->error = strdup(e->detail);
				a->error_from_event = a->error != NULL;
			}
		}
	}
	if (a->claim < 0)
		a->claim = a->start;
	/* Its own worker's end first; a takeover only ends an attempt whose worker said nothing. */
	a->end = ev_end >= 0 ? ev_end : a->finished_at >= 0 ? a->finished_at : ev_taken >= 0 ? ev_taken : a->stale_at;
	/* Both parts are in range, their sum may not be: then the end stays unknown. */
	if (a->end < 0 && a->claim >= 0 && a->proc_secs >= 0 && a->status != ES_JV_RUNNING &&
	    a->claim + a->proc_secs <= r->time_hi)
		a->end = a->claim + a->proc_secs;
	a->end_kind = a->end >= 0 ? ES_JV_END_RECORDED : ES_JV_END_UNKNOWN;
}

/* A running attempt whose shard lock still holds its token is live: it is drawn up to now. */
static int attempt_is_live(const struct es_jobview *r, const struct es_jv_attempt *a)
{
	/* What the status read of the lock a moment ago tells, when it tells it: a final shard's
	 * lock is its terminal fence, a running or stale one's token is known, a pending shard has
	 * no lock. */
	const struct es_shard_status *s = a->shard_index >= 0 ? &r->st.shards[a->shard_index] : NULL;
	if (s && status_final(s))
		return 0;
	if (s && !s->metadata_error && (s->state == ES_SHARD_RUNNING || s->state == ES_SHARD_STALE))
		return !strcmp(s->lock_token, a->token);
	if (s && s->state == ES_SHARD_PENDING)
		return 0;
	struct es_buf path = ES_BUF_INIT;
	struct es_lock_info li;
	es_log_quiet_begin();
	int rc = es_jobpath_lock(&path, r->m.job_dir, a->shard);
	if (!rc)
		rc = es_claim_lock_read(path.data, &li);
	es_log_quiet_end();
	es_buf_free(&path);
	return !rc && li.exists && !li.terminal && !strcmp(li.token, a->token);
}

static void resolve(struct es_jobview *r)
{
	r->t0 = r->t1 = -1;
	memset(r->by_status, 0, sizeof(r->by_status));
	r->n_backups = r->n_backups_won = 0;
	for (size_t i = 0; i < r->n_a; i++) {
		struct es_jv_attempt *a = &r->a[i];
		resolve_times(r, a);
		/* A done attempt without finished_at ended when its done record was completed. */
		if (a->end < 0 && a->status == ES_JV_DONE && a->shard_index >= 0 &&
		    r->st.shards[a->shard_index].state == ES_SHARD_DONE &&
		    r->st.shards[a->shard_index].completed_at_epoch >= 0)
			a->end = take_time(r, r->st.shards[a->shard_index].completed_at_epoch);
		if (a->end >= 0)
			a->end_kind = ES_JV_END_RECORDED;
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
		struct es_jv_attempt *a = &r->a[i];
		if (a->status == ES_JV_RUNNING && a->end < 0 && attempt_is_live(r, a)) {
			a->end = r->now;
			a->end_kind = ES_JV_END_LIVE;
			if (r->now > r->t1)
				r->t1 = r->now;
		}
	}
	for (size_t i = 0; i < r->n_a; i++) {
		struct es_jv_attempt *a = &r->a[i];
		if (a->claim < 0)
			a->claim = a->end >= 0 ? a->end : r->t0;
		if (a->end < 0)
			a->end = a->status == ES_JV_RUNNING && r->t1 > a->claim ? r->t1 : a->claim;
		r->by_status[a->status]++;
		r->n_backups += a->backup;
		r->n_backups_won += a->backup && a->status == ES_JV_DONE;
	}
}

static int worker_cmp(const void *x, const void *y)
{
	const struct es_jv_worker *a = x, *b = y;
	int c = strcmp(a->host, b->host);
	if (c)
		return c;
	if (a->first_claim != b->first_claim)
		return a->first_claim < b->first_claim ? -1 : 1;
	return (a->pid > b->pid) - (a->pid < b->pid);
}

static size_t find_worker(const struct es_jobview *r, const char *host, int64_t pid)
{
	for (size_t i = 0; i < r->n_w; i++)
		if (r->w[i].pid == pid && !strcmp(r->w[i].host, host))
			return i;
	return (size_t)-1;
}

/* Workers (host + pid, sorted by host, then first claim) and hosts, with their sums. */
static int group(struct es_jobview *r)
{
	free(r->w);
	free(r->h);
	r->n_w = r->n_h = 0;
	r->w = calloc(r->n_a ? r->n_a : 1, sizeof(*r->w));
	r->h = calloc(r->n_a ? r->n_a : 1, sizeof(*r->h));
	if (!r->w || !r->h)
		return oom("hosts");
	for (size_t i = 0; i < r->n_a; i++) {
		struct es_jv_attempt *a = &r->a[i];
		size_t k = find_worker(r, a->host, a->pid);
		if (k == (size_t)-1) {
			k = r->n_w++;
			r->w[k] = (struct es_jv_worker){ a->host, a->pid, a->claim, 0 };
		} else if (a->claim < r->w[k].first_claim) {
			r->w[k].first_claim = a->claim;
		}
	}
	if (r->n_w > 1)
		qsort(r->w, r->n_w, sizeof(*r->w), worker_cmp);
	for (size_t k = 0; k < r->n_w; k++) {
		if (!r->n_h || strcmp(r->h[r->n_h - 1].host, r->w[k].host)) {
			r->h[r->n_h] = (struct es_jv_host){ .host = r->w[k].host, .first_claim = r->w[k].first_claim };
			r->n_h++;
		}
		struct es_jv_host *h = &r->h[r->n_h - 1];
		h->n_workers++;
		if (r->w[k].first_claim < h->first_claim)
			h->first_claim = r->w[k].first_claim;
		r->w[k].host_index = r->n_h - 1;
	}
	for (size_t i = 0; i < r->n_a; i++) {
		struct es_jv_attempt *a = &r->a[i];
		a->worker = find_worker(r, a->host, a->pid);
		struct es_jv_host *h = &r->h[r->w[a->worker].host_index];
		double d = es_jv_duration(a);
		h->attempts++;
		h->busy += d > 0 ? d : 0;
		if (a->status == ES_JV_FAILED)
			h->failed++;
		if (a->status == ES_JV_DONE) {
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
double *es_jobview_done_durations(const struct es_jobview *r, size_t *n)
{
	double *d = malloc((r->n_a ? r->n_a : 1) * sizeof(*d));
	*n = 0;
	for (size_t i = 0; d && i < r->n_a; i++)
		if (r->a[i].status == ES_JV_DONE && es_jv_duration(&r->a[i]) >= 0)
			d[(*n)++] = es_jv_duration(&r->a[i]);
	if (d && *n > 1)
		qsort(d, *n, sizeof(*d), dbl_cmp);
	return d;
}

void es_jobview_free(struct es_jobview *r)
{
	for (size_t i = 0; i < r->n_a; i++)
		free_attempt(&r->a[i]);
	free(r->a);
	if (r->cache) {
		free(r->cache->seen);
		free(r->cache->attempts_final);
		free(r->cache->one_leaf);
		free(r->cache->named_shard);
		for (int k = 0; k < 4; k++) {
			es_strv_free(&r->cache->pre[k]);
			es_strv_free(&r->cache->kept[k]);
			es_strv_free(&r->cache->named[k]);
		}
		es_strv_free(&r->cache->ev_files);
		free(r->cache->ev_off);
		free(r->cache);
	}
	for (size_t i = 0; i < r->n_ev; i++)
		free(r->ev[i].detail);
	free(r->ev);
	free(r->w);
	free(r->h);
	if (r->have_status)
		es_status_free(&r->st);
	if (r->have_manifest)
		es_manifest_free(&r->m);
	memset(r, 0, sizeof(*r));
}

/* A copy of a into out (reset first). */
static int strv_copy(const struct es_strv *a, struct es_strv *out)
{
	es_strv_free(out);
	for (size_t i = 0; i < a->n; i++)
		if (es_strv_push(out, strdup(a->v[i])))
			return oom("a listing");
	return 0;
}

/* Seconds after a folder's stamp is first seen that the listing which confirms it begins
 * (es_fs_list_dir_if_changed): far longer than any file system's tick of folder times. */
#define ES_JV_SETTLE_SECS 2.0

/* How long the listing of a folder that changed may be deferred while events name what changed
 * there (list_job_part): a minute, or as long as it takes to list the folder at
 * ES_JV_RELIST_NAMES names a second, so that the listings that catch what no event named (a
 * worker of the reference's, or one that died between its record and its event) cost the file
 * server about a request a second at any size (a READDIRP answers ~190 names on GlusterFS; at
 * 20,000 shards the three folders that change are ~330 requests, every 200 s). */
#define ES_JV_RELIST_SECS 60.0
#define ES_JV_RELIST_NAMES 100.0

static double relist_secs(size_t names)
{
	double s = (double)names / ES_JV_RELIST_NAMES;
	return s > ES_JV_RELIST_SECS ? s : ES_JV_RELIST_SECS;
}

/* The names of add put into v, which is then sorted and unique. */
static int strv_union(struct es_strv *v, const struct es_strv *add)
{
	for (size_t i = 0; i < add->n; i++)
		if (es_strv_push(v, strdup(add->v[i])))
			return ES_ENOMEM; /* reported by es_strv_push */
	if (add->n)
		es_strv_sort_unique(v);
	return 0;
}

struct list_job_ctx {
	const char *job_dir;
	struct es_jv_cache *c; /* NULL: list every folder, keep nothing */
	int may_defer;         /* events came (the last at named_mono): a changed folder may wait */
	double named_mono;
	struct es_strv *v;
};

/* Folder k of list_job's four, each on a thread of its own (par.h). With a cache: listed
 * unless its stamp says it is as last listed (es_fs_list_dir_if_changed), or unless it
 * changed but the events name what changed (may_defer) and its last listing is younger than
 * relist_secs; either way with the names the events of this refresh imply, which the kept
 * listing holds from then on. */
static int list_job_part(void *ctx, size_t part, size_t begin, size_t end)
{
	static const char *const dirs[4] = { ES_JOB_DONE, ES_JOB_FAILED, ES_JOB_LOCKS, ES_JOB_ATTEMPTS };
	struct list_job_ctx *x = ctx;
	struct es_buf p = ES_BUF_INIT;
	int rc = 0;
	(void)part;
	for (size_t k = begin; !rc && k < end; k++) {
		if ((rc = es_jobpath_join(&p, x->job_dir, dirs[k])))
			break;
		if (!x->c) {
			rc = es_fs_list_dir(p.data, &x->v[k]);
			continue;
		}
		struct es_jv_cache *c = x->c;
		double mono = es_time_mono();
		double wait = relist_secs(c->kept[k].n);
		int defer = x->may_defer && c->have_kept[k] && mono - c->listed_mono[k] < wait && mono - x->named_mono < wait;
		int listed = ES_FS_LISTED;
		rc = es_fs_list_dir_if_changed(p.data, &c->stamp[k], ES_JV_SETTLE_SECS, defer, &x->v[k], &listed);
		if (!rc && (listed == ES_FS_LISTED || listed == ES_FS_LISTED_PART)) {
			rc = strv_union(&x->v[k], &c->named[k]);
			/* A listing cut short by an error is used once, never kept (the next lists). */
			if (!rc && listed == ES_FS_LISTED)
				rc = strv_copy(&x->v[k], &c->kept[k]);
			else
				es_strv_free(&c->kept[k]);
			c->have_kept[k] = !rc && listed == ES_FS_LISTED;
			c->listed_mono[k] = mono;
		} else if (!rc) {
			rc = strv_union(&c->kept[k], &c->named[k]);
			if (!rc)
				rc = strv_copy(&c->kept[k], &x->v[k]);
		}
		if (rc) {
			c->stamp[k].valid = 0;
			c->have_kept[k] = 0;
			es_strv_free(&c->kept[k]);
		}
	}
	es_buf_free(&p);
	return rc;
}

/* The four listings a refresh starts from, into v: state/done, state/failed, state/locks and
 * attempts/; with a cache c, a folder unchanged since its last listing is not listed again, nor
 * one whose changes the events name (may_defer; list_job_part). Nothing to free after an error. */
static int list_job(const char *job_dir, struct es_jv_cache *c, int may_defer, struct es_strv v[4])
{
	struct list_job_ctx x = { job_dir, c, may_defer, c ? c->named_mono : 0, v };
	int rc = es_par_run(4, 4, list_job_part, &x);
	for (int k = 0; rc && k < 4; k++)
		es_strv_free(&v[k]);
	return rc;
}

struct init_ctx {
	const char *job_dir;
	struct es_jobview *r;
	struct es_buf jd;      /* job_dir resolved by part 1 */
	struct es_strv pre[4]; /* part 1's listings (es_jv_cache pre) */
	int pre_rc;
	double pre_mono;       /* when they began */
};

/* The manifest (part 0) and, at once, the listings the first refresh needs (part 1: quiet; a
 * refresh that cannot use them lists again). */
static int init_part(void *ctx, size_t part, size_t begin, size_t end)
{
	struct init_ctx *c = ctx;
	(void)begin;
	(void)end;
	if (part == 0)
		return es_manifest_load(c->job_dir, &c->r->m);
	es_log_quiet_begin();
	c->pre_mono = es_time_mono();
	int rc = es_fs_resolve(c->job_dir, &c->jd);
	if (!rc)
		rc = list_job(c->jd.data, NULL, 0, c->pre);
	es_log_quiet_end();
	c->pre_rc = rc;
	return 0;
}

int es_jobview_init(const char *job_dir, double lock_timeout, struct es_jobview *r)
{
	memset(r, 0, sizeof(*r));
	r->median = -1;
	r->lock_timeout = lock_timeout;
	struct init_ctx c = { job_dir, r, ES_BUF_INIT, { ES_STRV_INIT, ES_STRV_INIT, ES_STRV_INIT, ES_STRV_INIT }, 0, 0 };
	int rc = es_par_run(2, 2, init_part, &c);
	if (!rc) {
		r->have_manifest = 1;
		r->st.claims_by_caller = 1; /* refresh_attempts reads every attempt.json: fill_claims */
		size_t n = r->m.n_shards ? r->m.n_shards : 1;
		if (!(r->cache = calloc(1, sizeof(*r->cache))) || !(r->cache->seen = calloc(n, 1)) ||
		    !(r->cache->attempts_final = calloc(n, 1)) || !(r->cache->one_leaf = calloc(n, 1)) ||
		    !(r->cache->named_shard = calloc(n, 1)))
			rc = oom("the view");
	}
	/* Kept only for the folder the manifest was read from. */
	int keep = !rc && !c.pre_rc && c.jd.data && !strcmp(c.jd.data, r->m.job_dir);
	for (int k = 0; k < 4; k++) {
		if (keep)
			r->cache->pre[k] = c.pre[k];
		else
			es_strv_free(&c.pre[k]);
	}
	if (keep) {
		r->cache->have_pre = 1;
		r->cache->pre_mono = c.pre_mono;
	}
	es_buf_free(&c.jd);
	return rc;
}

/* The claim time of each done shard, from the attempt that published it (status.h
 * claims_by_caller), and the status's sums made again with them. A done shard whose folder
 * held one entry when listed while it was final, the attempt that published it, whose
 * attempt.json says done (its writer's last write there), is attempts_clean (status.h). */
static int fill_claims(struct es_jobview *r)
{
	for (size_t i = 0; i < r->st.n_shards; i++)
		r->st.shards[i].attempts_clean = 0;
	for (size_t i = 0; i < r->n_a; i++) {
		const struct es_jv_attempt *a = &r->a[i];
		long idx = a->shard_index;
		struct es_shard_status *s = idx >= 0 ? &r->st.shards[idx] : NULL;
		if (!s || s->state != ES_SHARD_DONE || !s->published_dir || strcmp(s->published_dir, a->dir))
			continue;
		s->claimed_at_epoch = a->json_claim;
		s->attempts_clean = !s->record_error && r->cache->attempts_final[idx] && r->cache->one_leaf[idx] &&
				    a->status == ES_JV_DONE && !a->raw_status && !a->unreadable;
	}
	return es_status_sum(&r->st);
}

/* The median duration of the done attempts. */
static int set_median(struct es_jobview *r)
{
	size_t n = 0;
	double *d = es_jobview_done_durations(r, &n);
	if (!d)
		return oom("durations");
	r->median = n ? (n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2) : -1;
	free(d);
	return 0;
}

/* How long the listings made with the manifest serve the first refresh (es_jv_cache pre). */
#define ES_JV_PRE_SECS 1.0

int es_jobview_refresh(struct es_jobview *r, double now)
{
	r->now = now > 0 ? now : es_time_epoch();
	r->bad_times = r->unreadable_attempts = 0;
	set_time_range(r);
	struct es_jv_cache *c = r->cache;
	/* The events first: the shards they name are read again whatever the listings say
	 * (ES_SEEN_AGAIN), and while new ones come (the last less than a folder's relist_secs ago),
	 * a folder that changed may wait for its listing (list_job_part). Then the listings: a shard in none of them is pending without
	 * a look at its own names. Those made while the manifest was read serve a first refresh
	 * that follows at once. */
	memset(c->named_shard, 0, r->m.n_shards);
	c->n_named = 0;
	int rc = refresh_events(r);
	double mono = es_time_mono();
	if (c->n_named) {
		c->have_named = 1;
		c->named_mono = mono;
	}
	/* Events came: the folders' changes are named (a refresh between two bursts of them too, or
	 * in a tail where one shard runs, up to a folder's relist_secs after the last event). */
	int may_defer = !r->list_whole && c->have_named;
	if (!rc && (!c->have_pre || es_time_mono() - c->pre_mono >= ES_JV_PRE_SECS)) {
		for (int k = 0; k < 4; k++)
			es_strv_free(&c->pre[k]);
		rc = list_job(r->m.job_dir, c, may_defer, c->pre);
	}
	/* init's listings serve only a first refresh, whose events name nothing (name_event). */
	for (int k = 0; k < 4; k++)
		es_strv_free(&c->named[k]);
	c->have_pre = 0;
	if (!rc)
		rc = es_status_seen(&r->m, c->pre, c->seen);
	for (size_t i = 0; !rc && i < r->m.n_shards; i++)
		c->seen[i] |= c->named_shard[i] ? ES_SEEN_AGAIN : 0;
	struct es_strv shards = c->pre[3];
	c->pre[3] = (struct es_strv)ES_STRV_INIT;
	for (int k = 0; k < 3; k++)
		es_strv_free(&c->pre[k]);
	r->have_status = 1;
	es_fs_walk_cache_begin(); /* one walk per folder for the whole refresh (fs.h) */
	if (!rc)
		rc = es_status_refresh(&r->m, r->lock_timeout, r->cache->seen, &r->st);
	if (!rc)
		rc = refresh_attempts(r, shards);
	else
		es_strv_free(&shards);
	if (!rc)
		rc = fill_claims(r);
	es_fs_walk_cache_end();
	if (!rc) {
		resolve(r);
		rc = group(r);
	}
	r->st.bad_times = (int64_t)r->bad_times;
	return rc ? rc : set_median(r);
}

int es_jobview_load(const char *job_dir, double now, double lock_timeout, struct es_jobview *r)
{
	int rc = es_jobview_init(job_dir, lock_timeout, r);
	return rc ? rc : es_jobview_refresh(r, now);
}

/* ---------------- rates ---------------- */

static int span_cmp(const void *x, const void *y)
{
	const struct es_work_span *a = x, *b = y;
	return (a->start > b->start) - (a->start < b->start);
}

/* The length of the union of the spans clipped to [from, to]; spans sorted by start. */
static double union_secs(const struct es_work_span *s, size_t n, double from, double to)
{
	double total = 0, cur_a = 0, cur_b = -1;
	int open = 0;
	for (size_t i = 0; i < n; i++) {
		double a = s[i].start > from ? s[i].start : from, b = s[i].end < to ? s[i].end : to;
		if (b <= a)
			continue;
		if (open && a <= cur_b) {
			if (b > cur_b)
				cur_b = b;
			continue;
		}
		if (open)
			total += cur_b - cur_a;
		cur_a = a;
		cur_b = b;
		open = 1;
	}
	if (open)
		total += cur_b - cur_a;
	return total;
}

void es_rate_compute(const struct es_work_span *spans, size_t n, double now, double window, int64_t rows_left,
		     int64_t running, int terminal, struct es_rate *out)
{
	*out = (struct es_rate){ 0, -1, -1, -1, -1, -1 };
	struct es_work_span *s = malloc((n ? n : 1) * sizeof(*s));
	if (!s)
		return;
	if (n) {
		memcpy(s, spans, n * sizeof(*s));
		qsort(s, n, sizeof(*s), span_cmp);
	}
	double from = now - window;
	int64_t rows = 0, bytes = 0, wrows = 0, wbytes = 0;
	for (size_t i = 0; i < n; i++) {
		if (!s[i].done)
			continue;
		rows += s[i].rows;
		bytes += s[i].bytes;
		if (s[i].end >= from && s[i].end <= now) {
			wrows += s[i].rows;
			wbytes += s[i].bytes;
		}
	}
	out->work_secs = union_secs(s, n, -INFINITY, INFINITY);
	if (out->work_secs > 0) {
		out->rows_per_sec = (double)rows / out->work_secs;
		out->bytes_per_sec = (double)bytes / out->work_secs;
	}
	double wsecs = union_secs(s, n, from, now);
	if (wsecs > 0 && wrows > 0) {
		out->window_rows_per_sec = (double)wrows / wsecs;
		out->window_bytes_per_sec = (double)wbytes / wsecs;
	} else {
		out->window_rows_per_sec = out->rows_per_sec;
		out->window_bytes_per_sec = out->bytes_per_sec;
	}
	if (running > 0 && !terminal && out->window_rows_per_sec > 0)
		out->eta_secs = (double)rows_left / out->window_rows_per_sec;
	free(s);
}

int es_jobview_rate(const struct es_jobview *v, double window, struct es_rate *out)
{
	struct es_work_span *s = malloc((v->n_a ? v->n_a : 1) * sizeof(*s));
	if (!s)
		return es_error(ES_ENOMEM, "out of memory computing the rates of %s", v->m.job_dir);
	size_t n = 0;
	for (size_t i = 0; i < v->n_a; i++) {
		const struct es_jv_attempt *a = &v->a[i];
		if (a->status == ES_JV_STALE || a->status == ES_JV_LOST || a->claim < 0 || a->end < a->claim)
			continue;
		if (a->status == ES_JV_RUNNING && a->end_kind != ES_JV_END_LIVE)
			continue; /* a running attempt whose lock is not its own any more: its end is not known */
		int done = a->status == ES_JV_DONE && a->shard_index >= 0;
		s[n++] = (struct es_work_span){ a->claim, a->end, done, done ? v->m.shards[a->shard_index].rows : 0,
						 done ? v->m.shards[a->shard_index].size_bytes : 0 };
	}
	const struct es_status *st = &v->st;
	es_rate_compute(s, n, v->now, window > 0 ? window : 60, st->rows_total - st->rows_done, st->counts.running,
			st->terminal, out);
	free(s);
	return 0;
}

int es_jobview_rate_status(struct es_jobview *v)
{
	struct es_rate r;
	int rc = es_jobview_rate(v, 60, &r);
	if (rc)
		return rc;
	v->st.rate_rows_per_sec = r.window_rows_per_sec;
	v->st.eta_secs = v->st.complete ? 0 : r.eta_secs;
	return 0;
}

/* ---------------- Prometheus ---------------- */

/* A label value: backslash, double quote and newline escaped (the exposition format's rule). */
static int prom_label(struct es_buf *out, const char *v)
{
	int rc = 0;
	for (const char *p = v ? v : ""; *p; p++) {
		if (*p == '\\' || *p == '"')
			rc |= es_buf_addc(out, '\\') | es_buf_addc(out, *p);
		else if (*p == '\n')
			rc |= es_buf_adds(out, "\\n");
		else
			rc |= es_buf_addc(out, *p);
	}
	return rc;
}

static int prom_family(struct es_buf *out, const char *name, const char *help)
{
	return es_buf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

/* name{job="..."[,key="val"]} value */
static int prom_sample(struct es_buf *out, const char *name, const char *job, const char *key, const char *val,
		       double value)
{
	int rc = es_buf_printf(out, "%s{job=\"", name);
	rc |= prom_label(out, job);
	if (key) {
		rc |= es_buf_printf(out, "\",%s=\"", key);
		rc |= prom_label(out, val);
	}
	if (value == floor(value) && fabs(value) < 9e15)
		rc |= es_buf_printf(out, "\"} %lld\n", (long long)value);
	else
		rc |= es_buf_printf(out, "\"} %.6g\n", value);
	return rc;
}

int es_jobview_format_prometheus(const struct es_jobview *v, struct es_buf *out)
{
	const struct es_status *st = &v->st;
	const struct es_status_counts *c = &st->counts;
	const char *job = v->m.job_id;
	int64_t bytes_total = 0, bytes_done = 0;
	for (size_t i = 0; i < v->m.n_shards; i++) {
		bytes_total += v->m.shards[i].size_bytes;
		if (i < st->n_shards && st->shards[i].state == ES_SHARD_DONE)
			bytes_done += v->m.shards[i].size_bytes;
	}
	struct es_rate r;
	int rc = es_jobview_rate(v, 60, &r);
	if (rc)
		return rc;
	const char *states[] = { "pending", "running", "stale", "done", "failed" };
	int64_t counts[] = { c->pending, c->running, c->stale, c->done, c->failed };
	rc |= prom_family(out, "eshard_shards", "Shards of the job by state (as eshard-mpi status classifies them).");
	for (int i = 0; i < 5; i++)
		rc |= prom_sample(out, "eshard_shards", job, "state", states[i], (double)counts[i]);
	rc |= prom_family(out, "eshard_shards_total", "Shards in the manifest.");
	rc |= prom_sample(out, "eshard_shards_total", job, NULL, NULL, (double)c->total);
	rc |= prom_family(out, "eshard_rows_total", "Input rows in the manifest.");
	rc |= prom_sample(out, "eshard_rows_total", job, NULL, NULL, (double)st->rows_total);
	rc |= prom_family(out, "eshard_rows_done", "Input rows of the done shards.");
	rc |= prom_sample(out, "eshard_rows_done", job, NULL, NULL, (double)st->rows_done);
	rc |= prom_family(out, "eshard_result_rows_done", "Rows of the results of the done shards (after filtering).");
	rc |= prom_sample(out, "eshard_result_rows_done", job, NULL, NULL, (double)st->result_rows_done);
	rc |= prom_family(out, "eshard_bytes_total", "Input bytes in the manifest.");
	rc |= prom_sample(out, "eshard_bytes_total", job, NULL, NULL, (double)bytes_total);
	rc |= prom_family(out, "eshard_bytes_done", "Input bytes of the done shards.");
	rc |= prom_sample(out, "eshard_bytes_done", job, NULL, NULL, (double)bytes_done);
	rc |= prom_family(out, "eshard_attempts", "Attempt folders by outcome (the status of their attempt.json).");
	for (int i = 0; i < ES_JV_N; i++)
		rc |= prom_sample(out, "eshard_attempts", job, "outcome", es_jv_status_names[i], (double)v->by_status[i]);
	rc |= prom_family(out, "eshard_host_shards_done", "Done shards by the host that published them.");
	for (size_t i = 0; i < st->n_hosts; i++)
		rc |= prom_sample(out, "eshard_host_shards_done", job, "host", st->hosts[i].host, (double)st->hosts[i].done);
	rc |= prom_family(out, "eshard_job_complete", "1 when every shard is done and merge would accept every record.");
	rc |= prom_sample(out, "eshard_job_complete", job, NULL, NULL, st->complete);
	rc |= prom_family(out, "eshard_job_terminal", "1 when every shard is done or failed.");
	rc |= prom_sample(out, "eshard_job_terminal", job, NULL, NULL, st->terminal);
	rc |= prom_family(out, "eshard_bad_times", "Recorded times ignored: not finite, or outside the job's span (a node's clock may be wrong).");
	rc |= prom_sample(out, "eshard_bad_times", job, NULL, NULL, (double)v->bad_times);
	rc |= prom_family(out, "eshard_work_seconds", "Seconds in which some attempt ran (downtime between submissions excluded).");
	rc |= prom_sample(out, "eshard_work_seconds", job, NULL, NULL, r.work_secs);
	if (r.window_rows_per_sec >= 0) {
		rc |= prom_family(out, "eshard_rows_per_second", "Input rows per second of work over the last minute of work.");
		rc |= prom_sample(out, "eshard_rows_per_second", job, NULL, NULL, r.window_rows_per_sec);
	}
	if (r.eta_secs >= 0) {
		rc |= prom_family(out, "eshard_eta_seconds", "Estimated seconds to the end (only while shards run).");
		rc |= prom_sample(out, "eshard_eta_seconds", job, NULL, NULL, r.eta_secs);
	}
	return rc ? es_error(ES_ENOMEM, "out of memory writing the metrics of %s", v->m.job_dir) : 0;
}
