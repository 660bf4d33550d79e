#include "eshard/manifest.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "json.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void es_processor_free(struct es_processor *p)
{
	free(p->dj_process);
	free(p->dj_root);
	free(p->python);
	free(p->command);
	memset(p, 0, sizeof(*p));
}

/* The reference casts with int(); a float in a hand-edited manifest is truncated too. A
 * float past int64's range (1e300, Infinity) means "no limit" and is clamped: a C cast of it
 * would be undefined. NaN has no integer value (int() raises): the manifest is refused. */
static int policy_int(const cJSON *pol, const char *key, int64_t *v, const char *path)
{
	double d;
	if (es_json_get_num(pol, key, &d))
		return 0;
	if (isnan(d))
		return es_error(ES_EINVAL, "Manifest policy.%s is not a number (NaN): %s", key, path);
	*v = es_i64_of_double(d);
	return 0;
}

static int load_policy(const cJSON *pol, struct es_policy *p, const char *path)
{
	p->lock_timeout_secs = ES_DEFAULT_LOCK_TIMEOUT_SECS;
	p->max_retries = ES_DEFAULT_MAX_RETRIES;
	p->poll_interval_secs = ES_DEFAULT_POLL_INTERVAL_SECS;
	p->heartbeat_secs = ES_DEFAULT_HEARTBEAT_SECS;
	p->lease_secs = ES_DEFAULT_LEASE_SECS;
	if (!cJSON_IsObject(pol))
		return 0;
	int rc = policy_int(pol, "lock_timeout_secs", &p->lock_timeout_secs, path);
	if (!rc)
		rc = policy_int(pol, "max_retries", &p->max_retries, path);
	if (!rc)
		rc = policy_int(pol, "poll_interval_secs", &p->poll_interval_secs, path);
	double d;
	if (!es_json_get_num(pol, "heartbeat_secs", &d) && d > 0) p->heartbeat_secs = d;
	if (!es_json_get_num(pol, "lease_secs", &d) && d > 0) p->lease_secs = d;
	return rc;
}

/* The reference's reader checks of execution (executor_type "ray", a non-empty ray_address). */
static int load_execution(const cJSON *doc, struct es_manifest *m, const char *path)
{
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(doc, "execution");
	const char *et = es_json_get_str(ex, "executor_type"), *ra = es_json_get_str(ex, "ray_address");
	if (!cJSON_IsObject(ex) || !et || strcmp(et, "ray") || !ra || !*ra)
		return es_error(ES_EINVAL, "Manifest execution must have executor_type 'ray' and a ray_address: %s", path);
	m->executor_type = strdup(et);
	m->ray_address = strdup(ra);
	m->recipe_executor_type = dup_or_null(es_json_get_str(ex, "recipe_executor_type"));
	return m->executor_type && m->ray_address ? 0 : es_error(ES_ENOMEM, "out of memory loading %s", path);
}

/* eshard-mpi's processor (absent in a reference manifest: Data-Juicer). */
static int load_processor(const cJSON *doc, struct es_processor *p, const char *path)
{
	const cJSON *proc = cJSON_GetObjectItemCaseSensitive(doc, "processor");
	const char *ptype = es_json_get_str(proc, "type");
	if (ptype && !strcmp(ptype, "command")) {
		const char *cmd = es_json_get_str(proc, "command");
		if (!cmd || !*cmd)
			return es_error(ES_EINVAL, "Manifest processor of type 'command' has no command: %s", path);
		p->kind = ES_PROC_COMMAND;
		p->command = strdup(cmd);
	} else if (ptype && strcmp(ptype, "data-juicer")) {
		return es_error(ES_EINVAL, "Unknown processor type '%s' in %s", ptype, path);
	}
	p->dj_process = dup_or_null(es_json_get_str(proc, "dj_process"));
	p->dj_root = dup_or_null(es_json_get_str(proc, "dj_root"));
	p->python = dup_or_null(es_json_get_str(proc, "python"));
	p->keep_order = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(proc, "keep_order"));
	return 0;
}

static int load_shards(const cJSON *shards, struct es_manifest *m, const char *path)
{
	size_t n = (size_t)cJSON_GetArraySize(shards), i = 0;
	if (!(m->shards = calloc(n, sizeof(*m->shards))))
		return es_error(ES_ENOMEM, "out of memory loading %s", path);
	m->n_shards = n; /* calloc'd: entries not filled yet are empty */
	const cJSON *s;
	cJSON_ArrayForEach(s, shards) {
		struct es_shard *sh = &m->shards[i];
		const char *id = es_json_get_str(s, "id"), *sp = es_json_get_str(s, "path");
		const char *sha = es_json_get_str(s, "sha256");
		/* A shard id names files under state/ and attempts/: it must be one plain name. */
		/* The shard path is read by workers: it must stay inside the job folder. */
		if (!id || !*id || strchr(id, '/') || !strcmp(id, ".") || !strcmp(id, "..") || !sp || !*sp ||
		    sp[0] == '/' || !strncmp(sp, "../", 3) || strstr(sp, "/../") || !strcmp(sp, ".."))
			return es_error(ES_EINVAL, "Manifest shard %zu has a missing or unsafe id or path: %s", i, path);
		sh->id = strdup(id);
		sh->path = strdup(sp);
		es_json_get_i64(s, "index", &sh->index);
		es_json_get_i64(s, "rows", &sh->rows);
		es_json_get_i64(s, "size_bytes", &sh->size_bytes);
		snprintf(sh->sha256, sizeof(sh->sha256), "%s", sha ? sha : "");
		if (!sh->id || !sh->path)
			return es_error(ES_ENOMEM, "out of memory loading %s", path);
		i++;
	}
	return 0;
}

/* input_files, for prepare's idempotency check; entries may lack fields (then -1, NULL, ""). */
static int load_inputs(const cJSON *doc, struct es_manifest *m, const char *path)
{
	const cJSON *files = cJSON_GetObjectItemCaseSensitive(doc, "input_files");
	if (!cJSON_IsArray(files))
		return 0;
	m->has_inputs = 1;
	size_t n = (size_t)cJSON_GetArraySize(files), i = 0;
	if (n && !(m->inputs = calloc(n, sizeof(*m->inputs))))
		return es_error(ES_ENOMEM, "out of memory loading %s", path);
	m->n_inputs = n;
	const cJSON *e;
	cJSON_ArrayForEach(e, files) {
		struct es_manifest_input *in = &m->inputs[i++];
		const char *p = es_json_get_str(e, "path"), *sha = es_json_get_str(e, "sha256");
		in->path = dup_or_null(p);
		if (es_json_get_i64(e, "size_bytes", &in->size_bytes))
			in->size_bytes = -1;
		if (es_json_get_i64(e, "mtime_ns", &in->mtime_ns))
			in->mtime_ns = -1;
		snprintf(in->sha256, sizeof(in->sha256), "%s", sha ? sha : "");
		if (p && !in->path)
			return es_error(ES_ENOMEM, "out of memory loading %s", path);
	}
	return 0;
}

/* No shard's folder attempts/<id> may be a symbolic link either (every attempt of the shard
 * is written below it). One readdir, the types from it where the file system gives them. */
static int check_attempt_dirs(const char *jd)
{
	struct es_buf p = ES_BUF_INIT, target = ES_BUF_INIT;
	int rc = es_jobpath_join(&p, jd, ES_JOB_ATTEMPTS);
	DIR *d = rc ? NULL : opendir(p.data);
	if (!d) {
		es_buf_free(&p);
		return rc;
	}
	struct dirent *e;
	while (!rc && (e = readdir(d)) != NULL) {
		struct stat st;
		int link = e->d_type == DT_LNK;
		if (e->d_type == DT_UNKNOWN && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			link = S_ISLNK(st.st_mode);
		if (!link)
			continue;
		es_log_quiet_begin(); /* a target that cannot be read is shown as '' */
		es_fs_readlink(dirfd(d), e->d_name, &target);
		es_log_quiet_end();
		rc = es_error(ES_EINVAL, "Job folder entry %s/%s is a symbolic link to '%s'; eshard-mpi does not follow links out "
			      "of a job folder: replace it by the real folder", p.data, e->d_name, target.data);
	}
	closedir(d);
	es_buf_free(&p);
	es_buf_free(&target);
	return rc;
}

/* The job folder is a boundary: none of the folders eshard-mpi writes into or trusts may be a
 * symbolic link, which eshard-mpi never makes (a planted one would send writes, or the records
 * merge trusts, out of the folder). Missing ones are fine (a reference job folder lacks
 * state/events; they are made when needed). */
static int check_entry(const char *p, int is_dir)
{
	struct stat st;
	if (lstat(p, &st) != 0)
		return 0;
	if (S_ISLNK(st.st_mode)) {
		struct es_buf target = ES_BUF_INIT;
		es_log_quiet_begin(); /* a target that cannot be read is shown as '' */
		es_fs_readlink(AT_FDCWD, p, &target);
		es_log_quiet_end();
		int rc = es_error(ES_EINVAL, "Job folder entry %s is a symbolic link to '%s'; eshard-mpi does not follow links "
				  "out of a job folder: replace it by the real %s", p, target.data, is_dir ? "folder" : "file");
		es_buf_free(&target);
		return rc;
	}
	if (is_dir != !!S_ISDIR(st.st_mode))
		return es_error(ES_EINVAL, "Job folder entry %s is not a %s", p, is_dir ? "folder" : "regular file");
	return 0;
}

static int check_layout(const char *jd, int flags)
{
	static const char *const files[] = { ES_JOB_MANIFEST, ES_JOB_RECIPE, NULL };
	struct es_buf p = ES_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; !rc && es_jobpath_folders[i]; i++)
		if (!(rc = es_jobpath_join(&p, jd, es_jobpath_folders[i])))
			rc = check_entry(p.data, 1);
	for (size_t i = 0; !rc && files[i]; i++)
		if (!(rc = es_jobpath_join(&p, jd, files[i])))
			rc = check_entry(p.data, 0);
	es_buf_free(&p);
	return rc || (flags & ES_MANIFEST_ATTEMPTS_CHECKED) ? rc : check_attempt_dirs(jd);
}

static int load_doc(const cJSON *doc, const char *jd, struct es_manifest *m, const char *path)
{
	const cJSON *sv = cJSON_GetObjectItemCaseSensitive(doc, "schema_version");
	int64_t v = 0;
	if (!cJSON_IsObject(doc) || es_json_to_i64(sv, &v) || v != 2)
		return es_error(ES_EINVAL, "Unsupported manifest schema_version in %s (expected 2)", path);
	const cJSON *shards = cJSON_GetObjectItemCaseSensitive(doc, "shards");
	if (!cJSON_IsArray(shards) || cJSON_GetArraySize(shards) == 0)
		return es_error(ES_EINVAL, "Manifest has no shards: %s", path);
	int rc = load_execution(doc, m, path);
	if (rc)
		return rc;
	m->job_dir = strdup(jd);
	const char *slash = strrchr(jd, '/');
	m->job_id = strdup(slash ? slash + 1 : jd);
	m->dataset_path = dup_or_null(es_json_get_str(doc, "dataset_path"));
	m->recipe_sha256 = dup_or_null(es_json_get_str(cJSON_GetObjectItemCaseSensitive(doc, "recipe"), "sha256"));
	m->dj_commit = dup_or_null(es_json_get_str(cJSON_GetObjectItemCaseSensitive(doc, "data_juicer"), "commit"));
	if (!m->job_dir || !m->job_id)
		return es_error(ES_ENOMEM, "out of memory loading %s", path);
	es_json_get_i64(doc, "num_shards", &m->num_shards);
	es_json_get_i64(doc, "total_rows", &m->total_rows);
	m->unsharded = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "unsharded"));
	m->bad_lines = -1;
	if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "bad_lines")) &&
	    (es_json_get_i64(cJSON_GetObjectItemCaseSensitive(doc, "bad_lines"), "count", &m->bad_lines) || m->bad_lines < 0))
		return es_error(ES_EINVAL, "Manifest field bad_lines.count is not a count: %s", path);
	es_json_get_i64(doc, "total_size_bytes", &m->total_size_bytes);
	if (es_time_parse_iso(es_json_get_str(doc, "created_at"), &m->created_at))
		m->created_at = -1;
	if ((rc = load_policy(cJSON_GetObjectItemCaseSensitive(doc, "policy"), &m->policy, path)) ||
	    (rc = load_processor(doc, &m->processor, path)) || (rc = load_shards(shards, m, path)))
		return rc;
	return load_inputs(doc, m, path);
}

int es_manifest_load(const char *job_dir, struct es_manifest *m)
{
	return es_manifest_load_ex(job_dir, 0, m);
}

int es_manifest_load_ex(const char *job_dir, int flags, struct es_manifest *m)
{
	memset(m, 0, sizeof(*m));
	struct es_buf jd = ES_BUF_INIT, path = ES_BUF_INIT;
	cJSON *doc = NULL;
	int rc = es_fs_resolve(job_dir, &jd);
	if (!rc)
		rc = es_jobpath_join(&path, jd.data, ES_JOB_MANIFEST);
	if (!rc) {
		rc = es_json_load(path.data, &doc);
		if (rc == ES_ENOENT)
			rc = es_error(ES_ENOENT, "Job manifest not found: %s (is '%s' a prepared job folder?)", path.data, job_dir);
	}
	if (!rc)
		rc = check_layout(jd.data, flags);
	if (!rc)
		rc = load_doc(doc, jd.data, m, path.data);
	if (!rc)
		es_fs_set_boundary(jd.data);
	if (rc)
		es_manifest_free(m);
	cJSON_Delete(doc);
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
	free(m->executor_type);
	for (size_t i = 0; i < m->n_inputs; i++)
		free(m->inputs[i].path);
	free(m->inputs);
	memset(m, 0, sizeof(*m));
}

long es_manifest_find(const struct es_manifest *m, const char *shard_id)
{
	for (size_t i = 0; i < m->n_shards; i++)
		if (!strcmp(m->shards[i].id, shard_id))
			return (long)i;
	return -1;
}
