#include "eshard/retry.h"
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
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/state/failed/%s.json", m.job_dir, id);
		if ((rc = es_fs_exists_fresh(p.data)) < 0)
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
	const char *hist[] = { "state/history/failed", "state/history/attempts" };
	for (size_t i = 0; i < 2; i++) {
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/%s", m.job_dir, hist[i]);
		if ((rc = es_fs_mkdirs(p.data, 0755)))
			goto out;
	}
	/* Check every target before moving anything, so a refusal leaves the job untouched. */
	for (size_t i = 0; i < nt; i++) {
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/state/locks/%s.lock", m.job_dir, targets[i]);
		if ((rc = es_fs_exists(p.data)) < 0)
			goto out;
		if (rc == 1) {
			rc = es_error(ES_EINVAL, "Cannot retry %s: a lock still exists", targets[i]);
			goto out;
		}
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/state/done/%s.json", m.job_dir, targets[i]);
		if ((rc = es_fs_exists_fresh(p.data)) < 0)
			goto out;
		if (rc == 1) {
			rc = es_error(ES_EINVAL, "Cannot retry %s: it is already complete", targets[i]);
			goto out;
		}
	}
	rc = 0;
	for (size_t i = 0; i < nt; i++) {
		const char *id = targets[i];
		char tok[33], suffix[64];
		if ((rc = es_fs_token(tok)))
			goto out;
		snprintf(suffix, sizeof(suffix), "%lld.%s", (long long)es_time_epoch(), tok);
		/* Attempts first: see the contract in retry.h. */
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/attempts/%s", m.job_dir, id);
		if ((rc = es_fs_exists(p.data)) < 0)
			goto out;
		if (rc == 1) {
			es_buf_reset(&q);
			es_buf_printf(&q, "%s/state/history/attempts/%s.%s", m.job_dir, id, suffix);
			if ((rc = es_fs_rename(p.data, q.data)))
				goto out;
		}
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/state/failed/%s.json", m.job_dir, id);
		es_buf_reset(&q);
		es_buf_printf(&q, "%s/state/history/failed/%s.%s.json", m.job_dir, id, suffix);
		if ((rc = es_fs_rename(p.data, q.data)))
			goto out;
		if (!quiet) {
			printf("Requeued %s\n", id);
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
