/*
 * eshard-mpi run: the whole job as one MPI program.
 *
 * rank 0 prepares; the outcome is broadcast and every rank stops with it if it failed; every
 * rank then claims shards through the shared-file locks (the locks, not MPI, decide who runs
 * what); the ranks agree that the job ended with an all-reduce of their exit codes; rank 0
 * verifies and merges; the final code is broadcast and every rank exits with it.
 *
 * MPI is used only for these hand-offs. Every wait is a non-blocking collective polled with a
 * short sleep: Open MPI busy-polls inside blocking collectives, and a waiting rank must not
 * burn the core that its node's processor needs.
 */
#include "commands.h"

#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/prepare.h"
#include "eshard/retry.h"
#include "eshard/util.h"
#include "eshard/verify.h"
#include "eshard/worker.h"

#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_STOP 7101
#define HOST_LEN 256

struct run {
	int rank, size;
	MPI_Request stop_recv;
	int stop_buf;                /* a peer's stop notice: the exit code that peer ends with */
	int stopped_by_peer;         /* this rank's worker stopped because of such a notice */
	int stop_sent;
	int stop_code;               /* the buffer of the stop sends: it must outlive them */
	MPI_Request *stop_sends;
};

/* Wait for a request without spinning on the core. */
static void wait_request(MPI_Request *r)
{
	int done = 0;
	double pause = 0.001;
	for (;;) {
		MPI_Test(r, &done, MPI_STATUS_IGNORE);
		if (done)
			return;
		es_sleep(pause);
		if (pause < 0.05)
			pause *= 2;
	}
}

/* The decision "did prepare succeed", made by rank 0 and learnt by all. */
static int bcast_int_from_root(int value)
{
	MPI_Request r;
	MPI_Ibcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD, &r);
	wait_request(&r);
	return value;
}

/* The decision "how did the work end": the largest exit code of any rank. */
static int agree_max(int value)
{
	int out = 0;
	MPI_Request r;
	MPI_Iallreduce(&value, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r);
	wait_request(&r);
	return out;
}

static double agree_min_double(double v, MPI_Op op)
{
	double out = 0;
	MPI_Request r;
	MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD, &r);
	wait_request(&r);
	return out;
}

/* Tell every other rank, once, that this one stops with exit code `code`: they stop too (their
 * workers release their claims), so the whole job ends together with one code. */
static void send_stop(struct run *r, int code)
{
	if (r->stop_sent)
		return;
	r->stop_sent = 1;
	r->stop_code = code;
	for (int i = 0; i < r->size; i++)
		if (i != r->rank)
			MPI_Isend(&r->stop_code, 1, MPI_INT, i, TAG_STOP, MPI_COMM_WORLD, &r->stop_sends[i]);
}

/* Called by the worker about once a second while this rank has no stop signal of its own:
 * nonzero when another rank told this one to stop. */
static int should_stop(void *arg)
{
	struct run *r = arg;
	if (r->stopped_by_peer)
		return 1;
	if (r->stop_recv != MPI_REQUEST_NULL) {
		int got = 0;
		MPI_Test(&r->stop_recv, &got, MPI_STATUS_IGNORE);
		if (got) {
			r->stopped_by_peer = 1;
			return 1;
		}
	}
	return 0;
}

static const char *env_run_id(void)
{
	static const char *const names[] = { "PAI_JOB_ID", "DLC_JOB_ID", "JOB_ID", "SLURM_JOB_ID" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *v = getenv(names[i]);
		if (v && *v)
			return v;
	}
	return NULL;
}

/* This rank's index among the ranks of its host, and how many ranks the host has. */
static void host_slot(const char *hosts, int n, int rank, int *slot, int *count)
{
	*slot = 0;
	*count = 0;
	for (int i = 0; i < n; i++)
		if (!strncmp(hosts + (size_t)i * HOST_LEN, hosts + (size_t)rank * HOST_LEN, HOST_LEN)) {
			if (i < rank)
				(*slot)++;
			(*count)++;
		}
}

static int count_hosts(char *hosts, int n)
{
	int distinct = 0;
	for (int i = 0; i < n; i++) {
		int seen = 0;
		for (int j = 0; j < i; j++)
			if (!strncmp(hosts + (size_t)i * HOST_LEN, hosts + (size_t)j * HOST_LEN, HOST_LEN))
				seen = 1;
		distinct += !seen;
	}
	return distinct;
}

int cmd_run(int argc, char **argv)
{
	struct prepare_cli pc;
	prepare_cli_init(&pc);
	struct es_opt opts[ES_PREPARE_MAX_OPTS + 13];
	size_t n = prepare_cli_options(&pc, opts);
	const char *output = NULL, *run_id = NULL, *ray_mode = NULL;
	int64_t nodes = 0;
	int require_all = 0, retry_failed = 0, allow_mismatch = 0, no_runner = 0;
	int seen_lease = 0, seen_hb = 0, seen_lt = 0, seen_mr = 0;
	double attempt_timeout = 0, preempt_grace = 0;
	/* Policy options given explicitly also override a job prepared earlier (a resubmission). */
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(opts[i].name, "lease-secs")) opts[i].seen = &seen_lease;
		if (!strcmp(opts[i].name, "heartbeat-secs")) opts[i].seen = &seen_hb;
		if (!strcmp(opts[i].name, "lock-timeout-secs")) opts[i].seen = &seen_lt;
		if (!strcmp(opts[i].name, "max-retries")) opts[i].seen = &seen_mr;
	}
	opts[n++] = (struct es_opt){ "output", ES_OPT_STR, &output, NULL, "PATH", "merged output (default <job-dir>/merged.jsonl)" };
	opts[n++] = (struct es_opt){ "nodes", ES_OPT_POS_INT, &nodes, NULL, NULL, "nodes of the job (default: distinct hosts of the ranks)" };
	opts[n++] = (struct es_opt){ "require-all-nodes", ES_OPT_FLAG, &require_all, NULL, NULL, "strict mode: every node must complete shards; claim cap ceil(shards/nodes)" };
	opts[n++] = (struct es_opt){ "run-id", ES_OPT_STR, &run_id, NULL, "ID", "submission id (default PAI_JOB_ID, DLC_JOB_ID, JOB_ID, SLURM_JOB_ID, or made up)" };
	opts[n++] = (struct es_opt){ "retry-failed", ES_OPT_FLAG, &retry_failed, NULL, NULL, "requeue failed shards before work starts" };
	opts[n++] = (struct es_opt){ "attempt-timeout-secs", ES_OPT_POS_NUM, &attempt_timeout, NULL, NULL, "kill an attempt that runs longer (counted as failed)" };
	opts[n++] = (struct es_opt){ "preempt-grace-secs", ES_OPT_POS_NUM, &preempt_grace, NULL, NULL, "a processor killed by a stop signal from outside: wait this long (default 5) for the rank's own stop before counting a failure" };
	opts[n++] = (struct es_opt){ "ray-mode", ES_OPT_STR, &ray_mode, NULL, "MODE", "per-attempt (default) or per-rank: one node-local Ray head per rank, reused by every shard" };
	opts[n++] = (struct es_opt){ "no-dj-runner", ES_OPT_FLAG, &no_runner, NULL, NULL, "per-rank mode: plain dj-process per shard instead of the persistent Data-Juicer runner" };
	opts[n++] = (struct es_opt){ "allow-version-mismatch", ES_OPT_FLAG, &allow_mismatch, NULL, NULL, "only warn when Data-Juicer differs from the job's" };
	static const struct es_cmd_help help = {
		"run",
		"Run the whole job under MPI: rank 0 prepares, every rank claims and processes shards, rank 0 verifies and merges.",
		"Start it as 'mpirun -np N -npernode 1 eshard-mpi run ...' (one rank per node), with srun in a\n"
		"Slurm allocation, or alone for one machine. Every rank exits with the same code:\n"
		"0 PASS; 2 bad input, failed shards or failed verification; 128+signal when stopped\n"
		"(SIGTERM on any rank stops all ranks and releases their claims, so running the same\n"
		"command again resumes the job).",
	};
	/* Options are checked before MPI starts, identically on every rank. */
	int rc = es_args_parse(argc, argv, opts, n, &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (prepare_cli_finish(&pc, "run"))
		return 2;
	{
		struct es_worker_opts check;
		es_worker_opts_init(&check);
		check.ray_mode_name = ray_mode;
		if (worker_cli_finish(&check, "run"))
			return 2;
	}

	install_stop_handlers();
	int provided;
	MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided); /* prepare and merge run helper threads on rank 0 */
	struct run r;
	memset(&r, 0, sizeof(r));
	MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &r.size);
	char prefix[300];
	snprintf(prefix, sizeof(prefix), "[rank %d %s] ", r.rank, es_hostname());
	es_log_set_prefix(prefix);
	r.stop_sends = calloc((size_t)r.size, sizeof(*r.stop_sends));
	for (int i = 0; i < r.size; i++)
		r.stop_sends[i] = MPI_REQUEST_NULL;
	MPI_Irecv(&r.stop_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_STOP, MPI_COMM_WORLD, &r.stop_recv);

	/* Who is in the job. */
	char me[HOST_LEN] = { 0 };
	snprintf(me, sizeof(me), "%s", es_hostname());
	char *hosts = calloc((size_t)r.size, HOST_LEN);
	MPI_Request req;
	MPI_Iallgather(me, HOST_LEN, MPI_CHAR, hosts, HOST_LEN, MPI_CHAR, MPI_COMM_WORLD, &req);
	wait_request(&req);
	int distinct = count_hosts(hosts, r.size);
	int slot = 0, slots = 1;
	host_slot(hosts, r.size, r.rank, &slot, &slots);
	free(hosts);
	if (!nodes)
		nodes = distinct;

	/* The run id: explicit, from the launcher, or made by rank 0. */
	char rid[128] = { 0 };
	if (run_id && *run_id)
		snprintf(rid, sizeof(rid), "%s", run_id);
	else if (env_run_id())
		snprintf(rid, sizeof(rid), "%s", env_run_id());
	else if (r.rank == 0)
		snprintf(rid, sizeof(rid), "run-%lld-%d", (long long)es_time_epoch(), (int)getpid());
	MPI_Ibcast(rid, sizeof(rid), MPI_CHAR, 0, MPI_COMM_WORLD, &req);
	wait_request(&req);

	int64_t shards = pc.o.num_shards, cap = 0;
	int code = 0;
	if (require_all) {
		cap = (shards + nodes - 1) / nodes;
		if (distinct < nodes) {
			if (r.rank == 0)
				es_error(ES_EUSAGE, "strict mode (--require-all-nodes) needs %lld nodes, but the job's %d rank(s) run on %d distinct host(s)",
					 (long long)nodes, r.size, distinct);
			code = 2;
		} else if (shards < nodes || (nodes - 1) * cap >= shards) {
			if (r.rank == 0)
				es_error(ES_EUSAGE, "strict mode cannot give every one of %lld nodes a shard with %lld shards (cap %lld per node); "
					 "use more shards or elastic mode", (long long)nodes, (long long)shards, (long long)cap);
			code = 2;
		}
	}
	if (r.rank == 0 && !code) {
		printf("eshard-mpi run %s on %d rank(s), %d host(s): nodes=%lld shards=%lld mode=%s cap=%s\n", rid, r.size,
		       distinct, (long long)nodes, (long long)shards, require_all ? "strict" : "elastic",
		       cap ? "ceil(shards/nodes)" : "unlimited");
		fflush(stdout);
	}

	/* Phase 1: rank 0 prepares (an unchanged job is a no-op, so a resubmission resumes). */
	if (!code) {
		if (r.rank == 0) {
			struct es_prepare_result pres;
			int prc = es_prepare_run(&pc.o, &pres);
			if (!prc && retry_failed)
				prc = es_retry_run(pres.job_dir, 1, NULL, 0, 0);
			code = es_exit_code(prc);
			free(pres.job_dir);
		}
		code = bcast_int_from_root(code);
	}

	/* Phase 2: every rank works until the job is terminal. */
	struct es_worker_result wres;
	memset(&wres, 0, sizeof(wres));
	int wcode = code;
	if (!code) {
		struct es_worker_opts wo;
		es_worker_opts_init(&wo);
		wo.job_dir = pc.o.job_dir;
		wo.max_shards = cap;
		wo.cap_counts_done = 1;
		wo.wait_for_terminal = 1;
		wo.quiet_idle = 1;
		/* Idle ranks poll every second for a quick end; a huge job polls less often, since
		 * each poll opens every shard's markers on the shared file system. */
		wo.poll_interval_override = shards / 2000.0 > 1.0 ? (shards / 2000.0 < 20.0 ? shards / 2000.0 : 20.0) : 1.0;
		wo.run_id = rid;
		wo.stop_flag = stop_flag();
		wo.should_stop = should_stop;
		wo.should_stop_arg = &r;
		wo.supervisor_exe = self_exe();
		wo.attempt_timeout_secs = attempt_timeout;
		wo.preempt_grace_secs = preempt_grace;
		wo.allow_version_mismatch = allow_mismatch;
		wo.ray_mode_name = ray_mode;
		wo.ray_no_runner = no_runner;
		wo.ray_rank_on_host = slot;
		wo.ray_ranks_on_host = slots;
		worker_cli_finish(&wo, "run"); /* checked before MPI started */
		if (seen_lease) wo.lease_secs = pc.o.policy.lease_secs;
		if (seen_hb) wo.heartbeat_secs = pc.o.policy.heartbeat_secs;
		if (seen_lt) wo.lock_timeout_secs = pc.o.policy.lock_timeout_secs;
		if (seen_mr) wo.max_retries = pc.o.policy.max_retries;
		int wrc = es_worker_run(&wo, &wres);
		wcode = wrc ? 2 : wres.exit_code;
		if (wrc) {
			/* This rank cannot work (say the job folder is not mounted on its node). The
			 * job fails anyway, so stop the others now; in strict mode they could never
			 * finish without this rank's share and would wait forever. */
			send_stop(&r, 2);
		} else if (r.stopped_by_peer && wres.stopped_by_signal) {
			wcode = r.stop_buf; /* end with the code of the rank that stopped the job */
		} else if (*stop_flag() || wres.stopped_by_signal) {
			send_stop(&r, wcode);
		}
	}
	int agreed = agree_max(wcode);
	/* The spread of the first claims (only ranks that claimed something count). */
	double first_min = agree_min_double(wres.first_claim_epoch > 0 ? wres.first_claim_epoch : INFINITY, MPI_MIN);
	double first_max = agree_min_double(wres.first_claim_epoch > 0 ? wres.first_claim_epoch : -INFINITY, MPI_MAX);
	if (r.rank == 0 && isfinite(first_min) && isfinite(first_max) && !code)
		printf("First claims of the ranks were %.3f s apart\n", first_max - first_min);

	/* Phase 3: rank 0 verifies and merges; everyone exits with the final code. */
	int final = agreed;
	if (r.rank == 0 && !agreed) {
		struct es_buf out = ES_BUF_INIT;
		if (output)
			es_buf_adds(&out, output);
		else
			es_buf_printf(&out, "%s/merged.jsonl", pc.o.job_dir);
		struct es_verify_result vr;
		final = es_exit_code(es_verify_run(pc.o.job_dir, out.data, require_all ? (int)nodes : 1, &vr));
		es_buf_free(&out);
	} else if (r.rank == 0 && agreed && !code) {
		es_error(ES_EINVAL, "the job did not complete (exit code %d on at least one rank); see the rank messages above and 'eshard-mpi status --job-dir %s'",
			 agreed, pc.o.job_dir);
	}
	final = bcast_int_from_root(final);

	/* Tidy up the stop messages before MPI ends. */
	if (r.stop_recv != MPI_REQUEST_NULL) {
		int got = 0;
		MPI_Test(&r.stop_recv, &got, MPI_STATUS_IGNORE);
		if (!got) {
			MPI_Cancel(&r.stop_recv);
			MPI_Wait(&r.stop_recv, MPI_STATUS_IGNORE);
		}
	}
	MPI_Waitall(r.size, r.stop_sends, MPI_STATUSES_IGNORE);
	free(r.stop_sends);
	MPI_Finalize();
	return final;
}
