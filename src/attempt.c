/*
 * attempt: the processor's argv and environment, the worker side of a supervised run, and
 * output materialization. The supervisor process itself lives in supervise.c.
 */
#include "eshard/attempt.h"
#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/jsonl.h"
#include "eshard/linereader.h"
#include "eshard/log.h"
#include "eshard/prepare.h"
#include "eshard/sha.h"
#include "eshard/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
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

/* ---- command templates ---- */

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Split a template into words (quote removal only); on a syntax error, *why says which. */
static int split_template(const char *t, struct es_strv *words, const char **why)
{
	struct es_buf w = ES_BUF_INIT;
	int in_word = 0, rc = 0;
	*why = NULL;
	for (const char *p = t; !rc; p++) {
		char c = *p;
		if (c == '\0' || is_blank(c)) {
			if (in_word) {
				rc = es_strv_push(words, es_buf_detach(&w, NULL));
				in_word = 0;
			}
			if (c == '\0')
				break;
		} else if (c == '\'') {
			in_word = 1;
			const char *end = strchr(p + 1, '\'');
			if (!end) {
				*why = "unmatched single quote";
				break;
			}
			rc = es_buf_add(&w, p + 1, (size_t)(end - p - 1));
			p = end;
		} else if (c == '"') {
			in_word = 1;
			for (p++; !rc && *p != '"'; p++) {
				if (*p == '\0') {
					*why = "unmatched double quote";
					break;
				}
				/* As in sh: inside double quotes a backslash escapes only '"' and '\'. */
				if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
					p++;
				rc = es_buf_addc(&w, *p);
			}
			if (*why)
				break;
		} else if (c == '\\') {
			in_word = 1;
			if (p[1] == '\0') {
				*why = "ends with a lone backslash";
				break;
			}
			rc = es_buf_addc(&w, *++p);
		} else {
			in_word = 1;
			rc = es_buf_addc(&w, c);
		}
	}
	es_buf_free(&w);
	return *why ? ES_EINVAL : rc;
}

struct placeholder {
	const char *name;
	const char *value;
	int used;
};

/* Replace the placeholders of one word into out; ES_EINVAL with a message in why on a bad
 * brace or an unknown name. */
static int substitute(const char *word, struct placeholder *ph, size_t n_ph, struct es_buf *out,
		      struct es_buf *why)
{
	int rc = 0;
	es_buf_reset(out);
	for (const char *p = word; *p && !rc; p++) {
		if (p[0] == '{' && p[1] == '{') {
			rc = es_buf_addc(out, '{');
			p++;
		} else if (p[0] == '}' && p[1] == '}') {
			rc = es_buf_addc(out, '}');
			p++;
		} else if (*p == '}') {
			rc = es_buf_printf(why, "a single '}' in '%s' (write '}}' for a literal brace)", word);
			return rc ? rc : ES_EINVAL;
		} else if (*p == '{') {
			const char *end = strchr(p, '}');
			size_t i;
			for (i = 0; end && i < n_ph; i++)
				if (strlen(ph[i].name) == (size_t)(end - p - 1) &&
				    !strncmp(ph[i].name, p + 1, (size_t)(end - p - 1)))
					break;
			if (!end || i == n_ph) {
				if (!end)
					rc = es_buf_printf(why, "an unmatched '{' in '%s' (write '{{' for a literal brace)",
							   word);
				else
					rc = es_buf_printf(why, "unknown placeholder '%.*s' (known: {input} {output} "
							   "{attempt_dir} {shard_id} {job_dir})", (int)(end - p + 1), p);
				return rc ? rc : ES_EINVAL;
			}
			ph[i].used = 1;
			rc = es_buf_adds(out, ph[i].value);
			p = end;
		} else {
			rc = es_buf_addc(out, *p);
		}
	}
	return rc;
}

/* Expand a template into argv; errors are reported with code (usage at prepare, invalid job
 * state at run time). */
static int expand_template(const char *tmpl, struct placeholder *ph, size_t n_ph, int code,
			   struct es_strv *argv)
{
	struct es_strv words = { 0 };
	struct es_buf word = ES_BUF_INIT, why = ES_BUF_INIT;
	const char *syntax;
	int rc = split_template(tmpl ? tmpl : "", &words, &syntax);
	if (rc == ES_EINVAL)
		rc = es_error(code, "bad processor command template '%s': %s", tmpl, syntax);
	if (!rc && words.n == 0)
		rc = es_error(code, "bad processor command template '%s': it has no program", tmpl ? tmpl : "");
	for (size_t i = 0; !rc && i < words.n; i++) {
		rc = substitute(words.v[i], ph, n_ph, &word, &why);
		if (rc == ES_EINVAL)
			rc = es_error(code, "bad processor command template '%s': %s", tmpl, why.data);
		if (!rc)
			rc = es_strv_push(argv, es_buf_detach(&word, NULL));
	}
	es_buf_free(&word);
	es_buf_free(&why);
	es_strv_free(&words);
	return rc;
}

int es_command_template_check(const char *tmpl)
{
	struct placeholder ph[] = {
		{ "input", "x", 0 }, { "output", "x", 0 }, { "attempt_dir", "x", 0 },
		{ "shard_id", "x", 0 }, { "job_dir", "x", 0 },
	};
	struct es_strv argv = { 0 };
	int rc = expand_template(tmpl, ph, sizeof(ph) / sizeof(ph[0]), ES_EUSAGE, &argv);
	es_strv_free(&argv);
	if (!rc && (!ph[0].used || !ph[1].used))
		rc = es_error(ES_EUSAGE, "bad processor command template '%s': it must use both {input} and {output}",
			      tmpl);
	return rc;
}

/* ---- argv and environment ---- */

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
		struct placeholder ph[] = {
			{ "input", s->input_path, 0 }, { "output", out.data, 0 },
			{ "attempt_dir", A, 0 }, { "shard_id", s->shard_id, 0 }, { "job_dir", J, 0 },
		};
		if (!rc)
			rc = expand_template(p->command, ph, sizeof(ph) / sizeof(ph[0]), ES_EINVAL, &argv);
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

/* What the child must not inherit: the launcher's identity (util.c), and the variables set
 * below, so that exactly one of each remains. */
static int env_dropped(const char *kv)
{
	return es_env_is_launcher_identity(kv) || es_env_name_is(kv, "DJ_PRODUCED_DATA_DIR") ||
	       es_env_name_is(kv, "ESHARD_SHARD_ID") || es_env_name_is(kv, "ESHARD_ATTEMPT_DIR");
}

/* The value of name in env, or NULL when absent (an empty value counts as set, like
 * Python's os.environ.setdefault). */
static const char *env_get(char *const *env, const char *name)
{
	size_t n = strlen(name);
	for (; env && *env; env++)
		if (!strncmp(*env, name, n) && (*env)[n] == '=')
			return *env + n + 1;
	return NULL;
}

int es_attempt_env(const struct es_attempt_spec *s, char *const *env, char ***out)
{
	int rc = check_spec(s);
	if (rc)
		return rc;
	if (!env)
		env = environ;
	struct es_strv v = { 0 };
	const struct es_processor *p = s->proc;
	int dj_root = p->kind == ES_PROC_DATA_JUICER && p->dj_root && *p->dj_root;
	const char *xdg = env_get(env, "XDG_CACHE_HOME");
	const char *hf = env_get(env, "HF_HOME");
	const char *pypath = env_get(env, "PYTHONPATH");
	struct es_buf root = ES_BUF_INIT;

	for (char *const *e = env; !rc && *e; e++) {
		if (env_dropped(*e))
			continue;
		if (dj_root && !strncmp(*e, "PYTHONPATH=", 11))
			continue;
		rc = vec_pushdup(&v, *e);
	}
	if (!rc) rc = vec_pushdup(&v, "DJ_ELASTIC_SHARD_CHILD=1");
	if (!rc) rc = es_strv_pushf(&v, "DJ_PRODUCED_DATA_DIR=%s/produced", s->attempt_dir);
	if (!rc && !xdg)
		rc = es_strv_pushf(&v, "XDG_CACHE_HOME=%s/cache", s->job_dir);
	if (!rc && !hf) {
		if (xdg)
			rc = es_strv_pushf(&v, "HF_HOME=%s/huggingface", xdg);
		else
			rc = es_strv_pushf(&v, "HF_HOME=%s/cache/huggingface", s->job_dir);
	}
	if (!rc && strcmp(s->ray_address, "local") != 0)
		rc = es_strv_pushf(&v, "RAY_ADDRESS=%s", s->ray_address);
	if (!rc && dj_root) {
		rc = es_fs_resolve(p->dj_root, &root);
		if (!rc && pypath && *pypath)
			rc = es_strv_pushf(&v, "PYTHONPATH=%s:%s", root.data, pypath);
		else if (!rc)
			rc = es_strv_pushf(&v, "PYTHONPATH=%s", root.data);
	}
	if (!rc && p->kind == ES_PROC_COMMAND) {
		rc = es_strv_pushf(&v, "ESHARD_SHARD_ID=%s", s->shard_id);
		if (!rc)
			rc = es_strv_pushf(&v, "ESHARD_ATTEMPT_DIR=%s", s->attempt_dir);
	}
	es_buf_free(&root);
	if (!rc)
		rc = vec_finish(&v, out, NULL);
	if (rc)
		es_strv_free(&v);
	return rc;
}

/* ---- the worker side of a supervised run ---- */

/* Give fd a number of at least 10 (close-on-exec), so that the spawn's dup2() onto 0-3 can
 * never find its source already overwritten. */
static int high_fd(int fd)
{
	if (fd < 0 || fd >= 10)
		return fd;
	int h = fcntl(fd, F_DUPFD_CLOEXEC, 10);
	int e = errno;
	close(fd);
	errno = e;
	return h;
}

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
	int fd;                 /* worker's end of the socket pair */
	pid_t sup;              /* the supervisor */
	pid_t child;            /* the processor, once "started" was read; its process group */
	int reported;           /* a "status" or "error" line was read */
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

static int spawn_supervisor(const struct es_attempt_spec *s, char **argv, const char *cwd,
			    char **env, int log_fd, int sup_fd, pid_t *pid)
{
	struct es_strv sv = { 0 };
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
	if (!rc) rc = vec_pushdup(&sv, "--");
	for (char **a = argv; !rc && *a; a++)
		rc = vec_pushdup(&sv, *a);
	if (rc) {
		es_strv_free(&sv);
		return -ENOMEM;
	}

	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	int err = posix_spawn_file_actions_init(&fa);
	if (!err && (err = posix_spawnattr_init(&at)) != 0)
		posix_spawn_file_actions_destroy(&fa);
	if (err) {
		es_strv_free(&sv);
		return -err;
	}
	/* Its own process group, so that the worker's job-control and terminal signals reach
	 * only the worker, which decides; a clean signal state, whatever the worker (an MPI rank
	 * with its own handlers) has installed or blocked. */
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
	posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
	posix_spawn_file_actions_adddup2(&fa, sup_fd, SUPERVISOR_FD);
	err = posix_spawn(pid, s->supervisor_exe, &fa, &at, sv.v, env);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	es_strv_free(&sv);
	return -err;
}

static double elapsed_since(double t0)
{
	return es_time_mono() - t0;
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

	char **argv = NULL, **env = NULL, *cwd = NULL;
	struct es_buf path = ES_BUF_INIT;
	int log_fd = -1, sv[2] = { -1, -1 };
	const char *who = s->proc->kind == ES_PROC_COMMAND ? "processor" : "Data-Juicer";
	char tok12[13];
	snprintf(tok12, sizeof(tok12), "%s", s->token);

	rc = es_attempt_argv(s, &argv, NULL, &cwd);
	if (!rc)
		rc = es_attempt_env(s, NULL, &env);
	if (!rc)
		rc = es_buf_printf(&path, "%s/work/%s_%s_%s", s->attempt_dir, s->job_id, s->shard_id, tok12);
	if (!rc)
		rc = es_fs_mkdirs(path.data, 0777);
	if (!rc)
		rc = es_path_join(&path, s->attempt_dir, "process.log");
	if (!rc) {
		log_fd = high_fd(open(path.data, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0666));
		if (log_fd < 0)
			rc = es_error_errno(ES_EIO, "cannot open '%s'", path.data);
	}
	if (!rc) {
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
			rc = es_error_errno(ES_EIO, "cannot create a socket pair for the supervisor");
		} else {
			sv[0] = high_fd(sv[0]);
			sv[1] = high_fd(sv[1]);
			if (sv[0] < 0 || sv[1] < 0)
				rc = es_error_errno(ES_EIO, "cannot move the supervisor's socket");
		}
	}
	if (rc)
		goto done;

	struct run_state r = { .s = s, .out = out, .fd = sv[0] };
	double t0 = es_time_mono();
	int err = spawn_supervisor(s, argv, cwd, env, log_fd, sv[1], &r.sup);
	close(sv[1]);
	sv[1] = -1;
	if (err) {
		os_error_text(out->start_error, sizeof(out->start_error), -err, s->supervisor_exe);
		append_log(log_fd, "\nUnable to start %s: %s\n", who, out->start_error);
		out->duration_secs = elapsed_since(t0);
		goto done;
	}

	double tick_secs = s->tick_secs > 0 ? s->tick_secs : DEFAULT_TICK_SECS;
	double grace = s->grace_secs > 0 ? s->grace_secs : DEFAULT_GRACE_SECS;
	double next_tick = t0 + tick_secs;
	double hard_deadline = s->timeout_secs > 0 ? t0 + s->timeout_secs + grace + REPORT_SLACK_SECS : 0;
	int stop_sent = 0, killed = 0;
	for (;;) {
		double now = es_time_mono();
		if (!stop_sent && s->stop_flag && *s->stop_flag) {
			out->preempted = 1;
			stop_sent = 1;
			if (s->on_stop)
				s->on_stop(s->tick_arg);
		}
		if (!stop_sent && s->tick && now >= next_tick) {
			next_tick = now + tick_secs;
			if (s->tick(s->tick_arg)) {
				out->aborted = 1;
				stop_sent = 1;
			}
		}
		if (stop_sent == 1) {
			ask_stop(&r);
			stop_sent = 2;
			double d = es_time_mono() + grace + REPORT_SLACK_SECS;
			if (!hard_deadline || d < hard_deadline)
				hard_deadline = d;
		}
		if (hard_deadline && es_time_mono() >= hard_deadline) {
			/* The supervisor is wedged or gone without a report: take down what we know. */
			kill(-r.sup, SIGKILL);
			if (r.child > 0)
				kill(-r.child, SIGKILL);
			append_log(log_fd, "\n[eshard-mpi] the supervisor did not report in time; killed it\n");
			killed = 1;
			break;
		}
		struct pollfd pfd = { .fd = r.fd, .events = POLLIN };
		int pr = poll(&pfd, 1, POLL_MS);
		if (pr < 0 && errno != EINTR) {
			rc = es_error_errno(ES_EIO, "cannot poll the supervisor");
			kill(-r.sup, SIGKILL);
			break;
		}
		if (pr > 0 && read_reports(&r))
			break;
	}

	int st = 0;
	pid_t w;
	while ((w = waitpid(r.sup, &st, 0)) < 0 && errno == EINTR)
		;
	out->duration_secs = elapsed_since(t0);
	if (killed) {
		out->return_code = -SIGKILL;
		if (!stop_sent)
			out->timed_out = 1;
	} else if (!r.reported) {
		/* The supervisor ended without a final line. Before "started" it never ran the
		 * processor (a wrong supervisor_exe, say); after, it was killed and the processor
		 * got SIGKILL through its parent-death signal. */
		char how[64] = "ended";
		if (w == r.sup && WIFEXITED(st))
			snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(st));
		else if (w == r.sup && WIFSIGNALED(st))
			snprintf(how, sizeof(how), "was killed by signal %d", WTERMSIG(st));
		if (r.child > 0)
			kill(-r.child, SIGKILL);
		if (!out->started) {
			snprintf(out->start_error, sizeof(out->start_error),
				 "the supervisor '%s __supervise' %s before starting it", s->supervisor_exe, how);
			out->return_code = -1;
		} else {
			append_log(log_fd, "\n[eshard-mpi] the supervisor %s without a report\n", how);
			out->return_code = w == r.sup && WIFSIGNALED(st) ? -WTERMSIG(st) : -SIGKILL;
			if (w == r.sup && WIFSIGNALED(st))
				out->supervisor_signal = WTERMSIG(st);
		}
	}
	if (!out->started) {
		out->return_code = -1;
		if (!out->start_error[0])
			snprintf(out->start_error, sizeof(out->start_error), "unknown error");
		append_log(log_fd, "\nUnable to start %s: %s\n", who, out->start_error);
	}

done:
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	if (log_fd >= 0 && close(log_fd) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot close '%s/process.log'", s->attempt_dir);
	es_buf_free(&path);
	es_argv_free(argv);
	es_argv_free(env);
	free(cwd);
	return rc;
}

/* ---- materialization ---- */

struct sources {
	char **rel;             /* relative to the export folder */
	size_t n, cap;
};

static int sources_add(struct sources *s, const char *rel)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		char **v = realloc(s->rel, cap * sizeof(*v));
		if (!v)
			return es_error(ES_ENOMEM, "out of memory");
		s->rel = v;
		s->cap = cap;
	}
	if (!(s->rel[s->n] = strdup(rel)))
		return es_error(ES_ENOMEM, "out of memory");
	s->n++;
	return 0;
}

static void sources_free(struct sources *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->rel[i]);
	free(s->rel);
}

/* Collect the regular files below dir (rel is its path below the export root, "" at the
 * top). Like the reference's rglob: symlinks to files count, symlinked folders are not
 * entered, and only a file's own name is filtered. */
static int walk(const char *root, struct es_buf *rel, struct sources *out)
{
	struct es_buf path = ES_BUF_INIT;
	int rc = rel->len ? es_path_join(&path, root, rel->data) : es_buf_adds(&path, root);
	if (rc)
		return rc;
	DIR *d = opendir(path.data);
	if (!d) {
		rc = es_error_errno(ES_EIO, "cannot read folder '%s'", path.data);
		es_buf_free(&path);
		return rc;
	}
	size_t base = rel->len;
	struct dirent *e;
	for (;;) {
		errno = 0;
		if (!(e = readdir(d))) {
			if (errno)
				rc = es_error_errno(ES_EIO, "cannot read folder '%s'", path.data);
			break;
		}
		const char *name = e->d_name;
		if (!strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		struct stat st;
		if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = es_error_errno(ES_EIO, "cannot stat '%s/%s'", path.data, name);
			break;
		}
		es_buf_setlen(rel, base);
		if ((base && (rc = es_buf_addc(rel, '/'))) || (rc = es_buf_adds(rel, name)))
			break;
		if (S_ISDIR(st.st_mode)) {
			if ((rc = walk(root, rel, out)) != 0)
				break;
			continue;
		}
		if (S_ISLNK(st.st_mode) && fstatat(dirfd(d), name, &st, 0) != 0)
			continue; /* a dangling link is not a file */
		if (!S_ISREG(st.st_mode) || name[0] == '.' || name[0] == '_')
			continue;
		if ((rc = sources_add(out, rel->data)) != 0)
			break;
	}
	es_buf_setlen(rel, base);
	closedir(d);
	es_buf_free(&path);
	return rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The processed.jsonl being written: a 1 MiB write buffer whose bytes are hashed and
 * counted exactly as they go to write(). */
struct sink {
	int fd;
	const char *path;
	struct es_buf buf;
	struct es_sha sha;
	int64_t rows, bytes;
};

static int sink_flush(struct sink *k)
{
	if (!k->buf.len)
		return 0;
	es_sha_update(&k->sha, k->buf.data, k->buf.len);
	k->bytes += (int64_t)k->buf.len;
	int rc = es_fs_write_all(k->fd, k->buf.data, k->buf.len, k->path);
	es_buf_reset(&k->buf);
	return rc;
}

static int sink_line(struct sink *k, const char *line, size_t len)
{
	int rc = 0;
	if (k->buf.len + len + 1 > ((size_t)1 << 20))
		rc = sink_flush(k);
	if (!rc && len + 1 > ((size_t)1 << 20)) {
		/* A line larger than the buffer goes straight out, hashed the same way. */
		es_sha_update(&k->sha, line, len);
		es_sha_update(&k->sha, "\n", 1);
		k->bytes += (int64_t)len + 1;
		rc = es_fs_write_all(k->fd, line, len, k->path);
		if (!rc)
			rc = es_fs_write_all(k->fd, "\n", 1, k->path);
	} else if (!rc) {
		rc = es_buf_add(&k->buf, line, len);
		if (!rc)
			rc = es_buf_addc(&k->buf, '\n');
	}
	if (!rc)
		k->rows++;
	return rc;
}

static void raw_hash(void *arg, const void *p, size_t n)
{
	es_sha_update(arg, p, n);
}

/* Copy one source into the sink; fills its row count, raw size and raw hash. */
static int copy_source(struct es_jsonl *jl, const char *path, size_t max_line, struct sink *k,
		       struct es_output_file *f)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return es_error_errno(ES_EIO, "cannot open '%s'", path);
	struct es_sha sha;
	int rc = es_sha_init(&sha);
	if (rc) {
		close(fd);
		return rc;
	}
	struct es_line_reader *r = es_line_reader_new(fd, max_line, path);
	if (!r)
		rc = es_error(ES_ENOMEM, "out of memory");
	else
		es_line_reader_set_raw_cb(r, raw_hash, &sha);
	const char *line;
	size_t len;
	int has_nl, got;
	while (!rc && (got = es_line_reader_next(r, &line, &len, &has_nl)) != 0) {
		if (got < 0) {
			rc = got;
			break;
		}
		rc = es_jsonl_validate(jl, line, len, path, es_line_reader_lineno(r));
		if (!rc)
			rc = sink_line(k, line, len);
		if (!rc)
			f->rows++;
	}
	if (!rc) {
		f->size_bytes = (int64_t)es_line_reader_bytes(r);
		rc = es_sha_final(&sha, f->sha256);
	} else {
		es_sha_abort(&sha);
	}
	es_line_reader_free(r);
	close(fd);
	return rc;
}

void es_materialized_free(struct es_materialized *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_files; i++)
		free(m->files[i].path);
	free(m->files);
	memset(m, 0, sizeof(*m));
}

int es_attempt_materialize(const char *job_dir, const char *attempt_dir, size_t max_line,
			   struct es_materialized *m)
{
	memset(m, 0, sizeof(*m));
	if (!max_line)
		max_line = ES_MAX_LINE_BYTES;
	size_t jl_len = strlen(job_dir);
	while (jl_len > 1 && job_dir[jl_len - 1] == '/')
		jl_len--;
	if (strncmp(attempt_dir, job_dir, jl_len) != 0 || attempt_dir[jl_len] != '/')
		return es_error(ES_EINTERNAL, "attempt folder '%s' is not inside the job folder '%s'",
				attempt_dir, job_dir);

	struct es_buf export = ES_BUF_INIT, tmp = ES_BUF_INIT, final = ES_BUF_INIT, src = ES_BUF_INIT,
		      rel = ES_BUF_INIT;
	struct sources sources = { 0 };
	struct sink k = { .fd = -1, .buf = ES_BUF_INIT };
	struct es_jsonl *jl = NULL;
	int single = 0, sha_live = 0;
	int rc = es_path_join(&export, attempt_dir, "ray-output.jsonl");
	if (!rc)
		rc = es_path_join(&final, attempt_dir, "processed.jsonl");
	if (rc)
		goto out;

	struct stat st;
	if (stat(export.data, &st) != 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			rc = es_error(ES_ENOENT, "Data-Juicer returned 0 but did not create %s", export.data);
		else
			rc = es_error_errno(ES_EIO, "cannot stat '%s'", export.data);
		goto out;
	}
	if (S_ISREG(st.st_mode)) {
		single = 1;
		rc = sources_add(&sources, "");
	} else if (S_ISDIR(st.st_mode)) {
		rc = walk(export.data, &rel, &sources);
		if (!rc && sources.n > 1)
			qsort(sources.rel, sources.n, sizeof(char *), cmp_str);
	} else {
		rc = es_error(ES_EINVAL, "Ray output is neither a file nor a folder: %s", export.data);
	}
	if (rc)
		goto out;

	if (sources.n && !(m->files = calloc(sources.n, sizeof(*m->files)))) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	if (!(jl = es_jsonl_new(NULL))) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = es_fs_open_temp(final.data, &tmp, &k.fd)) != 0)
		goto out;
	k.path = tmp.data;
	if ((rc = es_sha_init(&k.sha)) != 0)
		goto out;
	sha_live = 1;

	for (size_t i = 0; !rc && i < sources.n; i++) {
		struct es_output_file *f = &m->files[i];
		if (single)
			rc = es_buf_adds(&src, export.data);
		else
			rc = es_path_join(&src, export.data, sources.rel[i]);
		if (rc)
			break;
		if (!(f->path = strdup(src.data + jl_len + 1))) {
			rc = es_error(ES_ENOMEM, "out of memory");
			break;
		}
		m->n_files = i + 1;
		rc = copy_source(jl, src.data, max_line, &k, f);
	}
	if (!rc)
		rc = sink_flush(&k);
	if (!rc && fsync(k.fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync '%s'", tmp.data);
	if (!rc) {
		struct stat ts;
		if (fstat(k.fd, &ts) != 0)
			rc = es_error_errno(ES_EIO, "cannot stat '%s'", tmp.data);
		else if ((int64_t)ts.st_size != k.bytes)
			rc = es_error(ES_EIO, "'%s' holds %lld bytes after writing %lld", tmp.data,
				      (long long)ts.st_size, (long long)k.bytes);
	}
	if (!rc && close(k.fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot close '%s'", tmp.data);
	k.fd = -1;
	if (!rc) {
		sha_live = 0;
		rc = es_sha_final(&k.sha, m->sha256);
	}
	if (!rc)
		rc = es_fs_rename(tmp.data, final.data);
	if (!rc) {
		m->rows = k.rows;
		m->size_bytes = k.bytes;
	}

out:
	if (sha_live)
		es_sha_abort(&k.sha);
	if (k.fd >= 0)
		close(k.fd);
	if (rc && tmp.len)
		unlink(tmp.data);
	if (rc)
		es_materialized_free(m);
	es_jsonl_free(jl);
	sources_free(&sources);
	es_buf_free(&k.buf);
	es_buf_free(&export);
	es_buf_free(&tmp);
	es_buf_free(&final);
	es_buf_free(&src);
	es_buf_free(&rel);
	return rc;
}
