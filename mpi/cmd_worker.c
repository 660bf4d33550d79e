#include "commands.h"

#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/cpus.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/progress.h"
#include "eshard/stop.h"
#include "eshard/worker.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
	stop_signal = sig;
}

void install_stop_handlers(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: a blocking call returns EINTR and the loop sees the flag. */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	es_set_stop_flag(&stop_signal);
}

volatile sig_atomic_t *stop_flag(void)
{
	return &stop_signal;
}

const char *self_exe(void)
{
	/* Kept for the life of the process: children are started from it at any time. */
	static struct es_buf path = ES_BUF_INIT;
	if (!path.len) {
		es_log_quiet_begin(); /* without /proc, the name is looked up in PATH */
		if (es_fs_readlink(AT_FDCWD, "/proc/self/exe", &path) || !path.len)
			es_buf_adds(&path, "eshard-mpi");
		es_log_quiet_end();
	}
	return path.data;
}

size_t worker_cli_options(struct es_worker_opts *o, struct es_opt *opts)
{
	struct es_opt t[] = {
		{ "max-shards", ES_OPT_POS_INT, &o->max_shards, NULL, NULL, "most claims (attempts) this process handles" },
		{ "lock-timeout-secs", ES_OPT_POS_INT, &o->lock_timeout_secs, NULL, NULL, "override the manifest: a lock older than this is stale" },
		{ "max-retries", ES_OPT_NONNEG_INT, &o->max_retries, NULL, NULL, "override the manifest's retry limit" },
		{ "poll-interval-secs", ES_OPT_POS_INT, &o->poll_interval_secs, NULL, NULL, "override the manifest's idle poll interval" },
		{ "heartbeat-secs", ES_OPT_POS_NUM, &o->heartbeat_secs, NULL, NULL, "override the lease refresh interval" },
		{ "lease-secs", ES_OPT_POS_NUM, &o->lease_secs, NULL, NULL, "override the lease: a lock unchanged this long is stale" },
		{ "attempt-timeout-secs", ES_OPT_POS_NUM, &o->attempt_timeout_secs, NULL, NULL, "kill an attempt that runs longer (counted as failed)" },
		{ "ray-address", ES_OPT_STR, &o->ray_address, NULL, "ADDR", "override the manifest's Ray address for this process" },
		{ "python", ES_OPT_STR, &o->python, NULL, "PATH", "override the manifest's Python (that imports Data-Juicer; its folder has Ray's 'ray') for this process" },
		{ "dj-process", ES_OPT_STR, &o->dj_process, NULL, "CMD", "override the manifest's Data-Juicer process command (or --dj-root) for this process" },
		{ "dj-root", ES_OPT_STR, &o->dj_root, NULL, "DIR", "override the manifest's Data-Juicer checkout (or --dj-process) for this process" },
		{ "allow-version-mismatch", ES_OPT_FLAG, &o->allow_version_mismatch, NULL, NULL, "only warn when Data-Juicer differs from the job's" },
		{ "run-id", ES_OPT_STR, &o->run_id, NULL, "ID", "submission id recorded in events and done records" },
		{ "ray-mode", ES_OPT_STR, &o->ray_mode_name, NULL, "MODE", "per-rank (default for Data-Juicer with the local Ray address: one node-local Ray head and Data-Juicer runner reused by every shard) or per-attempt (Ray starts inside every shard's run, as in the reference)" },
		{ "no-dj-runner", ES_OPT_FLAG, &o->ray_no_runner, NULL, NULL, "per-rank mode: run plain dj-process per shard instead of the persistent Data-Juicer runner" },
		{ "num-cpus", ES_OPT_POS_NUM, &o->ray_num_cpus, NULL, "N", "per-rank mode: the CPUs the worker's Ray head offers (default: every CPU of its node)" },
		{ "preempt-grace-secs", ES_OPT_POS_NUM, &o->preempt_grace_secs, NULL, NULL, "a processor killed by a stop signal from outside: wait this long (default 5) for the worker's own stop before counting a failure" },
		{ "no-backup", ES_OPT_FLAG, &o->no_backup, NULL, NULL, "never run a backup attempt of an overdue shard when idle (default: backups on)" },
	};
	memcpy(opts, t, sizeof(t));
	return sizeof(t) / sizeof(t[0]);
}

int worker_cli_finish(struct es_worker_opts *o, const char *cmd)
{
	if (!o->ray_mode_name)
		o->ray_per_rank = -1; /* per-rank for Data-Juicer on a local Ray (decided with the manifest) */
	else if (!strcmp(o->ray_mode_name, "per-attempt"))
		o->ray_per_rank = 0;
	else if (!strcmp(o->ray_mode_name, "per-rank"))
		o->ray_per_rank = 1;
	else
		return es_error(ES_EUSAGE, "eshard-mpi %s: --ray-mode must be per-attempt or per-rank, got '%s'", cmd, o->ray_mode_name);
	if (o->ray_num_cpus > INT_MAX)
		return es_error(ES_EUSAGE, "eshard-mpi %s: --num-cpus %g is out of range: at most %d (Ray takes a whole "
				"number of CPUs as an int)", cmd, o->ray_num_cpus, INT_MAX);
	if (o->ray_per_rank == 1 && o->ray_address && strcmp(o->ray_address, "local"))
		return es_error(ES_EUSAGE, "eshard-mpi %s: --ray-mode per-rank chooses the Ray address itself; drop --ray-address (or use --ray-mode per-attempt)", cmd);
	if (o->dj_process && o->dj_root)
		return es_error(ES_EUSAGE, "eshard-mpi %s: give at most one of --dj-process and --dj-root", cmd);
	return 0;
}

/* A worker, like a rank of run, gives its children every CPU of its node, not a binding a
 * launcher (srun, a wrapper's mpirun) gave the worker itself (cpus.h). */
static void take_worker_cpus(void)
{
	struct es_cpus c;
	if (es_cpus_take_share(0, 1, &c) != 0) {
		es_warning("this worker's processor (Data-Juicer and Ray, or a --process-cmd) keeps its CPU binding "
			   "(see the error above)");
		return;
	}
	if (es_cpus_was_narrower(&c)) {
		char bound[128], share[128];
		es_cpus_format(&c.bound, bound, sizeof(bound));
		es_cpus_format(&c.share, share, sizeof(share));
		es_warning("this worker was bound to CPU(s) %s, fewer than its node's %s; its processor uses all of them "
			   "(start it unbound, e.g. srun --cpu-bind=none, to avoid this warning)", bound, share);
	}
}

int cmd_worker(int argc, char **argv)
{
	struct es_worker_opts o;
	es_worker_opts_init(&o);
	struct es_opt opts[24];
	opts[0] = (struct es_opt){ "job-dir", ES_OPT_STR, &o.job_dir, NULL, "DIR", "the prepared job folder (required)" };
	size_t n = 1 + worker_cli_options(&o, opts + 1);
	int64_t progress_secs = 10;
	opts[n++] = (struct es_opt){ "progress-secs", ES_OPT_NONNEG_INT, &progress_secs, NULL, "N", "print a progress line of the whole job every N seconds (default 10; on a terminal one line redrawn once a second; 0: none)" };
	static const struct es_cmd_help help = {
		"worker",
		"Claim shards of a prepared job one at a time, run each through the job's processor and publish the result.",
		"The worker runs until every shard is done or failed, until --max-shards claims were handled,\n"
		"or until SIGTERM/SIGINT: then it stops its child, releases its lock at once (the attempt is\n"
		"recorded as preempted and does not count toward the retry limit; a lock it cannot release,\n"
		"the job folder being away, is left to expire with its lease, said in one line) and exits\n"
		"128+signal. A lease it cannot keep (its refresh keeps failing: a full disk, a read-only\n"
		"lock) ends its attempt before the lease runs out, not counted as a failure, and the worker\n"
		"with exit 2.\n"
		"Exit codes: 0 all shards done (or --max-shards reached without a failure of its own),\n"
		"2 the job finished with failed shards, one of its own attempts failed under --max-shards,\n"
		"or an error.",
	};
	int rc = es_args_parse(argc, argv, opts, n, &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (!o.job_dir) {
		es_error(ES_EUSAGE, "eshard-mpi worker: --job-dir is required");
		return 2;
	}
	if (worker_cli_finish(&o, "worker"))
		return 2;
	install_stop_handlers();
	take_worker_cpus();
	o.stop_flag = stop_flag();
	o.supervisor_exe = self_exe();
	struct es_worker_result res;
	es_log_set_clock(es_time_mono());
	struct es_progress *prog = NULL;
	if (es_progress_start(o.job_dir, (double)progress_secs, isatty(STDOUT_FILENO), &prog))
		es_warning("no progress lines for this worker (see the error above); 'eshard-mpi status --watch' shows them");
	rc = es_worker_run(&o, &res);
	es_progress_stop(prog);
	return rc ? 2 : res.exit_code;
}
