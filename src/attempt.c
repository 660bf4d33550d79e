/*
 * attempt: the processor's argv and environment, and the worker side of a supervised run. The
 * supervisor process itself lives in supervise.c, templates in template.c, the export's
 * materialization in materialize.c.
 */
#include "eshard/attempt.h"
#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/proc.h"
#include "eshard/template.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_GRACE_SECS 10.0
#define DEFAULT_TICK_SECS 1.0
#define POLL_MS 100
/* How long past a due stop (plus grace) the worker still waits for the supervisor's report;
 * longer than the supervisor's own SIGKILL sweep (30 s), so a slow sweep is not cut short. */
#define REPORT_SLACK_SECS 45.0
/* The supervisor's end of the socket pair, as the supervisor sees it. */
#define SUPERVISOR_FD 3

/* ---- argv and environment vectors (struct es_strv, buf.h) ---- */

static int vec_pushdup(struct es_strv *a, const char *s)
{
	return es_strv_push(a, strdup(s));
}


/* Hand the vector over, never as NULL: an empty vector becomes { NULL }. */
static int vec_finish(struct es_strv *a, char ***out, size_t *n)
{
	if (!a->v) {
		a->v = calloc(1, sizeof(char *));
		if (!a->v)
			return es_error(ES_ENOMEM, "out of memory");
		a->cap = 1;
	}
	*out = a->v;
	if (n)
		*n = a->n;
	a->v = NULL;
	a->n = a->cap = 0;
	return 0;
}

void es_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}

/* ---- argv and environment ---- */

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int check_spec(const struct es_attempt_spec *s)
{
	if (!s || !s->job_dir || !s->job_id || !s->shard_id || !s->input_path || !s->attempt_dir ||
	    !s->token || !s->proc || !s->ray_address)
		return es_error(ES_EINTERNAL, "incomplete attempt specification");
	if (s->job_dir[0] != '/' || s->attempt_dir[0] != '/' || s->input_path[0] != '/')
		return es_error(ES_EINTERNAL, "attempt paths must be absolute");
	return 0;
}

static int split_blanks(const char *cmd, struct es_strv *argv)
{
	int rc = 0;
	size_t before = argv->n;
	for (const char *p = cmd; *p && !rc;) {
		while (is_blank(*p))
			p++;
		const char *start = p;
		while (*p && !is_blank(*p))
			p++;
		if (p > start)
			rc = es_strv_push(argv, strndup(start, (size_t)(p - start)));
	}
	if (!rc && argv->n == before)
		rc = es_error(ES_EINVAL, "the Data-Juicer process command '%s' is empty", cmd);
	return rc;
}

int es_attempt_check_processor(const struct es_processor *p)
{
	struct es_strv argv = { 0 };
	const char *what = "--process-cmd";
	int rc = 0;
	if (p->kind == ES_PROC_COMMAND) {
		struct es_template_vars tv = { "in.jsonl", "out.jsonl", "attempt", "shard", "job" };
		rc = p->command ? es_template_expand(p->command, &tv, &argv) : 0;
	} else if (p->dj_process && !p->dj_root) {
		what = "--dj-process";
		rc = split_blanks(p->dj_process, &argv);
	} else if (p->python && *p->python) {
		what = "--python";
		rc = vec_pushdup(&argv, p->python);
	}
	if (!rc && argv.n)
		rc = es_proc_check_program(argv.v[0], what);
	es_strv_free(&argv);
	return rc;
}

int es_attempt_argv(const struct es_attempt_spec *s, char ***argv_out, size_t *argc, char **cwd)
{
	int rc = check_spec(s);
	if (rc)
		return rc;
	struct es_strv argv = { 0 };
	struct es_buf root = ES_BUF_INIT;
	const struct es_processor *p = s->proc;
	if (cwd)
		*cwd = NULL;
	const char *A = s->attempt_dir, *J = s->job_dir;

	if (p->kind == ES_PROC_COMMAND) {
		struct es_buf out = ES_BUF_INIT;
		rc = es_path_join(&out, A, "ray-output.jsonl");
		struct es_template_vars tv = { s->input_path, out.data, A, s->shard_id, J };
		if (!rc)
			rc = es_template_expand(p->command, &tv, &argv);
		es_buf_free(&out);
	} else {
		if (p->dj_root && *p->dj_root) {
			rc = es_fs_resolve(p->dj_root, &root);
			if (!rc)
				rc = vec_pushdup(&argv, p->python && *p->python ? p->python : "python3");
			if (!rc)
				rc = es_strv_pushf(&argv, "%s/tools/process_data.py",
					       strcmp(root.data, "/") ? root.data : "");
			if (!rc && cwd && !(*cwd = strdup(root.data)))
				rc = es_error(ES_ENOMEM, "out of memory");
		} else if (p->dj_process) {
			rc = split_blanks(p->dj_process, &argv);
		} else {
			rc = vec_pushdup(&argv, "dj-process");
		}
		char tok12[13];
		snprintf(tok12, sizeof(tok12), "%s", s->token);
		if (!rc) rc = vec_pushdup(&argv, "--config");
		if (!rc) rc = es_strv_pushf(&argv, "%s/recipe.yaml", J);
		if (!rc) rc = vec_pushdup(&argv, "--dataset_path");
		if (!rc) rc = vec_pushdup(&argv, s->input_path);
		if (!rc) rc = vec_pushdup(&argv, "--export_path");
		if (!rc) rc = es_strv_pushf(&argv, "%s/ray-output.jsonl", A);
		if (!rc) rc = vec_pushdup(&argv, "--executor_type");
		if (!rc) rc = vec_pushdup(&argv, "ray");
		if (!rc) rc = vec_pushdup(&argv, "--ray_address");
		if (!rc) rc = vec_pushdup(&argv, s->ray_address);
		if (!rc) rc = vec_pushdup(&argv, "--work_dir");
		if (!rc) rc = es_strv_pushf(&argv, "%s/work", A);
		if (!rc) rc = vec_pushdup(&argv, "--job_id");
		if (!rc) rc = es_strv_pushf(&argv, "%s_%s_%s", s->job_id, s->shard_id, tok12);
		if (!rc) rc = vec_pushdup(&argv, "--event_log_dir");
		if (!rc) rc = es_strv_pushf(&argv, "%s/logs", A);
		if (!rc) rc = vec_pushdup(&argv, "--checkpoint_dir");
		if (!rc) rc = es_strv_pushf(&argv, "%s/checkpoints", A);
		if (!rc) rc = vec_pushdup(&argv, "--partition_dir");
		if (!rc) rc = es_strv_pushf(&argv, "%s/partitions", A);
	}
	if (!rc)
		rc = vec_finish(&argv, argv_out, argc);
	if (rc) {
		es_strv_free(&argv);
		if (cwd) {
			free(*cwd);
			*cwd = NULL;
		}
	}
	es_buf_free(&root);
	return rc;
}

int es_attempt_env(const struct es_attempt_spec *s, char *const *env, char ***out)
{
	int rc = check_spec(s);
	if (rc)
		return rc;
	const struct es_processor *p = s->proc;
	struct es_buf cache = ES_BUF_INIT, root = ES_BUF_INIT, produced = ES_BUF_INIT, sid = ES_BUF_INIT,
		      adir = ES_BUF_INIT;
	struct es_strv v = ES_STRV_INIT;
	/* Set here, so that exactly one of each remains even when the worker has them. */
	static const char *const drop[] = { "DJ_PRODUCED_DATA_DIR", "ESHARD_SHARD_ID", "ESHARD_ATTEMPT_DIR", NULL };
	const char *vars[4] = { NULL };
	rc = es_path_join(&cache, s->job_dir, "cache");
	if (!rc)
		rc = es_buf_printf(&produced, "DJ_PRODUCED_DATA_DIR=%s/produced", s->attempt_dir);
	vars[0] = produced.data;
	if (!rc && p->kind == ES_PROC_COMMAND) {
		rc = es_buf_printf(&sid, "ESHARD_SHARD_ID=%s", s->shard_id);
		if (!rc)
			rc = es_buf_printf(&adir, "ESHARD_ATTEMPT_DIR=%s", s->attempt_dir);
		vars[1] = sid.data;
		vars[2] = adir.data;
	}
	int dj_root = p->kind == ES_PROC_DATA_JUICER && p->dj_root && *p->dj_root;
	if (!rc && dj_root)
		rc = es_fs_resolve(p->dj_root, &root);
	struct es_env_spec es = {
		.base = env, .cache_dir = cache.data, .ray_address = s->ray_address,
		.pythonpath_first = dj_root ? root.data : NULL, .drop = drop, .vars = vars,
	};
	if (!rc)
		rc = es_env_child(&es, &v);
	if (!rc)
		rc = vec_finish(&v, out, NULL);
	es_strv_free(&v);
	es_buf_free(&cache);
	es_buf_free(&root);
	es_buf_free(&produced);
	es_buf_free(&sid);
	es_buf_free(&adir);
	return rc;
}

/* ---- the worker side of a supervised run ---- */

static void append_log(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append_log(int fd, const char *fmt, ...)
{
	struct es_buf b = ES_BUF_INIT;
	va_list ap;
	va_start(ap, fmt);
	int rc = es_buf_vprintf(&b, fmt, ap);
	va_end(ap);
	/* The log is only for people; a failed write must not change the attempt's outcome. */
	if (!rc) {
		es_log_quiet_begin();
		es_fs_write_all(fd, b.data, b.len, "process.log");
		es_log_quiet_end();
	}
	es_buf_free(&b);
}

/* Python's OSError text, which the reference writes after "Unable to start ...: ". */
static void os_error_text(char *out, size_t n, int err, const char *what)
{
	snprintf(out, n, "[Errno %d] %s: '%s'", err, strerror(err), what);
}

struct run_state {
	const struct es_attempt_spec *s;
	struct es_attempt_outcome *out;
	char **argv, **env, *cwd;
	int log_fd;             /* A/process.log */
	int fd;                 /* worker's end of the socket pair */
	int sup_fd;             /* the supervisor's end, until it is started */
	struct es_proc sup;     /* the supervisor; its pid leads its process group */
	pid_t child;            /* the processor, once "started" was read; its process group */
	int reported;           /* a "status" or "error" line was read */
	int stop_sent;          /* 1: due, 2: sent */
	int killed;             /* the worker killed the supervisor's group itself */
	double t0;
	char line[4096];
	size_t line_len;
};

static void parse_report(struct run_state *r, const char *l)
{
	if (!strncmp(l, "started ", 8)) {
		int64_t pid;
		if (es_parse_i64(l + 8, &pid) == 0 && pid > 0) {
			r->child = (pid_t)pid;
			r->out->started = 1;
		}
	} else if (!strncmp(l, "status ", 7)) {
		int rc = 0, to = 0, sig = 0;
		if (sscanf(l + 7, "%d %d %d", &rc, &to, &sig) >= 2) {
			r->out->return_code = rc;
			r->out->supervisor_signal = sig;
			if (to)
				r->out->timed_out = 1;
			r->reported = 1;
		}
	} else if (!strncmp(l, "error ", 6)) {
		int err = 0, off = 0;
		char stage[16];
		if (sscanf(l + 6, "%d %15s %n", &err, stage, &off) >= 2 && off > 0) {
			os_error_text(r->out->start_error, sizeof(r->out->start_error), err, l + 6 + off);
			r->out->started = 0;
			r->out->return_code = -1;
			r->reported = 1;
		}
	}
}

/* Read what the supervisor wrote; returns 1 at EOF. */
static int read_reports(struct run_state *r)
{
	char buf[1024];
	ssize_t n = read(r->fd, buf, sizeof(buf));
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : 1;
	if (n == 0)
		return 1;
	for (ssize_t i = 0; i < n; i++) {
		if (buf[i] == '\n') {
			r->line[r->line_len] = '\0';
			parse_report(r, r->line);
			r->line_len = 0;
		} else if (r->line_len + 1 < sizeof(r->line)) {
			r->line[r->line_len++] = buf[i];
		}
	}
	return 0;
}

static void ask_stop(struct run_state *r)
{
	/* EPIPE (the supervisor is already gone) is fine: its report or EOF follows. */
	while (send(r->fd, "T", 1, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

/* The supervisor: its own process group, so that the worker's job-control and terminal
 * signals reach only the worker, which decides; stdin and stdout /dev/null, stderr the log (its
 * one descriptor of it: every close of one is a request to a FUSE file server), its end of the
 * socket pair as descriptor 3 and nothing else (proc resets its signals). */
static int spawn_supervisor(const struct es_attempt_spec *s, char **argv, const char *cwd,
			    char **env, int log_fd, int sup_fd, struct es_proc *sup)
{
	struct es_strv sv = ES_STRV_INIT;
	double grace = s->grace_secs > 0 ? s->grace_secs : DEFAULT_GRACE_SECS;
	int rc = vec_pushdup(&sv, s->supervisor_exe);
	if (!rc) rc = vec_pushdup(&sv, "__supervise");
	if (!rc) rc = vec_pushdup(&sv, "--fd");
	if (!rc) rc = es_strv_pushf(&sv, "%d", SUPERVISOR_FD);
	if (!rc) rc = vec_pushdup(&sv, "--grace");
	if (!rc) rc = es_strv_pushf(&sv, "%.17g", grace);
	if (!rc && s->timeout_secs > 0) {
		rc = vec_pushdup(&sv, "--timeout");
		if (!rc) rc = es_strv_pushf(&sv, "%.17g", s->timeout_secs);
	}
	if (!rc && cwd) {
		rc = vec_pushdup(&sv, "--cwd");
		if (!rc) rc = vec_pushdup(&sv, cwd);
	}
	/* Data-Juicer writes process.log itself (supervise.c, open_output: its threads' writes are
	 * bigger than a pipe keeps whole); a command writes into the supervisor's pipe. */
	if (!rc && s->proc->kind != ES_PROC_COMMAND) {
		rc = vec_pushdup(&sv, "--output");
		if (!rc) rc = vec_pushdup(&sv, "log");
	}
	if (!rc) rc = vec_pushdup(&sv, "--");
	for (char **a = argv; !rc && *a; a++)
		rc = vec_pushdup(&sv, *a);
	if (!rc) {
		struct es_proc_spec ps;
		es_proc_spec_init(&ps, sv.v);
		ps.envp = env;
		ps.fd[0] = ps.fd[1] = ES_PROC_DEVNULL;
		ps.fd[2] = log_fd;
		ps.extra = &sup_fd;
		ps.n_extra = 1;
		ps.new_group = 1;
		es_log_quiet_begin(); /* the caller words the start failure like the reference */
		rc = es_proc_spawn(&ps, sup);
		es_log_quiet_end();
	}
	es_strv_free(&sv);
	return rc;
}

static double elapsed_since(double t0)
{
	return es_time_mono() - t0;
}

static const char *who(const struct es_attempt_spec *s)
{
	return s->proc->kind == ES_PROC_COMMAND ? "processor" : "Data-Juicer";
}

/* argv, environment, A/work/<job_id> (Data-Juicer's: it fails without it; a command is not
 * given it, and two folders a shard are two MKDIR requests at a file server), the log and the
 * socket pair. */
static int run_setup(struct run_state *r)
{
	const struct es_attempt_spec *s = r->s;
	struct es_buf path = ES_BUF_INIT;
	char tok12[13];
	snprintf(tok12, sizeof(tok12), "%s", s->token);
	int rc = es_attempt_argv(s, &r->argv, NULL, &r->cwd);
	if (!rc)
		rc = es_attempt_env(s, NULL, &r->env);
	if (!rc && s->proc->kind != ES_PROC_COMMAND) {
		rc = es_buf_printf(&path, "%s/work/%s_%s_%s", s->attempt_dir, s->job_id, s->shard_id, tok12);
		if (!rc)
			rc = es_fs_mkdirs(path.data, 0777);
	}
	if (!rc)
		rc = es_path_join(&path, s->attempt_dir, "process.log");
	if (!rc && (r->log_fd = open(path.data, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0666)) < 0)
		rc = es_error_errno(ES_EIO, "cannot open '%s'", path.data);
	int sv[2];
	if (!rc && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		rc = es_error_errno(ES_EIO, "cannot create a socket pair for the supervisor");
	else if (!rc) {
		r->fd = sv[0];
		r->sup_fd = sv[1];
	}
	es_buf_free(&path);
	return rc;
}

/* Ask for a stop once it is due (the stop flag or tick()); returns the new hard deadline. */
static double check_stop(struct run_state *r, double *next_tick, double hard_deadline)
{
	const struct es_attempt_spec *s = r->s;
	double tick_secs = s->tick_secs > 0 ? s->tick_secs : DEFAULT_TICK_SECS;
	double grace = s->grace_secs > 0 ? s->grace_secs : DEFAULT_GRACE_SECS;
	double now = es_time_mono();
	if (!r->stop_sent && s->stop_flag && *s->stop_flag) {
		r->out->preempted = 1;
		r->stop_sent = 1;
		if (s->on_stop)
			s->on_stop(s->tick_arg);
	}
	if (!r->stop_sent && s->tick && now >= *next_tick) {
		*next_tick = now + tick_secs;
		if (s->tick(s->tick_arg)) {
			r->out->aborted = 1;
			r->stop_sent = 1;
		}
	}
	if (r->stop_sent == 1) {
		ask_stop(r);
		r->stop_sent = 2;
		double d = es_time_mono() + grace + REPORT_SLACK_SECS;
		if (!hard_deadline || d < hard_deadline)
			hard_deadline = d;
	}
	return hard_deadline;
}

/* Poll every 100 ms until the supervisor's report ends (EOF), or until the hard deadline,
 * when the worker kills what it knows itself. */
static int run_watch(struct run_state *r)
{
	const struct es_attempt_spec *s = r->s;
	double grace = s->grace_secs > 0 ? s->grace_secs : DEFAULT_GRACE_SECS;
	double next_tick = r->t0 + (s->tick_secs > 0 ? s->tick_secs : DEFAULT_TICK_SECS);
	double hard_deadline = s->timeout_secs > 0 ? r->t0 + s->timeout_secs + grace + REPORT_SLACK_SECS : 0;
	for (;;) {
		hard_deadline = check_stop(r, &next_tick, hard_deadline);
		if (hard_deadline && es_time_mono() >= hard_deadline) {
			/* The supervisor is wedged or gone without a report: take down what we know. */
			es_proc_kill_group(r->sup.pid, SIGKILL);
			if (r->child > 0)
				es_proc_kill_group(r->child, SIGKILL);
			append_log(r->log_fd, "\n[eshard-mpi] the supervisor did not report in time; killed it\n");
			r->killed = 1;
			return 0;
		}
		struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
		int pr = poll(&pfd, 1, POLL_MS);
		if (pr < 0 && errno != EINTR) {
			int rc = es_error_errno(ES_EIO, "cannot poll the supervisor");
			es_proc_kill_group(r->sup.pid, SIGKILL);
			return rc;
		}
		if (pr > 0 && read_reports(r))
			return 0;
	}
}

/* Reap the supervisor and settle the outcome from its report, or from how it ended. */
static void run_collect(struct run_state *r)
{
	struct es_attempt_outcome *out = r->out;
	int st = 0;
	int reaped = es_proc_wait(r->sup.pid, &st, 0) == 1;
	out->duration_secs = elapsed_since(r->t0);
	if (r->killed) {
		out->return_code = -SIGKILL;
		if (!r->stop_sent)
			out->timed_out = 1;
	} else if (!r->reported) {
		/* The supervisor ended without a final line. Before "started" it never ran the
		 * processor (a wrong supervisor_exe, say); after, it was killed and the processor
		 * got SIGKILL through its parent-death signal. */
		char how[64] = "ended";
		if (reaped)
			es_proc_describe_status(st, how, sizeof(how));
		if (r->child > 0)
			es_proc_kill_group(r->child, SIGKILL);
		if (!out->started) {
			snprintf(out->start_error, sizeof(out->start_error),
				 "the supervisor '%s __supervise' %s before starting it", r->s->supervisor_exe, how);
			out->return_code = -1;
		} else {
			append_log(r->log_fd, "\n[eshard-mpi] the supervisor %s without a report\n", how);
			out->return_code = reaped && WIFSIGNALED(st) ? -WTERMSIG(st) : -SIGKILL;
			if (reaped && WIFSIGNALED(st))
				out->supervisor_signal = WTERMSIG(st);
		}
	}
}

int es_attempt_run(const struct es_attempt_spec *s, struct es_attempt_outcome *out)
{
	memset(out, 0, sizeof(*out));
	out->return_code = -1;
	int rc = check_spec(s);
	if (!rc && !s->supervisor_exe)
		rc = es_error(ES_EINTERNAL, "no supervisor executable given");
	if (rc)
		return rc;
	struct run_state r = { .s = s, .out = out, .log_fd = -1, .fd = -1, .sup_fd = -1 };
	if ((rc = run_setup(&r)) != 0)
		goto done;
	r.t0 = es_time_mono();
	int started = spawn_supervisor(s, r.argv, r.cwd, r.env, r.log_fd, r.sup_fd, &r.sup) == 0;
	close(r.sup_fd);
	r.sup_fd = -1;
	if (!started) {
		os_error_text(out->start_error, sizeof(out->start_error), r.sup.err ? r.sup.err : EIO, s->supervisor_exe);
		out->duration_secs = elapsed_since(r.t0);
	} else {
		rc = run_watch(&r);
		run_collect(&r);
	}
	if (!out->started) {
		out->return_code = -1;
		if (!out->start_error[0])
			snprintf(out->start_error, sizeof(out->start_error), "unknown error");
		append_log(r.log_fd, "\nUnable to start %s: %s\n", who(s), out->start_error);
	}
done:
	if (r.fd >= 0)
		close(r.fd);
	if (r.sup_fd >= 0)
		close(r.sup_fd);
	if (r.log_fd >= 0 && close(r.log_fd) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot close '%s/process.log'", s->attempt_dir);
	es_argv_free(r.argv);
	es_argv_free(r.env);
	free(r.cwd);
	return rc;
}

