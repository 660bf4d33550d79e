#include "eshard/claim.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/util.h"
#include "json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct es_lease_obs {
	int valid;
	dev_t dev;
	ino_t ino;
	int64_t mtime_ns;
	uint64_t content_hash;
	double since_mono;   /* when this exact state was first seen */
	/* A done marker of this shard was seen (or published by us). Done markers are final
	 * (retry refuses done shards, nothing removes them), so es_claim_try need not look again:
	 * without this, a worker scanning from the first shard made one open() per done shard for
	 * every claim, O(shards^2) in all, and on NFS each of them is a round trip. */
	int done;
};

static uint64_t fnv1a(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

int es_claim_lock_path(const struct es_manifest *m, const char *shard_id, char *out, size_t n)
{
	int len = snprintf(out, n, "%s/state/locks/%s.lock", m->job_dir, shard_id);
	return len < 0 || (size_t)len >= n ? es_error(ES_EINVAL, "path too long for shard '%s'", shard_id) : 0;
}

static int marker_path(const struct es_manifest *m, const char *kind, const char *shard_id, char *out, size_t n)
{
	int len = snprintf(out, n, "%s/state/%s/%s.json", m->job_dir, kind, shard_id);
	return len < 0 || (size_t)len >= n ? es_error(ES_EINVAL, "path too long for shard '%s'", shard_id) : 0;
}

int es_claim_marker_exists(const struct es_manifest *m, const char *kind, const char *shard_id)
{
	char p[4096];
	int rc = marker_path(m, kind, shard_id, p, sizeof(p));
	return rc ? rc : es_fs_exists_fresh(p);
}

int es_claimer_init(struct es_claimer *c, const struct es_manifest *m, const struct es_policy *p)
{
	memset(c, 0, sizeof(*c));
	c->m = m;
	c->policy = *p;
	c->obs = calloc(m->n_shards ? m->n_shards : 1, sizeof(*c->obs));
	return c->obs ? 0 : es_error(ES_ENOMEM, "out of memory");
}

void es_claimer_free(struct es_claimer *c)
{
	free(c->obs);
	c->obs = NULL;
}

/* Read a whole lock (at most 1 MiB) from an open descriptor. */
static int read_fd(int fd, struct es_buf *b, const char *what)
{
	if (lseek(fd, 0, SEEK_SET) < 0)
		return es_error_errno(ES_EIO, "cannot seek '%s'", what);
	return es_fs_read_fd(fd, b, (size_t)1 << 20, what);
}

static int same_file_at(int fd, const char *path, struct stat *fst)
{
	struct stat pst;
	if (fstat(fd, fst) != 0)
		return 0;
	if (stat(path, &pst) != 0)
		return 0;
	return pst.st_dev == fst->st_dev && pst.st_ino == fst->st_ino;
}

static void copy_str(char *out, size_t n, const cJSON *doc, const char *key)
{
	const char *v = es_json_get_str(doc, key);
	snprintf(out, n, "%s", v ? v : "");
}

/* Fill li from an open lock: fstat, then the content (parsed quietly); *doc gets the parsed
 * object when doc is not NULL (NULL when unreadable). */
static int lock_info_fd(int fd, const char *path, struct es_lock_info *li, cJSON **doc)
{
	struct stat st;
	struct es_buf content = ES_BUF_INIT;
	memset(li, 0, sizeof(*li));
	li->claimed_at_epoch = -1;
	if (doc)
		*doc = NULL;
	if (fstat(fd, &st) != 0)
		return es_error_errno(ES_EIO, "cannot stat lock '%s'", path);
	int rc = read_fd(fd, &content, path);
	if (rc) {
		es_buf_free(&content);
		return rc;
	}
	li->exists = 1;
	li->dev = st.st_dev;
	li->ino = st.st_ino;
	li->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	li->content_hash = fnv1a(content.data, content.len);
	es_log_quiet_begin();
	cJSON *l = es_json_parse(content.data, content.len, path);
	es_log_quiet_end();
	es_buf_free(&content);
	if (!cJSON_IsObject(l)) {
		cJSON_Delete(l);
		return 0;
	}
	li->readable = 1;
	copy_str(li->token, sizeof(li->token), l, "token");
	copy_str(li->hostname, sizeof(li->hostname), l, "hostname");
	copy_str(li->attempt_dir, sizeof(li->attempt_dir), l, "attempt_dir");
	es_json_get_i64(l, "attempt_number", &li->attempt_number);
	li->has_pid = !es_json_get_i64(l, "pid", &li->pid);
	li->has_heartbeat = cJSON_GetObjectItemCaseSensitive(l, "heartbeat") != NULL;
	es_json_get_i64(l, "heartbeat", &li->heartbeat);
	if (es_json_get_num(l, "lease_secs", &li->lease_secs))
		li->lease_secs = 0;
	double t;
	if (!es_json_get_num(l, "claimed_at_epoch", &t) || !es_time_parse_iso(es_json_get_str(l, "claimed_at"), &t))
		li->claimed_at_epoch = t;
	if (doc)
		*doc = l;
	else
		cJSON_Delete(l);
	return 0;
}

int es_claim_lock_read(const char *path, struct es_lock_info *li)
{
	memset(li, 0, sizeof(*li));
	li->claimed_at_epoch = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		return es_error_errno(ES_EIO, "cannot open lock '%s'", path);
	}
	int rc = lock_info_fd(fd, path, li, NULL);
	close(fd);
	return rc;
}

double es_claim_lease_of(const struct es_lock_info *li, double job_lease)
{
	if (!li->readable)
		return job_lease;
	if (!li->has_heartbeat)
		return 0;
	return li->lease_secs > job_lease ? li->lease_secs : job_lease;
}

int es_claim_lock_stale(const struct es_lock_info *li, double age_secs, double unchanged_secs,
			const struct es_policy *p)
{
	double lease = es_claim_lease_of(li, p->lease_secs);
	return age_secs > (double)p->lock_timeout_secs || (lease > 0 && unchanged_secs >= lease);
}

/* Join rel under the job folder, refusing anything that escapes it. */
static int inside_job(const struct es_manifest *m, const char *rel, struct es_buf *out)
{
	struct es_buf j = ES_BUF_INIT;
	int rc = es_path_join(&j, m->job_dir, rel);
	if (!rc)
		rc = es_fs_resolve(j.data, out);
	es_buf_free(&j);
	if (rc)
		return rc;
	size_t n = strlen(m->job_dir);
	if (strncmp(out->data, m->job_dir, n) != 0 || (out->data[n] != '/' && out->data[n] != '\0'))
		return ES_EINVAL;
	return 0;
}

/* The stale takeover's step f: mark the referenced attempt stale if it is still running. */
static void mark_attempt_stale(const struct es_manifest *m, const char *ad)
{
	if (!*ad)
		return;
	struct es_buf dir = ES_BUF_INIT, path = ES_BUF_INIT;
	cJSON *a = NULL;
	es_log_quiet_begin();
	if (!inside_job(m, ad, &dir) && !es_path_join(&path, dir.data, "attempt.json") &&
	    !es_json_load(path.data, &a) && cJSON_IsObject(a)) {
		const char *st = es_json_get_str(a, "status");
		if (st && !strcmp(st, "running")) {
			char now[40];
			es_time_now_iso(now);
			es_json_set_str(a, "status", "stale");
			es_json_set_str(a, "stale_at", now);
			es_json_write_atomic(path.data, a);
		}
	}
	es_log_quiet_end();
	cJSON_Delete(a);
	es_buf_free(&dir);
	es_buf_free(&path);
}

/* 1: the lock was moved away (by us or someone else): go on claiming; 0: live or busy. */
static int try_takeover(struct es_claimer *c, size_t i, const char *lock_path)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	struct es_lease_obs *o = &c->obs[i];
	/* O_RDWR: NFS emulates flock() with fcntl() locks, and an exclusive one needs a file
	 * open for writing (flock(2), "NFS details"); read-only, every takeover fails EBADF. */
	int fd = open(lock_path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT) {
			o->valid = 0;
			return 1;
		}
		return es_error_errno(ES_EIO, "cannot open lock '%s'", lock_path);
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int busy = errno == EWOULDBLOCK || errno == EINTR;
		if (!busy)
			es_error_errno(ES_EIO, "cannot lock '%s' to check it for a stale takeover", lock_path);
		close(fd);
		return busy ? 0 : ES_EIO; /* busy: someone is releasing, publishing, refreshing or taking it over */
	}
	int rc = 0;
	struct stat st;
	struct es_lock_info li;
	if (!same_file_at(fd, lock_path, &st)) {
		o->valid = 0;
		rc = 1;
		goto out;
	}
	if ((rc = lock_info_fd(fd, lock_path, &li, NULL)) != 0)
		goto out;
	double now_mono = es_time_mono();
	if (!o->valid || o->dev != li.dev || o->ino != li.ino || o->mtime_ns != li.mtime_ns ||
	    o->content_hash != li.content_hash)
		*o = (struct es_lease_obs){ 1, li.dev, li.ino, li.mtime_ns, li.content_hash, now_mono, o->done };
	double age = es_time_epoch() - (double)li.mtime_ns / 1e9;
	if (!es_claim_lock_stale(&li, age, now_mono - o->since_mono, &c->policy))
		goto out; /* rc 0: live */
	mark_attempt_stale(m, li.attempt_dir);
	char tok[33], dest[4096];
	if ((rc = es_fs_token(tok)) != 0)
		goto out;
	snprintf(dest, sizeof(dest), "%s/state/stale_locks/%s.%lld.%s.lock", m->job_dir, id,
		 (long long)es_time_epoch(), tok);
	if ((rc = es_fs_rename(lock_path, dest)) != 0)
		goto out;
	c->took_over = 1;
	snprintf(c->took_over_token, sizeof(c->took_over_token), "%s", li.token);
	if (li.attempt_number > 0 && li.attempt_number <= INT32_MAX)
		c->took_over_attempt = (int)li.attempt_number;
	o->valid = 0;
	rc = 1;
out:
	flock(fd, LOCK_UN);
	close(fd);
	return rc;
}

int es_claim_count_failures(const char *job_dir, const char *shard_id, int *failures, int *folders)
{
	struct es_buf root = ES_BUF_INIT, p = ES_BUF_INIT;
	*failures = 0;
	*folders = 0;
	es_buf_printf(&root, "%s/attempts/%s", job_dir, shard_id);
	DIR *d = opendir(root.data);
	if (!d) {
		int rc = errno == ENOENT ? 0 : es_error_errno(ES_EIO, "cannot read '%s'", root.data);
		es_buf_free(&root);
		return rc;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		struct stat st;
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/%s", root.data, e->d_name);
		if (stat(p.data, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		(*folders)++;
		es_buf_adds(&p, "/attempt.json");
		cJSON *a = NULL;
		es_log_quiet_begin();
		if (!es_json_load(p.data, &a) && cJSON_IsObject(a)) {
			const char *s = es_json_get_str(a, "status");
			if (s && (!strcmp(s, "failed") || !strcmp(s, "stale")))
				(*failures)++;
		}
		es_log_quiet_end();
		cJSON_Delete(a);
	}
	closedir(d);
	es_buf_free(&root);
	es_buf_free(&p);
	return 0;
}

static cJSON *lock_doc(const struct es_claimer *c, const char *shard_id)
{
	cJSON *l = cJSON_CreateObject();
	es_json_set_str(l, "attempt_dir", c->attempt_rel);
	es_json_set_int(l, "attempt_number", c->attempt_number);
	es_json_set_str(l, "claimed_at", c->claimed_at);
	es_json_set_float(l, "claimed_at_epoch", c->claimed_at_epoch);
	es_json_set_str(l, "hostname", es_hostname());
	es_json_set_int(l, "pid", (int64_t)getpid());
	es_json_set_str(l, "shard_id", shard_id);
	es_json_set_str(l, "token", c->token);
	/* eshard-mpi lease fields: readers of the reference ignore them. */
	es_json_set_int(l, "heartbeat", c->heartbeat);
	es_json_set_float(l, "lease_secs", c->policy.lease_secs);
	return l;
}

int es_claim_try(struct es_claimer *c, size_t i)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	char lock_path[4096];
	int rc;
	c->took_over = 0;
	c->took_over_attempt = 0;
	if (c->obs[i].done)
		return ES_CLAIM_NONE;
	if ((rc = es_claim_lock_path(m, id, lock_path, sizeof(lock_path))))
		return rc;
	/* Step 1. */
	if ((rc = es_claim_marker_exists(m, "done", id)) != 0) {
		if (rc == 1)
			c->obs[i].done = 1;
		return rc < 0 ? rc : ES_CLAIM_NONE;
	}
	if ((rc = es_claim_marker_exists(m, "failed", id)) != 0)
		return rc < 0 ? rc : ES_CLAIM_NONE;
	/* Step 2. */
	if ((rc = es_fs_exists(lock_path)) < 0)
		return rc;
	if (rc == 1) {
		rc = try_takeover(c, i, lock_path);
		if (rc <= 0)
			return rc < 0 ? rc : ES_CLAIM_NONE;
	}
	/* Step 3. */
	if ((rc = es_claim_marker_exists(m, "done", id)) != 0 || (rc = es_claim_marker_exists(m, "failed", id)) != 0)
		return rc < 0 ? rc : ES_CLAIM_NONE;
	/* Step 5: the attempt number and token. The folder itself is made only once the lock is
	 * ours (below): the reference made it before the O_EXCL create, so every loser of a race
	 * briefly added a folder that the winner counted, and a shard's first attempt could be
	 * numbered 0016 when 16 workers raced for it. */
	int failures, folders;
	if ((rc = es_claim_count_failures(m->job_dir, id, &failures, &folders)))
		return rc;
	if ((rc = es_fs_token(c->token)))
		return rc;
	c->attempt_number = folders + 1;
	c->heartbeat = 0;
	snprintf(c->attempt_rel, sizeof(c->attempt_rel), "attempts/%s/%04d-%s", id, c->attempt_number, c->token);
	struct es_buf ad = ES_BUF_INIT, parent = ES_BUF_INIT;
	es_buf_printf(&parent, "%s/attempts/%s", m->job_dir, id);
	es_buf_printf(&ad, "%s/%s", m->job_dir, c->attempt_rel);
	/* Step 6: the lock. */
	es_time_now_iso(c->claimed_at);
	c->claimed_at_epoch = es_time_epoch();
	cJSON *l = lock_doc(c, id);
	struct es_buf line = ES_BUF_INIT;
	rc = es_json_dump(l, 0, &line);
	if (!rc)
		rc = es_fs_create_exclusive(lock_path, line.data, line.len);
	es_buf_free(&line);
	if (rc != 0) {
		cJSON_Delete(l);
		rc = rc == 1 ? ES_CLAIM_NONE : rc;
		goto out;
	}
	/* Step 4, done while holding the lock (the reference did it before, without the lock, so
	 * a crash or race could publish a failed record for a shard another worker held). */
	if (failures > c->policy.max_retries) {
		cJSON *f = cJSON_CreateObject();
		char now[40];
		es_time_now_iso(now);
		es_json_set_str(f, "failed_at", now);
		es_json_set_int(f, "failures", failures);
		es_json_set_str(f, "reason", "retry limit reached before claim");
		es_json_set_str(f, "shard_id", id);
		es_json_set_str(f, "status", "failed");
		struct es_buf rec = ES_BUF_INIT;
		int published = 0;
		rc = es_json_dump(f, 1, &rec);
		if (!rc)
			rc = es_claim_publish(c, i, c->token, "failed", rec.data, rec.len, &published);
		es_buf_free(&rec);
		cJSON_Delete(f);
		cJSON_Delete(l);
		rc = rc < 0 ? rc : ES_CLAIM_FAILED_LIMIT;
		goto out;
	}
	/* The attempt folder (its leaf is new: the name holds a fresh token). */
	if ((rc = es_fs_mkdirs(parent.data, 0755)) == 0 && mkdir(ad.data, 0755) != 0)
		rc = es_error_errno(ES_EIO, "cannot create attempt folder '%s'", ad.data);
	if (rc) {
		cJSON_Delete(l);
		es_claim_release(c, i, c->token);
		goto out;
	}
	/* Step 7: attempt.json. */
	es_json_set_str(l, "status", "running");
	es_json_set_str(l, "input_path", m->shards[i].path);
	cJSON_DeleteItemFromObjectCaseSensitive(l, "heartbeat");
	cJSON_DeleteItemFromObjectCaseSensitive(l, "lease_secs");
	es_buf_adds(&ad, "/attempt.json");
	rc = es_json_write_atomic(ad.data, l);
	cJSON_Delete(l);
	if (rc) {
		es_claim_release(c, i, c->token);
		goto out;
	}
	rc = ES_CLAIM_OK;
out:
	es_buf_free(&ad);
	es_buf_free(&parent);
	return rc;
}

/* Open the lock, flock it, and check it is the one at the path and carries token.
 * Returns the fd (>= 0) when we own it, ES_ENOENT-style 1 when we do not, negative on error. */
static int lock_owned(const char *lock_path, const char *token, int nonblock, int *fd_out, cJSON **doc)
{
	*fd_out = -1;
	int fd = open(lock_path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		return es_error_errno(ES_EIO, "cannot open lock '%s'", lock_path);
	}
	while (flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0)) != 0) {
		if (errno == EINTR)
			continue;
		int busy = errno == EWOULDBLOCK;
		close(fd);
		return busy ? 2 : es_error_errno(ES_EIO, "cannot lock '%s'", lock_path);
	}
	struct stat st;
	struct es_buf content = ES_BUF_INIT;
	int rc = 1;
	/* Not the one at the path (moved or replaced): not ours. A read error (ESTALE, EIO) is an
	 * error, not a lost lease: a heartbeat must not abort a live shard over a hiccup. */
	if (same_file_at(fd, lock_path, &st) && (rc = read_fd(fd, &content, lock_path)) == 0) {
		rc = 1;
		es_log_quiet_begin();
		cJSON *l = es_json_parse(content.data, content.len, lock_path);
		es_log_quiet_end();
		const char *t = es_json_get_str(l, "token");
		if (t && !strcmp(t, token)) {
			rc = 0;
			if (doc)
				*doc = l;
			else
				cJSON_Delete(l);
		} else {
			cJSON_Delete(l);
		}
	}
	es_buf_free(&content);
	if (rc) {
		flock(fd, LOCK_UN);
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

static void unlock_close(int fd)
{
	flock(fd, LOCK_UN);
	close(fd);
}

int es_claim_heartbeat(struct es_claimer *c, size_t i)
{
	char lock_path[4096];
	int rc = es_claim_lock_path(c->m, c->m->shards[i].id, lock_path, sizeof(lock_path));
	if (rc)
		return rc;
	int fd;
	cJSON *doc = NULL;
	rc = lock_owned(lock_path, c->token, 1, &fd, &doc);
	if (rc == 2)
		return 0; /* an observer holds it for a moment: refresh next time */
	if (rc)
		return rc;
	c->heartbeat++;
	es_json_set_int(doc, "heartbeat", c->heartbeat);
	struct es_buf line = ES_BUF_INIT;
	rc = es_json_dump(doc, 0, &line);
	/* In place, same inode: rewrite from the start, then cut what is left of the old text. */
	if (!rc && pwrite(fd, line.data, line.len, 0) != (ssize_t)line.len)
		rc = es_error_errno(ES_EIO, "cannot refresh lock '%s'", lock_path);
	if (!rc && ftruncate(fd, (off_t)line.len) != 0)
		rc = es_error_errno(ES_EIO, "cannot refresh lock '%s'", lock_path);
	if (!rc && fsync(fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync lock '%s'", lock_path);
	es_buf_free(&line);
	cJSON_Delete(doc);
	unlock_close(fd);
	return rc;
}

int es_claim_release(struct es_claimer *c, size_t i, const char *token)
{
	char lock_path[4096];
	int rc = es_claim_lock_path(c->m, c->m->shards[i].id, lock_path, sizeof(lock_path));
	if (rc)
		return rc;
	int fd;
	rc = lock_owned(lock_path, token, 0, &fd, NULL);
	if (rc)
		return rc;
	if (unlink(lock_path) != 0)
		rc = es_error_errno(ES_EIO, "cannot remove lock '%s'", lock_path);
	else
		rc = es_fs_fsync_parent(lock_path);
	unlock_close(fd);
	return rc;
}

int es_claim_publish(struct es_claimer *c, size_t i, const char *token, const char *kind,
		     const char *record, size_t record_len, int *published)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	char lock_path[4096], path[4096];
	*published = 0;
	int rc = es_claim_lock_path(m, id, lock_path, sizeof(lock_path));
	if (!rc)
		rc = marker_path(m, kind, id, path, sizeof(path));
	if (rc)
		return rc;
	int fd;
	rc = lock_owned(lock_path, token, 0, &fd, NULL);
	if (rc)
		return rc;
	const char *other = !strcmp(kind, "done") ? "failed" : "done";
	int blocked = es_claim_marker_exists(m, other, id);
	if (blocked < 0) {
		rc = blocked;
	} else if (!blocked) {
		es_crash_point("claim-before-publish");
		int r = es_fs_publish_exclusive(path, record, record_len);
		if (r < 0)
			rc = r;
		else
			*published = r == 0;
		if (r >= 0 && !strcmp(kind, "done"))
			c->obs[i].done = 1; /* ours, or someone else's already there */
	}
	if (!rc || rc == 1) {
		if (unlink(lock_path) != 0)
			rc = es_error_errno(ES_EIO, "cannot remove lock '%s'", lock_path);
		else
			rc = es_fs_fsync_parent(lock_path);
	}
	unlock_close(fd);
	return rc;
}
