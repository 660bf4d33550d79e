#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/log.h"
#include "eshard/proc.h"
#include "json.h"
#include "record.h"

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
	/* The shard is terminal (its fence was seen, or written by us). Done fences are final
	 * (retry refuses done shards, nothing removes them) and a failed one goes only by retry,
	 * which no worker runs alongside: es_claim_try need not look again. Without this, a
	 * worker scanning from the first shard made one open() per finished shard for every
	 * claim, O(shards^2) in all, and on NFS each of them is a round trip. */
	int terminal;
	/* What the last look showed, for the backup rule (es_claim_seen). */
	int running;
	double claimed_at_epoch;
	double done_secs;
	char host[256];
	char token[33];
	double running_seen_mono; /* when a live running lock was last seen here (es_claim_seen) */
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
	if (!c->obs)
		return es_error(ES_ENOMEM, "out of memory");
	for (size_t i = 0; i < m->n_shards; i++)
		c->obs[i].claimed_at_epoch = c->obs[i].done_secs = -1;
	return 0;
}

void es_claimer_free(struct es_claimer *c)
{
	free(c->obs);
	c->obs = NULL;
	free(c->attempt_text);
	c->attempt_text = NULL;
}

char *es_claim_take_attempt(struct es_claimer *c, size_t *len)
{
	char *text = c->attempt_text;
	double window = c->policy.lease_secs;
	if (c->policy.lock_timeout_secs > 0 && (double)c->policy.lock_timeout_secs < window)
		window = (double)c->policy.lock_timeout_secs;
	*len = c->attempt_text_len;
	c->attempt_text = NULL;
	if (text && es_time_mono() - c->attempt_text_mono >= window / 4) {
		free(text);
		text = NULL;
	}
	return text;
}

/* Read a whole lock (at most 1 MiB) from an open descriptor whose fstat() gave size. */
static int read_fd(int fd, struct es_buf *b, off_t size, const char *what)
{
	if (lseek(fd, 0, SEEK_SET) < 0)
		return es_error_errno(ES_EIO, "cannot seek '%s'", what);
	return es_fs_read_fd_sized(fd, b, (size_t)1 << 20, size, what);
}

/* Open a lock (O_RDONLY or O_RDWR): 0 with *fd, 1 when there is none, negative after
 * es_error(). A symbolic link (planted: eshard-mpi never makes one) is refused, so that nothing
 * is written through it out of the job folder, and so is anything but a regular file: a FIFO
 * would block the open or the read for ever. */
static int open_lock(const char *path, int flags, int *fd)
{
	return es_fs_open_read(path, flags | O_NOFOLLOW, fd);
}

static void unlock_close(int fd);

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
	li->claimed_at_epoch = li->terminal_at_epoch = -1;
	if (doc)
		*doc = NULL;
	if (fstat(fd, &st) != 0)
		return es_error_errno(ES_EIO, "cannot stat lock '%s'", path);
	int rc = read_fd(fd, &content, S_ISREG(st.st_mode) ? st.st_size : -1, path);
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
	const char *state = es_json_get_str(l, "status");
	snprintf(li->state, sizeof(li->state), "%s", state ? state : "running");
	li->terminal = !strcmp(li->state, "done") || !strcmp(li->state, "failed");
	copy_str(li->terminal_path, sizeof(li->terminal_path), l, "terminal_path");
	double t;
	if (!es_time_parse_iso(es_json_get_str(l, "terminal_at"), &t))
		li->terminal_at_epoch = t;
	copy_str(li->record_host, sizeof(li->record_host), cJSON_GetObjectItemCaseSensitive(l, "record"), "hostname");
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
	li->claimed_at_epoch = li->terminal_at_epoch = -1;
	int fd, rc = open_lock(path, O_RDONLY, &fd);
	if (rc)
		return rc == 1 ? 0 : rc;
	rc = lock_info_fd(fd, path, li, NULL);
	close(fd);
	return rc;
}

int es_claim_lock_hold(const char *path, int *fd_out, struct es_lock_info *li)
{
	*fd_out = -1;
	memset(li, 0, sizeof(*li));
	li->claimed_at_epoch = li->terminal_at_epoch = -1;
	/* O_RDWR: an exclusive flock() emulated with fcntl() locks on NFS needs it (try_takeover). */
	int fd, rc = open_lock(path, O_RDWR, &fd);
	if (rc)
		return rc;
	while (flock(fd, LOCK_EX) != 0) {
		if (errno == EINTR)
			continue;
		rc = es_error_errno(ES_EIO, "cannot lock '%s'", path);
		close(fd);
		return rc;
	}
	struct stat st;
	if (!same_file_at(fd, path, &st)) {
		/* Moved or replaced while we waited for it: look again. */
		unlock_close(fd);
		return es_claim_lock_hold(path, fd_out, li);
	}
	rc = lock_info_fd(fd, path, li, NULL);
	if (rc) {
		unlock_close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

void es_claim_lock_unhold(int fd)
{
	if (fd >= 0)
		unlock_close(fd);
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

/* A publisher that died between its record and its fence left its attempt "running": when the
 * record is its own (same token), the attempt did publish, so it says "done" (with
 * recovered_at) and its result; any other running attempt is marked stale. */
static void mark_attempt_recovered(const struct es_manifest *m, const char *ad, const char *state,
				   const char *record, size_t len)
{
	struct es_buf dir = ES_BUF_INIT, path = ES_BUF_INIT;
	cJSON *a = NULL, *rec = NULL;
	es_log_quiet_begin();
	if (record)
		rec = es_json_parse(record, len, "record");
	if (*ad && !inside_job(m, ad, &dir) && !es_path_join(&path, dir.data, "attempt.json") &&
	    !es_json_load(path.data, &a) && cJSON_IsObject(a)) {
		const char *st = es_json_get_str(a, "status"), *tok = es_json_get_str(a, "token");
		const char *rtok = es_json_get_str(rec, "token");
		if (st && !strcmp(st, "running")) {
			char now[40];
			es_time_now_iso(now);
			int own = tok && rtok && !strcmp(tok, rtok);
			es_json_set_str(a, "status", own ? state : "stale");
			es_json_set_str(a, own ? "recovered_at" : "stale_at", now);
			if (own && !strcmp(state, "done")) {
				cJSON *r = cJSON_CreateObject();
				static const char *const keys[] = { "ray_output_files", "rows", "sha256", "size_bytes" };
				for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
					const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, keys[k]);
					if (v)
						es_json_set(r, keys[k], cJSON_Duplicate(v, 1));
				}
				es_json_set(a, "result", r);
			}
			es_json_write_atomic(path.data, a);
		}
	}
	es_log_quiet_end();
	cJSON_Delete(a);
	cJSON_Delete(rec);
	es_buf_free(&dir);
	es_buf_free(&path);
}

/* The stale takeover's step f: mark the referenced attempt stale if it is still running, and
 * remove the temporaries its dead owner left in its folder (a processed.jsonl or attempt.json
 * cut short): untouched for a lease, like the lock. Merge's sweep cannot tell that for a maker
 * on another host before an hour has passed. */
static void mark_attempt_stale(const struct es_manifest *m, const char *ad, double lease_secs)
{
	if (!*ad)
		return;
	struct es_buf dir = ES_BUF_INIT, path = ES_BUF_INIT;
	cJSON *a = NULL;
	es_log_quiet_begin();
	int inside = !inside_job(m, ad, &dir);
	if (inside && !es_path_join(&path, dir.data, "attempt.json") &&
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
	if (inside)
		es_fs_sweep_dead_temps(dir.data, lease_secs);
	cJSON_Delete(a);
	es_buf_free(&dir);
	es_buf_free(&path);
}

/* ---- terminal fences ---- */

/* The record a terminal state points at, relative to the job folder. */
static void record_rel(const char *id, const char *state, char *out, size_t n)
{
	snprintf(out, n, "state/%s/%s.json", state, id);
}

/* Rewrite an open lock in place (same inode: an observer's open sees the new content, never a
 * missing lock) with doc, then cut what is left of the old text and fsync. The new text is at
 * least as long as a running lock's (the fence adds fields), so a reader that catches it half
 * written sees text that does not parse, which it treats as a busy lock and reads again. */
static int rewrite_lock(int fd, const char *lock_path, const cJSON *doc, const char *crash_point)
{
	struct es_buf line = ES_BUF_INIT;
	int rc = es_json_dump(doc, 0, &line);
	if (!rc && pwrite(fd, line.data, line.len, 0) != (ssize_t)line.len)
		rc = es_error_errno(ES_EIO, "cannot rewrite lock '%s'", lock_path);
	if (crash_point)
		es_crash_point(crash_point);
	if (!rc && ftruncate(fd, (off_t)line.len) != 0)
		rc = es_error_errno(ES_EIO, "cannot rewrite lock '%s'", lock_path);
	if (!rc && fsync(fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync lock '%s'", lock_path);
	es_buf_free(&line);
	return rc;
}

/* Turn the lock held open (and flocked) as fd into a terminal fence: its state ("done" or
 * "failed") and the record it stands for. The lock is never removed afterwards (until retry
 * archives a failed one), so no client can take a finished shard for a free one. */
static int write_fence(int fd, const char *lock_path, cJSON *doc, const char *id, const char *state,
		       const char *record, size_t record_len)
{
	char now[40], rel[600];
	es_time_now_iso(now);
	record_rel(id, state, rel, sizeof(rel));
	es_json_set_str(doc, "status", state);
	es_json_set_str(doc, "terminal_at", now);
	es_json_set_str(doc, "terminal_path", rel);
	/* A copy of the record, for readers that cannot see the record file yet (record.h). */
	cJSON *copy = NULL;
	if (record) {
		es_log_quiet_begin();
		copy = es_json_parse(record, record_len, rel);
		es_log_quiet_end();
	}
	if (cJSON_IsObject(copy))
		es_json_set(doc, "record", copy);
	else
		cJSON_Delete(copy);
	return rewrite_lock(fd, lock_path, doc, NULL);
}

/* The text of a visible record (for a fence written after it), or NULL. */
static char *record_text(const struct es_manifest *m, const char *state, const char *id, size_t *len)
{
	char p[4096];
	struct es_buf b = ES_BUF_INIT;
	if (marker_path(m, state, id, p, sizeof(p)))
		return NULL;
	es_log_quiet_begin();
	int rc = es_fs_read_file(p, &b, (size_t)1 << 20);
	es_log_quiet_end();
	if (rc) {
		es_buf_free(&b);
		return NULL;
	}
	return es_buf_detach(&b, len);
}


/* A shard whose record is visible but whose lock is not a fence (a job folder written by the
 * reference, which removes its locks; a publisher that died between its record and its fence):
 * the state its records tell ("done" wins), or NULL when neither is visible. */
static int visible_record(const struct es_manifest *m, const char *id, const char **state)
{
	*state = NULL;
	int rc = es_claim_marker_exists(m, "done", id);
	if (rc == 1)
		*state = "done";
	else if (!rc && (rc = es_claim_marker_exists(m, "failed", id)) == 1)
		*state = "failed";
	return rc < 0 ? rc : 0;
}

static void backup_marker_path(const struct es_manifest *m, const char *id, const char *primary_token,
			       struct es_buf *path)
{
	es_buf_printf(path, "%s/state/backups/%s.%s.json", m->job_dir, id, primary_token);
}

/* The backup of the primary attempt holding token, if one exists and its marker changed
 * within the lease (by the file server's clock against ours, like the reference's lock mtime
 * rule): it is running the shard. The marker is opened, not looked up, so a cached "no such
 * file" cannot hide it on a client that opens with close-to-open consistency. */
static int backup_alive(const struct es_claimer *c, const char *id, const char *token)
{
	struct es_buf path = ES_BUF_INIT;
	backup_marker_path(c->m, id, token, &path);
	int fd;
	es_log_quiet_begin(); /* anything but a regular file is no live backup's marker */
	int rc = es_fs_open_read(path.data, O_RDONLY | O_NOFOLLOW, &fd);
	es_log_quiet_end();
	es_buf_free(&path);
	if (rc)
		return 0;
	struct stat st;
	int alive = fstat(fd, &st) == 0 && es_time_epoch() - ((double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9) < c->policy.lease_secs;
	close(fd);
	return alive;
}

/* ---- stale takeover ---- */

/* Observe a lock for the lease rule: its (inode, mtime, content) and since when this client has
 * seen it unchanged, on its own monotonic clock. 1 when it is stale. */
static int observe(struct es_claimer *c, size_t i, const struct es_lock_info *li)
{
	struct es_lease_obs *o = &c->obs[i];
	double now_mono = es_time_mono();
	if (!o->valid || o->dev != li->dev || o->ino != li->ino || o->mtime_ns != li->mtime_ns ||
	    o->content_hash != li->content_hash)
		*o = (struct es_lease_obs){ 1, li->dev, li->ino, li->mtime_ns, li->content_hash, now_mono, o->terminal,
					    0, -1, o->done_secs, "", "", 0 };
	double age = es_time_epoch() - (double)li->mtime_ns / 1e9;
	return es_claim_lock_stale(li, age, now_mono - o->since_mono, &c->policy);
}

/* The rename of a stale lock acts on the name, which the file server answers, while the
 * judgement was made on what this client read, which may come from a cached name that still
 * leads to an earlier lock (an NFS client trusts a cached entry for up to acdirmax; another
 * worker may have taken the same stale lock over and made its own since). So check what was
 * moved: when it is not the lock that was judged (another inode or token), put it back with
 * link() (same inode: its owner notices nothing) and report 1. 0: it was the judged lock. */
static int verify_moved(const char *lock_path, const char *dest, const struct es_lock_info *judged)
{
	struct es_lock_info moved;
	int rc = es_claim_lock_read(dest, &moved);
	if (rc)
		return rc;
	if (moved.exists && moved.ino == judged->ino && moved.dev == judged->dev && !strcmp(moved.token, judged->token))
		return 0;
	if (link(dest, lock_path) == 0) {
		unlink(dest);
		es_fs_fsync_parent(lock_path);
		es_warning("a stale takeover of %s moved a newer lock (token %s, not the stale %s); it was put back",
			   lock_path, moved.token, judged->token);
	} else {
		es_warning("a stale takeover of %s moved a newer lock (token %s) and could not put it back (%s): "
			   "its owner will find its lease lost", lock_path, moved.token, strerror(errno));
	}
	return 1;
}

/* The temporaries of the shard's done and failed records (".<id>.json.<32hex>.tmp" in
 * state/done and state/failed) that the dead holder of its stale lock left: killed between the
 * write of a record's temporary and its unlink (es_fs_publish_exclusive), it leaves one beside the
 * records, with its record linked or not. A backup publishing the shard's record right now has
 * a temporary too: a live one on this host is kept, and on another host a temporary is removed
 * only once it is a lease old. */
static void sweep_record_temps(const struct es_manifest *m, const char *id, double lease_secs)
{
	char dir[4096], prefix[512];
	snprintf(prefix, sizeof(prefix), "%s.json.", id);
	for (int k = 0; k < 2; k++) {
		int len = snprintf(dir, sizeof(dir), "%s/state/%s", m->job_dir, k ? "failed" : "done");
		if (len > 0 && (size_t)len < sizeof(dir))
			es_fs_sweep_writer_temps(dir, prefix, lease_secs);
	}
}

/* A lock that looked stale, under flock: still the lock at the path, still running, still
 * stale? Then either the shard's record is visible (its publisher died before its fence: write
 * the fence, 2) or the lock is moved to state/stale_locks (1). 0: live, busy or terminal. */
static int try_takeover(struct es_claimer *c, size_t i, const char *lock_path)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	struct es_lease_obs *o = &c->obs[i];
	/* O_RDWR: NFS emulates flock() with fcntl() locks, and an exclusive one needs a file
	 * open for writing (flock(2), "NFS details"); read-only, every takeover fails EBADF. */
	int fd, rc = open_lock(lock_path, O_RDWR, &fd);
	if (rc == 1)
		o->valid = 0;
	if (rc)
		return rc;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int busy = errno == EWOULDBLOCK || errno == EINTR;
		if (!busy)
			es_error_errno(ES_EIO, "cannot lock '%s' to check it for a stale takeover", lock_path);
		close(fd);
		return busy ? 0 : ES_EIO; /* busy: someone is releasing, publishing, refreshing or taking it over */
	}
	struct stat st;
	struct es_lock_info li;
	cJSON *doc = NULL;
	const char *record;
	if (!same_file_at(fd, lock_path, &st)) {
		o->valid = 0;
		rc = 1;
		goto out;
	}
	if ((rc = lock_info_fd(fd, lock_path, &li, &doc)) != 0 || li.terminal || !observe(c, i, &li))
		goto out; /* rc 0: terminal, or live */
	sweep_record_temps(m, id, c->policy.lease_secs);
	if ((rc = visible_record(m, id, &record)) != 0)
		goto out;
	if (record) {
		if (!doc)
			doc = cJSON_CreateObject();
		size_t len = 0;
		char *text = record_text(m, record, id, &len);
		if (!(rc = write_fence(fd, lock_path, doc, id, record, text, len)))
			rc = 2;
		mark_attempt_recovered(m, li.attempt_dir, record, text, len);
		free(text);
		o->terminal = 1;
		goto out;
	}
	if (backup_alive(c, id, li.token))
		goto out; /* rc 0: its backup carries the shard; its record will be fenced here */
	char tok[33], dest[4096];
	if ((rc = es_fs_token(tok)) != 0)
		goto out;
	snprintf(dest, sizeof(dest), "%s/state/stale_locks/%s.%lld.%s.lock", m->job_dir, id,
		 (long long)es_time_epoch(), tok);
	es_proc_test_hook("ESHARD_TEST_HOOK_BEFORE_TAKEOVER");
	/* Where flock() is local to one client, another host's takeover may have moved the lock
	 * first: the rename then finds no lock, which is a lost race (as for the open above). */
	es_log_quiet_begin();
	rc = es_fs_rename(lock_path, dest);
	int moved_away = rc && errno == ENOENT;
	es_log_quiet_end();
	if (moved_away) {
		o->valid = 0;
		rc = 1;
		goto out;
	}
	if (rc) {
		es_error(rc, "%s", es_last_error());
		goto out;
	}
	if ((rc = verify_moved(lock_path, dest, &li)) != 0) {
		o->valid = 0;
		rc = rc < 0 ? rc : 0;
		goto out;
	}
	mark_attempt_stale(m, li.attempt_dir, c->policy.lease_secs);
	c->took_over = 1;
	snprintf(c->took_over_token, sizeof(c->took_over_token), "%s", li.token);
	if (li.attempt_number > 0 && li.attempt_number <= INT32_MAX)
		c->took_over_attempt = (int)li.attempt_number;
	o->valid = 0;
	rc = 1;
out:
	cJSON_Delete(doc);
	flock(fd, LOCK_UN);
	close(fd);
	return rc;
}

int es_claim_count_failures(const char *job_dir, const char *shard_id, int *failures, int *folders)
{
	struct es_buf root = ES_BUF_INIT, p = ES_BUF_INIT;
	if (failures)
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
		if (!failures)
			continue;
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
	/* eshard-mpi fields, which readers of the reference ignore: the lock's state (running,
	 * then a terminal fence) and the lease. */
	es_json_set_str(l, "status", "running");
	es_json_set_int(l, "heartbeat", c->heartbeat);
	es_json_set_float(l, "lease_secs", c->policy.lease_secs);
	return l;
}

/* Open the lock, flock it, and check it is the one at the path, still running, and carries
 * token. 0 with *fd_out (and *doc when asked) when we own it; 1 when not (gone, replaced,
 * another token, or already a terminal fence); 2 when busy (nonblock); negative on error. */
static int lock_owned(const char *lock_path, const char *token, int nonblock, int *fd_out, cJSON **doc)
{
	*fd_out = -1;
	int fd, rc = open_lock(lock_path, O_RDWR, &fd);
	if (rc)
		return rc;
	while (flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0)) != 0) {
		if (errno == EINTR)
			continue;
		int busy = errno == EWOULDBLOCK;
		close(fd);
		return busy ? 2 : es_error_errno(ES_EIO, "cannot lock '%s'", lock_path);
	}
	struct stat st;
	struct es_lock_info li;
	cJSON *l = NULL;
	rc = 1;
	/* Not the one at the path (moved or replaced): not ours. A read error (ESTALE, EIO) is an
	 * error, not a lost lease: a heartbeat must not abort a live shard over a hiccup. */
	if (same_file_at(fd, lock_path, &st) && (rc = lock_info_fd(fd, lock_path, &li, &l)) == 0)
		rc = li.readable && !li.terminal && !strcmp(li.token, token) ? 0 : 1;
	if (rc) {
		cJSON_Delete(l);
		flock(fd, LOCK_UN);
		close(fd);
		return rc;
	}
	if (doc)
		*doc = l;
	else
		cJSON_Delete(l);
	*fd_out = fd;
	return 0;
}

static void unlock_close(int fd)
{
	flock(fd, LOCK_UN);
	close(fd);
}

/* A fence seen: the shard is terminal; a done one tells how long it took and who completed it. */
static void seen_terminal(struct es_lease_obs *o, const struct es_lock_info *li)
{
	o->terminal = 1;
	o->running = 0;
	if (strcmp(li->state, "done"))
		return;
	if (li->terminal_at_epoch > 0 && li->claimed_at_epoch > 0 && li->terminal_at_epoch >= li->claimed_at_epoch)
		o->done_secs = li->terminal_at_epoch - li->claimed_at_epoch;
	snprintf(o->host, sizeof(o->host), "%s", li->record_host[0] ? li->record_host : li->hostname);
}

/* A live running lock seen: who holds it since when, and when we saw it. */
static void seen_running(struct es_lease_obs *o, const struct es_lock_info *li)
{
	o->running = li->readable;
	o->claimed_at_epoch = li->claimed_at_epoch;
	o->running_seen_mono = es_time_mono();
	snprintf(o->host, sizeof(o->host), "%s", li->hostname);
	snprintf(o->token, sizeof(o->token), "%s", li->token);
}

void es_claim_seen(const struct es_claimer *c, size_t i, struct es_claim_seen *s)
{
	const struct es_lease_obs *o = &c->obs[i];
	s->terminal = o->terminal;
	s->running = o->running && !o->terminal;
	s->claimed_at_epoch = s->running ? o->claimed_at_epoch : -1;
	s->done_secs = o->done_secs;
	s->host = o->host;
	s->token = s->running ? o->token : "";
	s->running_seen_mono = s->running ? o->running_seen_mono : -1;
}

/* What the lock says before a claim, read with one open() that the file server answers: 1
 * when there is none (free as far as this client can tell; the exclusive create decides), 0
 * when it is a terminal fence (remembered) or a live or busy running lock, negative on error.
 * A running lock that is stale is taken over (1) or, when the shard's record is visible, turned
 * into its fence (0). */
static int probe_lock(struct es_claimer *c, size_t i, const char *lock_path)
{
	struct es_lock_info li;
	int rc = es_claim_lock_read(lock_path, &li);
	if (rc)
		return rc;
	struct es_lease_obs *o = &c->obs[i];
	o->running = 0;
	if (!li.exists) {
		o->valid = 0;
		return 1;
	}
	if (li.terminal) {
		seen_terminal(o, &li);
		return 0;
	}
	if (!observe(c, i, &li)) {
		seen_running(o, &li);
		return 0;
	}
	rc = try_takeover(c, i, lock_path);
	return rc == 1 ? 1 : rc < 0 ? rc : 0;
}

/* After a lost exclusive create: read the lock that won, to learn a terminal state, or that it
 * runs (the winner's fresh lock). */
static void learn_winner(struct es_claimer *c, size_t i, const char *lock_path)
{
	struct es_lock_info li;
	es_log_quiet_begin();
	c->obs[i].running = 0;
	if (!es_claim_lock_read(lock_path, &li) && li.exists) {
		if (li.terminal)
			seen_terminal(&c->obs[i], &li);
		else if (!observe(c, i, &li))
			seen_running(&c->obs[i], &li);
	}
	es_log_quiet_end();
}

/* Our fresh lock on a shard whose record is visible (a reference job folder, which removes
 * its locks; a publisher that died between its record and its fence and was taken over):
 * the lock becomes the shard's fence instead of a claim. 1 when that happened. */
static int fence_if_recorded(struct es_claimer *c, size_t i, const char *lock_path)
{
	const char *id = c->m->shards[i].id, *record;
	int rc = visible_record(c->m, id, &record);
	if (rc || !record)
		return rc;
	int fd;
	cJSON *doc = NULL;
	if ((rc = lock_owned(lock_path, c->token, 0, &fd, &doc)) != 0)
		return rc < 0 ? rc : 1;
	size_t len = 0;
	char *text = record_text(c->m, record, id, &len);
	rc = write_fence(fd, lock_path, doc, id, record, text, len);
	free(text);
	c->obs[i].terminal = 1;
	cJSON_Delete(doc);
	unlock_close(fd);
	return rc ? rc : 1;
}

/* Step 4 at claim time, holding the lock: the failed record, then the failed fence. */
static int publish_limit(struct es_claimer *c, size_t i, int failures)
{
	cJSON *f = cJSON_CreateObject();
	char now[40];
	es_time_now_iso(now);
	es_json_set_str(f, "failed_at", now);
	es_json_set_int(f, "failures", failures);
	es_json_set_str(f, "reason", "retry limit reached before claim");
	es_json_set_str(f, "shard_id", c->m->shards[i].id);
	es_json_set_str(f, "status", "failed");
	es_json_set_str(f, "token", c->token);
	struct es_buf rec = ES_BUF_INIT;
	int published = 0;
	int rc = es_json_dump(f, 1, &rec);
	if (!rc)
		rc = es_claim_publish(c, i, c->token, "failed", rec.data, rec.len, NULL, NULL, &published);
	es_buf_free(&rec);
	cJSON_Delete(f);
	return rc < 0 ? rc : ES_CLAIM_FAILED_LIMIT;
}

/* Steps 5 and 6: the attempt number and token, then the exclusive create. The attempt folder
 * itself is made only once the lock is ours: the reference made it before the O_EXCL create, so
 * every loser of a race briefly added a folder that the winner counted, and a shard's first
 * attempt could be numbered 0016 when 16 workers raced for it. 0 with *l set (ours), 1 lost. */
static int create_lock(struct es_claimer *c, size_t i, const char *lock_path, int folders, cJSON **l)
{
	const char *id = c->m->shards[i].id;
	int rc = es_fs_token(c->token);
	if (rc)
		return rc;
	c->attempt_number = folders + 1;
	c->heartbeat = 0;
	c->backup_of[0] = '\0';
	snprintf(c->attempt_rel, sizeof(c->attempt_rel), "attempts/%s/%04d-%s", id, c->attempt_number, c->token);
	es_time_now_iso(c->claimed_at);
	c->claimed_at_epoch = es_time_epoch();
	*l = lock_doc(c, id);
	struct es_buf line = ES_BUF_INIT;
	rc = es_json_dump(*l, 0, &line);
	if (!rc)
		rc = es_fs_create_exclusive(lock_path, line.data, line.len);
	es_buf_free(&line);
	if (rc) {
		cJSON_Delete(*l);
		*l = NULL;
	}
	return rc;
}

/* The attempt folder (its leaf is new: the name holds a fresh token) and its attempt.json,
 * from the lock document l (without the lease fields, which only a lock carries). */
static int make_attempt(struct es_claimer *c, size_t i, cJSON *l)
{
	const struct es_manifest *m = c->m;
	struct es_buf ad = ES_BUF_INIT, parent = ES_BUF_INIT, text = ES_BUF_INIT;
	es_buf_printf(&parent, "%s/attempts/%s", m->job_dir, m->shards[i].id);
	es_buf_printf(&ad, "%s/%s", m->job_dir, c->attempt_rel);
	int rc = es_fs_mkdir_nofollow(parent.data, 0755);
	if (!rc && mkdir(ad.data, 0755) != 0)
		rc = es_error_errno(ES_EIO, "cannot create attempt folder '%s'", ad.data);
	if (!rc) {
		es_json_set_str(l, "input_path", m->shards[i].path);
		cJSON_DeleteItemFromObjectCaseSensitive(l, "heartbeat");
		cJSON_DeleteItemFromObjectCaseSensitive(l, "lease_secs");
		es_buf_adds(&ad, "/attempt.json");
		rc = es_json_dump(l, 1, &text);
		if (!rc)
			rc = es_fs_write_atomic(ad.data, text.data, text.len);
	}
	free(c->attempt_text);
	c->attempt_text = NULL;
	if (!rc) {
		c->attempt_text = es_buf_detach(&text, &c->attempt_text_len);
		c->attempt_text_mono = es_time_mono();
	}
	es_buf_free(&text);
	es_buf_free(&ad);
	es_buf_free(&parent);
	return rc;
}

/* Step 7: the attempt folder and its attempt.json; the lock is released when either cannot be
 * written. */
static int start_attempt(struct es_claimer *c, size_t i, cJSON *l)
{
	int rc = make_attempt(c, i, l);
	if (!rc)
		es_crash_point("claim-after-attempt-json");
	if (rc)
		es_claim_release(c, i, c->token);
	return rc;
}

int es_claim_try(struct es_claimer *c, size_t i)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	char lock_path[4096];
	int rc;
	c->took_over = 0;
	c->took_over_attempt = 0;
	if (c->obs[i].terminal)
		return ES_CLAIM_NONE;
	if ((rc = es_claim_lock_path(m, id, lock_path, sizeof(lock_path))))
		return rc;
	/* Steps 1-3. The lock decides, not the absence of a record: a finished shard keeps its
	 * lock as a terminal fence, and an NFS client may believe a fresh record absent. */
	if ((rc = probe_lock(c, i, lock_path)) <= 0)
		return rc < 0 ? rc : ES_CLAIM_NONE;
	int failures, folders;
	if ((rc = es_claim_count_failures(m->job_dir, id, NULL, &folders)))
		return rc;
	es_proc_test_hook("ESHARD_TEST_HOOK_BEFORE_CLAIM_CREATE");
	cJSON *l = NULL;
	if ((rc = create_lock(c, i, lock_path, folders, &l)) != 0) {
		if (rc == 1)
			learn_winner(c, i, lock_path);
		return rc == 1 ? ES_CLAIM_NONE : rc;
	}
	es_crash_point("claim-after-lock");
	if ((rc = fence_if_recorded(c, i, lock_path)) != 0) {
		cJSON_Delete(l);
		return rc < 0 ? rc : ES_CLAIM_NONE;
	}
	/* Step 4, done while holding the lock (the reference did it before, without the lock, so
	 * a crash or race could publish a failed record for a shard another worker held), and
	 * counted only now: an attempt that ended between a count before the create and the
	 * create would be missed, and one attempt could run over the limit. */
	if ((rc = es_claim_count_failures(m->job_dir, id, &failures, &folders))) {
		es_claim_release(c, i, c->token);
		cJSON_Delete(l);
		return rc;
	}
	if (failures > c->policy.max_retries) {
		cJSON_Delete(l);
		return publish_limit(c, i, failures);
	}
	rc = start_attempt(c, i, l);
	cJSON_Delete(l);
	return rc ? rc : ES_CLAIM_OK;
}

int es_claim_repair(struct es_claimer *c, size_t i)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	char lock_path[4096];
	struct es_lock_info li;
	int rc = es_claim_lock_path(m, id, lock_path, sizeof(lock_path));
	if (rc || c->obs[i].terminal || (rc = es_claim_lock_read(lock_path, &li)) != 0)
		return rc;
	if (!li.exists || li.terminal || !li.readable || !li.token[0])
		return 0;
	static const char *const kinds[] = { "done", "failed" };
	for (size_t k = 0; k < 2; k++) {
		size_t len = 0;
		char *text = record_text(m, kinds[k], id, &len);
		cJSON *rec = NULL;
		if (text) {
			es_log_quiet_begin();
			rec = es_json_parse(text, len, "record");
			es_log_quiet_end();
		}
		const char *tok = es_json_get_str(rec, "token");
		int own = tok && !strcmp(tok, li.token);
		cJSON_Delete(rec);
		if (!own) {
			free(text);
			if (!text || k)
				continue;
			/* A done record of another attempt (a backup won) beside a live lock: its
			 * owner fences it when it notices; a stale one is taken over, which fences. */
			if (!observe(c, i, &li))
				return 2;
			rc = try_takeover(c, i, lock_path);
			return rc < 0 ? rc : rc == 2;
		}
		/* The owner published and then died before its fence: write it in its place. */
		int fd;
		cJSON *doc = NULL;
		rc = lock_owned(lock_path, li.token, 1, &fd, &doc);
		if (rc == 0) {
			rc = write_fence(fd, lock_path, doc, id, kinds[k], text, len);
			mark_attempt_recovered(m, li.attempt_dir, kinds[k], text, len);
			c->obs[i].terminal = 1;
			cJSON_Delete(doc);
			unlock_close(fd);
		}
		free(text);
		return rc < 0 ? rc : rc == 0;
	}
	return 0;
}

/* ---- backup attempts ---- */

int es_claim_backup(struct es_claimer *c, size_t i, const char *primary_token)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	struct es_buf dir = ES_BUF_INIT, marker = ES_BUF_INIT, text = ES_BUF_INIT;
	int folders = 0;
	cJSON *l = NULL;
	es_buf_printf(&dir, "%s/state/backups", m->job_dir);
	backup_marker_path(m, id, primary_token, &marker);
	int rc = es_fs_mkdir_nofollow(dir.data, 0755);
	if (!rc)
		rc = es_claim_count_failures(m->job_dir, id, NULL, &folders);
	if (!rc)
		rc = es_fs_token(c->token);
	if (rc)
		goto out;
	c->attempt_number = folders + 1;
	c->heartbeat = 0;
	snprintf(c->backup_of, sizeof(c->backup_of), "%s", primary_token);
	snprintf(c->attempt_rel, sizeof(c->attempt_rel), "attempts/%s/%04d-%s", id, c->attempt_number, c->token);
	es_time_now_iso(c->claimed_at);
	c->claimed_at_epoch = es_time_epoch();
	l = lock_doc(c, id);
	es_json_set_bool(l, "backup", 1);
	es_json_set_str(l, "backup_of", primary_token);
	if ((rc = es_json_dump(l, 1, &text)) != 0)
		goto out;
	/* One backup per primary attempt: the marker's exclusive publish decides. */
	if ((rc = es_fs_publish_exclusive(marker.data, text.data, text.len)) != 0) {
		rc = rc == 1 ? ES_CLAIM_NONE : rc;
		goto out;
	}
	rc = make_attempt(c, i, l);
	if (!rc)
		rc = ES_CLAIM_OK;
out:
	cJSON_Delete(l);
	es_buf_free(&dir);
	es_buf_free(&marker);
	es_buf_free(&text);
	return rc;
}

int es_claim_backup_beat(struct es_claimer *c, size_t i)
{
	struct es_buf path = ES_BUF_INIT;
	backup_marker_path(c->m, c->m->shards[i].id, c->backup_of, &path);
	int rc = 0;
	if (utimensat(AT_FDCWD, path.data, NULL, AT_SYMLINK_NOFOLLOW) != 0)
		rc = es_error_errno(ES_EIO, "cannot refresh the backup marker '%s'", path.data);
	es_buf_free(&path);
	return rc;
}

int es_claim_publish_backup(struct es_claimer *c, size_t i, const char *record, size_t record_len, int *published)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	char lock_path[4096], path[4096];
	struct es_lock_info li;
	*published = 0;
	int rc = es_claim_lock_path(m, id, lock_path, sizeof(lock_path));
	if (!rc)
		rc = marker_path(m, "done", id, path, sizeof(path));
	if (!rc)
		rc = es_claim_lock_read(lock_path, &li);
	if (rc || (li.exists && li.terminal))
		return rc;
	int failed = es_claim_marker_exists(m, "failed", id);
	if (failed)
		return failed < 0 ? failed : 0;
	es_proc_test_hook("ESHARD_TEST_HOOK_BACKUP_BEFORE_LINK");
	int r = es_fs_publish_exclusive(path, record, record_len);
	if (r < 0)
		return r;
	*published = r == 0;
	if (*published) {
		/* Not terminal for this claimer yet: the lock is the primary's until it is fenced
		 * (by the primary, or by the takeover of a dead one, which es_claim_repair waits for). */
		struct es_lease_obs *o = &c->obs[i];
		o->running = 0;
		o->done_secs = es_time_epoch() - c->claimed_at_epoch;
		snprintf(o->host, sizeof(o->host), "%s", es_hostname());
	}
	return 0;
}

int es_claim_yield(struct es_claimer *c, size_t i, const char *token)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	char lock_path[4096];
	int rc = es_claim_marker_exists(m, "done", id);
	if (rc <= 0)
		return rc;
	if ((rc = es_claim_lock_path(m, id, lock_path, sizeof(lock_path))) != 0)
		return rc;
	int fd;
	cJSON *doc = NULL;
	if ((rc = lock_owned(lock_path, token, 0, &fd, &doc)) < 0)
		return rc;
	if (rc == 0) {
		size_t len = 0;
		char *text = record_text(m, "done", id, &len);
		rc = write_fence(fd, lock_path, doc, id, "done", text, len);
		/* The winner's attempt says done; if it died before saying so, say it for it. */
		cJSON *rec = NULL;
		if (text) {
			es_log_quiet_begin();
			rec = es_json_parse(text, len, "record");
			es_log_quiet_end();
		}
		const char *out = es_json_get_str(rec, "output_path"), *slash = out ? strrchr(out, '/') : NULL;
		if (slash) {
			char ad[512];
			snprintf(ad, sizeof(ad), "%.*s", (int)(slash - out), out);
			mark_attempt_recovered(m, ad, "done", text, len);
		}
		cJSON_Delete(rec);
		free(text);
		cJSON_Delete(doc);
		unlock_close(fd);
		c->obs[i].terminal = 1;
		c->obs[i].running = 0;
		if (rc)
			return rc;
	}
	return 1;
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
	rc = rewrite_lock(fd, lock_path, doc, "heartbeat-mid-rewrite");
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
	es_crash_point("release-before-unlink");
	if (unlink(lock_path) != 0)
		rc = es_error_errno(ES_EIO, "cannot remove lock '%s'", lock_path);
	else
		rc = es_fs_fsync_parent(lock_path);
	unlock_close(fd);
	return rc;
}

int es_claim_publish(struct es_claimer *c, size_t i, const char *token, const char *kind,
		     const char *record, size_t record_len, es_claim_settle_fn settle, void *settle_ctx,
		     int *published)
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
	cJSON *doc = NULL;
	if ((rc = lock_owned(lock_path, token, 0, &fd, &doc)) != 0)
		return rc;
	/* The record, then the attempt's outcome (settle), then the fence: a crash before the
	 * fence leaves a running lock whose record is visible, which the next stale takeover
	 * turns into the fence (saying "done" for an attempt still running); once the lock is a
	 * fence nothing repairs the attempt, so it must have said its outcome by then. */
	const char *other = !strcmp(kind, "done") ? "failed" : "done";
	const char *state = kind;
	int blocked = es_claim_marker_exists(m, other, id);
	if (blocked < 0) {
		rc = blocked;
	} else if (blocked) {
		state = other; /* the other record was there first: the shard is terminal that way */
	} else {
		es_crash_point(!strcmp(kind, "done") ? "done-before-link" : "failed-before-link");
		int r = es_fs_publish_exclusive(path, record, record_len);
		if (r < 0)
			rc = r;
		else
			*published = r == 0;
	}
	if (!rc && settle && !strcmp(kind, "done")) {
		es_crash_point("done-before-attempt");
		settle(settle_ctx, *published);
	}
	if (!rc) {
		es_crash_point(!strcmp(kind, "done") ? "done-before-fence" : "failed-before-fence");
		/* Ours when we published it; else the one that was there first, if we can read it. */
		size_t len = record_len;
		char *theirs = *published ? NULL : record_text(m, state, id, &len);
		rc = write_fence(fd, lock_path, doc, id, state, *published ? record : theirs, len);
		free(theirs);
		if (!rc)
			es_crash_point(!strcmp(kind, "done") ? "done-after-fence" : "failed-after-fence");
		c->obs[i].terminal = 1;
		c->obs[i].running = 0;
		if (*published && !strcmp(kind, "done") && c->claimed_at_epoch > 0) {
			c->obs[i].done_secs = es_time_epoch() - c->claimed_at_epoch;
			snprintf(c->obs[i].host, sizeof(c->obs[i].host), "%s", es_hostname());
		}
	}
	cJSON_Delete(doc);
	unlock_close(fd);
	return rc;
}
