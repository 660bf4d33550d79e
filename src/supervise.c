/*
 * supervise: the hidden "eshard-mpi __supervise" process that stands between a worker and
 * its processor child (see attempt.h for the contract and the line protocol).
 *
 * Why a separate process: a worker may be an MPI rank, which must not fork without exec and
 * cannot be trusted to clean up after itself when it is SIGKILLed. The supervisor is a fresh,
 * single-threaded exec of eshard-mpi, so it may fork freely; it is a child subreaper, so every
 * descendant of the processor, even one that called setsid() or double-forked, stays below
 * it and can be found by walking /proc; and it learns of the worker's death from EOF on a
 * socket only the worker holds, which no signal-based scheme (PR_SET_PDEATHSIG fires on the
 * death of the forking *thread*, not the process) gives reliably.
 *
 * The log, A/process.log, is our stderr and the one descriptor of it we hold (the worker gives
 * us /dev/null as stdout). The processor's tree never gets it: it writes into a pipe that we
 * copy into the log as the output comes (people follow the log while a shard runs). On a FUSE
 * file system every close() of a descriptor of the log, in every process that exits, is a FLUSH
 * request to the file server, so each command of a shell processor cost requests of its own;
 * through the pipe the log is closed a fixed number of times per attempt, however many
 * processes the processor starts (docs/design.md#supervised-children).
 */
#include "eshard/attempt.h"
#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/proc.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* After SIGKILL, how long to keep sweeping for processes that are slow to die (an
 * uninterruptible NFS wait, say) before reporting anyway. */
#define KILL_SWEEP_SECS 30.0
/* A/process.log: our notes, es_error() lines and the processor's output all go there. */
#define LOG_FD STDERR_FILENO

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
	got_signal = sig;
}

/* Only there so that SIGCHLD interrupts ppoll() below: the processor's exit is seen at once
 * instead of at the next 100 ms poll timeout. */
static void on_sigchld(int sig)
{
	(void)sig;
}

struct proc_entry {
	pid_t pid, ppid;
	char state;
	char mark;
};

static int cmp_pid(const void *a, const void *b)
{
	pid_t x = ((const struct proc_entry *)a)->pid, y = ((const struct proc_entry *)b)->pid;
	return (x > y) - (x < y);
}

/* Read /proc/<pid>/stat's state and parent; 0 when the process vanished meanwhile. */
static int read_stat(struct proc_entry *e)
{
	struct es_proc_stat st;
	if (!es_proc_stat_read(e->pid, &st))
		return 0;
	e->state = st.state;
	e->ppid = st.ppid;
	return 1;
}

/*
 * Signal every live descendant of this process (zombies do not count: they are dead and
 * their parent is either a descendant that gets the signal too, or us). sig 0 only counts.
 * Returns how many there were, or -1 when /proc cannot be read. /proc/<pid>/task/<tid>/children
 * would be cheaper but needs CONFIG_PROC_CHILDREN, which many kernels lack; /proc/<pid>/stat
 * is always there.
 */
static long signal_descendants(int sig)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	struct proc_entry *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		/* Out of memory: the processes listed so far are still signalled, without a line. */
		es_log_quiet_begin();
		int rc = es_grow(&v, &cap, n + 1, sizeof(*v));
		es_log_quiet_end();
		if (rc)
			break;
		struct proc_entry e = { .pid = (pid_t)strtol(de->d_name, NULL, 10) };
		if (read_stat(&e))
			v[n++] = e;
	}
	closedir(d);
	qsort(v, n, sizeof(*v), cmp_pid);
	pid_t self = getpid();
	/* Mark the tree below us: one pass per level of depth. */
	for (int changed = 1; changed;) {
		changed = 0;
		for (size_t i = 0; i < n; i++) {
			if (v[i].mark)
				continue;
			int parent_marked = v[i].ppid == self;
			if (!parent_marked) {
				struct proc_entry key = { .pid = v[i].ppid };
				struct proc_entry *p = bsearch(&key, v, n, sizeof(*v), cmp_pid);
				parent_marked = p && p->mark;
			}
			if (parent_marked) {
				v[i].mark = 1;
				changed = 1;
			}
		}
	}
	long live = 0;
	for (size_t i = 0; i < n; i++) {
		if (!v[i].mark || v[i].state == 'Z' || v[i].state == 'X')
			continue;
		live++;
		if (sig)
			kill(v[i].pid, sig);
	}
	free(v);
	return live;
}

/* The processor, as far as we know it. */
struct sup_run {
	pid_t child;             /* the processor; it leads its own process group */
	int done, status;        /* reaped, and its wait status */
	int timed_out;
	int out;                 /* the read end of its output pipe (non-blocking); -1: none, or EOF */
};

/* Collect every exited child (orphans reparented to us included); note the processor's. */
static void reap(struct sup_run *r)
{
	int st;
	pid_t w;
	while ((w = waitpid(-1, &st, WNOHANG)) > 0 || (w < 0 && errno == EINTR))
		if (w == r->child) {
			r->done = 1;
			r->status = st;
		}
}

/* ---- the processor's output ---- */

/* A failed write (a full disk) loses that part of the log, never the attempt: the log is for
 * people, and a child that wrote the log itself got no more than a failed write either. */
static void log_write(const char *data, size_t n)
{
	es_log_quiet_begin();
	es_fs_write_all(LOG_FD, data, n, "process.log");
	es_log_quiet_end();
}

/* Copy into the log what the pipe holds now, and no more, so that a tree that keeps writing
 * cannot hold us here. At EOF (every writer gone) the pipe is closed and *out becomes -1. */
static void copy_output(int *out)
{
	int held = 0;
	if (*out < 0)
		return;
	if (ioctl(*out, FIONREAD, &held) != 0)
		held = 0;
	char chunk[65536];
	size_t copied = 0;
	do {
		ssize_t n = read(*out, chunk, sizeof(chunk));
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			close(*out);
			*out = -1;
			return;
		}
		log_write(chunk, (size_t)n);
		copied += (size_t)n;
	} while (copied < (size_t)held);
}

/* Copy the output as it comes until EOF or the time until (once at least, also when it has
 * passed). */
static void pump(int *out, double until)
{
	while (*out >= 0) {
		double left = until - es_time_mono();
		struct pollfd pfd = { .fd = *out, .events = POLLIN };
		int n = poll(&pfd, 1, left > 0 ? (int)(left * 1000.0) + 1 : 0);
		if (n > 0)
			copy_output(out);
		else if (n == 0 || errno != EINTR)
			return;
		if (left <= 0)
			return;
	}
}

/* Wait ms, copying the output meanwhile: a tree that writes while it shuts down must not block
 * on a full pipe until its SIGKILL. */
static void nap(int *out, int ms)
{
	double until = es_time_mono() + ms / 1000.0;
	pump(out, until);
	double left = until - es_time_mono();
	if (left > 0)
		poll(NULL, 0, (int)(left * 1000.0) + 1);
}

/* One of our own lines in the log, after everything the tree wrote before it. */
static void note(int *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(int *out, const char *fmt, ...)
{
	copy_output(out);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
}

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
	char line[4200];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	/* MSG_NOSIGNAL: a worker that is gone must not kill us with SIGPIPE before cleanup. */
	for (int off = 0; off < n;) {
		ssize_t w = send(fd, line + off, (size_t)(n - off), MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		off += (int)w;
	}
}

static int usage(void)
{
	es_error(ES_EUSAGE, "usage: eshard-mpi __supervise --fd N [--timeout SECS] [--grace SECS] "
			    "[--cwd DIR] [--output pipe|log] -- PROGRAM [ARGS...]");
	return 2;
}

struct sup_args {
	int ctl;                 /* the control socket */
	double timeout, grace;
	const char *cwd;
	int direct;              /* --output log: the tree writes the log itself, no pipe */
	char **prog;
};

static int parse_args(int argc, char **argv, struct sup_args *a)
{
	int64_t fd = -1;
	int i;
	a->timeout = 0;
	a->grace = 10;
	a->cwd = NULL;
	a->direct = 0;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		}
		if (i + 1 >= argc)
			return usage();
		const char *opt = argv[i], *val = argv[++i];
		if (!strcmp(opt, "--fd")) {
			if (es_parse_i64(val, &fd) || fd < 3 || fd > 1 << 20)
				return usage();
		} else if (!strcmp(opt, "--timeout")) {
			if (es_parse_double(val, &a->timeout) || a->timeout < 0)
				return usage();
		} else if (!strcmp(opt, "--grace")) {
			if (es_parse_double(val, &a->grace) || a->grace < 0)
				return usage();
		} else if (!strcmp(opt, "--cwd")) {
			a->cwd = val;
		} else if (!strcmp(opt, "--output")) {
			if (strcmp(val, "pipe") && strcmp(val, "log"))
				return usage();
			a->direct = !strcmp(val, "log");
		} else {
			return usage();
		}
	}
	if (fd < 0 || i >= argc)
		return usage();
	a->ctl = (int)fd;
	a->prog = argv + i;
	if (fcntl(a->ctl, F_SETFD, FD_CLOEXEC) != 0) {
		es_error_errno(ES_EUSAGE, "__supervise: descriptor %d is not open", a->ctl);
		return 2;
	}
	return 0;
}

/* Our own signal handling: stop signals end the watch, SIGCHLD wakes ppoll(); SIGCHLD stays
 * blocked except inside ppoll(), so an exit between reap() and ppoll() is not missed. */
static void install_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	/* waitpid() needs SIGCHLD caught, not ignored (SIG_IGN would auto-reap). */
	sa.sa_handler = on_sigchld;
	sigaction(SIGCHLD, &sa, NULL);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_SETMASK, &chld, NULL);
}

/* The pipe the processor's tree writes into, as its stdout and its stderr both (one pipe, so
 * that the two interleave as they did in one file). The read end goes to *out; the write end is
 * returned, for the caller to close once the child has it. Without a pipe (--output log, or no
 * descriptor left) the child writes the log itself: *out is -1 and LOG_FD is returned. A pipe
 * keeps a write whole only up to PIPE_BUF (4 KiB) where an O_APPEND file keeps any write whole:
 * writers that write bigger chunks at once (Data-Juicer's threads: Ray's log forwarding beside
 * the main thread) can be cut into each other mid-character through a pipe, so the worker asks
 * for the log for them. */
static int open_output(const struct sup_args *a, int *out)
{
	int p[2];
	*out = -1;
	if (a->direct || pipe2(p, O_CLOEXEC) != 0)
		return LOG_FD;
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) != 0) {
		close(p[0]);
		close(p[1]);
		return LOG_FD;
	}
	*out = p[0];
	return p[1];
}

/* Start the processor: its own process group (one kill() reaches it and everything it starts,
 * without reaching us), SIGKILL when we die, our stdin, the output pipe, nothing else. 0 with
 * r->child and r->out set, or 1 after the "error" line was sent. */
static int start_child(const struct sup_args *a, struct sup_run *r)
{
	struct es_proc_spec ps;
	es_proc_spec_init(&ps, a->prog);
	ps.cwd = a->cwd;
	ps.fd[1] = ps.fd[2] = open_output(a, &r->out);
	ps.new_group = 1;
	ps.pdeathsig = SIGKILL;
	struct es_proc p;
	fflush(NULL);
	es_log_quiet_begin(); /* the worker words the failure ("Unable to start ...") */
	int rc = es_proc_spawn(&ps, &p);
	es_log_quiet_end();
	if (ps.fd[1] != LOG_FD)
		close(ps.fd[1]); /* only the tree holds the write end now: EOF when it is gone */
	if (rc) {
		if (r->out >= 0)
			close(r->out);
		r->out = -1;
		char what[4096];
		int chdir_failed = p.stage && !strcmp(p.stage, "chdir");
		snprintf(what, sizeof(what), "%s", chdir_failed ? a->cwd : a->prog[0]);
		for (char *q = what; *q; q++)
			if (*q == '\n')
				*q = '?';
		say(a->ctl, "error %d %s %s\n", p.err ? p.err : EIO, chdir_failed ? "chdir" : "exec", what);
		return 1;
	}
	r->child = p.pid;
	return 0;
}

/* Wait for the processor's exit, a stop request, the worker's end, a signal or the timeout,
 * copying its output as it comes. Returns why it stopped waiting (NULL: the processor exited
 * on its own). */
static const char *watch(const struct sup_args *a, struct sup_run *r, char *why_buf, size_t n)
{
	double t0 = es_time_mono();
	sigset_t none;
	sigemptyset(&none);
	for (;;) {
		reap(r);
		if (r->done)
			return NULL;
		if (got_signal) {
			snprintf(why_buf, n, "the supervisor got signal %d", (int)got_signal);
			return why_buf;
		}
		if (a->timeout > 0 && es_time_mono() - t0 >= a->timeout) {
			r->timed_out = 1;
			snprintf(why_buf, n, "timed out after %g s", a->timeout);
			return why_buf;
		}
		struct pollfd pfd[2] = { { .fd = a->ctl, .events = POLLIN }, { .fd = r->out, .events = POLLIN } };
		struct timespec tick = { 0, 100 * 1000 * 1000 };
		if (ppoll(pfd, 2, &tick, &none) <= 0)
			continue;
		if (pfd[0].revents) {
			char c;
			ssize_t got = read(a->ctl, &c, 1);
			if (got > 0)
				return "the worker asked";
			if (got == 0 || (errno != EINTR && errno != EAGAIN))
				return "the worker is gone";
		}
		if (pfd[1].revents)
			copy_output(&r->out);
	}
}

/* How many processes the processor left behind after its exit. Orphans of the processor are
 * re-parented to us (we are a subreaper), so when we have no child at all there is no
 * descendant either: no /proc scan then. */
static long left_behind(void)
{
	if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD)
		return 0;
	return signal_descendants(0);
}

/* SIGKILL sweeps until nothing is left, for at most KILL_SWEEP_SECS. Returns when the sweeps
 * would have ended at the latest. */
static double kill_sweep(struct sup_run *r)
{
	double sweep_end = es_time_mono() + KILL_SWEEP_SECS;
	for (;;) {
		reap(r);
		if (!r->done)
			es_proc_kill_group(r->child, SIGKILL);
		long live = signal_descendants(SIGKILL);
		if (r->done && live <= 0)
			break;
		if (es_time_mono() >= sweep_end) {
			note(&r->out, "[eshard-mpi] %ld process(es) did not die after SIGKILL\n", live);
			break;
		}
		nap(&r->out, 20);
	}
	return sweep_end;
}

/* Tear down: SIGTERM to the processor's group and every descendant, wait up to grace, then
 * SIGKILL sweeps until nothing is left. After the processor exited on its own this still runs
 * for whatever it left behind (a Ray daemon, a setsid() helper). The group is signalled only
 * while the processor is unreaped, so its number cannot have been reused by then. Returns until
 * when the rest of the output is worth waiting for: once the tree is gone its EOF comes at once,
 * and what would not die may hold the pipe no longer than the sweeps would have lasted. */
static double teardown(const struct sup_args *a, struct sup_run *r, const char *why)
{
	long left = r->done ? left_behind() : 0;
	if (why)
		note(&r->out, "\n[eshard-mpi] stopping the processor: %s\n", why);
	else if (left > 0)
		note(&r->out, "\n[eshard-mpi] the processor exited and left %ld process(es) behind; "
			      "stopping them\n", left);
	if (r->done && left <= 0)
		return es_time_mono();
	if (!r->done)
		es_proc_kill_group(r->child, SIGTERM);
	signal_descendants(SIGTERM);
	double until = es_time_mono() + a->grace;
	while (es_time_mono() < until) {
		reap(r);
		if (r->done && signal_descendants(0) == 0)
			break;
		nap(&r->out, 50);
	}
	return kill_sweep(r);
}

int es_attempt_supervise_main(int argc, char **argv)
{
	struct sup_args a;
	int rc = parse_args(argc, argv, &a);
	if (rc)
		return rc;
	/* Normally the worker already made us a group leader; this covers a manual start. */
	if (getpgrp() != getpid())
		setpgid(0, 0);
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
		es_warning("cannot become a child subreaper; processes that leave their parent may "
			   "outlive the attempt: %s", strerror(errno));
	install_signals();
	struct sup_run r = { .out = -1 };
	if (start_child(&a, &r))
		return 0;
	say(a.ctl, "started %ld\n", (long)r.child);
	char why_buf[64];
	const char *why = watch(&a, &r, why_buf, sizeof(why_buf));
	/* All the tree wrote is in the log before the worker hears the outcome. */
	pump(&r.out, teardown(&a, &r, why));
	if (r.out >= 0)
		close(r.out);
	int code = -SIGKILL;
	if (r.done && WIFEXITED(r.status))
		code = WEXITSTATUS(r.status);
	else if (r.done && WIFSIGNALED(r.status))
		code = -WTERMSIG(r.status);
	/* The last field is the signal the supervisor itself got (0: none), also when it came
	 * after the processor had already ended: a scheduler that stops a job signals all of its
	 * processes, and the worker uses this to tell such a stop from a broken processor. */
	say(a.ctl, "status %d %d %d\n", code, r.timed_out, (int)got_signal);
	return 0;
}
