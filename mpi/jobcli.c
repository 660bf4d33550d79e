/*
 * jobcli: the options and the ends shared by run and dlc (jobcli.h).
 */
#include "jobcli.h"

#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/jobview.h"
#include "eshard/merge.h"
#include "eshard/log.h"
#include "eshard/progress.h"
#include "eshard/report.h"
#include "eshard/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t job_cli_options(struct job_cli *c, struct es_opt *opts, const char *nodes_help, const char *run_id_help)
{
	memset(c, 0, sizeof(*c));
	c->progress_secs = 10;
	prepare_cli_init(&c->pc);
	size_t n = prepare_cli_options(&c->pc, opts);
	/* Policy options given explicitly also override a job prepared earlier (a resubmission),
	 * and so do the node-local ones (job_worker_options). */
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(opts[i].name, "lease-secs")) opts[i].seen = &c->seen_lease;
		if (!strcmp(opts[i].name, "heartbeat-secs")) opts[i].seen = &c->seen_hb;
		if (!strcmp(opts[i].name, "lock-timeout-secs")) opts[i].seen = &c->seen_lt;
		if (!strcmp(opts[i].name, "max-retries")) opts[i].seen = &c->seen_mr;
		if (!strcmp(opts[i].name, "python")) opts[i].help = "Python that can import Data-Juicer, with Ray's 'ray' beside it (default python3); overrides a prepared job's for this run";
		if (!strcmp(opts[i].name, "dj-process")) opts[i].help = "Data-Juicer process command (default dj-process on PATH); overrides a prepared job's for this run";
		if (!strcmp(opts[i].name, "dj-root")) opts[i].help = "run tools/process_data.py of this Data-Juicer checkout; overrides a prepared job's for this run";
		if (!strcmp(opts[i].name, "ray-address")) opts[i].help = "Ray address given to every shard (default local); overrides a prepared job's for this run";
	}
	opts[n++] = (struct es_opt){ "output", ES_OPT_STR, &c->output, NULL, "PATH", "merged output (default <job-dir>/merged.jsonl, the one path in the job folder allowed)" };
	opts[n++] = (struct es_opt){ "nodes", ES_OPT_POS_INT, &c->nodes, NULL, NULL, nodes_help };
	opts[n++] = (struct es_opt){ "require-all-nodes", ES_OPT_FLAG, &c->require_all, NULL, NULL, "strict mode: every node must complete shards; claim cap ceil(shards/nodes)" };
	opts[n++] = (struct es_opt){ "run-id", ES_OPT_STR, &c->run_id, NULL, "ID", run_id_help };
	opts[n++] = (struct es_opt){ "no-backup", ES_OPT_FLAG, &c->no_backup, NULL, NULL, "never run a backup attempt of an overdue shard on an idle rank (default: backups on)" };
	opts[n++] = (struct es_opt){ "merge-at-end", ES_OPT_FLAG, &c->merge_at_end, NULL, NULL, "merge only after the last shard (default: the finalizing rank appends each shard to the output's temporary as soon as it and every earlier shard are done)" };
	opts[n++] = (struct es_opt){ "retry-failed", ES_OPT_FLAG, &c->retry_failed, NULL, NULL, "requeue failed shards before work starts" };
	opts[n++] = (struct es_opt){ "attempt-timeout-secs", ES_OPT_POS_NUM, &c->attempt_timeout, NULL, NULL, "kill an attempt that runs longer (counted as failed)" };
	opts[n++] = (struct es_opt){ "preempt-grace-secs", ES_OPT_POS_NUM, &c->preempt_grace, NULL, NULL, "a processor killed by a stop signal from outside: wait this long (default 5) for the rank's own stop before counting a failure" };
	opts[n++] = (struct es_opt){ "ray-mode", ES_OPT_STR, &c->ray_mode, NULL, "MODE", "per-rank (default for Data-Juicer with the local Ray address: one node-local Ray head and Data-Juicer runner per rank, reused by every shard) or per-attempt (Ray starts inside every shard's run, as in the reference)" };
	opts[n++] = (struct es_opt){ "no-dj-runner", ES_OPT_FLAG, &c->no_runner, NULL, NULL, "per-rank mode: plain dj-process per shard instead of the persistent Data-Juicer runner" };
	opts[n++] = (struct es_opt){ "num-cpus", ES_OPT_POS_NUM, &c->num_cpus, NULL, "N", "per-rank mode: the CPUs each rank's Ray head offers (default: the rank's share of its node's CPUs)" };
	opts[n++] = (struct es_opt){ "allow-version-mismatch", ES_OPT_FLAG, &c->allow_mismatch, NULL, NULL, "only warn when Data-Juicer differs from the job's" };
	opts[n++] = (struct es_opt){ "progress-secs", ES_OPT_NONNEG_INT, &c->progress_secs, NULL, "N", "the finalizing rank prints a progress line every N seconds (default 10; on a terminal one line redrawn once a second; 0: none)" };
	opts[n++] = (struct es_opt){ "verbose", ES_OPT_FLAG, &c->verbose, NULL, NULL, "also print a line per claim (Claimed <shard> (attempt N))" };
	return n;
}

int job_cli_finish(struct job_cli *c, const char *cmd)
{
	if (prepare_cli_finish(&c->pc, cmd) ||
	    es_opt_at_most(cmd, "nodes", c->nodes, ES_MAX_NODES, "MPI counts ranks in an int"))
		return 2;
	/* An output the job needs is refused now, not after the whole job ran. */
	if (c->output && es_fs_check_output(c->output, c->pc.o.job_dir, ES_MERGE_OUTPUT_NAME, NULL))
		return 2;
	struct es_worker_opts check;
	es_worker_opts_init(&check);
	check.ray_mode_name = c->ray_mode;
	check.ray_address = c->pc.o.ray_address;
	check.ray_num_cpus = c->num_cpus;
	return worker_cli_finish(&check, cmd) ? 2 : 0;
}

const char *job_env_run_id(int slurm)
{
	static const char *const names[] = { "PAI_JOB_ID", "DLC_JOB_ID", "JOB_ID", "SLURM_JOB_ID" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) - !slurm; i++) {
		const char *v = getenv(names[i]);
		if (v && *v)
			return v;
	}
	return NULL;
}

void job_worker_options(const struct job_cli *c, const char *run_id, int64_t cap, const char *cmd,
			struct es_worker_opts *wo)
{
	int64_t shards = c->pc.o.num_shards;
	es_worker_opts_init(wo);
	wo->job_dir = c->pc.o.job_dir;
	wo->max_shards = cap;
	wo->cap_counts_done = 1;
	wo->wait_for_terminal = 1;
	wo->quiet_idle = 1;
	wo->quiet_claims = !c->verbose;
	/* Idle ranks poll every second for a quick end; a huge job polls less often, since each
	 * poll opens every shard's markers on the shared file system. */
	wo->poll_interval_override = shards / 2000.0 > 1.0 ? (shards / 2000.0 < 20.0 ? shards / 2000.0 : 20.0) : 1.0;
	wo->tail_poll_secs = 0.25;
	wo->run_id = run_id;
	wo->stop_flag = stop_flag();
	wo->supervisor_exe = self_exe();
	wo->attempt_timeout_secs = c->attempt_timeout;
	wo->preempt_grace_secs = c->preempt_grace;
	wo->no_backup = c->no_backup;
	wo->backup_keep_hosts = c->require_all;
	wo->allow_version_mismatch = c->allow_mismatch;
	wo->ray_mode_name = c->ray_mode;
	wo->ray_no_runner = c->no_runner;
	/* Where things are on this node, given on the command line, override a prepared job's
	 * (a resubmission that corrects them); the manifest keeps its own. */
	wo->ray_address = c->pc.o.ray_address;
	wo->python = c->pc.python;
	wo->dj_process = c->pc.dj_process;
	wo->dj_root = c->pc.dj_root;
	wo->ray_ranks_on_host = 1;
	wo->ray_num_cpus = c->num_cpus;
	worker_cli_finish(wo, cmd); /* checked by job_cli_finish */
	if (c->seen_lease) wo->lease_secs = c->pc.o.policy.lease_secs;
	if (c->seen_hb) wo->heartbeat_secs = c->pc.o.policy.heartbeat_secs;
	if (c->seen_lt) wo->lock_timeout_secs = c->pc.o.policy.lock_timeout_secs;
	if (c->seen_mr) wo->max_retries = c->pc.o.policy.max_retries;
}

void job_output_path(const struct job_cli *c, struct es_buf *out)
{
	if (c->output)
		es_buf_adds(out, c->output);
	else
		es_buf_printf(out, "%s/%s", c->pc.o.job_dir, ES_MERGE_OUTPUT_NAME);
}
struct es_jobview *job_view_get(struct job_view *jv, const char *job_dir)
{
	if (!jv->have) {
		es_log_quiet_begin(); /* its caller reads the job itself then, which reports */
		int rc = es_jobview_init(job_dir, 0, &jv->v);
		es_log_quiet_end();
		jv->have = 1;
		if (rc) {
			job_view_free(jv);
			return NULL;
		}
	}
	jv->v.list_whole = 1; /* the job's end: every change, none deferred (jobview.h) */
	return &jv->v;
}

void job_view_free(struct job_view *jv)
{
	if (jv->have)
		es_jobview_free(&jv->v);
	jv->have = 0;
}

/* The job's HTML report beside its manifest, whatever the outcome (it shows the failures too).
 * A report that cannot be written costs a warning, never the job's exit code. */
void job_write_report(const char *job_dir, struct job_view *jv)
{
	struct es_buf path = ES_BUF_INIT;
	struct es_report_info info;
	struct es_report_opts o = { 0 };
	es_buf_printf(&path, "%s/%s", job_dir, ES_REPORT_NAME);
	o.view = job_view_get(jv, job_dir);
	if (!es_report_write(job_dir, path.data, &o, &info))
		printf("Report: %s (%zu attempts on %zu host(s))\n", path.data, info.attempts, info.hosts);
	else
		es_warning("no report was written to %s (see the error above); 'eshard-mpi report --job-dir %s --output FILE' retries it",
			path.data, job_dir);
	fflush(stdout);
	es_buf_free(&path);
}

/* Rank 0 at the end: the summary (shards, rows, wall time, hosts, slowest shards, why shards
 * failed or were retried), and for an incomplete job what to do next, into advice. */
void job_print_summary(const char *job_dir, struct es_buf *advice, struct job_view *jv)
{
	struct es_buf out = ES_BUF_INIT;
	es_log_quiet_begin();
	struct es_jobview *v = job_view_get(jv, job_dir);
	int rc = v ? es_jobview_refresh(v, 0) : -1;
	if (!rc)
		rc = es_progress_summary(v, &out);
	es_log_quiet_end();
	if (!rc) {
		es_say("%.*s", (int)(out.len && out.data[out.len - 1] == '\n' ? out.len - 1 : out.len), out.data);
		if (advice)
			es_status_advice(&v->st.counts, job_dir, advice);
	} else {
		es_warning("no summary of the job: %s", es_last_error());
		job_view_free(jv); /* a view seen mid-change: the report reads the job anew */
	}
	es_buf_free(&out);
}

int job_strict_cap(int64_t shards, int64_t nodes, int64_t *cap, int say)
{
	/* ceil(shards / nodes), and "the first nodes - 1 nodes take every shard", in forms that
	 * cannot overflow for any --num-shards. */
	*cap = shards / nodes + (shards % nodes != 0);
	if (shards >= nodes && nodes - 1 < shards / *cap + (shards % *cap != 0))
		return 0;
	if (say)
		es_error(ES_EUSAGE, "strict mode cannot give every one of %lld nodes a shard with %lld shards (cap %lld per node); "
			 "use more shards or elastic mode", (long long)nodes, (long long)shards, (long long)*cap);
	return 2;
}
