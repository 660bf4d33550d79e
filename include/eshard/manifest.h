/*
 * manifest: the job folder's manifest.json (docs/job-folder.md#manifest, schema_version 2), read
 * side.
 *
 * es_manifest_load() applies the reference's reader checks (schema_version 2, a non-empty
 * shards list, execution.executor_type "ray" and a non-empty ray_address) and fills the
 * fields every command needs. Read-only. Fields added by eshard-mpi (policy.heartbeat_secs,
 * policy.lease_secs, processor, unsharded, bad_lines) are optional, so a reference job folder loads too.
 */
#ifndef ESHARD_MANIFEST_H
#define ESHARD_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

struct es_shard {
	char *id;
	int64_t index;
	char *path;          /* relative to the job folder, "shards/<id>.jsonl" */
	int64_t rows;
	int64_t size_bytes;
	char sha256[65];
};

/* How each shard is processed; chosen at prepare time so every worker runs the same. */
enum es_processor_kind { ES_PROC_DATA_JUICER = 0, ES_PROC_COMMAND = 1 };

struct es_processor {
	enum es_processor_kind kind;
	char *dj_process;    /* Data-Juicer: command (split on spaces) or NULL for "dj-process" */
	char *dj_root;       /* Data-Juicer: a checkout folder (tools/process_data.py) or NULL */
	char *python;        /* interpreter for --dj-root and the helpers; NULL: "python3" */
	char *command;       /* ES_PROC_COMMAND: the template with {input} {output} ... */
	/* Order-stable output (processor.keep_order; absent: 0): each attempt reads a copy of its
	 * shard with a hidden row number, and materialization restores input order (materialize.h). */
	int keep_order;
};

/* One input file as prepare recorded it (input_files of the manifest). */
struct es_manifest_input {
	char *path;          /* absolute, or NULL when the entry lacks it */
	int64_t size_bytes;  /* -1 when absent */
	int64_t mtime_ns;    /* -1 when absent */
	char sha256[65];     /* "" when absent */
};

struct es_policy {
	int64_t lock_timeout_secs;
	int64_t max_retries;
	int64_t poll_interval_secs;
	double heartbeat_secs;
	double lease_secs;
};

#define ES_DEFAULT_LOCK_TIMEOUT_SECS 126000
#define ES_DEFAULT_MAX_RETRIES 3
#define ES_DEFAULT_POLL_INTERVAL_SECS 20
#define ES_DEFAULT_HEARTBEAT_SECS 10.0
#define ES_DEFAULT_LEASE_SECS 120.0

struct es_manifest {
	char *job_dir;       /* resolved absolute */
	char *job_id;
	char *dataset_path;
	char *ray_address;
	char *recipe_executor_type;
	char *recipe_sha256;
	char *dj_commit;
	int64_t num_shards;
	int64_t total_rows;
	int64_t total_size_bytes;
	double created_at;             /* created_at in Unix seconds, -1 when absent or not a time */
	struct es_policy policy;
	struct es_processor processor;
	struct es_shard *shards;
	size_t n_shards;
	char *executor_type;           /* execution.executor_type ("ray") */
	struct es_manifest_input *inputs; /* input_files, in scan order */
	size_t n_inputs;
	int has_inputs;                /* input_files is a list (it may be empty) */
	int unsharded;                 /* the extra field "unsharded" is there (--allow-unsharded) */
	/* The extra field "bad_lines" (prepare --bad-lines skip): its count of the input lines
	 * left out, or -1 when the field is absent (the strict rule, or a reference job). */
	int64_t bad_lines;
};

int es_manifest_load(const char *job_dir, struct es_manifest *m);
/* The same; with ES_MANIFEST_ATTEMPTS_CHECKED in flags, without the look for a link among the
 * shards' folders (a listing of attempts/: at 100,000 shards of a resumed job, about a thousand
 * requests at a file server), for a caller that knows it was done moments before (run: rank
 * 0's prepare loaded the manifest before any rank works). Every write and read below the job
 * folder refuses a link on its own (fs.h es_fs_set_boundary); the listing only says so first. */
#define ES_MANIFEST_ATTEMPTS_CHECKED 1
int es_manifest_load_ex(const char *job_dir, int flags, struct es_manifest *m);
void es_manifest_free(struct es_manifest *m);
/* Index of a shard id in manifest order, or -1. */
long es_manifest_find(const struct es_manifest *m, const char *shard_id);
void es_processor_free(struct es_processor *p);

#endif
