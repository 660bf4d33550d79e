#include "eshard/manifest.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void es_processor_free(struct es_processor *p)
{
	free(p->dj_process);
	free(p->dj_root);
	free(p->python);
	free(p->command);
	memset(p, 0, sizeof(*p));
}

static int load_policy(const cJSON *pol, struct es_policy *p)
{
	p->lock_timeout_secs = ES_DEFAULT_LOCK_TIMEOUT_SECS;
	p->max_retries = ES_DEFAULT_MAX_RETRIES;
	p->poll_interval_secs = ES_DEFAULT_POLL_INTERVAL_SECS;
	p->heartbeat_secs = ES_DEFAULT_HEARTBEAT_SECS;
	p->lease_secs = ES_DEFAULT_LEASE_SECS;
	if (!cJSON_IsObject(pol))
		return 0;
	double d;
	/* The reference casts with int(); a float in a hand-edited manifest is truncated too. */
	if (!es_json_get_num(pol, "lock_timeout_secs", &d)) p->lock_timeout_secs = (int64_t)d;
	if (!es_json_get_num(pol, "max_retries", &d)) p->max_retries = (int64_t)d;
	if (!es_json_get_num(pol, "poll_interval_secs", &d)) p->poll_interval_secs = (int64_t)d;
	if (!es_json_get_num(pol, "heartbeat_secs", &d) && d > 0) p->heartbeat_secs = d;
	if (!es_json_get_num(pol, "lease_secs", &d) && d > 0) p->lease_secs = d;
	return 0;
}

int es_manifest_load(const char *job_dir, struct es_manifest *m)
{
	memset(m, 0, sizeof(*m));
	struct es_buf jd = ES_BUF_INIT, path = ES_BUF_INIT;
	cJSON *doc = NULL;
	size_t n = 0, i = 0;
	int rc = es_fs_resolve(job_dir, &jd);
	if (!rc)
		rc = es_path_join(&path, jd.data, "manifest.json");
	if (!rc) {
		rc = es_json_load(path.data, &doc);
		if (rc == ES_ENOENT)
			rc = es_error(ES_ENOENT, "Job manifest not found: %s (is '%s' a prepared job folder?)", path.data, job_dir);
	}
	if (rc)
		goto out;
	const cJSON *sv = cJSON_GetObjectItemCaseSensitive(doc, "schema_version");
	int64_t v = 0;
	if (!cJSON_IsObject(doc) || es_json_to_i64(sv, &v) || v != 2) {
		rc = es_error(ES_EINVAL, "Unsupported manifest schema_version in %s (expected 2)", path.data);
		goto out;
	}
	const cJSON *shards = cJSON_GetObjectItemCaseSensitive(doc, "shards");
	if (!cJSON_IsArray(shards) || cJSON_GetArraySize(shards) == 0) {
		rc = es_error(ES_EINVAL, "Manifest has no shards: %s", path.data);
		goto out;
	}
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(doc, "execution");
	const char *et = es_json_get_str(ex, "executor_type"), *ra = es_json_get_str(ex, "ray_address");
	if (!cJSON_IsObject(ex) || !et || strcmp(et, "ray") || !ra || !*ra) {
		rc = es_error(ES_EINVAL, "Manifest execution must have executor_type 'ray' and a ray_address: %s", path.data);
		goto out;
	}
	m->doc = doc;
	m->job_dir = strdup(jd.data);
	const char *slash = strrchr(jd.data, '/');
	m->job_id = strdup(slash ? slash + 1 : jd.data);
	m->ray_address = strdup(ra);
	m->recipe_executor_type = dup_or_null(es_json_get_str(ex, "recipe_executor_type"));
	m->dataset_path = dup_or_null(es_json_get_str(doc, "dataset_path"));
	m->recipe_sha256 = dup_or_null(es_json_get_str(cJSON_GetObjectItemCaseSensitive(doc, "recipe"), "sha256"));
	m->dj_commit = dup_or_null(es_json_get_str(cJSON_GetObjectItemCaseSensitive(doc, "data_juicer"), "commit"));
	es_json_get_i64(doc, "num_shards", &m->num_shards);
	es_json_get_i64(doc, "total_rows", &m->total_rows);
	es_json_get_i64(doc, "total_size_bytes", &m->total_size_bytes);
	load_policy(cJSON_GetObjectItemCaseSensitive(doc, "policy"), &m->policy);
	const cJSON *proc = cJSON_GetObjectItemCaseSensitive(doc, "processor");
	const char *ptype = es_json_get_str(proc, "type");
	if (ptype && !strcmp(ptype, "command")) {
		const char *cmd = es_json_get_str(proc, "command");
		if (!cmd || !*cmd) {
			rc = es_error(ES_EINVAL, "Manifest processor of type 'command' has no command: %s", path.data);
			goto out;
		}
		m->processor.kind = ES_PROC_COMMAND;
		m->processor.command = strdup(cmd);
	} else if (ptype && strcmp(ptype, "data-juicer")) {
		rc = es_error(ES_EINVAL, "Unknown processor type '%s' in %s", ptype, path.data);
		goto out;
	}
	m->processor.dj_process = dup_or_null(es_json_get_str(proc, "dj_process"));
	m->processor.dj_root = dup_or_null(es_json_get_str(proc, "dj_root"));
	m->processor.python = dup_or_null(es_json_get_str(proc, "python"));
	n = (size_t)cJSON_GetArraySize(shards);
	m->shards = calloc(n, sizeof(*m->shards));
	if (!m->shards || !m->job_dir || !m->job_id || !m->ray_address) {
		rc = es_error(ES_ENOMEM, "out of memory loading %s", path.data);
		goto out;
	}
	const cJSON *s;
	cJSON_ArrayForEach(s, shards) {
		struct es_shard *sh = &m->shards[i];
		const char *id = es_json_get_str(s, "id"), *sp = es_json_get_str(s, "path");
		const char *sha = es_json_get_str(s, "sha256");
		/* A shard id names files under state/ and attempts/: it must be one plain name. */
		/* The shard path is read by workers: it must stay inside the job folder. */
		if (!id || !*id || strchr(id, '/') || !strcmp(id, ".") || !strcmp(id, "..") || !sp || !*sp ||
		    sp[0] == '/' || !strncmp(sp, "../", 3) || strstr(sp, "/../") || !strcmp(sp, "..")) {
			rc = es_error(ES_EINVAL, "Manifest shard %zu has a missing or unsafe id or path: %s", i, path.data);
			goto out;
		}
		sh->id = strdup(id);
		sh->path = strdup(sp);
		es_json_get_i64(s, "index", &sh->index);
		es_json_get_i64(s, "rows", &sh->rows);
		es_json_get_i64(s, "size_bytes", &sh->size_bytes);
		snprintf(sh->sha256, sizeof(sh->sha256), "%s", sha ? sha : "");
		if (!sh->id || !sh->path) {
			rc = es_error(ES_ENOMEM, "out of memory loading %s", path.data);
			goto out;
		}
		i++;
	}
	m->n_shards = n;
out:
	if (rc) {
		if (m->shards)
			m->n_shards = n; /* calloc'd: entries past i are empty */
		if (!m->doc)
			cJSON_Delete(doc);
		es_manifest_free(m);
	}
	es_buf_free(&jd);
	es_buf_free(&path);
	return rc;
}

void es_manifest_free(struct es_manifest *m)
{
	for (size_t i = 0; i < m->n_shards; i++) {
		free(m->shards[i].id);
		free(m->shards[i].path);
	}
	free(m->shards);
	free(m->job_dir);
	free(m->job_id);
	free(m->dataset_path);
	free(m->ray_address);
	free(m->recipe_executor_type);
	free(m->recipe_sha256);
	free(m->dj_commit);
	es_processor_free(&m->processor);
	cJSON_Delete((cJSON *)m->doc);
	memset(m, 0, sizeof(*m));
}

long es_manifest_find(const struct es_manifest *m, const char *shard_id)
{
	for (size_t i = 0; i < m->n_shards; i++)
		if (!strcmp(m->shards[i].id, shard_id))
			return (long)i;
	return -1;
}
