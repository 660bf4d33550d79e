/*
 * worker: the main loop of docs/design.md#the-worker-loop with leases, supervised children and an
 * event log. It claims shards in manifest order, runs each through the manifest's processor, and
 * publishes a done or failed record; it ends when the job is terminal, when --max-shards
 * claims were handled, or when it is told to stop (SIGTERM/SIGINT through stop_flag).
 *
 * Contract after a crash of the worker at any point: its child processes die with it (their
 * supervisor sees the worker's end); its lock stays until another worker takes it over after
 * one lease; no result of the interrupted attempt can be published.
 */
#ifndef ESHARD_WORKER_H
#define ESHARD_WORKER_H

#include <signal.h>
#include <stdint.h>

struct es_worker_opts {
	const char *job_dir;
	int64_t max_shards;          /* 0: no limit */
	/* Overrides of the manifest policy for this process; 0 (or -1 for max_retries): keep. */
	int64_t lock_timeout_secs;
	int64_t max_retries;
	int64_t poll_interval_secs;
	double heartbeat_secs;
	double lease_secs;
	double attempt_timeout_secs; /* 0: none */
	double poll_interval_override; /* > 0: poll this often (fractions allowed; used by tests and run) */
	/* > 0: at the job's tail (nothing pending or stale, R shards running) an idle worker polls
	 * every max(tail_poll_secs, tail_poll_secs x R) seconds when that is sooner than its poll,
	 * so that it sees the job end soon after the last shard (run: 0.25). Such a poll is one
	 * fstat() of the job's hint while it watches (docs/job-folder.md#the-hint). */
	double tail_poll_secs;
	const char *ray_address;     /* NULL: the manifest's */
	/* Where the processor is on this node (--python, --dj-process, --dj-root of run and
	 * worker), in place of the manifest's for this process only; NULL: the manifest's. The
	 * manifest on disk never changes: other nodes and the reference read it. --dj-process and
	 * --dj-root replace each other (a Data-Juicer job runs one of them) and need a
	 * Data-Juicer job. */
	const char *python;
	const char *dj_process;
	const char *dj_root;
	/* --ray-mode per-rank: start one node-local Ray head for this worker (at its first claim),
	 * give its address to every shard, restart it when it died, stop it when the worker ends
	 * (also on failure and SIGTERM). The ranks of one host get distinct ports and a share of
	 * the host's CPUs and GPUs. */
	int ray_per_rank;            /* 1 per-rank, 0 per-attempt, -1 (no --ray-mode): per-rank when the
	                              * processor is Data-Juicer and the Ray address (ray_address,
	                              * else the manifest's) is "local" */
	const char *ray_mode_name;   /* the option as given ("per-attempt", "per-rank") */
	/* Per-rank mode runs Data-Juicer shards through a persistent runner (scripts/dj_runner.py)
	 * that imports Data-Juicer and connects to the head once; 1: plain dj-process per shard. */
	int ray_no_runner;
	int ray_rank_on_host, ray_ranks_on_host;
	double ray_num_cpus;         /* --num-cpus: the head's CPUs; 0: the rank's share (cpus.h) */
	int allow_version_mismatch;
	const char *run_id;          /* recorded in events and done records when set */
	const char *supervisor_exe;  /* the eshard-mpi binary, for the child supervisor */
	volatile sig_atomic_t *stop_flag; /* set by the caller's signal handler */
	/* Asked about once a second while working or waiting; nonzero stops the worker as if a
	 * SIGTERM had arrived (the MPI run uses it when another rank was stopped). */
	int (*should_stop)(void *arg);
	void *should_stop_arg;
	int wait_for_terminal;       /* after --max-shards, keep waiting until the job is terminal */
	/* max_shards counts only the shards this process completed, not its attempts, and a job
	 * that ends with every shard done exits 0 even if one of its attempts failed on the way.
	 * The MPI run's strict-mode cap needs this: counted in attempts, a failed (or lost)
	 * attempt uses up a node's share, and its retry can find every rank capped, so the job
	 * never becomes terminal and the run waits forever. */
	int cap_counts_done;
	int quiet_idle;              /* print the idle line only once (else at every change of counts) */
	int quiet_claims;            /* no "Claimed <id>" line (run without --verbose) */
	int quiet_end;               /* no "All N shards completed" / "Job finished with failures"
	                              * line (every rank of run but rank 0) */
	/* At the job's end, leave the locks of shards known done only from a listing of
	 * state/done (es_claim_learn_done) to another process's repair: every rank of run but
	 * rank 0, so that the end costs one read of each such lock, not one per rank. */
	int leave_end_repair;
	/* The manifest was loaded and attempts/ looked at for links moments before (run: rank 0's
	 * prepare, before any rank works): the worker's load does not list attempts/ again
	 * (es_manifest_load_ex, ES_MANIFEST_ATTEMPTS_CHECKED). */
	int attempts_checked;
	/* Where a pass looks first (run: this rank's number and the number of ranks; 0 and 0 or 1:
	 * everywhere). With claim_step > 1, the first pass and a pass after a claim try the shards
	 * claim_first, claim_first + claim_step, ... and those whose locks this worker has read
	 * before, not the locks its peers made since its last look: each claim would otherwise
	 * read the newest lock of every peer, which a file server answers with a lookup of a name
	 * its client has never seen (a job's requests per shard then grow with the ranks). A pass
	 * that tries every shard still comes at least every quarter lease, and whenever such a
	 * pass finds nothing, so no lock goes unseen for longer than that: a stale lease is still
	 * taken over one lease after it was last seen changing (docs/design.md, "The worker
	 * loop"). */
	size_t claim_first, claim_step;
	/* A processor that dies of a stop signal (SIGTERM, SIGINT, SIGHUP, SIGKILL) that no
	 * eshard-mpi process sent may be the first victim of a scheduler stopping the whole job:
	 * the worker waits this long (<= 0: 5 s) for its own stop before it counts the attempt
	 * as failed; if the stop comes, the attempt is preempted. */
	double preempt_grace_secs;
	/* Backups (backup.h, claim.h): an idle worker runs a second attempt of the most overdue
	 * running shard unless no_backup; keep_hosts is strict mode's rule (a backup never takes
	 * a host's only shard). */
	int no_backup;
	int backup_keep_hosts;
};

struct es_worker_result {
	int exit_code;               /* 0, 2, or 128+signal when stopped */
	int64_t processed, failed;
	double first_claim_epoch;    /* 0 when nothing was claimed */
	int stopped_by_signal;
	/* Nonzero when the worker stopped because the job folder could not be reached for the
	 * whole outage budget (a dead mount): the errno of the outage (ENOTCONN, EIO, ESTALE).
	 * es_worker_run then returned ES_EIO after its one error line; its child was stopped and
	 * its shard, if it held one, goes to another worker once the lease runs out. The MPI run
	 * tells this apart from a node that cannot work at all. */
	int unreachable_errno;
};

void es_worker_opts_init(struct es_worker_opts *o);
/* Returns 0 with res->exit_code set, or a negative error (bad job folder, I/O; a dead mount
 * sets res->unreachable_errno). */
int es_worker_run(const struct es_worker_opts *o, struct es_worker_result *res);

#endif
