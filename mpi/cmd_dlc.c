/*
 * eshard-mpi dlc: the worker-broadcast job, where the platform runs the same command on every
 * worker and no MPI launcher connects them (README "PAI-DLC worker-broadcast jobs"). Each
 * instance is a world of one; the instances of one submission agree through the coordination files of
 * coord.h: one prepares while the others wait for its result, all claim shards, the first
 * failure aborts them all, one verifies and merges, and every instance exits with the same
 * code (the prepare result, the abort record or the finalize result).
 *
 * The finalize election happens, as the reference's, once an instance's work has ended well:
 * an instance that dies or stops while it works holds no election the others wait on. The
 * prepare coordinator merges while the shards are processed (the only instance that does, so
 * one merge reads the outputs at a time); it keeps that merge if it wins the finalize election
 * and drops it if it loses. That is simpler than handing the merge over, and it costs a wasted
 * partial merge only when another instance finishes first.
 */
#include "commands.h"
#include "jobcli.h"

#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/coord.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/merge.h"
#include "eshard/number.h"
#include "eshard/progress.h"
#include "eshard/retry.h"
#include "eshard/stop.h"
#include "eshard/verify.h"
#include "eshard/worker.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dlc {
	struct job_cli cli;
	double wait_timeout, poll;
	char rid[256];
	struct es_coord co;
	int64_t cap;                 /* strict mode's claims per instance; 0: none */
	int preparer;                /* this instance prepared the job (and merges while working) */
	double abort_checked;        /* es_time_mono() of the last look at abort.json */
	int peer_aborted;            /* the worker stopped because another instance aborted */
	struct es_merge_follow *follow;
	struct job_view view;        /* the preparer's progress view, for the job's end */
};

static int parse_cli(int argc, char **argv, struct dlc *d)
{
	struct job_cli *c = &d->cli;
	struct es_opt opts[JOB_CLI_MAX_OPTS + 2];
	size_t n = job_cli_options(c, opts, "workers of the job: logged, and required by --require-all-nodes",
				   "submission id shared by every worker (default PAI_JOB_ID, DLC_JOB_ID, JOB_ID)");
	d->wait_timeout = 126000;
	d->poll = 2;
	/* The reference's dlc polls its coordination files every --poll-interval-secs and leaves
	 * the job's own poll at its default: so here it is the coordination's, a float. */
	for (size_t i = 0; i < n; i++)
		if (!strcmp(opts[i].name, "poll-interval-secs"))
			opts[i] = (struct es_opt){ "poll-interval-secs", ES_OPT_POS_NUM, &d->poll, NULL, NULL,
						   "how often an instance looks at the coordination files while it waits (default 2)" };
	opts[n++] = (struct es_opt){ "wait-timeout-secs", ES_OPT_POS_NUM, &d->wait_timeout, NULL, NULL,
				     "the longest wait for another instance: the prepare result, the end of every shard (strict mode), the finalize result (default 126000)" };
	static const struct es_cmd_help help = {
		"dlc",
		"Run the whole job as one instance of a worker-broadcast job: the same command on every worker, without mpirun.",
		"For a job type that runs the start command on every worker (a PAI-DLC PyTorchJob) or any\n"
		"set of machines that share the job folder's file system. The instances of one submission\n"
		"(--run-id, or PAI_JOB_ID, DLC_JOB_ID, JOB_ID) meet in .<job-name>.dlc-coordination/ beside\n"
		"the job folder: one prepares (the others wait for it), all claim and process shards, the\n"
		"first failure stops them all, one verifies and merges. Every instance exits with the same\n"
		"code: 0 PASS; 2 bad input, failed shards, failed verification or a wait past\n"
		"--wait-timeout-secs; 128+signal when stopped. A new submission id starts afresh on the\n"
		"same job folder (it resumes the job). Under an MPI launcher use 'eshard-mpi run'.",
	};
	int rc = es_args_parse(argc, argv, opts, n, &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	return job_cli_finish(c, "dlc") ? 2 : -1;
}

/* More than one process in an MPI launcher's world: those are run's ranks, not workers. */
static int under_launcher(void)
{
	static const char *const sizes[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE" };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int64_t v;
		const char *s = getenv(sizes[i]);
		if (s && !es_parse_i64(s, &v) && v > 1)
			return 1;
	}
	const char *rank = getenv("PMIX_RANK");
	return rank && strcmp(rank, "0") != 0;
}

/* The submission id: --run-id (stripped) or the platform's; 0, or 2 when there is none. */
static int choose_run_id(struct dlc *d)
{
	const char *s = d->cli.run_id ? d->cli.run_id : "";
	while (isspace((unsigned char)*s))
		s++;
	size_t len = strlen(s);
	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	if (!len && (s = job_env_run_id(0)) != NULL)
		len = strlen(s);
	if (!len) {
		es_error(ES_EUSAGE, "eshard-mpi dlc: no submission id: give --run-id (the same on every worker, new for each "
			 "submission) or set PAI_JOB_ID, DLC_JOB_ID or JOB_ID");
		return 2;
	}
	if (len >= sizeof(d->rid)) {
		es_error(ES_EUSAGE, "eshard-mpi dlc: --run-id is longer than %zu bytes", sizeof(d->rid) - 1);
		return 2;
	}
	snprintf(d->rid, sizeof(d->rid), "%.*s", (int)len, s);
	return 0;
}

/* The reference's checks of strict mode before anything starts; 0 or 2. */
static int check_strict(struct dlc *d)
{
	if (!d->cli.require_all)
		return 0;
	if (!d->cli.nodes) {
		es_error(ES_EUSAGE, "eshard-mpi dlc: strict mode (--require-all-nodes) needs --nodes N, the number of workers");
		return 2;
	}
	return d->cli.pc.o.num_shards ? job_strict_cap(d->cli.pc.o.num_shards, d->cli.nodes, &d->cap, 1) : 0;
}

static void say_start(const struct dlc *d)
{
	char nodes[32] = "not-enforced", shards[32] = "auto", cap[32] = "unlimited";
	if (d->cli.nodes)
		snprintf(nodes, sizeof(nodes), "%lld", (long long)d->cli.nodes);
	if (d->cli.pc.o.num_shards)
		snprintf(shards, sizeof(shards), "%lld", (long long)d->cli.pc.o.num_shards);
	if (d->cli.require_all)
		snprintf(cap, sizeof(cap), d->cap ? "%lld" : "ceil(shards/nodes)", (long long)d->cap);
	es_say("DLC instance hostname=%s starting; nodes=%s, shards=%s, require_all_nodes=%s, max_shards_per_worker=%s, "
	       "coordination_generation=%s.", es_hostname(), nodes, shards, d->cli.require_all ? "True" : "False", cap,
	       d->co.run_key);
}

/* An election that failed after its lock was created (its line not written) must still end
 * the phase for everyone: publish the phase's result 2 with the error, as the reference does
 * when its coordinator raises. */
static int election_failed(struct dlc *d, const char *phase)
{
	es_coord_publish_result(&d->co, phase, 2, es_last_error());
	return 2;
}

/* Strict mode's cap against the prepared job (its automatic shard count is known only now):
 * 0, or 2 when strict mode cannot give every node a shard. */
static int strict_cap_of_job(struct dlc *d)
{
	struct es_manifest m;
	if (es_manifest_load(d->cli.pc.o.job_dir, &m))
		return 2;
	d->cli.pc.o.num_shards = (int64_t)m.n_shards;
	es_manifest_free(&m);
	return d->cli.require_all ? job_strict_cap(d->cli.pc.o.num_shards, d->cli.nodes, &d->cap, 1) : 0;
}

/* The prepare coordinator: prepare (an unchanged job is a no-op, so a new submission resumes),
 * check strict mode's cap against it, and publish the result: a cap that fails must fail every
 * instance, a reference instance's too, which trusts the result. */
static int coordinate_prepare(struct dlc *d)
{
	struct es_prepare_opts *o = &d->cli.pc.o;
	struct es_prepare_result pres;
	es_say("hostname=%s elected as DLC prepare coordinator.", es_hostname());
	es_crash_point("dlc-prepare-elected");
	o->auto_ranks = d->cli.nodes ? d->cli.nodes : 1;
	int prc = es_prepare_run(o, &pres);
	if (!prc && d->cli.retry_failed)
		prc = es_retry_run(pres.job_dir, 1, NULL, 0, 0);
	free(pres.job_dir);
	int code = es_exit_code(prc);
	if (!code)
		code = strict_cap_of_job(d);
	d->preparer = 1;
	return es_coord_publish_result(&d->co, "prepare", code, NULL) ? 2 : code;
}

/* Phase 1: one instance prepares, the others wait for its result; the job's facts for all. */
static int prepare_phase(struct dlc *d)
{
	const char *job_dir = d->cli.pc.o.job_dir;
	struct es_buf manifest = ES_BUF_INIT;
	int code = 0, rc = es_coord_result(&d->co, "prepare-result.json", &code);
	if (rc == 0 && (rc = es_path_join(&manifest, job_dir, ES_JOB_MANIFEST)) == 0) {
		int before = es_fs_exists_fresh(manifest.data) == 1;
		rc = es_coord_elect(&d->co, "prepare");
		if (rc == 0)
			code = coordinate_prepare(d);
		else if (rc == 1)
			rc = es_coord_wait_prepare(&d->co, job_dir, before, &code);
		else
			code = election_failed(d, "prepare");
	}
	es_buf_free(&manifest);
	if (rc < 0)
		return 2;
	if (code)
		return code;
	/* The shard count (an automatic one was made by the coordinator) and strict mode's cap. */
	return d->preparer ? 0 : strict_cap_of_job(d);
}

/* The worker's stop callback: another instance aborted the submission. The worker asks every
 * 0.1 s; abort.json is looked at once per --poll-interval-secs. */
static int peer_aborted(void *arg)
{
	struct dlc *d = arg;
	double now = es_time_mono();
	if (!d->peer_aborted && now - d->abort_checked >= d->poll) {
		d->abort_checked = now;
		d->peer_aborted = es_coord_aborted(&d->co);
	}
	return d->peer_aborted;
}

static int run_worker(struct dlc *d, struct es_worker_result *res)
{
	struct es_worker_opts wo;
	job_worker_options(&d->cli, d->rid, d->cap, "dlc", &wo);
	/* Strict mode returns at the cap, and then waits for the others' shards at most
	 * --wait-timeout-secs (es_coord_wait_terminal). */
	wo.wait_for_terminal = !d->cap;
	wo.quiet_end = !d->preparer;
	wo.should_stop = peer_aborted;
	wo.should_stop_arg = d;
	if (d->cap)
		es_say("Starting DLC worker on hostname=%s; this invocation will handle at most %lld shard claim(s).",
		       es_hostname(), (long long)d->cap);
	else
		es_say("Starting DLC worker on hostname=%s; this invocation will handle an unlimited number of shard claims.",
		       es_hostname());
	struct es_progress *prog = NULL;
	if (d->preparer && d->cli.progress_secs &&
	    es_progress_start(wo.job_dir, (double)d->cli.progress_secs, isatty(STDOUT_FILENO), &prog))
		es_warning("no progress lines for this run (see the error above); 'eshard-mpi status --watch' shows them");
	int wrc = es_worker_run(&wo, res);
	d->view.have = es_progress_stop_view(prog, &d->view.v);
	return wrc ? 2 : res->exit_code;
}

/* Phase 2: work until the job is terminal; the first failing instance aborts the submission.
 * Returns the submission's code so far (0: go on to finalize). */
static int work_phase(struct dlc *d)
{
	struct es_worker_result res;
	char reason[400];
	int code = 0, wcode = run_worker(d, &res);
	if (d->peer_aborted) {
		/* The worker took the abort for a stop signal; this process got none. */
		*stop_flag() = 0;
		return es_coord_result(&d->co, "abort.json", &code) == 1 ? code : 2;
	}
	if (wcode) {
		snprintf(reason, sizeof(reason), "worker on hostname=%s exited with code %d", es_hostname(), wcode);
		return es_coord_abort(&d->co, wcode, reason, &code) ? 2 : code;
	}
	if (d->cap && es_coord_wait_terminal(&d->co, d->cli.pc.o.job_dir, &code))
		return 2;
	return code;
}

/* The prepare coordinator merges while the shards are processed (merge.h), for the case that
 * it wins the finalize election. */
static void start_follow(struct dlc *d)
{
	if (!d->preparer || d->cli.merge_at_end)
		return;
	struct es_buf out = ES_BUF_INIT;
	job_output_path(&d->cli, &out);
	if (es_merge_follow_start(d->cli.pc.o.job_dir, out.data, 1.0, &d->follow))
		es_warning("the output cannot be merged while the job runs (see above); it is merged at the end");
	es_buf_free(&out);
}

/* The finalize coordinator: verify (owners, and N distinct hosts in strict mode) and merge. */
static int coordinate_finalize(struct dlc *d)
{
	const char *job_dir = d->cli.pc.o.job_dir;
	struct es_buf out = ES_BUF_INIT;
	struct es_verify_result vr;
	es_say("hostname=%s elected as DLC finalize coordinator.", es_hostname());
	es_crash_point("dlc-finalize-elected");
	job_output_path(&d->cli, &out);
	struct es_jobview *view = job_view_get(&d->view, job_dir); /* NULL: verify reads the job */
	int code = es_exit_code(es_verify_run_follow(job_dir, out.data, d->cli.require_all ? (int)d->cli.nodes : 1,
						     d->follow, 1, view, &vr));
	d->follow = NULL;
	free(vr.output);
	es_buf_free(&out);
	if (!code)
		job_print_summary(job_dir, NULL, &d->view);
	if (!*stop_flag())
		job_write_report(job_dir, &d->view);
	return es_coord_publish_result(&d->co, "finalize", code, NULL) ? 2 : code;
}

/* Phase 3: one instance verifies and merges, the others wait for its result (or an abort). */
static int finalize_phase(struct dlc *d)
{
	int code = 0, rc = es_coord_result(&d->co, "finalize-result.json", &code);
	if (rc)
		return rc < 0 ? 2 : code;
	rc = es_coord_elect(&d->co, "finalize");
	if (rc == 0)
		return coordinate_finalize(d);
	if (rc < 0)
		return election_failed(d, "finalize");
	return es_coord_wait_finalize(&d->co, &code) ? 2 : code;
}

/* The submission's code once prepared: an earlier end of this submission, or the work and the
 * finalize of this instance. */
static int after_prepare(struct dlc *d)
{
	int code = 0, rc = es_coord_result(&d->co, "finalize-result.json", &code);
	if (rc == 0)
		rc = es_coord_result(&d->co, "abort.json", &code);
	if (rc)
		return rc < 0 ? 2 : code;
	start_follow(d);
	code = work_phase(d);
	if (!code)
		code = finalize_phase(d);
	if (d->follow) {
		es_merge_follow_abort(d->follow); /* the job did not complete: its temporary goes */
		d->follow = NULL;
	}
	job_view_free(&d->view);
	return code;
}

int cmd_dlc(int argc, char **argv)
{
	static struct dlc d; /* large (the command line's tables); one per process */
	memset(&d, 0, sizeof(d));
	int rc = parse_cli(argc, argv, &d);
	if (rc >= 0)
		return rc;
	if (under_launcher()) {
		es_error(ES_EUSAGE, "eshard-mpi dlc runs once per worker without an MPI launcher; under mpirun, mpiexec or "
			 "srun use 'eshard-mpi run' with the same options");
		return 2;
	}
	if (choose_run_id(&d) || check_strict(&d))
		return 2;
	install_stop_handlers();
	es_log_set_clock(es_time_mono());
	if (es_coord_open(&d.co, d.cli.pc.o.job_dir, d.rid, d.wait_timeout, d.poll))
		return 2;
	say_start(&d);
	int code = prepare_phase(&d);
	if (!code)
		code = after_prepare(&d);
	es_coord_close(&d.co);
	return code;
}
