/*
 * attempt: run one processor child for one claimed shard attempt and supervise it
 * (docs/design.md#running-a-processor); materialize.h turns its output into processed.jsonl.
 *
 * Contract after a crash at any point:
 *  - The child never outlives its worker by much more than the grace period. It does not
 *    run under the worker itself but under a small supervisor process ("eshard-mpi
 *    __supervise", started through proc, so a worker that is an MPI rank never forks
 *    without exec). The child leads its own process group and the supervisor another, so
 *    terminal and job-control signals aimed at the worker reach neither; the worker decides.
 *    The supervisor is a child subreaper and holds one end of a socket pair whose other end
 *    only the worker holds: when the worker dies in any way, SIGKILL included, the kernel
 *    closes that end, the supervisor reads EOF, and it stops the child's whole tree
 *    (SIGTERM to the group and to every descendant, even those that called setsid(), then
 *    SIGKILL after grace_secs). If the supervisor itself is SIGKILLed,
 *    the direct child gets SIGKILL through PR_SET_PDEATHSIG; its descendants then survive
 *    (nothing is left to watch them), which is the one case this design does not cover
 *    (their output pipe has no reader then: a write fails, with EPIPE or SIGPIPE's kill).
 *  - es_attempt_run() returns only after the supervisor has reported and exited, which it
 *    does only once the child and every descendant are gone (or after the hard deadline
 *    described at es_attempt_run()).
 *
 * The paths handed to the child and the files it writes, with J the job folder and A the
 * attempt folder: A/process.log (stdout and stderr, truncated first; besides the child's
 * output it gets only the reference's "Unable to start" line and, when the supervisor had to
 * stop something, its "[eshard-mpi] ..." notes: "stopping the processor: <why>", or what the
 * processor left behind), A/ray-output.jsonl (the export path, file or folder),
 * A/work/<job_id>_<shard_id>_<token[:12]> (created before a Data-Juicer start; a command is not
 * given it), A/logs, A/checkpoints, A/partitions, A/produced (created by the child, if at all).
 */
#ifndef ESHARD_ATTEMPT_H
#define ESHARD_ATTEMPT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "eshard/manifest.h"

struct es_attempt_spec {
	const char *job_dir;         /* absolute, resolved (J) */
	const char *job_id;          /* the manifest's job_id */
	const char *shard_id;
	const char *input_path;      /* absolute J/shards/<id>.jsonl */
	const char *attempt_dir;     /* absolute J/attempts/<id>/<NNNN>-<token> (A) */
	const char *token;           /* the claim token (32 hex); its first 12 go in --job_id */
	const struct es_processor *proc;
	const char *ray_address;     /* the effective address, passed to Data-Juicer */
	/* eshard-mpi itself. The literal "/proc/self/exe" works (posix_spawn's clone shares the
	 * worker's executable) and keeps working when the installed binary is replaced. */
	const char *supervisor_exe;
	double timeout_secs;         /* 0: none; a longer run is stopped and timed_out is set */
	double tick_secs;            /* how often tick() is called while the child runs; 0: 1 s */
	int (*tick)(void *arg);      /* heartbeat hook, may be NULL; nonzero: stop (aborted) */
	void *tick_arg;
	volatile sig_atomic_t *stop_flag; /* may be NULL; set by the caller's SIGTERM/SIGINT handler */
	/* Called once, at once, when *stop_flag is seen and before the child is stopped (which
	 * may take the grace period): the worker releases its lock there, because a launcher
	 * such as mpirun may SIGKILL it a second after its SIGTERM. May be NULL. */
	void (*on_stop)(void *arg);
	double grace_secs;           /* SIGTERM first, SIGKILL this much later; 0: 10 s */
};

struct es_attempt_outcome {
	int started;                 /* 0: the processor could not be started */
	int return_code;             /* exit status, -signal, or -1 when not started */
	double duration_secs;        /* wall time from the spawn to the supervisor's report */
	int timed_out;               /* stopped because timeout_secs passed */
	int preempted;               /* stopped because *stop_flag was set */
	int aborted;                 /* stopped because tick() returned nonzero */
	int supervisor_signal;       /* a signal the supervisor itself got from outside, or 0 */
	char start_error[512];       /* why it could not start ("" when started) */
};

/*
 * The processor's argv, as recorded in attempt.json "command" (NULL-terminated, malloc'd,
 * free with es_argv_free()). cwd, when not NULL, gets the folder the child starts in
 * (malloc'd; NULL means the worker's own folder).
 *
 * Data-Juicer (ES_PROC_DATA_JUICER) gets the reference's options, preceded by
 *   proc->dj_root set:    <python or "python3"> <dj_root>/tools/process_data.py, cwd dj_root
 *                         (resolved to an absolute path), and dj_root first on PYTHONPATH;
 *   proc->dj_process set: that command split on blanks ("python -m data_juicer.tools...");
 *   neither:              dj-process, looked up on PATH when the child starts.
 * A command (ES_PROC_COMMAND) is proc->command split by template.h's rules,
 * with the placeholders substituted inside each word: {input} the shard file, {output}
 * A/ray-output.jsonl, {attempt_dir} A, {shard_id}, {job_dir} J.
 */
int es_attempt_argv(const struct es_attempt_spec *s, char ***argv, size_t *argc, char **cwd);
void es_argv_free(char **argv);

/* The processor's program can be started on this node (es_proc_check_program): the first word
 * of a command, of dj_process, or python with dj_root. Only what the job names is checked: the
 * default dj-process is looked up when the child starts. 0 or ES_EUSAGE naming the option. */
int es_attempt_check_processor(const struct es_processor *p);

/*
 * The child's environment (NULL-terminated "K=V" strings, free with es_argv_free()): the
 * worker's environ minus the launcher identity, which would otherwise make Data-Juicer wrap
 * itself in an elastic run of its own or make a library think it is one rank of many:
 *   dropped prefixes: OMPI_ PMIX_ PMI_ PRTE_ HYDRA_ MV2_COMM_WORLD_ SLURM_ SLURMD_
 *                     MASTER_ DJ_ELASTIC_
 *   dropped names:    WORLD_SIZE RANK LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK NODE_RANK
 *                     ROLE_RANK MPI_LOCALRANKID MPI_LOCALNRANKS PAI_JOB_ID DLC_JOB_ID JOB_ID
 *                     RAY_ADDRESS
 * Every SLURM_* goes, not only the task variables: the child is one node-local process, not
 * a Slurm task, and the job-wide ones (SLURM_JOB_ID, SLURM_NTASKS) are exactly what
 * distributed auto-detection keys on. Allocation that matters to the child reaches it through
 * CUDA_VISIBLE_DEVICES and the cgroup, which are kept. Then added:
 *   DJ_ELASTIC_SHARD_CHILD=1, DJ_PRODUCED_DATA_DIR=A/produced,
 *   XDG_CACHE_HOME=J/cache (only if unset), HF_HOME=<XDG_CACHE_HOME or J/cache>/huggingface
 *   (only if unset), RAY_ADDRESS=<ray_address> unless it is "local",
 *   PYTHONPATH=<dj_root>[:<old>] with --dj-root,
 *   ESHARD_SHARD_ID and ESHARD_ATTEMPT_DIR for command processors.
 * env is the environment to start from (NULL: environ).
 */
int es_attempt_env(const struct es_attempt_spec *s, char *const *env, char ***out);

/*
 * Run the processor and wait for it (see the contract above). Returns 0 once the child has
 * run or could not be started (see out->started; a start failure also appends
 * "\nUnable to start Data-Juicer: <err>\n", or "Unable to start processor" for a command,
 * to A/process.log like the reference), or a negative ES_E* code when the attempt could not
 * even be set up (bad spec, cannot create A/work/..., cannot open A/process.log).
 *
 * The child's stdin is /dev/null, its stdout and stderr one pipe (a command processor; a
 * Data-Juicer child gets A/process.log itself: supervise.c, open_output), and it inherits no
 * other descriptor of the worker (the supervisor closes whatever an MPI library left open). The
 * supervisor copies the pipe into A/process.log as it comes, so that people can follow the log
 * while the child runs; the child and everything it starts never hold the log itself, which is
 * closed a fixed number of times per attempt however many processes write to it (on a FUSE
 * file system every close is a request to the server). All that the child's tree wrote is in
 * the log before the supervisor's note that follows it and before es_attempt_run() returns,
 * except what a process that would not die after SIGKILL wrote after the supervisor's sweeps
 * ended, and what the pipe held when a supervisor that did not report in time was killed. A
 * failed write to the log (a full disk) loses output, never the attempt.
 *
 * While the child runs, the worker polls every 100 ms: tick() every tick_secs, *stop_flag,
 * and the supervisor's report. Stopping (stop flag, tick() nonzero) asks the supervisor to
 * stop the child's tree and still waits for its report; tick() is not called after that. timeout_secs is enforced by the
 * supervisor itself, so that it holds even if the worker is wedged. If the supervisor has
 * not reported 45 s after the stop or timeout was due plus grace, the worker SIGKILLs the
 * supervisor's process group and returns. Signals are never blocked; EINTR is retried.
 */
int es_attempt_run(const struct es_attempt_spec *s, struct es_attempt_outcome *out);

/*
 * Body of the hidden subcommand "eshard-mpi __supervise" (argv[0] is "__supervise"):
 *   __supervise --fd N [--timeout SECS] [--grace SECS] [--cwd DIR] -- PROGRAM [ARGS...]
 * fd N is the supervisor's end of the socket pair. The worker writes one byte to ask for a
 * stop; EOF means the worker is gone, which also stops. The supervisor writes text lines:
 *   "started <pid>\n"                 after a successful exec of PROGRAM,
 *   "error <errno> <stage> <what>\n"  when chdir (stage "chdir") or exec (stage "exec")
 *                                     failed, followed by nothing else,
 *   "status <rc> <timed_out> <sig>\n" once the tree is gone: rc is the exit code, or -signal;
 *                                     sig is a signal the supervisor itself got (0: none).
 * Its stderr is the log: its notes, its es_error() lines and the copy of PROGRAM's output (the
 * write end of a pipe, as PROGRAM's stdout and stderr) go there; its stdin is PROGRAM's. With
 * --output log PROGRAM gets the log itself as stdout and stderr, no pipe.
 * Returns the process exit code: 0 after a report, 2 on a usage error. Must run before any
 * MPI call, in a process that did not initialize MPI.
 */
int es_attempt_supervise_main(int argc, char **argv);

#endif
