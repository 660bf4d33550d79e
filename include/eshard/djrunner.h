/*
 * djrunner: the per-rank Data-Juicer runtime of a worker (--ray-mode per-rank): one node-local
 * Ray head (ray.h) and, for Data-Juicer processors, the persistent runner scripts/dj_runner.py
 * that imports Data-Juicer and connects to that head once, then runs each shard's dj-process
 * argv in-process. A shard reaches the runner through a small client that is the attempt's
 * supervised processor (so it is logged, timed out and killed like any other processor).
 *
 * Contract after a crash of the worker at any point: the head dies with it (its watchdog, see
 * ray.h), and the runner too (its stdin is a pipe that only the worker holds: EOF ends it).
 * Nothing here writes into the job folder; the head's and the runner's logs live in the head's
 * node-local temp folder.
 */
#ifndef ESHARD_DJRUNNER_H
#define ESHARD_DJRUNNER_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "eshard/manifest.h"
#include "eshard/ray.h"

struct es_djrunner_opts {
	const char *job_dir;               /* the job's cache/ is the head's and runner's cache */
	const struct es_processor *proc;   /* the job's processor */
	int rank_on_host, ranks_on_host;   /* this worker's slot among the ranks of its host */
	double num_cpus;                   /* the head's CPUs; <= 0: the caller's mask (ray.h) */
	int no_runner;                     /* 1: the head only; shards run plain dj-process */
	volatile sig_atomic_t *cancel;     /* set by a stop signal: give up a start at once */
};

struct es_djrunner {
	struct es_djrunner_opts o;
	struct es_ray_head head;
	pid_t pid;                         /* the runner; 0 when none */
	int stdin_fd;                      /* the write end of its stdin */
	int ended, status;                 /* it was reaped, with this wait status */
	int restarts;                      /* new runners started after one died */
	char sock[600];                    /* its Unix socket, in the head's temp folder */
	char exe[4096];                    /* the Python that runs it */
	char script[4096];
	char command[10000];               /* the client command of es_djrunner_command() */
};

void es_djrunner_init(struct es_djrunner *r, const struct es_djrunner_opts *o);

/* Make sure the head is up: start it (and the runner with it) when there is none, restart both
 * when the head died, and the runner alone when it died under a live head. Prints one line per start. 0, or the head's start error (ES_EINTR when
 * cancelled). A runner that cannot start is a warning: shards then run plain dj-process. */
int es_djrunner_ensure(struct es_djrunner *r);

/* The head's address (valid after a successful es_djrunner_ensure). */
const char *es_djrunner_address(const struct es_djrunner *r);

/* The processor command of a shard that runs in the runner ("<python> dj_runner.py run
 * --socket S -- dj-process", split on blanks like --dj-process), or NULL when no runner is
 * alive. Valid until the next call. */
const char *es_djrunner_command(struct es_djrunner *r);

/* After an attempt through the runner failed: 1 with a reason in buf when the runner or the
 * head died of a stop signal (SIGTERM, SIGINT, SIGHUP, SIGKILL, or exit 128+N), or the head is
 * gone: the attempt may have been stopped from outside. 0 otherwise. */
int es_djrunner_stop_hint(struct es_djrunner *r, int via_runner, char *buf, size_t n);

/* Stop the runner, then the head (now: SIGKILL at once, for a worker that must exit). Prints
 * "Stopped the node-local Ray head" when there was one. */
void es_djrunner_stop(struct es_djrunner *r, int now);

#endif
