#include "eshard/verify.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/jobview.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/merge.h"
#include "eshard/prepare.h"
#include "eshard/status.h"
#include "eshard/stop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct owner {
	char *host;
	int64_t n;
};

static int owner_cmp(const void *a, const void *b)
{
	return strcmp(((const struct owner *)a)->host, ((const struct owner *)b)->host);
}

/* Count the done shards per hostname (the status's owner: the done record's hostname, status.h);
 * every record must name a host. */
static int count_owners(const struct es_manifest *m, const struct es_status *st, struct owner **out, size_t *n_out)
{
	struct owner *o = calloc(m->n_shards ? m->n_shards : 1, sizeof(*o));
	size_t n = 0;
	int rc = o ? 0 : es_error(ES_ENOMEM, "out of memory counting shard owners");
	for (size_t i = 0; !rc && i < m->n_shards; i++) {
		const char *h = st->shards[i].owner;
		if (!h || !*h) {
			struct es_buf p = ES_BUF_INIT;
			es_jobpath_record(&p, m->job_dir, "done", m->shards[i].id);
			rc = es_error(ES_EINVAL, "Done record for %s has no hostname: %s", m->shards[i].id, p.data);
			es_buf_free(&p);
		} else {
			size_t j = 0;
			while (j < n && strcmp(o[j].host, h))
				j++;
			if (j == n && !(o[n++].host = strdup(h)))
				rc = es_error(ES_ENOMEM, "out of memory counting shard owners");
			else
				o[j].n++;
		}
	}
	if (!rc && n > 1)
		qsort(o, n, sizeof(*o), owner_cmp);
	*out = o;
	*n_out = n;
	return rc;
}

/* How long verify waits for done shards' results that this client does not see yet (verify.h). */
static double settle_secs = 60.0;

void es_verify_set_settle_secs(double secs)
{
	settle_secs = secs >= 0 ? secs : 0;
}

/* The status, read again once a second while every shard is done and the only problems are
 * results a caching client may not see yet (another node wrote them a moment ago: see
 * check_done_record in status.c), for up to settle_secs. A stop ends the wait. st holds a
 * status already read (a job view's) or is zeroed; each round reads again every shard it does
 * not hold as final (es_status_refresh, without listings: what verify decides on is looked up
 * by name). */
static int collect_settled(const struct es_manifest *m, struct es_status *st)
{
	double t0 = es_time_mono();
	for (int round = 0;; round++) {
		int rc = es_status_refresh(m, 0, NULL, st);
		if (rc || st->complete || st->counts.done != st->counts.total || st->unseen_records != st->bad_records ||
		    es_time_mono() - t0 >= settle_secs || es_stop_signal())
			return rc;
		if (round == 0) {
			const char *first = NULL;
			for (size_t i = 0; !first && i < st->n_shards; i++)
				first = st->shards[i].record_error;
			es_log_note("%lld done shard(s) do not show their results on this node yet (the first: %s); waiting up "
				    "to %.0f s for the shared file system's cache",
				    (long long)st->unseen_records, first ? first : "?", settle_secs);
		}
		es_sleep(1.0);
	}
}

int es_verify_run(const char *job_dir, const char *output, int expect_nodes, struct es_verify_result *r)
{
	return es_verify_run_follow(job_dir, output, expect_nodes, NULL, 0, NULL, r);
}

int es_verify_run_follow(const char *job_dir, const char *output, int expect_nodes, struct es_merge_follow *follow,
			 int brief, struct es_jobview *view, struct es_verify_result *r)
{
	memset(r, 0, sizeof(*r));
	r->exit_code = 2;
	if (expect_nodes < 1)
		expect_nodes = 1;
	struct es_manifest own_m;
	struct es_status own_st;
	memset(&own_m, 0, sizeof(own_m));
	memset(&own_st, 0, sizeof(own_st));
	int have_view = view && view->have_manifest;
	const struct es_manifest *mp = have_view ? &view->m : &own_m;
	struct es_status *stp = have_view ? &view->st : &own_st;
	int rc = have_view ? 0 : es_manifest_load(job_dir, &own_m);
	if (rc) {
		if (follow)
			es_merge_follow_abort(follow);
		return rc;
	}
	struct es_buf text = ES_BUF_INIT, outp = ES_BUF_INIT;
	struct owner *owners = NULL;
	size_t n_owners = 0;
	struct es_merge_result mr;
	memset(&mr, 0, sizeof(mr));
	r->num_shards = (int64_t)mp->n_shards;

	/* An output the job needs is refused first, before the status is printed. */
	if (output)
		rc = es_fs_check_output(output, mp->job_dir, ES_MERGE_OUTPUT_NAME, &outp);
	else
		rc = es_path_join(&outp, mp->job_dir, ES_MERGE_OUTPUT_NAME);
	if (rc)
		goto out;
	/* The reference ran `status --all` here; its report is the same. */
	rc = collect_settled(mp, stp);
	if (!rc)
		rc = es_status_format_text(mp, stp, 1, &text);
	if (rc)
		goto out;
	if (!brief)
		fputs(text.data, stdout);
	int sc = es_status_exit(stp);
	if (sc) {
		fflush(stdout);
		struct es_buf advice = ES_BUF_INIT;
		es_status_advice(&stp->counts, mp->job_dir, &advice);
		for (size_t i = 0; i < stp->n_shards; i++) {
			if (stp->shards[i].record_error) {
				es_buf_printf(&advice, "%s%lld done record(s) cannot be merged, the first: %s", advice.len ? "; " : "",
					      (long long)stp->bad_records, stp->shards[i].record_error);
				break;
			}
		}
		rc = es_error(ES_EINVAL, "Verification stopped: not all shards are complete.%s%s%s", advice.len ? " " : "",
			      advice.data, advice.len ? "." : "");
		es_buf_free(&advice);
		r->exit_code = sc;
		goto out;
	}
	if ((rc = count_owners(mp, stp, &owners, &n_owners)))
		goto out;
	r->n_hosts = (int)n_owners;
	printf("Shard owners:\n");
	for (size_t i = 0; i < n_owners; i++)
		printf("  %s: %lld shard(s)\n", owners[i].host, (long long)owners[i].n);
	fflush(stdout);
	if ((int)n_owners < expect_nodes) {
		rc = es_error(ES_EINVAL, "Verification failed: expected at least %d distinct hostnames, found %zu.",
			      expect_nodes, n_owners);
		goto out;
	}
	uint64_t from = 0;
	int64_t from_rows = 0;
	rc = follow ? es_merge_follow_finish(follow, 0, stp, &mr, 0, &from, &from_rows) : es_merge_run(mp->job_dir, outp.data, 1, 0, &mr, 0);
	follow = NULL;
	if (rc)
		goto out;
	if ((rc = es_merge_reread(mr.output, from, from_rows, &r->rows)))
		goto out;
	r->rows += from_rows;
	memcpy(r->sha256, mr.sha256, sizeof(r->sha256));
	r->output = mr.output;
	mr.output = NULL;
	printf("PASS: %lld shards were completed by %zu node(s); merged %lld rows into %s\n",
	       (long long)r->num_shards, n_owners, (long long)r->rows, r->output);
	fflush(stdout);
	r->exit_code = 0;
out:
	if (follow)
		es_merge_follow_abort(follow);
	if (rc && r->exit_code == 2)
		r->exit_code = es_exit_code(rc); /* 128+N when stopped by a signal */
	for (size_t i = 0; owners && i < n_owners; i++)
		free(owners[i].host);
	free(owners);
	free(mr.output);
	es_status_free(&own_st);
	es_buf_free(&text);
	es_buf_free(&outp);
	if (!have_view)
		es_manifest_free(&own_m);
	return rc;
}
