#include "eshard/retry.h"
#include "eshard/claim.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/util.h"

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
	es_buf_reset(p);
	es_buf_printf(p, "%s/state/failed/%s.json", m->job_dir, id);
	int rc = es_fs_exists_fresh(p->data);
	if (rc)
		return rc;
	struct es_lock_info li;
	es_buf_reset(p);
	es_buf_printf(p, "%s/state/locks/%s.lock", m->job_dir, id);
	if ((rc = es_claim_lock_read(p->data, &li)))
		return rc;
	return li.exists && li.terminal && !strcmp(li.state, "failed");
}

/* A target may be requeued when no worker can still be working on it: its lock is absent, its
 * failed fence, or a running lock past its lease (its owner died between publishing the failed
 * record and writing the fence), and no done record exists. */
static int check_target(const struct es_manifest *m, const char *id, struct es_buf *p)
{
	struct es_lock_info li;
	es_buf_reset(p);
	es_buf_printf(p, "%s/state/locks/%s.lock", m->job_dir, id);
	int rc = es_claim_lock_read(p->data, &li);
	if (rc)
		return rc;
	if (li.exists && li.terminal && strcmp(li.state, "failed"))
		return es_error(ES_EINVAL, "Cannot retry %s: it is already complete", id);
	if (li.exists && !li.terminal) {
		double age = es_time_epoch() - (double)li.mtime_ns / 1e9;
		if (!es_claim_lock_stale(&li, age, age, &m->policy))
			return es_error(ES_EINVAL, "Cannot retry %s: a lock still exists (%s, held by %s pid %lld)", id, p->data,
					li.hostname[0] ? li.hostname : "an unknown host", (long long)li.pid);
	}
	es_buf_reset(p);
	es_buf_printf(p, "%s/state/done/%s.json", m->job_dir, id);
	if ((rc = es_fs_exists_fresh(p->data)) < 0)
		return rc;
	if (rc == 1)
		return es_error(ES_EINVAL, "Cannot retry %s: it is already complete", id);
	return 0;
}

/* Move attempts/<id>/, then the failed record, then the lock (the shard's failed fence) into
 * state/history: workers can claim the shard only once the fence is gone, and by then its old
 * attempts no longer count toward the retry limit. */
static int requeue(const struct es_manifest *m, const char *id, struct es_buf *p, struct es_buf *q)
{
	char tok[33], suffix[64];
	int rc = es_fs_token(tok);
	if (rc)
		return rc;
	snprintf(suffix, sizeof(suffix), "%lld.%s", (long long)es_time_epoch(), tok);
	static const struct { const char *from, *to; } moves[] = {
		{ "attempts/%s", "state/history/attempts/%s.%s" },
		{ "state/failed/%s.json", "state/history/failed/%s.%s.json" },
		{ "state/locks/%s.lock", "state/history/claims/%s.%s.lock" },
	};
	for (size_t k = 0; k < sizeof(moves) / sizeof(moves[0]); k++) {
		es_buf_reset(p);
		es_buf_printf(p, "%s/", m->job_dir);
		es_buf_printf(p, moves[k].from, id);
		if ((rc = es_fs_exists(p->data)) < 0)
			return rc;
		if (rc == 0)
			continue;
		es_buf_reset(q);
		es_buf_printf(q, "%s/", m->job_dir);
		es_buf_printf(q, moves[k].to, id, suffix);
		if ((rc = es_fs_rename(p->data, q->data)))
			return rc;
		es_crash_point(k == 0 ? "retry-after-attempts" : k == 1 ? "retry-after-record" : "retry-after-fence");
	}
	return 0;
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
	}
	rc = 0;
	if (!nt) {
		if (!quiet)
			printf("No failed shards selected\n");
		goto out;
	}
	qsort(targets, nt, sizeof(*targets), cmp_str);
	const char *hist[] = { "state/history/failed", "state/history/attempts", "state/history/claims" };
	for (size_t i = 0; i < sizeof(hist) / sizeof(hist[0]); i++) {
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/%s", m.job_dir, hist[i]);
		if ((rc = es_fs_mkdirs(p.data, 0755)))
			goto out;
	}
	/* Check every target before moving anything, so a refusal leaves the job untouched. */
	for (size_t i = 0; i < nt; i++)
		if ((rc = check_target(&m, targets[i], &p)) != 0)
			goto out;
	for (size_t i = 0; i < nt; i++) {
		if ((rc = requeue(&m, targets[i], &p, &q)))
			goto out;
		if (!quiet) {
			printf("Requeued %s\n", targets[i]);
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
