/*
 * eshard-mpi run: the whole job as one MPI program.
 *
 * rank 0 prepares (the other ranks read their slices of the input when it asks); the outcome
 * is broadcast and every rank stops with it if it failed; every rank then claims shards through
 * the shared-file locks (the locks, not MPI, decide who runs what); the ranks agree that the
 * job ended with an all-reduce of their exit codes; rank 0 verifies and merges; the final code
 * is broadcast and every rank exits with it. A rank whose job folder cannot be reached any more
 * leaves the work and waits for that end (leave_work).
 *
 * MPI is used only for these hand-offs (agree.c). Every wait is a non-blocking collective
 * polled with a short sleep: Open MPI busy-polls inside blocking collectives, and a waiting rank
 * must not burn the core that its node's processor needs.
 */
#include "commands.h"
#include "agree.h"
#include "jobcli.h"

#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/cpus.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/jobview.h"
#include "eshard/log.h"
#include "eshard/merge.h"
#include "eshard/prepare.h"
#include "eshard/progress.h"
#include "eshard/report.h"
#include "eshard/retry.h"
#include "eshard/status.h"
#include "eshard/stop.h"
#include "eshard/verify.h"
#include "eshard/worker.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define HOST_LEN 256

/* The job as this rank sees it once MPI runs. */
struct run {
	struct job_cli *cli;
	struct agree ag;
	int distinct;                /* distinct hosts of the ranks */
	int slot, slots;             /* this rank among the ranks of its host */
	int64_t nodes, cap;
	int unsharded;               /* the job runs once, unsharded, on rank 0 (--allow-unsharded) */
	char rid[128];
	struct es_worker_result wres;
	struct es_merge_follow *follow; /* rank 0: the merge while working */
	struct job_view view;        /* rank 0: the progress line's view, for the job's end */
	int lost;                    /* elastic mode: this rank's job folder went away; it left the work */
	size_t slice[3];             /* prepare: the ranges this rank read, [0, 1) of [2] (none: 0 0 0) */
};

/* The work code of a rank that lost the job folder (elastic mode): it left the work, and the
 * job is judged by the others. Below every exit code, so that the largest code of the ranks
 * is the others' (and RUN_LOST only when every rank lost the folder). */
#define RUN_LOST (-1)

/* Parse and check the options; returns -1 to go on, else the exit code. */
static int parse_cli(int argc, char **argv, struct job_cli *c)
{
	struct es_opt opts[JOB_CLI_MAX_OPTS];
	size_t n = job_cli_options(c, opts, "nodes of the job (default: distinct hosts of the ranks; at most 2147483647)",
				   "submission id (default PAI_JOB_ID, DLC_JOB_ID, JOB_ID, SLURM_JOB_ID, or made up)");
	static const struct es_cmd_help help = {
		"run",
		"Run the whole job under MPI: rank 0 prepares (every rank reads its share of the input), every rank claims and processes shards, rank 0 verifies and merges.",
		"Start it as 'mpirun -np N -npernode 1 eshard-mpi run ...' (one rank per node; MPICH:\n"
		"'mpiexec -n N -ppn 1'), with srun in a Slurm allocation, or alone for one machine. The\n"
		"launcher returns the ranks' code, except Open MPI's mpirun when it gets SIGTERM or SIGINT\n"
		"itself: it returns 1 (the ranks still stop as below). Every rank exits with the same code:\n"
		"0 PASS; 2 bad input, failed shards or failed verification; 128+signal when stopped\n"
		"(SIGTERM on any rank stops all ranks and releases their claims, so running the same\n"
		"command again resumes the job). A rank whose job folder cannot be reached (a dead mount)\n"
		"leaves the work without stopping the others and exits with the job's code; if it is rank\n"
		"0, nobody can verify or merge, and every rank exits 2 saying how to finish (strict mode:\n"
		"every rank stops at once with 2). A resubmission may change where things are on the nodes\n"
		"(--python, --dj-process, --dj-root, --ray-address: the manifest keeps its own); another\n"
		"recipe, input, shard count or processor command is refused with each difference.",
	};
	int rc = es_args_parse(argc, argv, opts, n, &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	return job_cli_finish(c, "run") ? 2 : -1;
}

/* Who is in the job: the distinct hosts, and this rank's slot on its host. */
static void discover_hosts(struct run *r)
{
	char me[HOST_LEN] = { 0 };
	snprintf(me, sizeof(me), "%s", es_hostname());
	int n = r->ag.size;
	char *hosts = calloc((size_t)n, HOST_LEN);
	if (!hosts) {
		r->distinct = r->slots = 1;
		return;
	}
	agree_allgather(me, hosts, HOST_LEN);
	r->distinct = 0;
	r->slot = r->slots = 0;
	for (int i = 0; i < n; i++) {
		const char *hi = hosts + (size_t)i * HOST_LEN;
		int seen = 0;
		for (int j = 0; j < i && !seen; j++)
			seen = !strncmp(hi, hosts + (size_t)j * HOST_LEN, HOST_LEN);
		r->distinct += !seen;
		if (!strncmp(hi, me, HOST_LEN)) {
			if (i < r->ag.rank)
				r->slot++;
			r->slots++;
		}
	}
	free(hosts);
	r->nodes = r->cli->nodes ? r->cli->nodes : r->distinct;
}

/* Every rank gives itself (and so every thread and child it starts later: prepare's helper
 * threads, the Ray head, Data-Juicer) its share of its node's CPUs in place of the launcher's
 * binding of the rank (cpus.h, README "CPUs, GPUs and binding"). Rank 0 says once how many
 * ranks the launcher had bound to fewer CPUs than that (every rank's head line says what it
 * got). */
static void take_cpus(struct run *r)
{
	struct es_cpus c;
	int narrower = 0;
	/* A --process-cmd job runs neither Ray nor Data-Juicer (the job prepared must match it). */
	const char *what = r->cli->pc.process_cmd ? "processor" : "Ray and Data-Juicer";
	if (es_cpus_take_share(r->slot, r->slots, &c) == 0)
		narrower = es_cpus_was_narrower(&c);
	else
		es_warning("this rank's %s keep%s the launcher's CPU binding (see the error above)", what,
			   r->cli->pc.process_cmd ? "s" : "");
	int count = agree_sum_int(narrower);
	if (r->ag.rank != 0 || !count)
		return;
	char mine[96] = "";
	if (narrower)
		snprintf(mine, sizeof(mine), " (rank 0: %d CPU(s), share %d)", CPU_COUNT(&c.bound), CPU_COUNT(&c.share));
	es_warning("the launcher bound %d of %d rank(s) to fewer CPUs than their share of their node%s; each rank's "
		   "%s use%s its share instead (mpirun --bind-to none, srun --cpu-bind=none avoid this warning)", count,
		   r->ag.size, mine, what, r->cli->pc.process_cmd ? "s" : "");
}

/* The run id: explicit, from the launcher, or made by rank 0; the same on every rank. */
static void choose_run_id(struct run *r)
{
	const char *given = r->cli->run_id && *r->cli->run_id ? r->cli->run_id : job_env_run_id(1);
	if (given)
		snprintf(r->rid, sizeof(r->rid), "%s", given);
	else if (r->ag.rank == 0)
		snprintf(r->rid, sizeof(r->rid), "run-%lld-%d", (long long)es_time_epoch(), (int)getpid());
	agree_bcast_bytes(r->rid, sizeof(r->rid));
}

/* Strict mode's cap and its refusal for too few shards (the same decision on every rank); 0 or 2. */
static int check_strict_shards(struct run *r)
{
	return job_strict_cap(r->cli->pc.o.num_shards, r->nodes, &r->cap, r->ag.rank == 0);
}

/* Strict mode's refusals (the same decision on every rank); 0 or 2. An automatic shard count
 * is checked once prepare has made it. */
static int check_strict(struct run *r)
{
	int64_t nodes = r->nodes;
	if (!r->cli->require_all)
		return 0;
	if (r->distinct < nodes) {
		if (r->ag.rank == 0)
			es_error(ES_EUSAGE, "strict mode (--require-all-nodes) needs %lld nodes, but the job's %d rank(s) run on %d distinct host(s)",
				 (long long)nodes, r->ag.size, r->distinct);
		return 2;
	}
	return r->cli->pc.o.num_shards ? check_strict_shards(r) : 0;
}

/* ---- the ranks' share of prepare's pass 1 (prepare.h, struct es_prepare_ranks) ----
 *
 * Rank 0's prepare calls share and gather; every other rank follows them (follow_prepare):
 * rank 0 broadcasts the plan's length (0: no plan, prepare went on without the ranks) and the
 * plan; every rank checks that it sees the stage folder; each reads its slice; rank 0 gathers
 * the counts. Every wait is polled (agree.c), so a rank that finished its slice sleeps. */

struct share {
	struct run *r;
	int told;                    /* rank 0: the other ranks got the plan's length */
};

/* Every rank's len bytes into rank 0's all (NULL on the other ranks). */
static int gather_bytes(struct run *r, const void *mine, size_t len, struct es_buf *all)
{
	int n = r->ag.size, rc = 0;
	int64_t me = (int64_t)len, *lens = r->ag.rank == 0 ? calloc((size_t)n, sizeof(*lens)) : NULL;
	int *counts = r->ag.rank == 0 ? calloc((size_t)n, sizeof(*counts)) : NULL;
	int *displs = r->ag.rank == 0 ? calloc((size_t)n, sizeof(*displs)) : NULL;
	if (r->ag.rank == 0 && (!lens || !counts || !displs)) {
		/* Rank 0 cannot take part: the ranks would wait for it forever. */
		es_error(ES_ENOMEM, "out of memory gathering the ranks' counts of the input ranges");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	agree_gather(&me, lens, (int)sizeof(me));
	int64_t total = 0;
	for (int i = 0; lens && i < n; i++) {
		counts[i] = lens[i] > INT_MAX - total ? 0 : (int)lens[i];
		displs[i] = (int)total;
		total += counts[i];
		if (!counts[i] && lens[i])
			rc = es_error(ES_EINVAL, "the ranks' counts of the input ranges pass 2 GiB");
	}
	if (all)
		es_buf_reset(all);
	if (all && es_buf_grow(all, (size_t)total)) {
		es_error(ES_ENOMEM, "out of memory gathering the ranks' counts of the input ranges");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	agree_gatherv(mine, (int)len, all ? all->data : NULL, counts, displs);
	if (all) {
		all->len = (size_t)total; /* grown for them above */
		all->data[total] = '\0';
	}
	free(lens);
	free(counts);
	free(displs);
	return rc;
}

/* Whether every rank sees the plan's stage folder (one collective; a rank that does not says
 * why, as a NOTE). */
static int all_see_stage(const void *plan, size_t len, size_t *n)
{
	int blind = es_prepare_plan_check(plan, len, n) != 0;
	if (blind)
		es_log_note("NOTE: this rank cannot read prepare's stage folder (%s): rank 0 reads the input without the ranks",
			    es_last_error());
	return agree_max_int(blind) == 0;
}

static int share_hook(void *arg, const void *plan, size_t len, size_t n, size_t *lo, size_t *hi)
{
	struct share *s = arg;
	/* MPI counts bytes in an int: a larger plan (millions of input files) is read here alone. */
	int64_t size = len <= INT_MAX ? (int64_t)len : 0;
	s->told = 1;
	agree_bcast_bytes(&size, (int)sizeof(size));
	if (!size)
		return 1;
	agree_bcast_bytes((void *)plan, (int)len); /* the root's buffer is only read */
	size_t n_seen;
	if (!all_see_stage(plan, len, &n_seen))
		return 1;
	es_prepare_rank_slice(n, s->r->ag.size, 0, lo, hi);
	s->r->slice[0] = *lo;
	s->r->slice[1] = *hi;
	s->r->slice[2] = n;
	return 0;
}

static int gather_hook(void *arg, const void *mine, size_t len, struct es_buf *all)
{
	struct share *s = arg;
	return gather_bytes(s->r, mine, len, all);
}

/* A rank other than 0 while rank 0 prepares: its slice of the ranges, when there is a plan. */
static void follow_prepare(struct run *r)
{
	int64_t len = 0;
	agree_bcast_bytes(&len, (int)sizeof(len));
	if (len <= 0)
		return;
	char *plan = malloc((size_t)len);
	if (!plan) {
		es_error(ES_ENOMEM, "out of memory for prepare's plan of the input ranges");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	agree_bcast_bytes(plan, (int)len);
	size_t n, lo, hi;
	if (all_see_stage(plan, (size_t)len, &n)) {
		struct es_buf counts = ES_BUF_INIT;
		es_prepare_rank_slice(n, r->ag.size, r->ag.rank, &lo, &hi);
		r->slice[0] = lo;
		r->slice[1] = hi;
		r->slice[2] = n;
		/* A failure is in the counts, for rank 0 to say in input order (or their absence). */
		es_prepare_ranges_run(plan, (size_t)len, r->ag.rank, r->ag.size, r->cli->pc.o.threads, &counts);
		gather_bytes(r, counts.data, counts.len, NULL);
		es_buf_free(&counts);
	}
	free(plan);
}

/* Test builds (ESHARD_TEST_PREPARE_RANKS set): the ranges this rank read in prepare, the
 * phase's wall time (since t0), the rank's CPU time and peak memory so far
 * (tests/e2e/test_run_prepare_ranks.sh, tests/bench/prepare.sh). */
static void say_prepare_cpu(struct run *r, double t0)
{
#ifdef ESHARD_TEST_HOOKS
	struct rusage ru;
	if (getenv("ESHARD_TEST_PREPARE_RANKS") && getrusage(RUSAGE_SELF, &ru) == 0)
		fprintf(stderr, "prepare rank %d: ranges %zu to %zu of %zu, wall %.3f s, cpu %.3f s, peak rss %ld KiB\n",
			r->ag.rank, r->slice[0], r->slice[1], r->slice[2], es_time_mono() - t0,
			(double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
				ru.ru_stime.tv_usec / 1e6,
			ru.ru_maxrss);
#else
	(void)r;
	(void)t0;
#endif
}

/* Phase 1: rank 0 prepares (an unchanged job is a no-op, so a resubmission resumes), the other
 * ranks reading their share of the input when it asks; every rank learns the shard count (an
 * automatic one is made here). */
static int prepare_phase(struct run *r)
{
	int code = 0;
	double t0 = es_time_mono();
	struct es_prepare_opts *o = &r->cli->pc.o;
	int automatic = !o->num_shards;
	int64_t shards = o->num_shards, unsharded = 0;
	if (r->ag.rank == 0) {
		char count[32];
		snprintf(count, sizeof(count), "%lld", (long long)shards);
		printf("eshard-mpi run %s on %d rank(s), %d host(s): nodes=%lld shards=%s mode=%s cap=%s\n", r->rid,
		       r->ag.size, r->distinct, (long long)r->nodes, automatic ? "auto" : count,
		       r->cli->require_all ? "strict" : "elastic", r->cli->require_all ? "ceil(shards/nodes)" : "unlimited");
		fflush(stdout);
		/* At least 4 shards per rank; strict mode's nodes when it counts fewer ranks' hosts. */
		o->auto_ranks = r->ag.size;
		o->progress_secs = (double)r->cli->progress_secs; /* a long prepare says how far it is */
		struct share sh = { r, 0 };
		struct es_prepare_ranks ranks = { r->ag.size, share_hook, gather_hook, &sh };
		o->ranks = r->ag.size > 1 ? &ranks : NULL;
		struct es_prepare_result pres;
		int prc = es_prepare_run(o, &pres);
		o->ranks = NULL;
		if (r->ag.size > 1 && !sh.told) {
			int64_t none = 0; /* no plan: the other ranks stop waiting for one */
			agree_bcast_bytes(&none, (int)sizeof(none));
		}
		if (!prc && r->cli->retry_failed)
			prc = es_retry_run(pres.job_dir, 1, NULL, 0, 0);
		code = es_exit_code(prc);
		if (!prc) {
			shards = pres.num_shards;
			unsharded = pres.unsharded;
		}
		free(pres.job_dir);
	} else {
		follow_prepare(r);
	}
	say_prepare_cpu(r, t0);
	code = agree_bcast_int(code);
	int64_t facts[2] = { shards, unsharded };
	agree_bcast_bytes(facts, (int)sizeof(facts));
	o->num_shards = facts[0];
	r->unsharded = facts[1] != 0;
	if (!code && r->unsharded && r->ag.rank == 0 && r->ag.size > 1) {
		printf("The recipe is not shard-safe: rank 0 runs it once, unsharded; the other %d rank(s) wait\n",
		       r->ag.size - 1);
		fflush(stdout);
	}
	if (!code && automatic && r->cli->require_all)
		code = check_strict_shards(r);
	return code;
}

/* Elastic mode, the job folder went away under this rank (a dead mount; the worker said so in
 * one error line, stopped its child and left its shard to the lease): the others can finish
 * without it, so it does not stop them. It waits for them in the final collectives with the
 * status RUN_LOST, which is no failure of the job, and exits with the job's code like every
 * rank. Its own stop signal still stops every rank. In strict mode the job cannot pass without
 * this rank's share, so work_phase stops every rank at once as for any rank that cannot work. */
static int leave_work(struct run *r)
{
	r->lost = 1;
	if (*stop_flag() && !r->ag.stopped_by_peer) {
		agree_send_stop(&r->ag, 128 + (int)*stop_flag());
		return 128 + (int)*stop_flag();
	}
	es_log_note("This rank leaves the work; the other ranks go on and take its shard over once its lease "
		    "runs out. It exits with the job's code when they end");
	return RUN_LOST;
}

/* Phase 2: every rank works until the job is terminal; returns this rank's exit code. */
static int work_phase(struct run *r)
{
	struct es_worker_opts wo;
	job_worker_options(r->cli, r->rid, r->cap, "run", &wo);
	wo.quiet_end = r->ag.rank != 0; /* rank 0 says how the job ended, once */
	wo.leave_end_repair = r->ag.rank != 0; /* and fences what a listing alone showed done */
	wo.attempts_checked = 1; /* rank 0's prepare loaded the manifest, links looked for */
	wo.claim_first = (size_t)r->ag.rank; /* busy passes try this rank's shards (worker.h) */
	wo.claim_step = (size_t)r->ag.size;
	wo.should_stop = agree_peer_stopped;
	wo.should_stop_arg = &r->ag;
	wo.ray_rank_on_host = r->slot;
	wo.ray_ranks_on_host = r->slots;
	struct es_progress *prog = NULL;
	/* Under a launcher the rank's stdout is the launcher's pseudo-terminal (Open MPI) or pipe,
	 * whatever the launcher's own stdout is: a redrawn line would end up in a log file. So
	 * only a run without a launcher (a singleton) redraws. */
	int tty = isatty(STDOUT_FILENO) && r->ag.size == 1 && !getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") &&
		  !getenv("PMIX_RANK");
	if (r->ag.rank == 0 && es_progress_start(wo.job_dir, (double)r->cli->progress_secs, tty, &prog))
		es_warning("no progress lines for this run (see the error above); 'eshard-mpi status --watch' shows them");
	int wrc = es_worker_run(&wo, &r->wres);
	r->view.have = es_progress_stop_view(prog, &r->view.v);
	int wcode = wrc ? 2 : r->wres.exit_code;
	if (wrc && r->wres.unreachable_errno && !r->cli->require_all) {
		wcode = leave_work(r);
	} else if (wrc) {
		/* This rank cannot work (say the job folder is not mounted on its node). The job
		 * fails anyway, so stop the others now; in strict mode they could never finish
		 * without this rank's share and would wait forever. */
		agree_send_stop(&r->ag, 2);
	} else if (r->ag.stopped_by_peer && r->wres.stopped_by_signal) {
		wcode = r->ag.stop_buf; /* end with the code of the rank that stopped the job */
	} else if (*stop_flag() || r->wres.stopped_by_signal) {
		agree_send_stop(&r->ag, wcode);
	}
	return wcode;
}

/* An unsharded job: the ranks other than 0 wait for rank 0's work to end (a non-blocking
 * barrier, polled with a sleep, that rank 0 enters after its work). A stop signal here stops
 * rank 0 too; a stop from rank 0 is this rank's code. Returns this rank's exit code. */
static int wait_phase(struct run *r)
{
	MPI_Request req;
	int done = 0, code = 0;
	MPI_Ibarrier(MPI_COMM_WORLD, &req);
	for (;;) {
		MPI_Test(&req, &done, MPI_STATUS_IGNORE);
		if (done)
			return code;
		if (!code && *stop_flag()) {
			code = es_stop_signal() > 0 ? 128 + es_stop_signal() : 2;
			agree_send_stop(&r->ag, code);
		} else if (!code && agree_peer_stopped(&r->ag)) {
			code = r->ag.stop_buf;
		}
		es_sleep(0.05);
	}
}

/* Rank 0 of an unsharded job, its work done: the barrier that releases the waiting ranks. */
static void release_waiters(void)
{
	MPI_Request req;
	int done = 0;
	MPI_Ibarrier(MPI_COMM_WORLD, &req);
	while (MPI_Test(&req, &done, MPI_STATUS_IGNORE), !done)
		es_sleep(0.005);
}

/* Rank 0 merges while the ranks work (merge.h); without it the whole merge runs at the end. */
static void start_follow(struct run *r)
{
	if (r->ag.rank != 0 || r->cli->merge_at_end)
		return;
	struct es_buf out = ES_BUF_INIT;
	job_output_path(r->cli, &out);
	if (es_merge_follow_start(r->cli->pc.o.job_dir, out.data, 1.0, &r->follow))
		es_warning("the output cannot be merged while the job runs (see above); it is merged at the end");
	es_buf_free(&out);
}

/* What the ranks learn from each other once the work is over. */
struct ending {
	int agreed;                  /* the worst work code; RUN_LOST: every rank lost the job folder */
	int all_done;                /* a rank's worker saw every shard done */
	int lost0;                   /* rank 0 lost the job folder: nothing can be verified or merged */
	int lost;                    /* how many ranks lost it */
	double first_min, first_max; /* the first claims of the ranks (epoch; infinite: none) */
};

/* A rank that left the work waits in the final collective until the others end, maybe for
 * hours: a stop signal there stops every rank, as anywhere else. */
static void watch_stop(void *arg)
{
	struct run *r = arg;
	if (r->lost && *stop_flag() && !r->ag.stop_sent && !agree_peer_stopped(&r->ag))
		agree_send_stop(&r->ag, 128 + (int)*stop_flag());
}

/* The collectives at the end of the work: the worst code, whether a rank saw every shard done,
 * whether rank 0 lost the job folder, the spread of the first claims (only ranks that claimed
 * something count; the earliest is the largest negated time), and how many ranks lost it. */
static void agree_ending(struct run *r, int wcode, struct ending *e)
{
	double first = r->wres.first_claim_epoch;
	/* A rank whose worker ended with 0 saw every shard done (the ranks that wait out an
	 * unsharded job ran none). */
	int saw_done = !r->lost && !wcode && (!r->unsharded || r->ag.rank == 0);
	double mine[5] = { (double)wcode, first > 0 ? -first : -INFINITY, first > 0 ? first : -INFINITY, saw_done,
			   r->ag.rank == 0 && r->lost }, all[5];
	agree_max_doubles(mine, all, 5, watch_stop, r);
	e->agreed = (int)all[0];
	e->first_min = -all[1];
	e->first_max = all[2];
	e->all_done = all[3] > 0;
	e->lost0 = all[4] > 0;
	e->lost = agree_sum_int(r->lost);
}

/* Rank 0 lost the job folder: nobody can verify or merge. The other ranks went on, so the work
 * may be complete; every rank says so in one error line, with how to finish, and exits with
 * the same code (2, or the others' own code when they failed or were stopped). */
static int end_without_rank0(struct run *r, const struct ending *e)
{
	const char *job_dir = r->cli->pc.o.job_dir;
	if (r->follow) {
		es_merge_follow_abort(r->follow);
		r->follow = NULL;
	}
	if (e->agreed == RUN_LOST) {
		es_error(ES_EIO, "no rank can reach the job folder %s any more (see each rank's error): nothing was verified or merged; "
			 "run this command again once it is mounted (the job resumes)", job_dir);
		return 2;
	}
	if (!e->agreed && e->all_done) {
		struct es_buf out = ES_BUF_INIT;
		if (r->cli->output)
			es_buf_printf(&out, " --output %s", r->cli->output);
		es_error(ES_EIO, "rank 0 cannot reach the job folder %s, so the job was neither verified nor merged, although every shard "
			 "is done; run 'eshard-mpi verify --job-dir %s%s' on a node that reaches it (or this run command again)",
			 job_dir, job_dir, out.len ? out.data : "");
		es_buf_free(&out);
		return 2;
	}
	char codes[64] = "";
	if (e->agreed > 0)
		snprintf(codes, sizeof(codes), " (exit code %d on at least one rank)", e->agreed);
	es_error(ES_EIO, "rank 0 cannot reach the job folder %s, and the job did not complete%s; 'eshard-mpi status --job-dir %s' "
		 "on a node that reaches it says what is left, and this run command again resumes it", job_dir, codes, job_dir);
	return e->agreed > 0 ? e->agreed : 2;
}

/* Rank 0 verifies and merges the job the ranks agree is done: the exit code. */
static int verify_job(struct run *r, const struct ending *e)
{
	if (e->lost)
		es_warning("%d rank(s) could not reach the job folder and left the work (see their errors); the other ranks "
			   "took their shards over", e->lost);
	struct es_buf out = ES_BUF_INIT;
	job_output_path(r->cli, &out);
	struct es_verify_result vr;
	struct es_jobview *view = job_view_get(&r->view, r->cli->pc.o.job_dir); /* NULL: verify reads the job */
	int final = es_exit_code(es_verify_run_follow(r->cli->pc.o.job_dir, out.data,
						      r->cli->require_all ? (int)r->nodes : 1, r->follow, 1, view, &vr));
	r->follow = NULL;
	free(vr.output);
	es_buf_free(&out);
	return final;
}

/* Rank 0 of a job that did not complete says so, with its summary and what to do next. When
 * it is rank 0 that lost the job folder (strict mode: every rank stopped with it), the folder
 * is neither read for a summary nor written, since a dead mount fails or hangs: one line. */
static void say_incomplete(struct run *r, int agreed)
{
	const char *job_dir = r->cli->pc.o.job_dir;
	if (r->wres.unreachable_errno) {
		es_error(ES_EIO, "rank 0 cannot reach the job folder %s, so the job stopped (strict mode, --require-all-nodes) "
			 "with no summary and no report; 'eshard-mpi status --job-dir %s' on a node that reaches it says what "
			 "is left, and this run command again resumes it", job_dir, job_dir);
		return;
	}
	struct es_buf advice = ES_BUF_INIT;
	job_print_summary(job_dir, *stop_flag() ? NULL : &advice, &r->view);
	es_error(ES_EINVAL, "the job did not complete (exit code %d on at least one rank); see the rank messages above and 'eshard-mpi status --job-dir %s'%s%s",
		 agreed, job_dir, advice.len ? "; " : "", advice.data);
	es_buf_free(&advice);
}

/* Phase 3: the ranks agree how the work ended; rank 0 verifies and merges; all learn the code. */
static int finalize_phase(struct run *r, int code, int wcode)
{
	struct ending e;
	agree_ending(r, wcode, &e);
	if (r->ag.rank == 0)
		es_crash_point("run-before-finalize");
	/* The spread says how evenly the ranks started: with one rank there is none. */
	if (r->ag.rank == 0 && r->ag.size > 1 && isfinite(e.first_min) && isfinite(e.first_max) && !code)
		printf("First claims of the ranks were %.3f s apart\n", e.first_max - e.first_min);
	if (e.lost0)
		return end_without_rank0(r, &e); /* the same code on every rank, from the collective */
	int agreed = e.agreed, final = agreed;
	const char *job_dir = r->cli->pc.o.job_dir;
	if (r->ag.rank == 0 && !agreed) {
		final = verify_job(r, &e);
	} else if (r->ag.rank == 0 && agreed && !code) {
		say_incomplete(r, agreed);
	}
	if (r->follow) {
		es_merge_follow_abort(r->follow); /* the job did not complete: its temporary goes */
		r->follow = NULL;
	}
	if (r->ag.rank == 0 && !agreed && !code)
		job_print_summary(job_dir, NULL, &r->view);
	if (r->ag.rank == 0 && !code && !*stop_flag() && !r->wres.unreachable_errno)
		job_write_report(job_dir, &r->view);
	job_view_free(&r->view);
	return agree_bcast_int(final);
}

int cmd_run(int argc, char **argv)
{
	struct job_cli cli;
	int rc = parse_cli(argc, argv, &cli);
	if (rc >= 0)
		return rc;
	install_stop_handlers();
	int provided;
	MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided); /* prepare and merge run helper threads on rank 0 */
	/* MPICH's MPI_Init makes stdout unbuffered, so a printf or puts of one line reaches the
	 * launcher in pieces that another rank's line can cut: keep whole lines. Nothing was
	 * written to stdout yet. The buffer is given: with NULL, glibc keeps the one byte of the
	 * unbuffered stream and writes a line in many pieces. */
	static char stdout_buf[BUFSIZ];
	setvbuf(stdout, stdout_buf, _IOLBF, sizeof(stdout_buf));
	struct run r;
	memset(&r, 0, sizeof(r));
	r.cli = &cli;
	int code = agree_init(&r.ag) ? 2 : 0;
	char prefix[300];
	snprintf(prefix, sizeof(prefix), "[rank %d %s] ", r.ag.rank, es_hostname());
	es_log_set_prefix(prefix);
	es_log_set_clock(es_time_mono());
	discover_hosts(&r);
	take_cpus(&r);
	choose_run_id(&r);
	code = agree_max_int(code ? code : check_strict(&r));
	if (!code)
		code = prepare_phase(&r);
	if (!code)
		start_follow(&r);
	int wcode = code;
	if (!code && r.unsharded && r.ag.rank != 0) {
		wcode = wait_phase(&r);
	} else if (!code) {
		wcode = work_phase(&r);
		if (r.unsharded)
			release_waiters();
	}
	int final = finalize_phase(&r, code, wcode);
	agree_finish(&r.ag);
	MPI_Finalize();
	return final;
}
