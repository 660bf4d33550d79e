#include "eshard/retry.h"
#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/proc.h"
#include "json.h"
#include "record.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* An id names files under state/ and attempts/, so it must be one plain, non-empty name. */
static int unsafe_id(const char *id)
{
	return !*id || strchr(id, '/') || !strcmp(id, ".") || !strcmp(id, "..");
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int check_unknown(const struct es_manifest *m, const char *const *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (unsafe_id(ids[i]))
			return es_error(ES_EUSAGE, "Invalid shard ID '%s': a shard ID is a plain name inside the job folder", ids[i]);
	const char **unknown = calloc(n ? n : 1, sizeof(*unknown));
	if (!unknown)
		return es_error(ES_ENOMEM, "out of memory checking shard IDs");
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (es_manifest_find(m, ids[i]) < 0)
			unknown[k++] = ids[i];
	int rc = 0;
	if (k) {
		qsort(unknown, k, sizeof(*unknown), cmp_str);
		struct es_buf msg = ES_BUF_INIT;
		for (size_t i = 0; i < k; i++) {
			if (i && !strcmp(unknown[i], unknown[i - 1]))
				continue; /* a set, like the reference's */
			if (msg.len)
				es_buf_adds(&msg, ", ");
			es_buf_adds(&msg, unknown[i]);
		}
		rc = es_error(ES_EUSAGE, "Unknown shard IDs: %s", msg.data);
		es_buf_free(&msg);
	}
	free(unknown);
	return rc;
}

static int selected(const char *id, int all_failed, const char *const *ids, size_t n)
{
	if (all_failed)
		return 1;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(ids[i], id))
			return 1;
	return 0;
}

/* Is the shard failed: its failed record, or its failed fence (a retry that stopped between
 * moving the record and the fence)? 1 yes, 0 no, negative on error. */
static int failed_state(const struct es_manifest *m, const char *id, struct es_buf *p)
{
	int rc = es_jobpath_record(p, m->job_dir, "failed", id);
	if (!rc)
		rc = es_fs_exists_fresh(p->data);
	if (rc)
		return rc;
	struct es_lock_info li;
	if ((rc = es_jobpath_lock(p, m->job_dir, id)) || (rc = es_claim_lock_read(p->data, &li)))
		return rc;
	return li.exists && li.terminal && !strcmp(li.state, "failed");
}

/* The failed record's token ("" when it has none or cannot be read): the attempt that gave the
 * shard up. */
static void failed_token(const struct es_manifest *m, const char *id, char *out, size_t n)
{
	cJSON *rec = NULL;
	out[0] = '\0';
	es_log_quiet_begin();
	if (!es_record_load(m, "failed", id, &rec)) {
		const char *t = es_json_get_str(rec, "token");
		snprintf(out, n, "%s", t ? t : "");
	}
	es_log_quiet_end();
	cJSON_Delete(rec);
}

/* May a failed shard with this lock be requeued? Yes when no worker can still be working on it:
 * no lock, its failed fence, a running lock whose token is the failed record's (its owner
 * published the record and died before the fence: nothing of that attempt is left to do), or a
 * running lock past its lease. A live running lock (a claim made after another retry requeued
 * the shard) or a done fence refuses. */
static int lock_allows(const struct es_manifest *m, const char *id, const struct es_lock_info *li, const char *path)
{
	if (!li->exists)
		return 0;
	if (li->terminal)
		return strcmp(li->state, "failed") ? es_error(ES_EINVAL, "Cannot retry %s: it is already complete", id) : 0;
	char tok[33];
	failed_token(m, id, tok, sizeof(tok));
	if (tok[0] && li->readable && !strcmp(tok, li->token))
		return 0;
	double age = es_time_epoch() - (double)li->mtime_ns / 1e9;
	if (es_claim_lock_stale(li, age, age, &m->policy))
		return 0;
	return es_error(ES_EINVAL, "Cannot retry %s: a lock still exists (%s, held by %s pid %lld)", id, path,
			li->hostname[0] ? li->hostname : "an unknown host", (long long)li->pid);
}

static int check_target(const struct es_manifest *m, const char *id, struct es_buf *p)
{
	struct es_lock_info li;
	int rc = es_jobpath_lock(p, m->job_dir, id);
	if (!rc)
		rc = es_claim_lock_read(p->data, &li);
	if (!rc)
		rc = lock_allows(m, id, &li, p->data);
	if (!rc)
		rc = es_jobpath_record(p, m->job_dir, "done", id);
	if (rc)
		return rc;
	if ((rc = es_fs_exists_fresh(p->data)) < 0)
		return rc;
	if (rc == 1)
		return es_error(ES_EINVAL, "Cannot retry %s: it is already complete", id);
	return 0;
}

/* Move attempts/<id>/, then the failed record, then the lock (the shard's failed fence) into
 * state/history: workers can claim the shard only once the fence is gone, and by then its old
 * attempts no longer count toward the retry limit. The lock is held under flock meanwhile and
 * judged again: another retry may have requeued the shard since the check and a worker may
 * have claimed it; that claim, its lock and its attempt folder are left alone (*skipped). With
 * no lock at all (a reference job folder), only a failed fence that a worker made from the
 * record meanwhile is moved at the end, never a running lock. */
/* Move k of requeue (0: the attempts, 1: the failed record, 2: the lock): from p to q. */
static int move_paths(const struct es_manifest *m, size_t k, const char *id, const char *suffix, struct es_buf *p,
		      struct es_buf *q)
{
	static const char *const what[] = { "attempts", "failed", "claims" };
	int rc = k == 0 ? es_jobpath_attempts(p, m->job_dir, id)
		 : k == 1 ? es_jobpath_record(p, m->job_dir, "failed", id) : es_jobpath_lock(p, m->job_dir, id);
	return rc ? rc : es_jobpath_history(q, m->job_dir, what[k], id, suffix);
}

static int requeue_at(const struct es_manifest *m, const char *id, const char *lock_path, struct es_buf *p,
		      struct es_buf *q, int *skipped)
{
	char tok[33], suffix[64];
	struct es_lock_info li;
	int fd = -1;
	*skipped = 0;
	int rc = es_fs_token(tok);
	if (!rc && (rc = es_claim_lock_hold(lock_path, &fd, &li)) == 1)
		rc = 0;
	if (!rc && (rc = failed_state(m, id, p)) == 0)
		*skipped = 1;
	if (rc == 1)
		rc = lock_allows(m, id, &li, lock_path);
	if (rc || *skipped) {
		es_claim_lock_unhold(fd);
		return rc < 0 ? rc : 0;
	}
	snprintf(suffix, sizeof(suffix), "%lld.%s", (long long)es_time_epoch(), tok);
	for (size_t k = 0; !rc && k < 3; k++) {
		if (k == 2 && fd < 0) {
			/* No lock was held: move one only if it is a failed fence. */
			if ((rc = es_claim_lock_hold(lock_path, &fd, &li)) < 0)
				break;
			if (rc == 1 || !li.terminal || strcmp(li.state, "failed")) {
				rc = 0;
				break;
			}
		}
		if ((rc = move_paths(m, k, id, suffix, p, q)) != 0 || (rc = es_fs_exists(p->data)) < 0)
			break;
		if (rc == 0)
			continue;
		if ((rc = es_fs_rename(p->data, q->data)))
			break;
		es_crash_point(k == 0 ? "retry-after-attempts" : k == 1 ? "retry-after-record" : "retry-after-fence");
	}
	es_claim_lock_unhold(fd);
	return rc;
}

static int requeue(const struct es_manifest *m, const char *id, struct es_buf *p, struct es_buf *q, int *skipped)
{
	struct es_buf lock_path = ES_BUF_INIT;
	*skipped = 0;
	int rc = es_jobpath_lock(&lock_path, m->job_dir, id);
	if (!rc)
		rc = requeue_at(m, id, lock_path.data, p, q, skipped);
	es_buf_free(&lock_path);
	return rc;
}

int es_retry_run(const char *job_dir, int all_failed, const char *const *ids, size_t n, int quiet)
{
	struct es_manifest m;
	int rc = es_manifest_load(job_dir, &m);
	if (rc)
		return rc;
	struct es_buf p = ES_BUF_INIT, q = ES_BUF_INIT;
	const char **targets = NULL;
	size_t nt = 0;
	if (!all_failed && (rc = check_unknown(&m, ids, n)))
		goto out;
	targets = calloc(m.n_shards, sizeof(*targets));
	if (!targets) {
		rc = es_error(ES_ENOMEM, "out of memory selecting shards");
		goto out;
	}
	for (size_t i = 0; i < m.n_shards; i++) {
		const char *id = m.shards[i].id;
		if (!selected(id, all_failed, ids, n))
			continue;
		if ((rc = failed_state(&m, id, &p)) < 0)
			goto out;
		if (rc == 1)
			targets[nt++] = id;
		/* A shard named on the command line that is done or still held is refused (the help
		 * says so): exit 0 would read as "requeued". One that is merely pending is left. */
		else if (!all_failed && (rc = check_target(&m, id, &p)) != 0)
			goto out;
	}
	rc = 0;
	if (!nt) {
		if (!quiet)
			printf("No failed shards selected\n");
		goto out;
	}
	qsort(targets, nt, sizeof(*targets), cmp_str);
	const char *hist[] = { ES_JOB_HISTORY_FAILED, ES_JOB_HISTORY_ATTEMPTS, ES_JOB_HISTORY_CLAIMS };
	for (size_t i = 0; i < sizeof(hist) / sizeof(hist[0]); i++) {
		if ((rc = es_jobpath_join(&p, m.job_dir, hist[i])) || (rc = es_fs_mkdirs(p.data, 0755)))
			goto out;
	}
	/* Check every target before moving anything, so a refusal leaves the job untouched. */
	for (size_t i = 0; i < nt; i++)
		if ((rc = check_target(&m, targets[i], &p)) != 0)
			goto out;
	es_proc_test_hook("ESHARD_TEST_HOOK_RETRY_BEFORE_MOVES");
	for (size_t i = 0; i < nt; i++) {
		int skipped = 0;
		if ((rc = requeue(&m, targets[i], &p, &q, &skipped)))
			goto out;
		if (!skipped)
			es_claim_hint(&m, targets[i], "requeued"); /* idle workers of a running job claim it now */
		if (!quiet) {
			printf(skipped ? "Skipped %s: it was requeued meanwhile by another retry\n" : "Requeued %s\n", targets[i]);
			fflush(stdout);
		}
	}
out:
	free(targets);
	es_buf_free(&p);
	es_buf_free(&q);
	es_manifest_free(&m);
	return rc;
}
