#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/proc.h"
#include "claim_parts.h"
#include "json.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Backup attempts (claim.h, "backup attempts"; docs/job-folder.md#backups): the marker that
 * allows one backup per primary attempt, its lease, the backup's publish, and the primary
 * that yields to a backup's record. */

/* The backup of the primary attempt holding token, if one exists and its marker changed
 * within the lease (by the file server's clock against ours, like the reference's lock mtime
 * rule): it is running the shard. The marker is opened, not looked up, so a cached "no such
 * file" cannot hide it on a client that opens with close-to-open consistency. */
int es_claim_backup_alive(const struct es_claimer *c, const char *id, const char *token)
{
	struct es_buf path = ES_BUF_INIT;
	int fd, rc = es_jobpath_backup(&path, c->m->job_dir, id, token);
	es_log_quiet_begin(); /* anything but a regular file is no live backup's marker */
	if (!rc)
		rc = es_fs_open_read(path.data, O_RDONLY | O_NOFOLLOW, &fd);
	es_log_quiet_end();
	es_buf_free(&path);
	if (rc)
		return 0;
	struct stat st;
	int alive = fstat(fd, &st) == 0 && es_time_epoch() - ((double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9) < c->policy.lease_secs;
	close(fd);
	return alive;
}

int es_claim_backup(struct es_claimer *c, size_t i, const char *primary_token)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	struct es_buf dir = ES_BUF_INIT, marker = ES_BUF_INIT, text = ES_BUF_INIT;
	int folders = 0;
	cJSON *l = NULL;
	int rc = es_jobpath_join(&dir, m->job_dir, ES_JOB_BACKUPS);
	if (!rc)
		rc = es_jobpath_backup(&marker, m->job_dir, id, primary_token);
	if (!rc)
		rc = es_fs_mkdir_nofollow(dir.data, 0755);
	if (!rc)
		rc = es_claim_count_failures(m->job_dir, id, NULL, &folders);
	if (!rc)
		rc = es_fs_token(c->token);
	if (rc)
		goto out;
	c->attempt_number = folders + 1;
	c->heartbeat = 0;
	snprintf(c->backup_of, sizeof(c->backup_of), "%s", primary_token);
	if ((rc = es_claim_set_attempt_rel(c, id)) != 0)
		goto out;
	es_time_now_iso(c->claimed_at);
	c->claimed_at_epoch = es_time_epoch();
	l = es_claim_lock_doc(c, id);
	es_json_set_bool(l, "backup", 1);
	es_json_set_str(l, "backup_of", primary_token);
	if ((rc = es_json_dump(l, 1, &text)) != 0)
		goto out;
	/* One backup per primary attempt: the marker's exclusive publish decides. */
	if ((rc = es_fs_publish_exclusive(marker.data, text.data, text.len)) != 0) {
		rc = rc == 1 ? ES_CLAIM_NONE : rc;
		goto out;
	}
	rc = es_claim_make_attempt(c, i, l);
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
	int rc = es_jobpath_backup(&path, c->m->job_dir, c->m->shards[i].id, c->backup_of);
	if (!rc && utimensat(AT_FDCWD, path.data, NULL, AT_SYMLINK_NOFOLLOW) != 0)
		rc = es_error_errno(ES_EIO, "cannot refresh the backup marker '%s'", path.data);
	es_buf_free(&path);
	return rc;
}

/* Is the shard terminal already (a fence, or a failed record)? 1 yes, 0 no, negative on error. */
static int terminal_already(const struct es_manifest *m, const char *id)
{
	struct es_buf lock_path = ES_BUF_INIT;
	struct es_lock_info li;
	int rc = es_jobpath_lock(&lock_path, m->job_dir, id);
	if (!rc)
		rc = es_claim_lock_read(lock_path.data, &li);
	es_buf_free(&lock_path);
	if (rc || (li.exists && li.terminal))
		return rc ? rc : 1;
	return es_claim_marker_exists(m, "failed", id);
}

int es_claim_publish_backup(struct es_claimer *c, size_t i, const char *record, size_t record_len, int *published)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	struct es_buf path = ES_BUF_INIT;
	*published = 0;
	int rc = terminal_already(m, id);
	if (rc)
		return rc < 0 ? rc : 0;
	es_proc_test_hook("ESHARD_TEST_HOOK_BACKUP_BEFORE_LINK");
	if ((rc = es_jobpath_record(&path, m->job_dir, "done", id)) == 0)
		rc = es_fs_publish_exclusive(path.data, record, record_len);
	es_buf_free(&path);
	if (rc < 0)
		return rc;
	*published = rc == 0;
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

/* es_claim_yield once the done record is visible, on the shard's lock at lock_path. */
static int yield_at(struct es_claimer *c, size_t i, const char *lock_path, const char *token)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	int rc, fd;
	cJSON *doc = NULL;
	if ((rc = es_claim_lock_owned(lock_path, token, 0, &fd, &doc)) < 0)
		return rc;
	if (rc == 0) {
		size_t len = 0;
		char *text = es_claim_record_text(m, "done", id, &len);
		rc = es_claim_write_fence(fd, lock_path, doc, id, "done", text, len);
		/* The winner's attempt says done; if it died before saying so, say it for it. */
		cJSON *rec = NULL;
		if (text) {
			es_log_quiet_begin();
			rec = es_json_parse(text, len, "record");
			es_log_quiet_end();
		}
		const char *out = es_json_get_str(rec, "output_path"), *slash = out ? strrchr(out, '/') : NULL;
		struct es_buf ad = ES_BUF_INIT;
		if (slash && !es_buf_add(&ad, out, (size_t)(slash - out)))
			es_claim_mark_recovered(m, ad.data, "done", text, len);
		es_buf_free(&ad);
		cJSON_Delete(rec);
		free(text);
		cJSON_Delete(doc);
		es_claim_unlock_close(fd);
		c->obs[i].terminal = 1;
		c->obs[i].running = 0;
		if (rc)
			return rc;
		es_claim_hint(m, id, "done");
	}
	return 1;
}

int es_claim_yield(struct es_claimer *c, size_t i, const char *token)
{
	int rc = es_claim_marker_exists(c->m, "done", c->m->shards[i].id);
	if (rc <= 0)
		return rc;
	struct es_buf lock_path = ES_BUF_INIT;
	if ((rc = es_jobpath_lock(&lock_path, c->m->job_dir, c->m->shards[i].id)) == 0)
		rc = yield_at(c, i, lock_path.data, token);
	es_buf_free(&lock_path);
	return rc;
}
