/*
 * proc: starting, waiting for and killing processes; child environments (see proc.h).
 */
#include "eshard/proc.h"
#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/env.h"
#include "eshard/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

void es_proc_spec_init(struct es_proc_spec *s, char *const *argv)
{
	memset(s, 0, sizeof(*s));
	s->argv = argv;
	for (int i = 0; i < 3; i++)
		s->fd[i] = i;
}

const char *es_proc_signal_name(int sig, char *out, size_t n)
{
	const char *abbrev = sig > 0 ? sigabbrev_np(sig) : NULL;
	snprintf(out, n, "SIG%s", abbrev ? abbrev : "?");
	return out;
}

/* 1 when path is an executable regular file. */
static int is_runnable(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int es_proc_check_program(const char *prog, const char *what)
{
	if (strchr(prog, '/')) {
		struct stat st;
		if (stat(prog, &st) != 0)
			return es_error(ES_EUSAGE, "%s: program '%s' does not exist", what, prog);
		if (!is_runnable(prog))
			return es_error(ES_EUSAGE, "%s: program '%s' is not an executable file", what, prog);
		return 0;
	}
	const char *path = getenv("PATH");
	struct es_buf cand = ES_BUF_INIT;
	int found = 0;
	for (const char *d = path ? path : "/usr/local/bin:/usr/bin:/bin"; !found;) {
		const char *colon = strchr(d, ':');
		size_t n = colon ? (size_t)(colon - d) : strlen(d);
		es_buf_reset(&cand);
		if (!es_buf_add(&cand, n ? d : ".", n ? n : 1) && !es_buf_addc(&cand, '/') && !es_buf_adds(&cand, prog))
			found = is_runnable(cand.data);
		if (!colon)
			break;
		d = colon + 1;
	}
	es_buf_free(&cand);
	return found ? 0 : es_error(ES_EUSAGE, "%s: program '%s' was not found on PATH", what, prog);
}

int es_proc_is_stop_signal(int sig)
{
	return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGKILL;
}

int es_proc_stop_signal_of(int status)
{
	if (WIFSIGNALED(status) && es_proc_is_stop_signal(WTERMSIG(status)))
		return WTERMSIG(status);
	if (WIFEXITED(status) && WEXITSTATUS(status) > 128 && es_proc_is_stop_signal(WEXITSTATUS(status) - 128))
		return WEXITSTATUS(status) - 128;
	return 0;
}

void es_proc_describe_status(int status, char *out, size_t n)
{
	char name[32];
	if (WIFEXITED(status))
		snprintf(out, n, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(out, n, "was killed by signal %d (%s)", WTERMSIG(status),
			 es_proc_signal_name(WTERMSIG(status), name, sizeof(name)));
	else
		snprintf(out, n, "ended with wait status %d", status);
}

/* ---- the child's descriptor table ---- */

/* The sources of the child's descriptors 0 .. n-1, each at a number >= n so that no dup2()
 * onto a lower target can overwrite a source that is still to be copied: the parent's own
 * descriptor when it is there already, else a private copy (close-on-exec). No copy where none
 * is needed: on a FUSE file system every close of a descriptor of a file, the copy's in the
 * parent and again in the child, is a FLUSH request to the server. */
struct fdmap {
	int src[64];             /* ES_PROC_DEVNULL, the parent's descriptor, or a private copy */
	unsigned char own[64];   /* src[i] is a private copy, closed by fdmap_close */
	int n;
};

static void fdmap_close(struct fdmap *m)
{
	for (int i = 0; i < m->n; i++)
		if (m->own[i])
			close(m->src[i]);
	m->n = 0;
}

static int fdmap_init(struct fdmap *m, const struct es_proc_spec *s)
{
	m->n = 0;
	if (s->n_extra > sizeof(m->src) / sizeof(m->src[0]) - 3)
		return es_error(ES_EINTERNAL, "too many descriptors for a child (%zu)", s->n_extra);
	int n = 3 + (int)s->n_extra;
	for (int i = 0; i < n; i++) {
		int from = i < 3 ? s->fd[i] : s->extra[i - 3];
		int c = from, own = from != ES_PROC_DEVNULL && from < n;
		if (own && (c = fcntl(from, F_DUPFD_CLOEXEC, n)) < 0) {
			int rc = es_error_errno(ES_EIO, "cannot pass descriptor %d to a child as %d", from, i);
			fdmap_close(m);
			return rc;
		}
		m->own[m->n] = (unsigned char)own;
		m->src[m->n++] = c;
	}
	return 0;
}

/* ---- posix_spawn ---- */

static int spawn_posix(const struct es_proc_spec *s, const struct fdmap *m, pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int err = posix_spawn_file_actions_init(&fa);
	if (err)
		return err;
	if ((err = posix_spawnattr_init(&at)) != 0) {
		posix_spawn_file_actions_destroy(&fa);
		return err;
	}
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
	if (s->new_group || s->join_group > 0) {
		flags |= POSIX_SPAWN_SETPGROUP;
		err = posix_spawnattr_setpgroup(&at, s->new_group ? 0 : s->join_group);
	}
	if (!err) err = posix_spawnattr_setflags(&at, flags);
	if (!err) err = posix_spawnattr_setsigmask(&at, &none);
	if (!err) err = posix_spawnattr_setsigdefault(&at, &all);
	for (int i = 0; !err && i < m->n; i++)
		err = m->src[i] == ES_PROC_DEVNULL ? posix_spawn_file_actions_addopen(&fa, i, "/dev/null", O_RDWR, 0)
						   : posix_spawn_file_actions_adddup2(&fa, m->src[i], i);
	if (!err)
		err = posix_spawn_file_actions_addclosefrom_np(&fa, m->n);
	if (!err && s->cwd)
		err = posix_spawn_file_actions_addchdir_np(&fa, s->cwd);
	if (!err)
		err = posix_spawnp(pid, s->argv[0], &fa, &at, s->argv, s->envp ? s->envp : environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	return err;
}

/* ---- fork + exec, for a parent-death signal ---- */

struct exec_failure {
	int err;
	char stage; /* 'c' chdir, 'e' exec, 'd' descriptors */
};

static void child_fail(int fd, int err, char stage)
{
	struct exec_failure f = { err, stage };
	ssize_t w;
	do
		w = write(fd, &f, sizeof(f));
	while (w < 0 && errno == EINTR);
	_exit(127);
}

static void close_from(int lo, int keep)
{
#ifdef SYS_close_range
	if (keep < lo && syscall(SYS_close_range, (unsigned)lo, ~0U, 0) == 0)
		return;
	if (keep >= lo && (keep == lo || syscall(SYS_close_range, (unsigned)lo, (unsigned)keep - 1, 0) == 0) &&
	    syscall(SYS_close_range, (unsigned)keep + 1, ~0U, 0) == 0)
		return;
#endif
	/* No close_range (Linux < 5.9): the slow way. Not async-signal-safe in theory (opendir
	 * allocates), but the child is single-threaded: its parent is. */
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		int fd = (int)strtol(de->d_name, NULL, 10);
		if (fd >= lo && fd != keep && fd != dirfd(d))
			close(fd);
	}
	closedir(d);
}

/* Only async-signal-safe calls until exec (the parent may have threads). */
static void child_setup_and_exec(const struct es_proc_spec *s, const struct fdmap *m, pid_t parent, int report)
{
	if (s->new_group)
		setpgid(0, 0);
	else if (s->join_group > 0)
		setpgid(0, s->join_group);
	if (s->pdeathsig) {
		prctl(PR_SET_PDEATHSIG, s->pdeathsig);
		if (getppid() != parent)
			_exit(127); /* the parent died before the death signal was armed */
	}
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &dfl, NULL);
	for (int i = 0; i < m->n; i++) {
		int fd = m->src[i];
		if (fd == ES_PROC_DEVNULL && (fd = open("/dev/null", O_RDWR)) < 0)
			child_fail(report, errno, 'd');
		if (fd != i && dup2(fd, i) < 0)
			child_fail(report, errno, 'd');
	}
	/* The report pipe stays (close-on-exec) until the exec; nothing else above the map. */
	close_from(m->n, report);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (s->cwd && chdir(s->cwd) != 0)
		child_fail(report, errno, 'c');
	if (s->envp)
		execvpe(s->argv[0], s->argv, s->envp);
	else
		execvp(s->argv[0], s->argv);
	child_fail(report, errno, 'e');
}

static int spawn_fork(const struct es_proc_spec *s, const struct fdmap *m, pid_t *pid, char *stage)
{
	int ep[2];
	if (pipe2(ep, O_CLOEXEC) != 0)
		return errno;
	/* The report pipe must not land on a number the map is about to fill. */
	for (int i = 0; i < 2; i++)
		if (ep[i] < m->n) {
			int h = fcntl(ep[i], F_DUPFD_CLOEXEC, m->n);
			int e = errno;
			close(ep[i]);
			if (h < 0) {
				close(ep[1 - i]);
				return e;
			}
			ep[i] = h;
		}
	pid_t parent = getpid();
	pid_t child = fork();
	if (child < 0) {
		int e = errno;
		close(ep[0]);
		close(ep[1]);
		return e;
	}
	if (child == 0)
		child_setup_and_exec(s, m, parent, ep[1]);
	/* Also from this side, so that the group exists before the parent's first kill(-pid). */
	if (s->new_group)
		setpgid(child, child);
	else if (s->join_group > 0)
		setpgid(child, s->join_group);
	close(ep[1]);
	struct exec_failure f;
	ssize_t got;
	do
		got = read(ep[0], &f, sizeof(f));
	while (got < 0 && errno == EINTR);
	close(ep[0]);
	if (got == (ssize_t)sizeof(f)) {
		es_proc_wait(child, NULL, 0);
		*stage = f.stage;
		return f.err ? f.err : EIO;
	}
	*pid = child;
	return 0;
}

int es_proc_spawn(const struct es_proc_spec *s, struct es_proc *p)
{
	memset(p, 0, sizeof(*p));
	if (!s->argv || !s->argv[0])
		return es_error(ES_EINTERNAL, "no program to start");
	struct fdmap m;
	int rc = fdmap_init(&m, s);
	if (rc)
		return rc;
	char stage = 'e';
	int err = s->pdeathsig ? spawn_fork(s, &m, &p->pid, &stage) : spawn_posix(s, &m, &p->pid);
	fdmap_close(&m);
	if (!err)
		return 0;
	p->pid = 0;
	p->err = err;
	/* posix_spawn cannot tell a failed chdir from a failed exec: look at the folder. */
	if (!s->pdeathsig && s->cwd && access(s->cwd, X_OK) != 0)
		stage = 'c';
	errno = err;
	if (stage == 'c') {
		p->stage = "chdir";
		return es_error_errno(ES_EIO, "cannot start '%s' in folder '%s'", s->argv[0], s->cwd);
	}
	p->stage = "exec";
	return es_error_errno(ES_EIO, "cannot start '%s'", s->argv[0]);
}

int es_proc_wait(pid_t pid, int *status, int nohang)
{
	int st = 0;
	for (;;) {
		pid_t w = waitpid(pid, &st, nohang ? WNOHANG : 0);
		if (w == pid) {
			if (status)
				*status = st;
			return 1;
		}
		if (w == 0)
			return 0;
		if (errno != EINTR)
			return es_error_errno(ES_EIO, "cannot wait for process %d", (int)pid);
	}
}

int es_proc_kill_group(pid_t pgid, int sig)
{
	if (pgid <= 1)
		return es_error(ES_EINTERNAL, "refusing to signal process group %d", (int)pgid);
	if (kill(-pgid, sig) != 0 && errno != ESRCH)
		return es_error_errno(ES_EIO, "cannot signal process group %d", (int)pgid);
	return 0;
}

/* ---- capture ---- */

void es_proc_result_free(struct es_proc_result *r)
{
	es_buf_free(&r->out);
	es_buf_free(&r->err_text);
}

/* Read what is there; close at EOF. Bytes past max are dropped (and flagged when overflow). */
static void drain(int *fd, struct es_buf *b, size_t max, int *overflow, int *open_fds)
{
	char chunk[65536];
	ssize_t n = read(*fd, chunk, sizeof(chunk));
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		close(*fd);
		*fd = -1;
		(*open_fds)--;
		return;
	}
	if (b->len + (size_t)n > max || es_buf_add(b, chunk, (size_t)n)) {
		if (overflow)
			*overflow = 1;
	}
}

int es_proc_capture(const struct es_proc_spec *s, size_t max_out, size_t max_err, double timeout_secs,
		    struct es_proc_result *r)
{
	memset(r, 0, sizeof(*r));
	r->out = (struct es_buf)ES_BUF_INIT;
	r->err_text = (struct es_buf)ES_BUF_INIT;
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 };
	if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) {
		int rc = es_error_errno(ES_EIO, "cannot create a pipe for '%s'", s->argv[0]);
		for (int i = 0; i < 2; i++) {
			if (po[i] >= 0) close(po[i]);
			if (pe[i] >= 0) close(pe[i]);
		}
		return rc;
	}
	struct es_proc_spec cs = *s;
	cs.fd[1] = po[1];
	cs.fd[2] = pe[1];
	struct es_proc p;
	es_log_quiet_begin();
	int rc = es_proc_spawn(&cs, &p);
	es_log_quiet_end();
	close(po[1]);
	close(pe[1]);
	if (rc) {
		r->err = p.err;
		r->stage = p.stage;
		close(po[0]);
		close(pe[0]);
		return rc == ES_EIO && p.err ? 0 : rc;
	}
	r->started = 1;
	struct pollfd fds[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
	int open_fds = 2;
	double deadline = timeout_secs > 0 ? es_time_mono() + timeout_secs : 0;
	while (open_fds && !r->overflow) {
		double left = deadline ? deadline - es_time_mono() : 3600.0;
		if (left <= 0) {
			r->timed_out = 1;
			break;
		}
		int n = poll(fds, 2, left > 3600.0 ? 3600000 : (int)(left * 1000.0) + 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = es_error_errno(ES_EIO, "cannot wait for '%s'", s->argv[0]);
			break;
		}
		if (fds[0].fd >= 0 && fds[0].revents)
			drain(&fds[0].fd, &r->out, max_out, &r->overflow, &open_fds);
		if (fds[1].fd >= 0 && fds[1].revents)
			drain(&fds[1].fd, &r->err_text, max_err, NULL, &open_fds);
	}
	for (int i = 0; i < 2; i++)
		if (fds[i].fd >= 0)
			close(fds[i].fd);
	if (open_fds) {
		if (s->new_group)
			es_proc_kill_group(p.pid, SIGKILL);
		else
			kill(p.pid, SIGKILL);
	}
	int wrc = es_proc_wait(p.pid, &r->status, 0);
	return rc ? rc : wrc < 0 ? wrc : 0;
}

/* ---- environments ---- */

const char *es_env_get(char *const *env, const char *name)
{
	size_t n = strlen(name);
	for (char *const *e = env ? env : environ; *e; e++)
		if (!strncmp(*e, name, n) && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

/* Is the name of kv one of the "K=V" entries of list? */
static int named_in(const char *kv, const char *const *list)
{
	for (; list && *list; list++) {
		const char *eq = strchr(*list, '=');
		size_t n = eq ? (size_t)(eq - *list) : strlen(*list);
		if (!strncmp(kv, *list, n) && (kv[n] == '=' || kv[n] == '\0'))
			return 1;
	}
	return 0;
}

/* Does env hold the name of the "K=V" entry kv? */
static int base_has(char *const *env, const char *kv)
{
	const char *const one[] = { kv, NULL };
	for (char *const *e = env; *e; e++)
		if (named_in(*e, one))
			return 1;
	return 0;
}

static int env_dropped(const char *kv, const struct es_env_spec *s)
{
	return es_env_is_launcher_identity(kv) || named_in(kv, s->drop) || named_in(kv, s->vars) ||
	       es_env_name_is(kv, "DJ_ELASTIC_SHARD_CHILD") ||
	       (s->pythonpath_first && es_env_name_is(kv, "PYTHONPATH"));
}

int es_env_child(const struct es_env_spec *s, struct es_strv *out)
{
	char *const *base = s->base ? s->base : environ;
	int rc = 0;
	es_strv_free(out);
	for (char *const *e = base; !rc && *e; e++)
		if (!env_dropped(*e, s))
			rc = es_strv_push(out, strdup(*e));
	if (!rc)
		rc = es_strv_pushf(out, "DJ_ELASTIC_SHARD_CHILD=1");
	const char *xdg = es_env_get(base, "XDG_CACHE_HOME");
	if (!rc && s->cache_dir && !xdg) {
		rc = es_strv_pushf(out, "XDG_CACHE_HOME=%s", s->cache_dir);
		xdg = s->cache_dir;
	}
	if (!rc && s->cache_dir && !es_env_get(base, "HF_HOME"))
		rc = es_strv_pushf(out, "HF_HOME=%s/huggingface", xdg);
	if (!rc && s->ray_address && strcmp(s->ray_address, "local") != 0)
		rc = es_strv_pushf(out, "RAY_ADDRESS=%s", s->ray_address);
	if (!rc && s->pythonpath_first) {
		const char *old = es_env_get(base, "PYTHONPATH");
		rc = old && *old ? es_strv_pushf(out, "PYTHONPATH=%s:%s", s->pythonpath_first, old)
				 : es_strv_pushf(out, "PYTHONPATH=%s", s->pythonpath_first);
	}
	for (const char *const *v = s->vars; !rc && v && *v; v++)
		rc = es_strv_push(out, strdup(*v));
	for (const char *const *v = s->defaults; !rc && v && *v; v++)
		if (!base_has(base, *v))
			rc = es_strv_push(out, strdup(*v));
	/* Ray lowers the worker processes it starts to nice 15 (its worker_niceness). Those
	 * workers are the job's processing: beside any other busy process of normal priority they
	 * would get a few percent of a core. They keep eshard-mpi's own priority, unless the
	 * environment says otherwise. */
	if (!rc && !base_has(base, ES_RAY_WORKER_NICENESS) && !named_in(ES_RAY_WORKER_NICENESS, s->vars) &&
	    !named_in(ES_RAY_WORKER_NICENESS, s->defaults))
		rc = es_strv_push(out, strdup(ES_RAY_WORKER_NICENESS));
	if (rc)
		es_strv_free(out);
	return rc;
}

#ifdef ESHARD_TEST_HOOKS
void es_proc_test_hook(const char *var)
{
	const char *cmd = getenv(var);
	if (!cmd || !*cmd)
		return;
	char *argv[] = { (char *)"/bin/sh", (char *)"-c", (char *)cmd, NULL };
	struct es_proc_spec ps;
	es_proc_spec_init(&ps, argv);
	struct es_proc p;
	int st = 0;
	if (es_proc_spawn(&ps, &p) != 0 || es_proc_wait(p.pid, &st, 0) != 1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		es_warning("test hook %s='%s' failed", var, cmd);
}
#endif

int es_proc_stat_read(pid_t pid, struct es_proc_stat *st)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n;
	do
		n = read(fd, buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "pid (comm) state ...": the name may hold spaces and ')', so it ends at the last ')'. */
	char *open_paren = strchr(buf, '(');
	char *close_paren = strrchr(buf, ')');
	if (!open_paren || !close_paren || close_paren < open_paren || close_paren[1] != ' ')
		return 0;
	size_t clen = (size_t)(close_paren - open_paren - 1);
	if (clen >= sizeof(st->comm))
		clen = sizeof(st->comm) - 1;
	memcpy(st->comm, open_paren + 1, clen);
	st->comm[clen] = '\0';
	int ppid, pgrp;
	/* After the name: 3 state, 4 ppid, 5 pgrp, 6..21, then 22 starttime. */
	if (sscanf(close_paren + 2, "%c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
		   &st->state, &ppid, &pgrp, &st->starttime) != 4)
		return 0;
	st->ppid = (pid_t)ppid;
	st->pgrp = (pid_t)pgrp;
	return 1;
}
