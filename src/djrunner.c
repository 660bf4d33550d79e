/*
 * djrunner: a worker's node-local Ray head and persistent Data-Juicer runner (see djrunner.h;
 * the runner's protocol and measurements are in scripts/dj_runner.py and docs/dj-notes.md).
 */
#include "eshard/djrunner.h"
#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/cpus.h"
#include "eshard/fs.h"
#include "eshard/helper.h"
#include "eshard/log.h"
#include "eshard/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* How long the runner may take to print "ready" (Data-Juicer's imports on a cold cache). */
#define RUNNER_START_SECS 180.0

void es_djrunner_init(struct es_djrunner *r, const struct es_djrunner_opts *o)
{
	memset(r, 0, sizeof(*r));
	r->o = *o;
	r->stdin_fd = -1;
	r->head.watchdog_fd = -1;
}

static const char *runner_script(void)
{
	return es_helper_path("ESHARD_DJ_RUNNER", "dj_runner.py");
}

static int has_space(const char *s)
{
	return strpbrk(s, " \t\n") != NULL;
}

static void runner_stop(struct es_djrunner *r, int now)
{
	if (!r->pid)
		return;
	if (r->stdin_fd >= 0)
		close(r->stdin_fd);
	r->stdin_fd = -1;
	double until = es_time_mono() + (now ? 0 : 5.0);
	int st = 0;
	while (es_proc_wait(r->pid, &st, 1) == 0) {
		if (es_time_mono() >= until) {
			es_proc_kill_group(r->pid, SIGKILL);
			es_proc_wait(r->pid, &st, 0);
			break;
		}
		es_sleep(0.02);
	}
	unlink(r->sock);
	r->pid = 0;
}

/* Is the runner still there? Reaps it (keeping its wait status) when it is not. */
static int runner_alive(struct es_djrunner *r)
{
	if (!r->pid)
		return 0;
	if (es_proc_wait(r->pid, &r->status, 1) == 1) {
		r->pid = 0;
		r->ended = 1;
		if (r->stdin_fd >= 0)
			close(r->stdin_fd);
		r->stdin_fd = -1;
		return 0;
	}
	return 1;
}

/* The Python that imports Data-Juicer: --python, else the one beside dj-process. */
static void runner_python(const struct es_processor *p, char *out, size_t n)
{
	if (p->python) {
		snprintf(out, n, "%s", p->python);
	} else if (p->dj_process && strchr(p->dj_process, '/') && !has_space(p->dj_process)) {
		snprintf(out, n, "%s", p->dj_process);
		char *slash = strrchr(out, '/');
		snprintf(slash + 1, n - (size_t)(slash + 1 - out), "python");
	} else {
		snprintf(out, n, "python3");
	}
}

/* Wait for the runner's "ready" line on fd; 1 when it came, with what was read in line. */
static int await_ready(struct es_djrunner *r, int fd, char *line, size_t n)
{
	size_t len = 0;
	double until = es_time_mono() + RUNNER_START_SECS;
	line[0] = '\0';
	while (es_time_mono() < until && !(r->o.cancel && *r->o.cancel)) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		int pr = poll(&pfd, 1, 200);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr <= 0)
			continue;
		ssize_t got = read(fd, line + len, n - 1 - len);
		if (got <= 0)
			break;
		len += (size_t)got;
		line[len] = '\0';
		if (strchr(line, '\n'))
			return !strncmp(line, "ready\n", 6);
		if (len == n - 1)
			break;
	}
	return 0;
}

/* Start the runner against the head and wait for its "ready" line. 0 on success; 1 when it
 * cannot run here or did not start (a warning says why; shards then run dj-process). Its stdin
 * is a pipe only this process holds, its stdout the pipe "ready" comes on, its stderr a log in
 * the head's temp folder; it leads its own process group. */
static int runner_start(struct es_djrunner *r, char *const *env)
{
	const struct es_processor *p = r->o.proc;
	const char *script = runner_script();
	if (p->kind != ES_PROC_DATA_JUICER || p->dj_root || !script || access(script, R_OK) != 0)
		return 1;
	runner_python(p, r->exe, sizeof(r->exe));
	snprintf(r->script, sizeof(r->script), "%s", script);
	snprintf(r->sock, sizeof(r->sock), "%s/djr.sock", r->head.temp_dir);
	if (has_space(r->exe) || has_space(r->script) || has_space(r->sock))
		return 1; /* the processor argv is split on blanks */
	char log[700];
	snprintf(log, sizeof(log), "%s/dj_runner.log", r->head.temp_dir);
	int in[2] = { -1, -1 }, out[2] = { -1, -1 };
	int log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (log_fd < 0 || pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
		es_warning("cannot set up the Data-Juicer runner (%s: %s); shards run dj-process directly", log,
			   strerror(errno));
		for (int k = 0; k < 2; k++) {
			if (in[k] >= 0) close(in[k]);
			if (out[k] >= 0) close(out[k]);
		}
		if (log_fd >= 0)
			close(log_fd);
		return 1;
	}
	char *argv[] = { r->exe, r->script, (char *)"serve", (char *)"--socket", r->sock,
			 (char *)"--ray-address", r->head.address, NULL };
	struct es_proc_spec ps;
	es_proc_spec_init(&ps, argv);
	ps.envp = env;
	ps.fd[0] = in[0];
	ps.fd[1] = out[1];
	ps.fd[2] = log_fd;
	ps.new_group = 1;
	struct es_proc pr;
	es_log_quiet_begin();
	int rc = es_proc_spawn(&ps, &pr);
	es_log_quiet_end();
	close(in[0]);
	close(out[1]);
	close(log_fd);
	if (rc) {
		close(in[1]);
		close(out[0]);
		es_warning("cannot start the Data-Juicer runner '%s': %s; shards run dj-process directly", r->exe,
			   strerror(pr.err));
		return 1;
	}
	r->pid = pr.pid;
	r->ended = 0;
	r->stdin_fd = in[1];
	char line[512];
	int ok = await_ready(r, out[0], line, sizeof(line));
	close(out[0]);
	if (!ok) {
		line[strcspn(line, "\n")] = '\0';
		es_warning("the Data-Juicer runner did not start (%s; see %s); shards run dj-process directly",
			   line[0] ? line : "no ready line", log);
		runner_stop(r, 1);
		return 1;
	}
	es_say("Started the persistent Data-Juicer runner (pid %d) on %s", (int)r->pid, r->sock);
	return 0;
}

/* The environment of the head and the runner: every shard child's, with the job's cache/. */
static int runtime_env(const struct es_djrunner *r, struct es_strv *env)
{
	/* Keep a few idle Ray workers: with --num-cpus 1 Ray would kill the spare one after each
	 * shard and the next shard would wait for a new worker (docs/dj-notes.md). */
	static const char *const defaults[] = { "RAY_num_workers_soft_limit=4", NULL };
	struct es_buf cache = ES_BUF_INIT;
	int rc = es_path_join(&cache, r->o.job_dir, "cache");
	struct es_env_spec es = { .cache_dir = cache.data, .defaults = defaults };
	if (!rc)
		rc = es_env_child(&es, env);
	es_buf_free(&cache);
	return rc;
}

/* The head is alive but the runner it had is gone (an operator ended its Python process, or
 * it was killed): start a new one for the next shard. That attempt failed on its own; the
 * shards after it must not pay for it by running without the runner. */
static void runner_restart(struct es_djrunner *r)
{
	int code = WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1;
	int sig = WIFSIGNALED(r->status) ? WTERMSIG(r->status) : 0;
	r->ended = 0;
	struct es_strv env = ES_STRV_INIT;
	if (runtime_env(r, &env) == 0) {
		if (sig)
			es_warning("the Data-Juicer runner died of signal %d; starting a new one", sig);
		else
			es_warning("the Data-Juicer runner exited with code %d; starting a new one", code);
		r->restarts++;
		runner_start(r, env.v);
	} else {
		es_warning("the Data-Juicer runner is gone and cannot be restarted (%s); the next shards run dj-process directly",
			   es_last_error());
	}
	es_strv_free(&env);
}

/* What the head was given, for its start line: "2 CPUs (0-1), no GPU, 1.2 GiB object store".
 * The CPU list is the mask the head inherited from this thread (the rank's share, cpus.h). */
static void head_resources(const struct es_ray_head *h, char *out, size_t n)
{
	cpu_set_t mask;
	char cpus[200] = "";
	if (sched_getaffinity(0, sizeof(mask), &mask) == 0)
		es_cpus_format(&mask, cpus, sizeof(cpus));
	char gpus[300];
	if (h->num_gpus < 0)
		snprintf(gpus, sizeof(gpus), "no GPU seen");
	else if (h->cuda_visible_devices[0])
		snprintf(gpus, sizeof(gpus), "%d GPU(s) (CUDA_VISIBLE_DEVICES=%s)", h->num_gpus, h->cuda_visible_devices);
	else
		snprintf(gpus, sizeof(gpus), "%d GPU(s)", h->num_gpus);
	snprintf(out, n, "%d CPU(s) (%s), %s, %.1f GiB object store", h->num_cpus, cpus, gpus,
		 (double)h->object_store_bytes / (1 << 30));
}

int es_djrunner_ensure(struct es_djrunner *r)
{
	if (r->head.running && es_ray_head_alive(&r->head) == 1) {
		if (!runner_alive(r) && r->ended && !(r->o.cancel && *r->o.cancel))
			runner_restart(r);
		return 0;
	}
	runner_stop(r, 1);
	if (r->head.running) {
		es_warning("the node-local Ray head at %s is gone; starting a new one", r->head.address);
		es_ray_head_stop(&r->head);
	}
	struct es_ray_opts ro;
	memset(&ro, 0, sizeof(ro));
	ro.python = r->o.proc->python ? r->o.proc->python : r->o.proc->dj_process;
	ro.rank_on_host = r->o.rank_on_host;
	ro.ranks_on_host = r->o.ranks_on_host > 0 ? r->o.ranks_on_host : 1;
	ro.num_cpus = r->o.num_cpus;
	ro.cancel = r->o.cancel;
	/* Data-Juicer's operators run in the head's Ray workers, which inherit the head's
	 * environment, not the shard child's: give the head the job's cache folders (as every
	 * shard child gets them), so models and caches land in the job folder's cache/. The same
	 * environment starts the runner. */
	struct es_strv env = ES_STRV_INIT;
	int rc = runtime_env(r, &env);
	if (!rc) {
		ro.env = env.v;
		/* Tests that start the heads of several fake hosts of one machine (one network) hold
		 * some of them here, so that each finds the ports another took. */
		es_proc_test_hook("ESHARD_TEST_HOOK_BEFORE_RAY_HEAD");
		double t0 = es_time_mono();
		rc = es_ray_head_start(&ro, &r->head);
		if (!rc) {
			char res[400];
			head_resources(&r->head, res, sizeof(res));
			es_say("Started a node-local Ray head at %s in %.1f s with %s (temp dir %s)", r->head.address,
			       es_time_mono() - t0, res, r->head.temp_dir);
			r->ended = 0;
			if (!r->o.no_runner)
				runner_start(r, env.v);
		}
	}
	es_strv_free(&env);
	return rc;
}

const char *es_djrunner_address(const struct es_djrunner *r)
{
	return r->head.address;
}

const char *es_djrunner_command(struct es_djrunner *r)
{
	if (!runner_alive(r))
		return NULL;
	snprintf(r->command, sizeof(r->command), "%s %s run --socket %s -- dj-process", r->exe, r->script, r->sock);
	return r->command;
}

int es_djrunner_stop_hint(struct es_djrunner *r, int via_runner, char *buf, size_t n)
{
	char name[32];
	if (via_runner && !runner_alive(r) && r->ended) {
		int sig = es_proc_stop_signal_of(r->status);
		if (sig) {
			snprintf(buf, n, "the Data-Juicer runner was stopped by signal %d (%s)", sig,
				 es_proc_signal_name(sig, name, sizeof(name)));
			return 1;
		}
	}
	if (r->head.running && es_ray_head_alive(&r->head) != 1) {
		snprintf(buf, n, "the node-local Ray head died during the attempt");
		return 1;
	}
	return 0;
}

void es_djrunner_stop(struct es_djrunner *r, int now)
{
	runner_stop(r, now);
	if (!r->head.running)
		return;
	/* After a signal the launcher may kill us within a second: no graceful steps. */
	if (now)
		es_ray_head_kill(&r->head);
	else
		es_ray_head_stop(&r->head);
	es_say("Stopped the node-local Ray head");
}
