#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "claim_parts.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Terminal fences (docs/job-folder.md#locks-and-fences): the owner-checked publish of a
 * record and the fence that stands for it, and the repair of a fence its publisher did not
 * live to write. */

/* Join rel under the job folder, refusing anything that escapes it. */
int es_claim_inside_job(const struct es_manifest *m, const char *rel, struct es_buf *out)
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

void es_claim_sweep_record_links(const struct es_manifest *m, const char *kind, const char *id)
{
	struct es_buf dir = ES_BUF_INIT, rec = ES_BUF_INIT, prefix = ES_BUF_INIT;
	if (!es_jobpath_join(&dir, m->job_dir, strcmp(kind, "done") ? ES_JOB_FAILED : ES_JOB_DONE) &&
	    !es_jobpath_record(&rec, m->job_dir, kind, id) && !es_buf_printf(&prefix, "%s.json.", id))
		es_fs_sweep_links_of(dir.data, prefix.data, rec.data);
	es_buf_free(&dir);
	es_buf_free(&rec);
	es_buf_free(&prefix);
}

/* The temporaries of the shard's done and failed records (".<id>.json.<32hex>.tmp" in
 * state/done and state/failed) that the dead holder of its lock left: killed between the write
 * of a record's temporary and its link or unlink (es_fs_publish_exclusive), it leaves one beside
 * the records. Its own (its maker named in the lock) go at any age and on any host: it publishes
 * only while it holds the lock's flock, which our caller holds now, so none of them is being
 * written; one written after its last heartbeat is younger than a lease when it is taken over,
 * and was kept for good before. A backup publishing the shard's record right now has a
 * temporary too: a live one on this host is kept, and on another host it is removed only once
 * it is a lease old. */
void es_claim_sweep_record_temps(const struct es_manifest *m, const char *id, double lease_secs, const char *maker)
{
	struct es_buf dir = ES_BUF_INIT, prefix = ES_BUF_INIT;
	int rc = es_buf_printf(&prefix, "%s.json.", id);
	for (int k = 0; !rc && k < 2; k++)
		if (!es_jobpath_join(&dir, m->job_dir, k ? ES_JOB_FAILED : ES_JOB_DONE))
			es_fs_sweep_writer_temps(dir.data, prefix.data, lease_secs, maker);
	es_buf_free(&dir);
	es_buf_free(&prefix);
}

/* A publisher that died between its record and its fence left its attempt "running": when the
 * record is its own (same token), the attempt did publish, so it says "done" (with
 * recovered_at) and its result; any other running attempt is marked stale. */
void es_claim_mark_recovered(const struct es_manifest *m, const char *ad, const char *state,
				   const char *record, size_t len)
{
	struct es_buf dir = ES_BUF_INIT, path = ES_BUF_INIT;
	cJSON *a = NULL, *rec = NULL;
	es_log_quiet_begin();
	if (record)
		rec = es_json_parse(record, len, "record");
	if (*ad && !es_claim_inside_job(m, ad, &dir) && !es_path_join(&path, dir.data, ES_ATTEMPT_JSON) &&
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

/* Rewrite an open lock in place (same inode: an observer's open sees the new content, never a
 * missing lock) with doc, then cut what is left of the old text and fsync. The new text is at
 * least as long as a running lock's (the fence adds fields), so a reader that catches it half
 * written sees text that does not parse, which it treats as a busy lock and reads again. */
int es_claim_rewrite_lock(int fd, const char *lock_path, const cJSON *doc, const char *crash_point)
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
int es_claim_write_fence(int fd, const char *lock_path, cJSON *doc, const char *id, const char *state,
		       const char *record, size_t record_len)
{
	char now[40];
	struct es_buf rel = ES_BUF_INIT; /* the record, relative to the job folder */
	int rc = es_jobpath_record(&rel, NULL, state, id);
	if (rc)
		return rc;
	es_time_now_iso(now);
	es_json_set_str(doc, "status", state);
	es_json_set_str(doc, "terminal_at", now);
	es_json_set_str(doc, "terminal_path", rel.data);
	/* A copy of the record, for readers that cannot see the record file yet (record.h). */
	cJSON *copy = NULL;
	if (record) {
		es_log_quiet_begin();
		copy = es_json_parse(record, record_len, rel.data);
		es_log_quiet_end();
	}
	if (cJSON_IsObject(copy))
		es_json_set(doc, "record", copy);
	else
		cJSON_Delete(copy);
	es_buf_free(&rel);
	return es_claim_rewrite_lock(fd, lock_path, doc, NULL);
}

/* The text of a visible record (for a fence written after it), or NULL. */
char *es_claim_record_text(const struct es_manifest *m, const char *state, const char *id, size_t *len)
{
	struct es_buf p = ES_BUF_INIT, b = ES_BUF_INIT;
	int rc = es_jobpath_record(&p, m->job_dir, state, id);
	es_log_quiet_begin();
	if (!rc)
		rc = es_fs_read_file(p.data, &b, (size_t)1 << 20);
	es_log_quiet_end();
	es_buf_free(&p);
	if (rc) {
		es_buf_free(&b);
		return NULL;
	}
	return es_buf_detach(&b, len);
}

/* A shard whose record is visible but whose lock is not a fence (a job folder written by the
 * reference, which removes its locks; a publisher that died between its record and its fence):
 * the state its records tell ("done" wins), or NULL when neither is visible. */
int es_claim_visible_record(const struct es_manifest *m, const char *id, const char **state)
{
	*state = NULL;
	int rc = es_claim_marker_exists(m, "done", id);
	if (rc == 1)
		*state = "done";
	else if (!rc && (rc = es_claim_marker_exists(m, "failed", id)) == 1)
		*state = "failed";
	return rc < 0 ? rc : 0;
}

/* Our fresh lock on a shard whose record is visible (a reference job folder, which removes
 * its locks; a publisher that died between its record and its fence and was taken over):
 * the lock becomes the shard's fence instead of a claim. 1 when that happened. */
int es_claim_fence_if_recorded(struct es_claimer *c, size_t i, const char *lock_path)
{
	const char *id = c->m->shards[i].id, *record;
	int rc = es_claim_visible_record(c->m, id, &record);
	if (rc || !record)
		return rc;
	int fd;
	cJSON *doc = NULL;
	if ((rc = es_claim_lock_owned(lock_path, c->token, 0, &fd, &doc)) != 0)
		return rc < 0 ? rc : 1;
	size_t len = 0;
	char *text = es_claim_record_text(c->m, record, id, &len);
	rc = es_claim_write_fence(fd, lock_path, doc, id, record, text, len);
	free(text);
	es_claim_sweep_record_links(c->m, record, id);
	c->obs[i].terminal = 1;
	cJSON_Delete(doc);
	es_claim_unlock_close(fd);
	if (!rc)
		es_claim_hint(c->m, id, record);
	return rc ? rc : 1;
}

/* es_claim_repair on the shard's lock at lock_path. */
static int repair_at(struct es_claimer *c, size_t i, const char *lock_path)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	struct es_lock_info li;
	int rc = es_claim_lock_read(lock_path, &li);
	if (rc)
		return rc;
	if (!li.exists || li.terminal || !li.readable || !li.token[0])
		return 0;
	static const char *const kinds[] = { "done", "failed" };
	for (size_t k = 0; k < 2; k++) {
		size_t len = 0;
		char *text = es_claim_record_text(m, kinds[k], id, &len);
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
			if (!es_claim_observe(c, i, &li))
				return 2;
			rc = es_claim_try_takeover(c, i, lock_path);
			return rc < 0 ? rc : rc == 2;
		}
		/* The owner published and then died before its fence: write it in its place. */
		int fd;
		cJSON *doc = NULL;
		rc = es_claim_lock_owned(lock_path, li.token, 1, &fd, &doc);
		if (rc == 0) {
			rc = es_claim_write_fence(fd, lock_path, doc, id, kinds[k], text, len);
			es_claim_mark_recovered(m, li.attempt_dir, kinds[k], text, len);
			es_claim_sweep_record_links(m, kinds[k], id);
			es_claim_sweep_record_temps(m, id, c->policy.lease_secs, li.maker);
			c->obs[i].terminal = 1;
			cJSON_Delete(doc);
			es_claim_unlock_close(fd);
			if (!rc)
				es_claim_hint(m, id, kinds[k]);
		}
		free(text);
		return rc < 0 ? rc : rc == 0;
	}
	return 0;
}

int es_claim_repair(struct es_claimer *c, size_t i)
{
	if (c->obs[i].terminal)
		return 0;
	struct es_buf lock_path = ES_BUF_INIT;
	int rc = es_jobpath_lock(&lock_path, c->m->job_dir, c->m->shards[i].id);
	if (!rc)
		rc = repair_at(c, i, lock_path.data);
	es_buf_free(&lock_path);
	return rc;
}

int es_claim_publish(struct es_claimer *c, size_t i, const char *token, const char *kind,
		     const char *record, size_t record_len, es_claim_settle_fn settle, void *settle_ctx,
		     int *published)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	struct es_buf lock_path = ES_BUF_INIT, path = ES_BUF_INIT;
	*published = 0;
	int fd = -1;
	cJSON *doc = NULL;
	int rc = es_jobpath_lock(&lock_path, m->job_dir, id);
	if (!rc)
		rc = es_jobpath_record(&path, m->job_dir, kind, id);
	if (!rc)
		rc = es_claim_lock_owned(lock_path.data, token, 0, &fd, &doc);
	if (rc)
		goto out;
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
		int r = es_fs_publish_exclusive(path.data, record, record_len);
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
		char *theirs = *published ? NULL : es_claim_record_text(m, state, id, &len);
		rc = es_claim_write_fence(fd, lock_path.data, doc, id, state, *published ? record : theirs, len);
		free(theirs);
		if (!rc)
			es_crash_point(!strcmp(kind, "done") ? "done-after-fence" : "failed-after-fence");
		c->obs[i].terminal = 1;
		c->obs[i].running = 0;
		c->obs[i].done = !strcmp(state, "done");
		if (*published && !strcmp(kind, "done") && c->claimed_at_epoch > 0) {
			c->obs[i].done_secs = es_time_epoch() - c->claimed_at_epoch;
			snprintf(c->obs[i].host, sizeof(c->obs[i].host), "%s", es_hostname());
		}
	}
	cJSON_Delete(doc);
	es_claim_unlock_close(fd);
out:
	es_buf_free(&lock_path);
	es_buf_free(&path);
	return rc;
}
