/*
 * ray: one node-local Ray head per rank (--ray-mode per-rank).
 *
 * A rank starts its own head once (`ray start --head`) and points every shard's Data-Juicer
 * child at it, instead of letting each child start and stop a private Ray instance (about
 * 5 s saved per shard, docs/dj-notes.md). Several ranks may share a host, and a crashed run
 * may have left a head behind, so a head is isolated in every way Ray allows:
 *  - its own temp dir <base_dir>/<rank>-<8 hex> (short: Ray's Unix sockets live under it);
 *  - its own block of TCP ports, chosen from the rank's own set of blocks and bind-tested
 *    before use, so neither another rank nor a leftover head is ever joined;
 *  - a --num-cpus/--num-gpus/--object-store-memory share of the node (the CPUs: those of the
 *    caller's mask, which a rank made its share of the node, cpus.h), and its own
 *    CUDA_VISIBLE_DEVICES slice so that two heads never hand out the same GPU;
 *  - its own process group, and a marker variable ESHARD_RAY_HEAD=<token> in the environment
 *    of every process of the head (Ray passes it on to its workers and actors). Stopping
 *    signals only processes that are in the head's group *and* carry the token, so a process
 *    group id reused after the head died is never signalled.
 *
 * Ports (ES_RAY_PORT_BLOCK consecutive ports per block, starting at port_base):
 *   block k = [port_base + k*BLOCK, port_base + (k+1)*BLOCK - 1]
 *   the rank tries k = rank_on_host, rank_on_host + ranks_on_host, + 2*ranks_on_host, ...
 *   so two ranks of one host never try the same block; a block is used only when no port of
 *   it is bound (TCP, IPv4 and IPv6 wildcard bind test) and it does not overlap the kernel's
 *   ephemeral range (/proc/sys/net/ipv4/ip_local_port_range). When `ray start` fails and a
 *   port of its block has been bound by someone else meanwhile (another job's head with the
 *   same rank number starting at the same moment), the start moves on to the rank's next free
 *   block, up to 3 times, with a warning.
 *   offset 0 GCS (--port), 1 node manager, 2 object manager, 3 dashboard, 4 dashboard agent
 *   HTTP, 5 dashboard agent gRPC, 6 runtime-env agent, 7 metrics export, 8-15 spare,
 *   16..BLOCK-1 worker ports (--min-worker-port/--max-worker-port).
 *
 * Contract after a crash of the caller at any point: the head does not outlive its rank. A
 * watchdog (`/bin/sh` in the head's process group) waits for EOF on a pipe whose write end
 * only the caller holds (O_CLOEXEC, so no child inherits it); when the caller dies in any way,
 * SIGKILL and the OOM killer included, the kernel closes it and the watchdog SIGKILLs the
 * group. Only if the watchdog itself is SIGKILLed can a head be left behind; a new start then
 * never joins it (its ports are busy), and its processes can be found by ESHARD_RAY_HEAD.
 * The temp dir of a crashed caller stays (Ray's logs, about 1.5 MB).
 *
 * Environment of the head (and therefore of every Ray worker that runs Data-Juicer operators
 * in per-rank mode; a driver's environment does not reach Ray workers): opts->env (or
 * environ) without the launcher's identity (OMPI_*, PMIX_*, PMI_*, Slurm, WORLD_SIZE, RANK,
 * MASTER_*, ...) and without RAY_ADDRESS, plus RAY_USAGE_STATS_ENABLED=0,
 * DJ_ELASTIC_SHARD_CHILD=1, ESHARD_RAY_HEAD and, when GPUs are known, CUDA_VISIBLE_DEVICES.
 *
 * Not async-signal-safe: call stop from the main flow after a signal handler set a flag.
 */
#ifndef ESHARD_RAY_H
#define ESHARD_RAY_H

#include <signal.h>
#include <sys/types.h>

#define ES_RAY_PORT_BASE 20000   /* below the usual ephemeral range, above Ray's defaults */
#define ES_RAY_PORT_BLOCK 384
/* A `ray start` that exited with a failure is tried once more when at least this much of the
 * start timeout is left (es_ray_opts.start_timeout_secs). */
#define ES_RAY_RETRY_MIN_SECS 20.0
#define ES_RAY_FIXED_PORTS 16    /* offsets below this are fixed services; the rest workers */
#define ES_RAY_TEMP_DIR_MAX 40   /* Ray appends about 64 bytes of socket path; limit is 107 */

struct es_ray_opts {
	const char *ray_exe;      /* `ray`; NULL: beside python, else on PATH */
	const char *python;       /* the processor's python or dj-process (its venv's bin/) */
	const char *base_dir;     /* absolute, short, node-local; NULL: /tmp/eshard-ray-<uid> */
	int rank_on_host;         /* 0 .. ranks_on_host-1 */
	int ranks_on_host;        /* >= 1 */
	double num_cpus;          /* <= 0: the CPUs of the calling thread's mask (its share) */
	double num_gpus;          /* <= 0: visible GPUs split between the ranks of the host */
	long long object_store_bytes; /* <= 0: a share of memory and of /dev/shm */
	double start_timeout_secs;    /* <= 0: 120 */
	double stop_step_timeout_secs; /* <= 0: 10 (each of the three graceful steps) */
	int port_base;            /* 0: ES_RAY_PORT_BASE */
	int keep_temp_dir;        /* 1: leave the temp dir (Ray's logs) after stop */
	char *const *env;         /* environment to start from; NULL: environ */
	volatile sig_atomic_t *cancel; /* nonzero while starting: give up (ES_EINTR) */
};

struct es_ray_head {
	int running;              /* 1 between a successful start and stop */
	pid_t pgid;               /* process group of every process of the head */
	int port;                 /* GCS port (first port of the block) */
	int port_block;           /* index k of the block */
	int num_cpus, num_gpus;   /* what the head was given (num_gpus -1: left to Ray) */
	long long object_store_bytes;
	char address[128];        /* GCS address "<node ip>:<port>" for ray.init / RAY_ADDRESS */
	char temp_dir[512];       /* --temp-dir; Ray's logs are in its session_latest/logs */
	char token[33];           /* value of ESHARD_RAY_HEAD in the head's processes */
	char cuda_visible_devices[256]; /* given to the head; "" when not set by us */
	double stop_step_timeout_secs;
	int keep_temp_dir;
	pid_t watchdog_pid;       /* our child; 0 when none */
	int watchdog_fd;          /* write end of the watchdog's pipe; -1 when none */
};

/* Start a head and wait (up to start_timeout_secs) until `ray start` reports it up and its
 * GCS and raylet are running. On failure nothing of it is left running, h->running is 0, and
 * the message names the cause (with the tail of `ray start`'s output). The calling process
 * becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so that the head's daemons, which
 * outlive `ray start`, are its children and stop can wait until they are gone. */
int es_ray_head_start(const struct es_ray_opts *o, struct es_ray_head *h);

/* Restarting a head that is no longer alive: es_ray_head_stop() (it takes down what is left)
 * then es_ray_head_start() again; the new head gets a new temp dir and token, and usually the
 * same port block. */

/* 1 when the head's gcs_server and raylet are running and the GCS port accepts a connection
 * on 127.0.0.1; 0 otherwise (also after stop). Costs a /proc scan and one local connect. */
int es_ray_head_alive(const struct es_ray_head *h);

/* Number of live (non-zombie) processes of the head (group and token match), or negative. */
int es_ray_head_count(const struct es_ray_head *h);

/* Stop like `ray stop`, limited to this head: SIGTERM the raylet and wait, SIGTERM the rest
 * but gcs_server and wait, SIGTERM gcs_server and wait, then SIGKILL whatever is left in the
 * group, and reap the head's processes, waiting up to stop_step_timeout_secs until none of
 * them is left, not even as a zombie (a warning says so if one is). Removes the head's own
 * temp dir unless keep_temp_dir; removes nothing shared. Idempotent: a stopped (or never started) head returns 0 at once. */
int es_ray_head_stop(struct es_ray_head *h);

/* Like stop without the graceful steps: SIGKILL at once, then reap (for a caller that must exit
 * now). */
int es_ray_head_kill(struct es_ray_head *h);

#endif
