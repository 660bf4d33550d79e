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
 */
#include "eshard/attempt.h"
#include "eshard/log.h"
#include "eshard/util.h"

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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* After SIGKILL, how long to keep sweeping for processes that are slow to die (an
 * uninterruptible NFS wait, say) before reporting anyway. */
#define KILL_SWEEP_SECS 30.0

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
static int read_stat(const char *pid, struct proc_entry *e)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The command name may hold spaces and ')': the fields start after the last ')'. */
	char *rp = strrchr(buf, ')');
	int ppid;
	if (!rp || sscanf(rp + 1, " %c %d", &e->state, &ppid) != 2)
		return 0;
	e->ppid = (pid_t)ppid;
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
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 512;
			struct proc_entry *nv = realloc(v, nc * sizeof(*nv));
			if (!nv)
				break;
			v = nv;
			cap = nc;
		}
		struct proc_entry e = { .pid = (pid_t)strtol(de->d_name, NULL, 10) };
		if (read_stat(de->d_name, &e))
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

/* Collect every exited child (orphans reparented to us included); note the processor's. */
static void reap(pid_t child, int *child_done, int *child_status)
{
	int st;
	pid_t w;
	while ((w = waitpid(-1, &st, WNOHANG)) > 0 || (w < 0 && errno == EINTR))
		if (w == child) {
			*child_done = 1;
			*child_status = st;
		}
}

static void nap(int ms)
{
	poll(NULL, 0, ms);
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

static int close_from(unsigned lo, unsigned hi)
{
#ifdef SYS_close_range
	return (int)syscall(SYS_close_range, lo, hi, 0);
#else
	(void)lo;
	(void)hi;
	errno = ENOSYS;
	return -1;
#endif
}

/* Close every inherited descriptor but stdio and the control socket: an MPI rank's sockets
 * and shared-memory files must not live on in the processor. */
static void close_inherited(int keep)
{
	if (keep > 3 && close_from(3, (unsigned)keep - 1) == 0 && close_from((unsigned)keep + 1, ~0U) == 0)
		return;
	if (keep == 3 && close_from(4, ~0U) == 0)
		return;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		int fd = (int)strtol(de->d_name, NULL, 10);
		if (fd > 2 && fd != keep && fd != dirfd(d))
			close(fd);
	}
	closedir(d);
}

struct exec_failure {
	int err;
	char stage; /* 'c' chdir, 'e' exec */
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

static int usage(void)
{
	es_error(ES_EUSAGE, "usage: eshard-mpi __supervise --fd N [--timeout SECS] [--grace SECS] "
			    "[--cwd DIR] -- PROGRAM [ARGS...]");
	return 2;
}

int es_attempt_supervise_main(int argc, char **argv)
{
	int64_t fd = -1;
	double timeout = 0, grace = 10;
	const char *cwd = NULL;
	int i;
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
			if (es_parse_double(val, &timeout) || timeout < 0)
				return usage();
		} else if (!strcmp(opt, "--grace")) {
			if (es_parse_double(val, &grace) || grace < 0)
				return usage();
		} else if (!strcmp(opt, "--cwd")) {
			cwd = val;
		} else {
			return usage();
		}
	}
	if (fd < 0 || i >= argc)
		return usage();
	int ctl = (int)fd;
	char **prog = argv + i;
	if (fcntl(ctl, F_SETFD, FD_CLOEXEC) != 0) {
		es_error_errno(ES_EUSAGE, "__supervise: descriptor %d is not open", ctl);
		return 2;
	}

	/* Normally posix_spawn already made us a group leader; this covers a manual start. */
	if (getpgrp() != getpid())
		setpgid(0, 0);
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
		es_warning("cannot become a child subreaper; processes that leave their parent may "
			   "outlive the attempt: %s", strerror(errno));
	close_inherited(ctl);

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	/* waitpid() needs SIGCHLD caught, not ignored (SIG_IGN would auto-reap). It stays blocked
	 * except inside ppoll(), so an exit between reap() and ppoll() is not missed. */
	sa.sa_handler = on_sigchld;
	sigaction(SIGCHLD, &sa, NULL);
	sigset_t none, chld;
	sigemptyset(&none);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_SETMASK, &chld, NULL);

	int ep[2];
	if (pipe2(ep, O_CLOEXEC) != 0) {
		int e = errno;
		es_error_errno(ES_EIO, "__supervise: cannot create a pipe");
		say(ctl, "error %d exec %s\n", e, prog[0]);
		return 0;
	}
	pid_t self = getpid();
	fflush(NULL);
	pid_t child = fork();
	if (child < 0) {
		int e = errno;
		say(ctl, "error %d exec %s\n", e, prog[0]);
		return 0;
	}
	if (child == 0) {
		/* Only async-signal-safe calls until exec. Its own process group, so that one
		 * kill() reaches the processor and everything it starts without reaching us. */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != self)
			_exit(127);
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigemptyset(&dfl.sa_mask);
		sigaction(SIGTERM, &dfl, NULL);
		sigaction(SIGINT, &dfl, NULL);
		sigaction(SIGHUP, &dfl, NULL);
		sigaction(SIGPIPE, &dfl, NULL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (cwd && chdir(cwd) != 0)
			child_fail(ep[1], errno, 'c');
		execvp(prog[0], prog);
		child_fail(ep[1], errno, 'e');
	}
	/* Also from this side, so that the group exists before the first kill(-child). */
	setpgid(child, child);
	close(ep[1]);
	struct exec_failure f;
	ssize_t got;
	do
		got = read(ep[0], &f, sizeof(f));
	while (got < 0 && errno == EINTR);
	close(ep[0]);
	if (got == (ssize_t)sizeof(f)) {
		int st;
		while (waitpid(child, &st, 0) < 0 && errno == EINTR)
			;
		char what[4096];
		snprintf(what, sizeof(what), "%s", f.stage == 'c' ? cwd : prog[0]);
		for (char *p = what; *p; p++)
			if (*p == '\n')
				*p = '?';
		say(ctl, "error %d %s %s\n", f.err, f.stage == 'c' ? "chdir" : "exec", what);
		return 0;
	}
	say(ctl, "started %ld\n", (long)child);

	double t0 = es_time_mono();
	int child_done = 0, child_status = 0, timed_out = 0;
	const char *why = NULL;
	char why_buf[64];
	for (;;) {
		reap(child, &child_done, &child_status);
		if (child_done)
			break;
		if (got_signal) {
			snprintf(why_buf, sizeof(why_buf), "the supervisor got signal %d", (int)got_signal);
			why = why_buf;
			break;
		}
		if (timeout > 0 && es_time_mono() - t0 >= timeout) {
			timed_out = 1;
			snprintf(why_buf, sizeof(why_buf), "timed out after %g s", timeout);
			why = why_buf;
			break;
		}
		struct pollfd pfd = { .fd = ctl, .events = POLLIN };
		struct timespec tick = { 0, 100 * 1000 * 1000 };
		if (ppoll(&pfd, 1, &tick, &none) > 0) {
			char c;
			ssize_t n = read(ctl, &c, 1);
			if (n > 0) {
				why = "the worker asked";
				break;
			}
			if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
				why = "the worker is gone";
				break;
			}
		}
	}

	/* Tear down: SIGTERM to the processor's group and every descendant, wait up to grace,
	 * then SIGKILL sweeps until nothing is left. After the processor exited on its own this
	 * still runs for whatever it left behind (a Ray daemon, a setsid() helper). The group
	 * is signalled only while the processor is unreaped, so its number cannot have been
	 * reused by then. */
	long left = 0;
	if (child_done) {
		/* Orphans of the processor are re-parented to us (we are a subreaper), so when we
		 * have no child at all there is no descendant either: skip the /proc scan. */
		if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD)
			left = 0;
		else
			left = signal_descendants(0);
	}
	if (why)
		fprintf(stderr, "\n[eshard-mpi] stopping the processor: %s\n", why);
	else if (left > 0)
		fprintf(stderr, "\n[eshard-mpi] the processor exited and left %ld process(es) behind; "
				"stopping them\n", left);
	fflush(stderr);
	if (!child_done || left > 0) {
		if (!child_done)
			kill(-child, SIGTERM);
		signal_descendants(SIGTERM);
		double until = es_time_mono() + grace;
		while (es_time_mono() < until) {
			reap(child, &child_done, &child_status);
			if (child_done && signal_descendants(0) == 0)
				break;
			nap(50);
		}
		double sweep_end = es_time_mono() + KILL_SWEEP_SECS;
		for (;;) {
			reap(child, &child_done, &child_status);
			if (!child_done)
				kill(-child, SIGKILL);
			long live = signal_descendants(SIGKILL);
			if (child_done && live <= 0)
				break;
			if (es_time_mono() >= sweep_end) {
				fprintf(stderr, "[eshard-mpi] %ld process(es) did not die after SIGKILL\n", live);
				break;
			}
			nap(20);
		}
	}

	int rc = -SIGKILL;
	if (child_done && WIFEXITED(child_status))
		rc = WEXITSTATUS(child_status);
	else if (child_done && WIFSIGNALED(child_status))
		rc = -WTERMSIG(child_status);
	/* The last field is the signal the supervisor itself got (0: none), also when it came
	 * after the processor had already ended: a scheduler that stops a job signals all of its
	 * processes, and the worker uses this to tell such a stop from a broken processor. */
	say(ctl, "status %d %d %d\n", rc, timed_out, (int)got_signal);
	return 0;
}
