/*
 * proc: the one place that starts processes (git's run-command.c is the model), and the one
 * builder of child environments.
 *
 * A child gets exactly the descriptors its spec names: the spec's fd[0..2] become its 0, 1 and
 * 2, extra[k] becomes 3+k, and every other descriptor of the parent is closed in the child,
 * close-on-exec or not (an MPI rank's sockets and shared-memory files, a lock file whose flock
 * would outlive its release). Every signal is reset to its default action and the signal mask
 * is empty, whatever the parent installed. The child leads a new process group, joins a given
 * one, or stays in the parent's.
 *
 * How: posix_spawn (glibc's is clone(CLONE_VM|CLONE_VFORK), so a big MPI process is never
 * copied, and a failed exec is reported by posix_spawn itself); only a spec that asks for a
 * parent-death signal, which posix_spawn cannot set, is started with fork and an immediate exec
 * (the attempt supervisor does: a small single-threaded process that never runs MPI). Nothing
 * else in libeshard calls fork, posix_spawn, system or popen.
 *
 * Contract: nothing here writes a file. Every function reports its own failure once through
 * es_error() (wrap a call in es_log_quiet_begin()/end() to keep it out of stderr) and returns 0
 * or a negative ES_E* code. A started child is the caller's to wait for; es_proc_capture()
 * always waits for its own, killing it when its time is up.
 */
#ifndef ESHARD_PROC_H
#define ESHARD_PROC_H

#include <stddef.h>
#include <sys/types.h>

#include "eshard/buf.h"

#define ES_PROC_DEVNULL (-1) /* in fd[]: the child gets /dev/null there */

struct es_proc_spec {
	char *const *argv;       /* argv[0] is the program; looked up on PATH when it has no '/' */
	char *const *envp;       /* NULL: the parent's environ */
	const char *cwd;         /* NULL: the parent's folder */
	int fd[3];               /* parent descriptors that become 0, 1, 2, or ES_PROC_DEVNULL */
	const int *extra;        /* parent descriptors that become 3, 4, ... */
	size_t n_extra;
	int new_group;           /* 1: the child leads a new process group */
	pid_t join_group;        /* > 0 (and new_group 0): the child joins this group */
	int pdeathsig;           /* != 0: the child gets it when the parent dies (fork path) */
};

/* fd[] = { 0, 1, 2 } (inherited), nothing else. */
void es_proc_spec_init(struct es_proc_spec *s, char *const *argv);

struct es_proc {
	pid_t pid;               /* > 0 once started */
	int err;                 /* errno of a failed start, else 0 */
	const char *stage;       /* of a failed start: "chdir" or "exec" */
};

/* Start the child. 0 with p->pid set; ES_EIO when it could not be started ("cannot start
 * 'prog': ...", p->err and p->stage say why). */
int es_proc_spawn(const struct es_proc_spec *s, struct es_proc *p);

/* waitpid with EINTR retried. nohang: 0 while it runs. 1 once reaped (*status set, may be
 * NULL), negative on error. */
int es_proc_wait(pid_t pid, int *status, int nohang);

/* Signal a whole process group (ESRCH, "nobody left", is not an error). Refuses pgid <= 1. */
int es_proc_kill_group(pid_t pgid, int sig);

/* "exited with status 3", "was killed by signal 15 (SIGTERM)". */
void es_proc_describe_status(int status, char *out, size_t n);

/* The signals a scheduler stops processes with: SIGTERM, SIGINT, SIGHUP, SIGKILL. */
int es_proc_is_stop_signal(int sig);

/* The stop signal a wait status tells of: death by it, or exit code 128+N (the shell's way to
 * pass on a child's death by signal N, and what scripts that trap SIGTERM return); else 0. */
int es_proc_stop_signal_of(int status);

/* "SIGTERM" for 15 (glibc's abbreviation with "SIG" in front; "SIG?" when unknown). */
const char *es_proc_signal_name(int sig, char *out, size_t n);

/* Can prog be started: a path (with a '/') that is an executable regular file, or a name found
 * as one in $PATH, as execvp looks it up. 0, else ES_EUSAGE with "<what>: program '<prog>' ..."
 * saying what is wrong (not found on PATH, missing, not executable). */
int es_proc_check_program(const char *prog, const char *what);

struct es_proc_result {
	int started;             /* 0: could not be started (err, stage) */
	int err;
	const char *stage;
	int status;              /* the wait status */
	int timed_out;           /* killed because timeout_secs passed */
	int overflow;            /* killed because stdout passed max_out */
	struct es_buf out, err_text; /* what it wrote; stderr past max_err is dropped */
};

/*
 * Run the child with stdout and stderr captured (spec fd[1] and fd[2] are replaced by pipes),
 * wait for it, and fill r (free with es_proc_result_free). It is killed with SIGKILL (its
 * group when new_group) when timeout_secs (> 0) pass or its stdout passes max_out bytes.
 * Returns 0 once it ran or could not be started (r->started says which; no message for the
 * latter, so that a caller can fall back), negative on an I/O error.
 */
int es_proc_capture(const struct es_proc_spec *s, size_t max_out, size_t max_err, double timeout_secs,
		    struct es_proc_result *r);
void es_proc_result_free(struct es_proc_result *r);

/*
 * The environment of every child (docs/design.md#a-clean-child-environment): base (NULL: environ)
 * without the launcher identity that would make Data-Juicer or a library think it is one rank of
 * many (es_env_is_launcher_identity(), RAY_ADDRESS included), the names in drop and those set by
 * vars, then:
 *   DJ_ELASTIC_SHARD_CHILD=1;
 *   cache_dir set: XDG_CACHE_HOME=<cache_dir> when base has none, and HF_HOME=<XDG_CACHE_HOME
 *     of the child>/huggingface when base has none (an empty value counts as set, like
 *     Python's os.environ.setdefault in the reference);
 *   ray_address set and not "local": RAY_ADDRESS=<ray_address>;
 *   pythonpath_first set: PYTHONPATH=<it>[:<base's PYTHONPATH when not empty>];
 *   every "K=V" of vars (replacing K), then every "K=V" of defaults whose K base lacks;
 *   RAY_worker_niceness=0 when none of base, vars and defaults sets it (Ray's own default,
 *     15, starves the processing beside any busy process of normal priority).
 * out must be initialized (ES_STRV_INIT) and is reset first; free it with es_strv_free.
 */
#define ES_RAY_WORKER_NICENESS "RAY_worker_niceness=0"
struct es_env_spec {
	char *const *base;
	const char *cache_dir;
	const char *ray_address;
	const char *pythonpath_first;
	const char *const *drop;     /* names ("K"), NULL-terminated, or NULL */
	const char *const *vars;     /* "K=V", NULL-terminated, or NULL */
	const char *const *defaults; /* "K=V", NULL-terminated, or NULL */
};
int es_env_child(const struct es_env_spec *s, struct es_strv *out);

/* Test builds (ESHARD_TEST_HOOKS) only: run the shell command held by the environment variable
 * var, if set, with /bin/sh -c and wait for it (a warning when it fails). A no-op otherwise. */
#ifdef ESHARD_TEST_HOOKS
void es_proc_test_hook(const char *var);
#else
#define es_proc_test_hook(var) ((void)0)
#endif

/* What /proc/<pid>/stat says of a process (fields numbered as in proc(5)). */
struct es_proc_stat {
	char comm[32];                 /* 2: the command name, cut to fit */
	char state;                    /* 3: 'R', 'S', ..., 'Z' (zombie), 'X' (dead) */
	pid_t ppid;                    /* 4 */
	pid_t pgrp;                    /* 5 */
	unsigned long long starttime;  /* 22: clock ticks since boot; with the pid it names one process */
};

/* Read /proc/<pid>/stat: 1 and *st filled (a zombie too: the caller judges its state), 0 when
 * the process does not exist or /proc cannot say. Reports nothing. */
int es_proc_stat_read(pid_t pid, struct es_proc_stat *st);

/* The value of name in env (NULL: environ), or NULL when absent; an empty value is a value. */
const char *es_env_get(char *const *env, const char *name);

#endif
