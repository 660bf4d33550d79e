/*
 * jobpath: every path inside a job folder, built in one place (docs/job-folder.md#layout).
 *
 * The names below are the on-disk contract that the reference implementation reads too, so no
 * other file types them out. Each builder resets out and writes <job_dir>/<name>, or the name
 * relative to the job folder when job_dir is NULL (what a lock, record or attempt.json stores:
 * "state/done/<id>.json"). A path of PATH_MAX bytes or more is refused with one error line
 * naming the job folder (ES_EINVAL), out left empty: a system call would refuse it later with
 * a less helpful error, and a path must never be cut short. Growing past memory is ES_ENOMEM.
 *
 * Pure string work: nothing here touches the file system.
 */
#ifndef ESHARD_JOBPATH_H
#define ESHARD_JOBPATH_H

#include <stdint.h>

#include "eshard/buf.h"

/* Files at the top of the job folder. */
#define ES_JOB_MANIFEST "manifest.json"
#define ES_JOB_RECIPE "recipe.yaml"
#define ES_JOB_MERGE_RECORD "merge.json"

/* Folders of the job folder. */
#define ES_JOB_SHARDS "shards"
#define ES_JOB_ATTEMPTS "attempts"
#define ES_JOB_STATE "state"
#define ES_JOB_LOCKS "state/locks"
#define ES_JOB_DONE "state/done"
#define ES_JOB_FAILED "state/failed"
#define ES_JOB_STALE_LOCKS "state/stale_locks"
#define ES_JOB_HISTORY "state/history"
#define ES_JOB_HISTORY_FAILED "state/history/failed"
#define ES_JOB_HISTORY_ATTEMPTS "state/history/attempts"
#define ES_JOB_HISTORY_CLAIMS "state/history/claims"
#define ES_JOB_EVENTS "state/events"
#define ES_JOB_BACKUPS "state/backups"
#define ES_JOB_LOCK_ENDS "state/lock_ends"
/* The hint of idle workers (docs/job-folder.md#the-hint): a file of state/, not a folder. */
#define ES_JOB_HINT "state/hint.json"

/* Files of an attempt folder (docs/job-folder.md#attempt-records). */
#define ES_ATTEMPT_JSON "attempt.json"
#define ES_ATTEMPT_LOG "process.log"
#define ES_ATTEMPT_EXPORT "ray-output.jsonl"
#define ES_ATTEMPT_OUTPUT "processed.jsonl"
#define ES_ATTEMPT_INPUT "input.jsonl"

/* The folders below the job folder, each after its parent, NULL-terminated: what prepare
 * makes and what a loaded manifest's folder must hold. */
extern const char *const es_jobpath_folders[];

/* <job_dir>/<name> for a name of the layout above (a folder, a top-level file). */
int es_jobpath_join(struct es_buf *out, const char *job_dir, const char *name);
/* shards/<id>.jsonl */
int es_jobpath_shard(struct es_buf *out, const char *job_dir, const char *id);
/* state/locks/<id>.lock: the claim, then the terminal fence */
int es_jobpath_lock(struct es_buf *out, const char *job_dir, const char *id);
/* state/<kind>/<id>.json, kind "done" or "failed" */
int es_jobpath_record(struct es_buf *out, const char *job_dir, const char *kind, const char *id);
/* state/stale_locks/<id>.<secs>.<hex>.lock */
int es_jobpath_stale_lock(struct es_buf *out, const char *job_dir, const char *id, long long secs,
			  const char *hex);
/* state/lock_ends/<id>.<key>: the lock of that key (its token) is being moved or removed */
int es_jobpath_lock_end(struct es_buf *out, const char *job_dir, const char *id, const char *key);
/* state/backups/<id>.<primary token>.json */
int es_jobpath_backup(struct es_buf *out, const char *job_dir, const char *id, const char *primary_token);
/* state/events/<host>.<pid>.<first 8 characters of token>.jsonl */
int es_jobpath_events(struct es_buf *out, const char *job_dir, const char *host, long pid, const char *token);
/* attempts/<id> */
int es_jobpath_attempts(struct es_buf *out, const char *job_dir, const char *id);
/* attempts/<id>/<NNNN>-<token> (at least four digits) */
int es_jobpath_attempt(struct es_buf *out, const char *job_dir, const char *id, int number, const char *token);
/* <job_dir>/<attempt_rel>/<name>: a file of an attempt folder named relative to the job. */
int es_jobpath_in_attempt(struct es_buf *out, const char *job_dir, const char *attempt_rel, const char *name);
/* Where retry moves a requeued shard's state (docs/job-folder.md#retry-and-history), with the
 * suffix <secs>.<hex>: what "attempts" gives state/history/attempts/<id>.<suffix>, "failed"
 * state/history/failed/<id>.<suffix>.json, "claims" state/history/claims/<id>.<suffix>.lock. */
int es_jobpath_history(struct es_buf *out, const char *job_dir, const char *what, const char *id,
		       const char *suffix);

#endif
