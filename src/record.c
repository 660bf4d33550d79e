/*
 * record: loading and checking done and failed records (see record.h).
 */
#include "record.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* The fence's copy of the record, when the lock is a fence of that kind. */
static int fence_copy_at(const char *lock_path, const char *kind, const char *id, cJSON **out)
{
	int rc;
	struct stat st;
	if (lstat(lock_path, &st) != 0 || !S_ISREG(st.st_mode))
		return ES_ENOENT;
	cJSON *lock = NULL;
	es_log_quiet_begin();
	rc = es_json_load(lock_path, &lock);
	es_log_quiet_end();
	const cJSON *copy = rc ? NULL : cJSON_GetObjectItemCaseSensitive(lock, "record");
	const char *st_name = rc ? NULL : es_json_get_str(lock, "status");
	if (!cJSON_IsObject(copy) || !st_name || strcmp(st_name, kind)) {
		cJSON_Delete(lock);
		return ES_ENOENT;
	}
	*out = cJSON_Duplicate(copy, 1);
	cJSON_Delete(lock);
	return *out ? 0 : es_error(ES_ENOMEM, "out of memory reading the fence of %s", id);
}

static int fence_copy(const struct es_manifest *m, const char *kind, const char *id, cJSON **out)
{
	struct es_buf lock_path = ES_BUF_INIT;
	int rc = es_jobpath_lock(&lock_path, m->job_dir, id);
	if (!rc)
		rc = fence_copy_at(lock_path.data, kind, id, out);
	es_buf_free(&lock_path);
	return rc;
}

/* es_record_load of the record at p. */
static int load_at(const struct es_manifest *m, const char *p, const char *kind, const char *id, cJSON **out)
{
	/* Below the boundary (the job folder, once its manifest was loaded) the read refuses a link
	 * itself, with no lookup of its own (one per record, 100,000 in a status of as many). */
	struct stat st;
	if (!es_fs_below_boundary(p) && lstat(p, &st) == 0 && S_ISLNK(st.st_mode))
		return es_error(ES_EINVAL, "Record %s is a symbolic link; eshard-mpi does not follow links in a job folder", p);
	int rc = es_json_load(p, out);
	if (!rc && !cJSON_IsObject(*out)) {
		cJSON_Delete(*out);
		*out = NULL;
		return es_error(ES_EINVAL, "Record %s is not a JSON object", p);
	}
	if (rc == ES_ENOENT)
		rc = fence_copy(m, kind, id, out);
	return rc;
}

int es_record_load(const struct es_manifest *m, const char *kind, const char *id, cJSON **out)
{
	struct es_buf p = ES_BUF_INIT;
	*out = NULL;
	int rc = es_jobpath_record(&p, m->job_dir, kind, id);
	if (!rc)
		rc = load_at(m, p.data, kind, id, out);
	es_buf_free(&p);
	return rc;
}

int es_record_check_done(const struct es_manifest *m, const char *id, const cJSON *rec, struct es_buf *output,
			 struct es_done_fields *f, struct stat *result_st)
{
	const char *rel = es_json_get_str(rec, "output_path");
	f->sha256 = es_json_get_str(rec, "sha256");
	f->hostname = es_json_get_str(rec, "hostname");
	if (es_json_get_i64(rec, "size_bytes", &f->size_bytes))
		f->size_bytes = -1;
	if (!rel || !*rel || !f->sha256 || es_json_get_i64(rec, "rows", &f->rows))
		return es_error(ES_EINVAL, "Done record for %s lacks output_path, rows or sha256: %s/" ES_JOB_DONE "/%s.json",
				id, m->job_dir, id);
	/* m->job_dir is resolved (es_manifest_load): only the record's own components are looked at. */
	int rc = es_fs_resolve_under(m->job_dir, rel, output, result_st);
	if (rc)
		return rc;
	size_t lj = strlen(m->job_dir);
	if (strncmp(output->data, m->job_dir, lj) || output->data[lj] != '/')
		return es_error(ES_EINVAL, "Done record for %s points outside the job folder: %s", id, rel);
	return 0;
}
