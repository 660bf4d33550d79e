/*
 * jobcli: what the two whole-job commands share: run (one MPI program) and dlc (one instance
 * per worker, no launcher). Their options beyond prepare's, the worker options they make of
 * them, and the end of a job on the instance that finalizes it (summary, report).
 */
#ifndef ESHARD_JOBCLI_H
#define ESHARD_JOBCLI_H

#include "commands.h"
#include "eshard/jobview.h"

/* What the command line asked for. */
struct job_cli {
	struct prepare_cli pc;
	const char *output, *run_id, *ray_mode;
	int64_t nodes;
	int require_all, retry_failed, allow_mismatch, no_runner, no_backup, merge_at_end, verbose;
	int64_t progress_secs;
	int seen_lease, seen_hb, seen_lt, seen_mr;
	double attempt_timeout, preempt_grace, num_cpus;
};

#define JOB_CLI_MAX_OPTS (ES_PREPARE_MAX_OPTS + 24)
/* prepare's options and the whole job's, for command cmd ("run", "dlc"); returns how many.
 * nodes_help and run_id_help say what --nodes and --run-id mean for that command. */
size_t job_cli_options(struct job_cli *c, struct es_opt *opts, const char *nodes_help, const char *run_id_help);
/* The checks the table cannot make (after es_args_parse); 0 or 2. */
int job_cli_finish(struct job_cli *c, const char *cmd);
/* The first non-empty submission id of the environment among PAI_JOB_ID, DLC_JOB_ID, JOB_ID
 * (and SLURM_JOB_ID with slurm), or NULL. */
const char *job_env_run_id(int slurm);
/* The worker options of the job: cap (0: none) claims counted in done shards, waiting for the
 * job's end unless the cap ends it; the caller adds its own (stop callbacks, quiet_end, the
 * rank's slot on its host). */
void job_worker_options(const struct job_cli *c, const char *run_id, int64_t cap, const char *cmd,
			struct es_worker_opts *wo);
/* The merged output: --output, or <job-dir>/merged.jsonl. */
void job_output_path(const struct job_cli *c, struct es_buf *out);
/* The view of the job that the process holding the progress line ends it with (jobview.h):
 * the progress thread's, handed over (es_progress_stop_view), else read when first needed.
 * Verify, the summary and the report each use it, so that the job's end reads what changed
 * since, not every shard three times (issue 29). */
struct job_view {
	struct es_jobview v;
	int have;
};
/* The view, its manifest read if it has none yet: &jv->v, or NULL when that cannot be read (not
 * reported: the caller reads the job itself then). */
struct es_jobview *job_view_get(struct job_view *jv, const char *job_dir);
void job_view_free(struct job_view *jv);
/* The job's HTML report beside its manifest (a failure costs a warning), from jv. */
void job_write_report(const char *job_dir, struct job_view *jv);
/* The summary of the job, from jv; for an incomplete job what to do next, into advice (may be
 * NULL). */
void job_print_summary(const char *job_dir, struct es_buf *advice, struct job_view *jv);
/* Strict mode's claim cap ceil(shards / nodes) into *cap: 0, or 2 when that cannot give every
 * node a shard (with the error when say). */
int job_strict_cap(int64_t shards, int64_t nodes, int64_t *cap, int say);

#endif
