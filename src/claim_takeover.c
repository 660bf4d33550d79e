#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/proc.h"
#include "claim_parts.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* The stale takeover (docs/job-folder.md#stale-takeover): the lease rule as this claimer
 * observes a lock, and the move of a stale lock to state/stale_locks under flock. */

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
	int inside = !es_claim_inside_job(m, ad, &dir);
	if (inside && !es_path_join(&path, dir.data, ES_ATTEMPT_JSON) &&
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

/* Observe a lock for the lease rule: its (inode, mtime, content) and since when this client has
 * seen it unchanged, on its own monotonic clock. 1 when it is stale. */
int es_claim_observe(struct es_claimer *c, size_t i, const struct es_lock_info *li)
{
	struct es_lease_obs *o = &c->obs[i];
	double now_mono = es_time_mono();
	if (!o->valid || o->dev != li->dev || o->ino != li->ino || o->mtime_ns != li->mtime_ns ||
	    o->content_hash != li->content_hash)
		*o = (struct es_lease_obs){ 1, li->dev, li->ino, li->mtime_ns, li->content_hash, now_mono, o->terminal,
					    0, -1, o->done_secs, "", "", 0, 0, o->done, o->listed_done };
	o->lease = es_claim_lease_of(li, c->policy.lease_secs);
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

/* A lock that looked stale, under flock: still the lock at the path, still running, still
 * stale? Then either the shard's record is visible (its publisher died before its fence: write
 * the fence, 2) or the lock is moved to state/stale_locks (1). 0: live, busy or terminal. */
int es_claim_try_takeover(struct es_claimer *c, size_t i, const char *lock_path)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	struct es_lease_obs *o = &c->obs[i];
	/* O_RDWR: NFS emulates flock() with fcntl() locks, and an exclusive one needs a file
	 * open for writing (flock(2), "NFS details"); read-only, every takeover fails EBADF. */
	int fd, rc = es_claim_open_lock(lock_path, O_RDWR, &fd);
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
	struct es_buf dest = ES_BUF_INIT;
	if (!es_claim_same_file(fd, lock_path, &st)) {
		o->valid = 0;
		rc = 1;
		goto out;
	}
	if ((rc = es_claim_lock_info_fd(fd, lock_path, &li, &doc)) != 0 || li.terminal || !es_claim_observe(c, i, &li))
		goto out; /* rc 0: terminal, or live */
	es_claim_sweep_record_temps(m, id, c->policy.lease_secs, li.maker);
	if ((rc = es_claim_visible_record(m, id, &record)) != 0)
		goto out;
	if (record) {
		if (!doc)
			doc = cJSON_CreateObject();
		size_t len = 0;
		char *text = es_claim_record_text(m, record, id, &len);
		if (!(rc = es_claim_write_fence(fd, lock_path, doc, id, record, text, len))) {
			rc = 2;
			es_claim_hint(m, id, record);
		}
		es_claim_mark_recovered(m, li.attempt_dir, record, text, len);
		es_claim_sweep_record_links(m, record, id);
		free(text);
		o->terminal = 1;
		goto out;
	}
	if (es_claim_backup_alive(c, id, li.token))
		goto out; /* rc 0: its backup carries the shard; its record will be fenced here */
	char tok[33];
	if ((rc = es_fs_token(tok)) != 0 ||
	    (rc = es_jobpath_stale_lock(&dest, m->job_dir, id, (long long)es_time_epoch(), tok)) != 0)
		goto out;
	es_proc_test_hook("ESHARD_TEST_HOOK_BEFORE_TAKEOVER");
	/* The name we judged by may be a cached one, which another client's takeover has moved
	 * already: the file server's exclusive create of the lock's end marker decides. */
	if ((rc = es_claim_end_lock(m, id, fd, lock_path, li.token, "takeover")) != 0) {
		if (rc == 1)
			o->valid = 0;
		goto out;
	}
	/* Before the move (the reference's order): a claimer that creates the next lock as soon as
	 * the name is free counts this attempt among the failures. */
	mark_attempt_stale(m, li.attempt_dir, c->policy.lease_secs);
	/* Where flock() is local to one client, another host's takeover may have moved the lock
	 * first: the rename then finds no lock, which is a lost race (as for the open above). */
	es_log_quiet_begin();
	rc = es_fs_rename(lock_path, dest.data);
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
	if ((rc = verify_moved(lock_path, dest.data, &li)) != 0) {
		o->valid = 0;
		rc = rc < 0 ? rc : 0;
		goto out;
	}
	c->took_over = 1;
	snprintf(c->took_over_token, sizeof(c->took_over_token), "%s", li.token);
	if (li.attempt_number > 0 && li.attempt_number <= INT32_MAX)
		c->took_over_attempt = (int)li.attempt_number;
	o->valid = 0;
	rc = 1;
out:
	es_buf_free(&dest);
	cJSON_Delete(doc);
	flock(fd, LOCK_UN);
	close(fd);
	return rc;
}
