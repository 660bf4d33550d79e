#include "eshard/jobpath.h"
#include "eshard/log.h"

#include <limits.h>
#include <stdarg.h>
#include <string.h>

const char *const es_jobpath_folders[] = {
	ES_JOB_SHARDS, ES_JOB_ATTEMPTS, ES_JOB_STATE, ES_JOB_LOCKS, ES_JOB_DONE, ES_JOB_FAILED,
	ES_JOB_STALE_LOCKS, ES_JOB_HISTORY, ES_JOB_HISTORY_FAILED, ES_JOB_HISTORY_ATTEMPTS,
	ES_JOB_HISTORY_CLAIMS, ES_JOB_EVENTS, ES_JOB_BACKUPS, ES_JOB_LOCK_ENDS, NULL
};

/* Reset out to "<job_dir>/" (nothing for a relative name) and append the formatted name; a
 * result no system call would take (PATH_MAX bytes or more) is refused, never cut. */
static int build(struct es_buf *out, const char *job_dir, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int build(struct es_buf *out, const char *job_dir, const char *fmt, ...)
{
	es_buf_reset(out);
	int rc = 0;
	if (job_dir) {
		size_t n = strlen(job_dir);
		rc = es_buf_add(out, job_dir, n);
		if (!rc && (n == 0 || job_dir[n - 1] != '/'))
			rc = es_buf_addc(out, '/');
	}
	va_list ap;
	va_start(ap, fmt);
	if (!rc)
		rc = es_buf_vprintf(out, fmt, ap);
	va_end(ap);
	if (!rc && out->len >= PATH_MAX)
		rc = es_error(ES_EINVAL, "path too long (%zu bytes, at most %d) in job folder '%s'", out->len,
			      PATH_MAX - 1, job_dir ? job_dir : ".");
	if (rc)
		es_buf_reset(out);
	return rc;
}

int es_jobpath_join(struct es_buf *out, const char *job_dir, const char *name)
{
	return build(out, job_dir, "%s", name);
}

int es_jobpath_shard(struct es_buf *out, const char *job_dir, const char *id)
{
	return build(out, job_dir, ES_JOB_SHARDS "/%s.jsonl", id);
}

int es_jobpath_lock(struct es_buf *out, const char *job_dir, const char *id)
{
	return build(out, job_dir, ES_JOB_LOCKS "/%s.lock", id);
}

int es_jobpath_record(struct es_buf *out, const char *job_dir, const char *kind, const char *id)
{
	return build(out, job_dir, ES_JOB_STATE "/%s/%s.json", kind, id);
}

int es_jobpath_stale_lock(struct es_buf *out, const char *job_dir, const char *id, long long secs,
			  const char *hex)
{
	return build(out, job_dir, ES_JOB_STALE_LOCKS "/%s.%lld.%s.lock", id, secs, hex);
}

int es_jobpath_lock_end(struct es_buf *out, const char *job_dir, const char *id, const char *key)
{
	return build(out, job_dir, ES_JOB_LOCK_ENDS "/%s.%s", id, key);
}

int es_jobpath_backup(struct es_buf *out, const char *job_dir, const char *id, const char *primary_token)
{
	return build(out, job_dir, ES_JOB_BACKUPS "/%s.%s.json", id, primary_token);
}

int es_jobpath_events(struct es_buf *out, const char *job_dir, const char *host, long pid, const char *token)
{
	return build(out, job_dir, ES_JOB_EVENTS "/%s.%ld.%.8s.jsonl", host, pid, token);
}

int es_jobpath_attempts(struct es_buf *out, const char *job_dir, const char *id)
{
	return build(out, job_dir, ES_JOB_ATTEMPTS "/%s", id);
}

int es_jobpath_attempt(struct es_buf *out, const char *job_dir, const char *id, int number, const char *token)
{
	return build(out, job_dir, ES_JOB_ATTEMPTS "/%s/%04d-%s", id, number, token);
}

int es_jobpath_in_attempt(struct es_buf *out, const char *job_dir, const char *attempt_rel, const char *name)
{
	return build(out, job_dir, "%s/%s", attempt_rel, name);
}

int es_jobpath_history(struct es_buf *out, const char *job_dir, const char *what, const char *id,
		       const char *suffix)
{
	if (!strcmp(what, "attempts"))
		return build(out, job_dir, ES_JOB_HISTORY_ATTEMPTS "/%s.%s", id, suffix);
	if (!strcmp(what, "failed"))
		return build(out, job_dir, ES_JOB_HISTORY_FAILED "/%s.%s.json", id, suffix);
	if (!strcmp(what, "claims"))
		return build(out, job_dir, ES_JOB_HISTORY_CLAIMS "/%s.%s.lock", id, suffix);
	es_buf_reset(out);
	return es_error(ES_EINTERNAL, "no history folder for '%s'", what);
}
