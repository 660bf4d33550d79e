/*
 * coord: the files through which the instances of a worker-broadcast job agree (coord.h).
 */
#include "eshard/coord.h"

#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/sha.h"
#include "eshard/status.h"
#include "eshard/stop.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int es_coord_run_key(const char *run_id, char out[21])
{
	struct es_sha s;
	char hex[65];
	if (es_sha_init(&s))
		return es_error(ES_ENOMEM, "cannot hash the submission id");
	es_sha_update(&s, run_id, strlen(run_id));
	if (es_sha_final(&s, hex))
		return es_error(ES_ENOMEM, "cannot hash the submission id");
	memcpy(out, hex, 20);
	out[20] = '\0';
	return 0;
}

/* <dir>/<name> into out. */
static int coord_path(const struct es_coord *c, const char *name, struct es_buf *out)
{
	return es_path_join(out, c->dir, name);
}

int es_coord_open(struct es_coord *c, const char *job_dir, const char *run_id, double timeout_secs, double poll_secs)
{
	memset(c, 0, sizeof(*c));
	c->timeout_secs = timeout_secs;
	c->poll_secs = poll_secs;
	struct es_buf job = ES_BUF_INIT, dir = ES_BUF_INIT;
	int rc = es_coord_run_key(run_id, c->run_key);
	if (!rc)
		rc = es_fs_resolve(job_dir, &job);
	if (!rc) {
		/* A sibling of the job folder: it exists before the job folder does. */
		char *slash = strrchr(job.data, '/');
		const char *name = slash ? slash + 1 : job.data;
		if (slash == job.data)
			es_buf_printf(&dir, "/.%s.dlc-coordination/%s", name, c->run_key);
		else
			es_buf_printf(&dir, "%.*s/.%s.dlc-coordination/%s", (int)(slash - job.data), job.data, name,
				      c->run_key);
		rc = es_fs_mkdirs(dir.data, 0755);
	}
	es_buf_free(&job);
	if (rc) {
		es_buf_free(&dir);
		return rc;
	}
	c->dir = es_buf_detach(&dir, NULL);
	return c->dir ? 0 : es_error(ES_ENOMEM, "out of memory");
}

void es_coord_close(struct es_coord *c)
{
	free(c->dir);
	c->dir = NULL;
}

int es_coord_result(const struct es_coord *c, const char *name, int *code)
{
	struct es_buf path = ES_BUF_INIT;
	cJSON *doc = NULL;
	int rc = coord_path(c, name, &path);
	/* open() revalidates a name an NFS client may cache as missing (es_fs_exists_fresh). */
	if (!rc)
		rc = es_fs_exists_fresh(path.data);
	if (rc == 1 && (rc = es_json_load_required(path.data, name, &doc)) == 0) {
		int64_t v;
		const cJSON *item = cJSON_GetObjectItemCaseSensitive(doc, "return_code");
		if (!item || !es_json_is_int(item) || es_json_to_i64(item, &v) || v < -255 || v > 255)
			rc = es_error(ES_EINVAL, "the return_code of %s is not an exit code", path.data);
		else
			*code = (int)v;
		rc = rc ? rc : 1;
	}
	cJSON_Delete(doc);
	es_buf_free(&path);
	return rc;
}

/* The JSON every coordination file starts from: finished_at or created_at, hostname, phase. */
static cJSON *coord_doc(const char *time_key, const char *phase)
{
	char now[40];
	cJSON *d = cJSON_CreateObject();
	es_time_now_iso(now);
	if (d && (es_json_set_str(d, time_key, now) || es_json_set_str(d, "hostname", es_hostname()) ||
		  es_json_set_str(d, "phase", phase))) {
		cJSON_Delete(d);
		d = NULL;
	}
	return d;
}

int es_coord_elect(const struct es_coord *c, const char *phase)
{
	struct es_buf path = ES_BUF_INIT, line = ES_BUF_INIT, name = ES_BUF_INIT;
	cJSON *d = coord_doc("created_at", phase);
	int rc = d && !es_json_set_int(d, "pid", (int64_t)getpid()) ? 0 : es_error(ES_ENOMEM, "out of memory");
	if (!rc)
		rc = es_buf_printf(&name, "%s.lock", phase);
	if (!rc)
		rc = coord_path(c, name.data, &path);
	if (!rc)
		rc = es_json_dump(d, 0, &line);
	if (!rc)
		rc = es_fs_create_exclusive(path.data, line.data, line.len);
	cJSON_Delete(d);
	es_buf_free(&path);
	es_buf_free(&line);
	es_buf_free(&name);
	return rc;
}

/* Publish a result-like document (the election's winner is its only writer). */
static int publish(const struct es_coord *c, const char *name, cJSON *d)
{
	struct es_buf path = ES_BUF_INIT;
	int rc = d ? coord_path(c, name, &path) : es_error(ES_ENOMEM, "out of memory");
	if (!rc)
		rc = es_json_publish_exclusive(path.data, d);
	cJSON_Delete(d);
	es_buf_free(&path);
	return rc < 0 ? rc : 0;
}

int es_coord_publish_result(const struct es_coord *c, const char *phase, int code, const char *error)
{
	char name[64];
	snprintf(name, sizeof(name), "%s-result.json", phase);
	cJSON *d = coord_doc("finished_at", phase);
	if (d && (es_json_set_int(d, "return_code", code) || (error && es_json_set_str(d, "error", error)))) {
		cJSON_Delete(d);
		d = NULL;
	}
	return publish(c, name, d);
}

/* One poll of a wait: 1 when the deadline passed, else sleep (at most until the deadline). */
static int wait_tick(const struct es_coord *c, double t0)
{
	double left = c->timeout_secs - (es_time_mono() - t0);
	if (left <= 0)
		return 1;
	es_sleep(c->poll_secs < left ? c->poll_secs : left);
	return 0;
}

static int timed_out(const struct es_coord *c, const char *what)
{
	return es_error(ES_EINVAL, "timed out after %gs waiting for DLC %s. Check whether another worker exited unexpectedly.",
			c->timeout_secs, what);
}

/* A stop signal ends every wait with 128 + signal. */
static int stopped(int *code)
{
	int sig = es_stop_signal();
	if (sig)
		*code = 128 + sig;
	return sig != 0;
}

/* Whether the manifest was written by this submission's prepare coordinator: its created_at
 * is not older than prepare.lock's (both from the coordinator's clock). A manifest that only
 * looked absent before the election (NFS caches "no such file") is an older job's, which the
 * coordinator may still be checking or may refuse; then only prepare-result.json counts. */
static int manifest_is_new(const struct es_coord *c, const char *job_dir)
{
	struct es_buf lock = ES_BUF_INIT;
	struct es_manifest m;
	cJSON *doc = NULL;
	double locked = -1;
	int yes = 0;
	if (!coord_path(c, "prepare.lock", &lock) && es_json_load_required(lock.data, "prepare.lock", &doc) == 0) {
		const char *at = es_json_get_str(doc, "created_at");
		if (!at || es_time_parse_iso(at, &locked))
			locked = -1;
	}
	if (locked >= 0 && es_manifest_load(job_dir, &m) == 0) {
		yes = m.created_at >= 0 && m.created_at + 1 >= locked; /* ISO times have whole seconds */
		es_manifest_free(&m);
	}
	cJSON_Delete(doc);
	es_buf_free(&lock);
	return yes;
}

int es_coord_wait_prepare(const struct es_coord *c, const char *job_dir, int manifest_before, int *code)
{
	struct es_buf manifest = ES_BUF_INIT;
	int rc = es_path_join(&manifest, job_dir, ES_JOB_MANIFEST);
	double t0 = es_time_mono();
	while (!rc && !stopped(code)) {
		if ((rc = es_coord_result(c, "prepare-result.json", code)) != 0)
			break;
		if (!manifest_before && es_fs_exists_fresh(manifest.data) == 1) {
			if (manifest_is_new(c, job_dir)) {
				*code = 0;
				break;
			}
			manifest_before = 1; /* an older job's: wait for the result */
		}
		if (wait_tick(c, t0))
			rc = timed_out(c, "preparation");
	}
	es_buf_free(&manifest);
	return rc < 0 ? rc : 0;
}

int es_coord_wait_finalize(const struct es_coord *c, int *code)
{
	double t0 = es_time_mono();
	int rc = 0;
	/* An abort ends the wait too: a finalize that cannot come (its winner stopped) must not
	 * keep every other instance waiting for the timeout. */
	while (!stopped(code) && (rc = es_coord_result(c, "finalize-result.json", code)) == 0 &&
	       (rc = es_coord_result(c, "abort.json", code)) == 0)
		if (wait_tick(c, t0))
			return timed_out(c, "final verification");
	return rc < 0 ? rc : 0;
}

int es_coord_aborted(const struct es_coord *c)
{
	struct es_buf path = ES_BUF_INIT;
	int yes = !coord_path(c, "abort.json", &path) && es_fs_exists_fresh(path.data) == 1;
	es_buf_free(&path);
	return yes;
}

int es_coord_abort(const struct es_coord *c, int code, const char *reason, int *final)
{
	int rc = es_coord_result(c, "abort.json", final);
	if (rc)
		return rc < 0 ? rc : 0;
	/* An election that failed half-way (the lock created, its line not written) must not
	 * leave the submission without abort.json: publish it anyway (published exclusively). */
	if ((rc = es_coord_elect(c, "abort")) <= 0) {
		cJSON *d = coord_doc("finished_at", "worker");
		if (d && (es_json_set_str(d, "reason", reason) || es_json_set_int(d, "return_code", code))) {
			cJSON_Delete(d);
			d = NULL;
		}
		if ((rc = publish(c, "abort.json", d)) != 0)
			return rc;
	}
	/* The first aborter's code is the submission's (another instance may have published). */
	double t0 = es_time_mono();
	while (!stopped(final) && (rc = es_coord_result(c, "abort.json", final)) == 0)
		if (wait_tick(c, t0))
			return timed_out(c, "abort record");
	return rc < 0 ? rc : 0;
}

/* The abort of the terminal wait: failed shards or the deadline. */
static int terminal_abort(const struct es_coord *c, const struct es_status_counts *n, int *code)
{
	char reason[160];
	if (n->failed)
		snprintf(reason, sizeof(reason), "%lld shard(s) reached terminal failure", (long long)n->failed);
	else
		snprintf(reason, sizeof(reason), "timed out after %gs waiting for all shards (%lld/%lld done)",
			 c->timeout_secs, (long long)n->done, (long long)n->total);
	if (!n->failed)
		es_error(ES_EINVAL, "%s", reason);
	return es_coord_abort(c, 2, reason, code);
}

int es_coord_wait_terminal(const struct es_coord *c, const char *job_dir, int *code)
{
	struct es_manifest m;
	int rc = es_manifest_load(job_dir, &m);
	if (rc)
		return rc;
	unsigned char *seen = calloc(m.n_shards ? m.n_shards : 1, 1);
	double t0 = es_time_mono();
	rc = seen ? 0 : es_error(ES_ENOMEM, "out of memory");
	while (!rc && !stopped(code)) {
		struct es_status_counts n;
		if ((rc = es_coord_result(c, "abort.json", code)) != 0)
			break;
		if ((rc = es_status_count_cached(&m, 0, seen, NULL, &n)) != 0)
			break;
		if (n.done == n.total) {
			*code = 0;
			break;
		}
		if (n.failed || es_time_mono() - t0 >= c->timeout_secs) {
			rc = terminal_abort(c, &n, code);
			break;
		}
		wait_tick(c, t0);
	}
	free(seen);
	es_manifest_free(&m);
	return rc < 0 ? rc : 0;
}
