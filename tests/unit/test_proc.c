/*
 * Unit tests of proc with real processes: a child gets exactly the descriptors it is given
 * (none of the parent's others, close-on-exec or not), default signal dispositions and an empty
 * mask whatever the parent set, its own process group when asked (or a given one), and dies with
 * its group; the fork path's parent-death signal; start failures with their stage; bounded
 * capture with a timeout and an output cap; the child environment; wait statuses.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/proc.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *T;

static int atoi_safe(const char *s)
{
	int64_t v;
	return es_parse_i64(s, &v) == 0 && v >= 0 && v < 1 << 20 ? (int)v : -1;
}

/* Run sh -c script with the spec's other settings, capture its stdout. */
static char *sh_out(struct es_proc_spec *s, const char *script)
{
	char *argv[] = { (char *)"/bin/sh", (char *)"-c", (char *)script, NULL };
	s->argv = argv;
	struct es_proc_result r;
	int rc = es_proc_capture(s, 1 << 20, 1 << 20, 20, &r);
	CHECK_INT_EQ(rc, 0);
	CHECK_INT_EQ(r.started, 1);
	CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
	char *out = strdup(r.out.data);
	es_proc_result_free(&r);
	s->argv = NULL;
	return out;
}

/* The descriptors of a running process, "0 1 2 " style, and where fd k points. */
static void fds_of(pid_t pid, char *out, size_t n)
{
	char path[64];
	int have[64] = { 0 };
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL) {
		int fd = atoi_safe(e->d_name);
		if (fd >= 0 && fd < 64)
			have[fd] = 1;
	}
	if (d)
		closedir(d);
	out[0] = '\0';
	for (int fd = 0; fd < 64; fd++)
		if (have[fd])
			snprintf(out + strlen(out), n - strlen(out), "%d ", fd);
}

static void link_of(pid_t pid, int fd, char *out, size_t n)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	ssize_t k = readlink(path, out, n - 1);
	out[k > 0 ? k : 0] = '\0';
}

/* Wait (at most 10 s) until pid sleeps in its nanosleep: `sleep` opens files of its own while
 * it starts (the locale), and a look at its table before that would see them. */
static void wait_asleep(pid_t pid)
{
	char path[64], buf[64];
	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(path, "r");
		long nr = -1;
		if (f) {
			if (fgets(buf, sizeof(buf), f))
				nr = strtol(buf, NULL, 10);
			fclose(f);
		}
		if (nr == SYS_clock_nanosleep || nr == SYS_nanosleep)
			return;
		usleep(10000);
	}
}

/* Start `sleep 30` with the spec, look at its descriptor table, kill it. */
static void spawn_and_look(struct es_proc_spec *s, char *fds, size_t n, char links[][4096], int n_links)
{
	char *argv[] = { (char *)"sleep", (char *)"30", NULL };
	s->argv = argv;
	struct es_proc p;
	if (!CHECK_INT_EQ(es_proc_spawn(s, &p), 0))
		return;
	wait_asleep(p.pid);
	fds_of(p.pid, fds, n);
	for (int k = 0; k < n_links; k++)
		link_of(p.pid, k, links[k], sizeof(links[k]));
	kill(p.pid, SIGKILL);
	es_proc_wait(p.pid, NULL, 0);
	s->argv = NULL;
}

/* F_DUPFD_CLOEXEC calls of this program on dup_watched, counted: this program's fcntl stands
 * before the C library's for the library linked into it. */
static int dup_watched = -1, dup_count;

int fcntl(int fd, int cmd, ...)
{
	static int (*real)(int, int, ...);
	if (!real)
		real = (int (*)(int, int, ...))dlsym(RTLD_NEXT, "fcntl");
	va_list ap;
	va_start(ap, cmd);
	int rc;
	if (cmd == F_GETFD || cmd == F_GETFL) {
		rc = real(fd, cmd);
	} else if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC || cmd == F_SETFD || cmd == F_SETFL) {
		int arg = va_arg(ap, int);
		if (cmd == F_DUPFD_CLOEXEC && fd == dup_watched)
			dup_count++;
		rc = real(fd, cmd, arg);
	} else {
		rc = real(fd, cmd, va_arg(ap, void *));
	}
	va_end(ap);
	return rc;
}

/* A source above the child's slots is passed as it is, a low one through a private copy: on a
 * FUSE file system each close of a copy, in the parent and again in the child, is a request. */
static void test_no_needless_copy(void)
{
	char path[4096], fds[256], links[4][4096];
	snprintf(path, sizeof(path), "%s/uncopied", T);
	int high = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	int high2 = fcntl(high, F_DUPFD_CLOEXEC, 100);
	CHECK(high2 >= 100);
	for (int fork_path = 0; fork_path < 2; fork_path++) {
		struct es_proc_spec s;
		es_proc_spec_init(&s, NULL);
		s.pdeathsig = fork_path ? SIGKILL : 0;
		s.fd[1] = s.fd[2] = high2;
		dup_watched = high2;
		dup_count = 0;
		spawn_and_look(&s, fds, sizeof(fds), links, 3);
		CHECK_INT_EQ(dup_count, 0);
		CHECK_STR_EQ(fds, "0 1 2 ");
		CHECK_STR_EQ(links[1], path);
		CHECK_STR_EQ(links[2], path);
		/* A low source (here 0, for the child's 1) is still copied first. */
		int low = dup2(high2, 0);
		CHECK_INT_EQ(low, 0);
		s.fd[1] = 0;
		s.fd[0] = ES_PROC_DEVNULL;
		dup_watched = 0;
		dup_count = 0;
		spawn_and_look(&s, fds, sizeof(fds), links, 3);
		CHECK_INT_EQ(dup_count, 1);
		CHECK_STR_EQ(fds, "0 1 2 ");
		CHECK_STR_EQ(links[0], "/dev/null");
		CHECK_STR_EQ(links[1], path);
		int nul = open("/dev/null", O_RDONLY); /* this program's 0 back as it was */
		CHECK(nul > 0 && dup2(nul, 0) == 0);
		close(nul);
	}
	dup_watched = -1;
	close(high);
	close(high2);
}

static void test_descriptors(void)
{
	char path[4096], fds[256], links[5][4096];
	snprintf(path, sizeof(path), "%s/inherited", T);
	/* Neither close-on-exec nor low: exactly what an MPI library leaves open. */
	int leak = open(path, O_WRONLY | O_CREAT, 0644);
	int leak_cloexec = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(leak >= 3 && leak_cloexec >= 3);
	for (int fork_path = 0; fork_path < 2; fork_path++) {
		struct es_proc_spec s;
		es_proc_spec_init(&s, NULL);
		s.pdeathsig = fork_path ? SIGKILL : 0;
		spawn_and_look(&s, fds, sizeof(fds), links, 0);
		CHECK_STR_EQ(fds, "0 1 2 ");
		/* An extra descriptor becomes 3, whatever its number in the parent; 0 is /dev/null. */
		s.fd[0] = ES_PROC_DEVNULL;
		s.extra = &leak;
		s.n_extra = 1;
		spawn_and_look(&s, fds, sizeof(fds), links, 4);
		CHECK_STR_EQ(fds, "0 1 2 3 ");
		CHECK_STR_EQ(links[0], "/dev/null");
		CHECK_STR_EQ(links[3], path);
		/* Sources that collide with the targets (parent 4 -> child 3, parent 3 -> child 4)
		 * are not overwritten on the way. */
		int a = dup2(leak, 3), b = dup2(leak_cloexec, 4);
		char other[4096];
		snprintf(other, sizeof(other), "%s/other", T);
		int o = open(other, O_WRONLY | O_CREAT, 0644);
		int c = dup2(o, 4);
		close(o);
		CHECK(a == 3 && b == 4 && c == 4);
		int swap[2] = { 4, 3 };
		s.extra = swap;
		s.n_extra = 2;
		spawn_and_look(&s, fds, sizeof(fds), links, 5);
		CHECK_STR_EQ(fds, "0 1 2 3 4 ");
		CHECK_STR_EQ(links[3], other);
		CHECK_STR_EQ(links[4], path);
		close(3);
		close(4);
		leak = open(path, O_WRONLY, 0644);
		leak_cloexec = open(path, O_RDONLY | O_CLOEXEC);
	}
	close(leak);
	close(leak_cloexec);
}

static void test_signals(void)
{
	struct sigaction ign, old_term, old_usr;
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigaction(SIGTERM, &ign, &old_term);
	sigaction(SIGUSR2, &ign, &old_usr);
	sigset_t block, old_mask;
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &old_mask);
	for (int fork_path = 0; fork_path < 2; fork_path++) {
		struct es_proc_spec s;
		es_proc_spec_init(&s, NULL);
		s.pdeathsig = fork_path ? SIGKILL : 0;
		char *out = sh_out(&s, "grep -E '^Sig(Ign|Blk):' /proc/$$/status | cut -f2 | tr '\\n' ' '");
		unsigned long long blk = 1, ign = 1;
		CHECK(sscanf(out, "%llx %llx", &blk, &ign) == 2);
		CHECK_INT_EQ(blk, 0);
		/* Signals 32 and 33 are glibc's own (thread cancellation, setxid): no program can
		 * change them through sigaction, and glibc installs its handlers at start-up. */
		CHECK_INT_EQ(ign & ~((1ULL << 31) | (1ULL << 32)), 0);
		free(out);
	}
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGUSR2, &old_usr, NULL);
}

static long pgid_of(pid_t pid)
{
	return (long)getpgid(pid);
}

static void test_groups(void)
{
	char *argv[] = { (char *)"sleep", (char *)"30", NULL };
	struct es_proc_spec s;
	struct es_proc p, q;
	/* Its own group when asked (both paths), the parent's otherwise, or a given one. */
	for (int fork_path = 0; fork_path < 2; fork_path++) {
		es_proc_spec_init(&s, argv);
		s.new_group = 1;
		s.pdeathsig = fork_path ? SIGKILL : 0;
		CHECK_INT_EQ(es_proc_spawn(&s, &p), 0);
		CHECK_INT_EQ(pgid_of(p.pid), p.pid);
		es_proc_spec_init(&s, argv);
		s.join_group = p.pid;
		CHECK_INT_EQ(es_proc_spawn(&s, &q), 0);
		CHECK_INT_EQ(pgid_of(q.pid), p.pid);
		/* Killed with its group: both go. */
		CHECK_INT_EQ(es_proc_kill_group(p.pid, SIGKILL), 0);
		int st1 = 0, st2 = 0;
		CHECK_INT_EQ(es_proc_wait(p.pid, &st1, 0), 1);
		CHECK_INT_EQ(es_proc_wait(q.pid, &st2, 0), 1);
		CHECK(WIFSIGNALED(st1) && WTERMSIG(st1) == SIGKILL);
		CHECK(WIFSIGNALED(st2) && WTERMSIG(st2) == SIGKILL);
	}
	es_proc_spec_init(&s, argv);
	CHECK_INT_EQ(es_proc_spawn(&s, &p), 0);
	CHECK_INT_EQ(pgid_of(p.pid), getpgrp());
	CHECK_INT_EQ(es_proc_wait(p.pid, NULL, 1), 0); /* still running */
	kill(p.pid, SIGTERM);
	int st = 0;
	CHECK_INT_EQ(es_proc_wait(p.pid, &st, 0), 1);
	CHECK_INT_EQ(es_proc_stop_signal_of(st), SIGTERM);
	/* A group of nobody is not an error; group 1 and below are refused. */
	CHECK_INT_EQ(es_proc_kill_group(p.pid, SIGKILL), 0);
	es_log_quiet_begin();
	CHECK(es_proc_kill_group(1, SIGKILL) < 0);
	CHECK(es_proc_kill_group(0, SIGKILL) < 0);
	es_log_quiet_end();
}

/* The fork path's parent-death signal: an intermediate process starts `sleep 60` with
 * pdeathsig SIGKILL and exits; the sleep dies at once (we are the subreaper that reaps it). */
static void test_pdeathsig(void)
{
	CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
	int pp[2];
	CHECK(pipe(pp) == 0);
	pid_t mid = fork();
	if (mid == 0) {
		char *argv[] = { (char *)"sleep", (char *)"60", NULL };
		struct es_proc_spec s;
		struct es_proc p;
		es_proc_spec_init(&s, argv);
		s.pdeathsig = SIGKILL;
		if (es_proc_spawn(&s, &p) != 0)
			_exit(1);
		ssize_t w = write(pp[1], &p.pid, sizeof(p.pid));
		_exit(w == (ssize_t)sizeof(p.pid) ? 0 : 1);
	}
	close(pp[1]);
	pid_t child = 0;
	CHECK(read(pp[0], &child, sizeof(child)) == (ssize_t)sizeof(child));
	close(pp[0]);
	int st = 0;
	CHECK(waitpid(mid, &st, 0) == mid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	double t0 = es_time_mono();
	st = 0;
	int reaped = child > 0 && es_proc_wait(child, &st, 0) == 1;
	CHECK(reaped);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK(es_time_mono() - t0 < 5);
	prctl(PR_SET_CHILD_SUBREAPER, 0);
}

static void test_start_failures(void)
{
	char *missing[] = { (char *)"/no/such/program", NULL };
	char *sh[] = { (char *)"/bin/true", NULL };
	for (int fork_path = 0; fork_path < 2; fork_path++) {
		struct es_proc_spec s;
		struct es_proc p;
		es_proc_spec_init(&s, missing);
		s.pdeathsig = fork_path ? SIGKILL : 0;
		es_log_quiet_begin();
		CHECK_INT_EQ(es_proc_spawn(&s, &p), ES_EIO);
		es_log_quiet_end();
		CHECK_INT_EQ(p.err, ENOENT);
		CHECK_STR_EQ(p.stage, "exec");
		CHECK_INT_EQ(p.pid, 0);
		CHECK(strstr(es_last_error(), "cannot start '/no/such/program'") != NULL);
		es_proc_spec_init(&s, sh);
		s.pdeathsig = fork_path ? SIGKILL : 0;
		s.cwd = "/no/such/folder";
		es_log_quiet_begin();
		CHECK_INT_EQ(es_proc_spawn(&s, &p), ES_EIO);
		es_log_quiet_end();
		CHECK_INT_EQ(p.err, ENOENT);
		CHECK_STR_EQ(p.stage, "chdir");
		CHECK(strstr(es_last_error(), "/no/such/folder") != NULL);
	}
	/* A start failure through capture is not an error: started says so. */
	struct es_proc_spec s;
	struct es_proc_result r;
	es_proc_spec_init(&s, missing);
	CHECK_INT_EQ(es_proc_capture(&s, 100, 100, 5, &r), 0);
	CHECK_INT_EQ(r.started, 0);
	CHECK_INT_EQ(r.err, ENOENT);
	es_proc_result_free(&r);
}

static void test_capture(void)
{
	struct es_proc_spec s;
	struct es_proc_result r;
	char *both[] = { (char *)"/bin/sh", (char *)"-c", (char *)"echo out; echo err >&2; exit 3", NULL };
	es_proc_spec_init(&s, both);
	CHECK_INT_EQ(es_proc_capture(&s, 100, 100, 5, &r), 0);
	CHECK_STR_EQ(r.out.data, "out\n");
	CHECK_STR_EQ(r.err_text.data, "err\n");
	CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 3);
	CHECK(!r.timed_out && !r.overflow);
	es_proc_result_free(&r);
	/* The timeout kills the whole group (a grandchild holding the pipe included). */
	char *slow[] = { (char *)"/bin/sh", (char *)"-c", (char *)"sleep 30 & sleep 30", NULL };
	es_proc_spec_init(&s, slow);
	s.new_group = 1;
	double t0 = es_time_mono();
	CHECK_INT_EQ(es_proc_capture(&s, 100, 100, 0.3, &r), 0);
	CHECK(r.timed_out);
	CHECK(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL);
	CHECK(es_time_mono() - t0 < 5);
	es_proc_result_free(&r);
	/* stdout past its cap ends the run; stderr past its cap is only cut. */
	char *loud[] = { (char *)"/bin/sh", (char *)"-c", (char *)"yes", NULL };
	es_proc_spec_init(&s, loud);
	CHECK_INT_EQ(es_proc_capture(&s, 4096, 100, 10, &r), 0);
	CHECK(r.overflow);
	CHECK(r.out.len <= 4096);
	es_proc_result_free(&r);
	char *noisy[] = { (char *)"/bin/sh", (char *)"-c", (char *)"head -c 100000 /dev/zero >&2; echo done", NULL };
	es_proc_spec_init(&s, noisy);
	CHECK_INT_EQ(es_proc_capture(&s, 100, 1000, 10, &r), 0);
	CHECK(!r.overflow);
	CHECK_STR_EQ(r.out.data, "done\n");
	CHECK(r.err_text.len <= 1000);
	es_proc_result_free(&r);
}

static int has(char **env, const char *kv)
{
	for (; *env; env++)
		if (!strcmp(*env, kv))
			return 1;
	return 0;
}

static int has_name(char **env, const char *name)
{
	size_t n = strlen(name);
	for (; *env; env++)
		if (!strncmp(*env, name, n) && (*env)[n] == '=')
			return 1;
	return 0;
}

static void test_env(void)
{
	char *base[] = { (char *)"PATH=/bin", (char *)"OMPI_COMM_WORLD_RANK=1", (char *)"SLURM_JOB_ID=7",
			 (char *)"RAY_ADDRESS=1.2.3.4:6379", (char *)"DJ_ELASTIC_SHARD_CHILD=0", (char *)"WORLD_SIZE=4",
			 (char *)"PYTHONPATH=/old", (char *)"KEEP=1", (char *)"DROPME=x", (char *)"SOFT=base", NULL };
	const char *drop[] = { "DROPME", NULL };
	const char *vars[] = { "KEEP=2", "NEW=y", NULL };
	const char *defaults[] = { "SOFT=default", "OTHER=default", NULL };
	struct es_env_spec es = { base, "/job/cache", "10.0.0.1:6379", "/dj", drop, vars, defaults };
	struct es_strv v = ES_STRV_INIT;
	CHECK_INT_EQ(es_env_child(&es, &v), 0);
	char **e = v.v;
	CHECK(has(e, "PATH=/bin"));
	CHECK(!has_name(e, "OMPI_COMM_WORLD_RANK") && !has_name(e, "SLURM_JOB_ID") && !has_name(e, "WORLD_SIZE"));
	CHECK(!has_name(e, "DROPME"));
	CHECK(has(e, "DJ_ELASTIC_SHARD_CHILD=1") && !has(e, "DJ_ELASTIC_SHARD_CHILD=0"));
	CHECK(has(e, "RAY_ADDRESS=10.0.0.1:6379") && !has(e, "RAY_ADDRESS=1.2.3.4:6379"));
	CHECK(has(e, "XDG_CACHE_HOME=/job/cache"));
	CHECK(has(e, "HF_HOME=/job/cache/huggingface"));
	CHECK(has(e, "PYTHONPATH=/dj:/old"));
	CHECK(has(e, "KEEP=2") && !has(e, "KEEP=1"));
	CHECK(has(e, "NEW=y"));
	CHECK(has(e, "SOFT=base") && !has(e, "SOFT=default"));
	CHECK(has(e, "OTHER=default"));
	CHECK(has(e, "RAY_worker_niceness=0"));
	es_strv_free(&v);
	/* Cache folders already set (even empty, like os.environ.setdefault) stay; "local" is no
	 * address. */
	char *base2[] = { (char *)"XDG_CACHE_HOME=/mine", (char *)"HF_HOME=", NULL };
	struct es_env_spec es2 = { base2, "/job/cache", "local", NULL, NULL, NULL, NULL };
	CHECK_INT_EQ(es_env_child(&es2, &v), 0);
	CHECK(has(v.v, "XDG_CACHE_HOME=/mine") && has(v.v, "HF_HOME="));
	CHECK(!has_name(v.v, "RAY_ADDRESS"));
	CHECK_INT_EQ((int)v.n, 4);
	es_strv_free(&v);
	/* A niceness the user chose for Ray's workers stays, and is not given twice. */
	char *base3[] = { (char *)"RAY_worker_niceness=7", NULL };
	struct es_env_spec es3 = { base3, NULL, NULL, NULL, NULL, NULL, NULL };
	CHECK_INT_EQ(es_env_child(&es3, &v), 0);
	CHECK(has(v.v, "RAY_worker_niceness=7") && !has(v.v, "RAY_worker_niceness=0"));
	CHECK_INT_EQ((int)v.n, 2);
	es_strv_free(&v);
	CHECK_STR_EQ(es_env_get(base, "KEEP"), "1");
	CHECK(es_env_get(base, "KEE") == NULL);
}

static void test_describe(void)
{
	char buf[64];
	es_proc_describe_status(3 << 8, buf, sizeof(buf));
	CHECK_STR_EQ(buf, "exited with status 3");
	es_proc_describe_status(SIGTERM, buf, sizeof(buf));
	CHECK_STR_EQ(buf, "was killed by signal 15 (SIGTERM)");
	CHECK_STR_EQ(es_proc_signal_name(SIGKILL, buf, sizeof(buf)), "SIGKILL");
	CHECK_INT_EQ(es_proc_stop_signal_of(143 << 8), SIGTERM);
	CHECK_INT_EQ(es_proc_stop_signal_of(130 << 8), SIGINT);
	CHECK_INT_EQ(es_proc_stop_signal_of(139 << 8), 0); /* 128+SIGSEGV: not a stop */
	CHECK_INT_EQ(es_proc_stop_signal_of(SIGSEGV), 0);
	CHECK_INT_EQ(es_proc_stop_signal_of(SIGHUP), SIGHUP);
	CHECK_INT_EQ(es_proc_stop_signal_of(1 << 8), 0);
}

/* /proc/<pid>/stat: this process, a zombie child, a name with spaces and ')', no process. */
static void test_stat(void)
{
	struct es_proc_stat st;
	CHECK_INT_EQ(es_proc_stat_read(getpid(), &st), 1);
	CHECK_INT_EQ(st.ppid, getppid());
	CHECK_INT_EQ(st.pgrp, getpgrp());
	CHECK(st.state == 'R');
	CHECK(st.starttime > 0);
	struct es_proc_stat again;
	CHECK_INT_EQ(es_proc_stat_read(getpid(), &again), 1);
	CHECK(again.starttime == st.starttime);

	pid_t c = fork();
	if (c == 0) {
		prctl(PR_SET_NAME, "a b) c", 0, 0, 0);
		pause();
		_exit(0);
	}
	CHECK(c > 0);
	struct es_proc_stat cs;
	memset(&cs, 0, sizeof(cs));
	for (int i = 0; i < 200 && !(es_proc_stat_read(c, &cs) && strcmp(cs.comm, "a b) c") == 0); i++)
		usleep(10000);
	CHECK_STR_EQ(cs.comm, "a b) c");
	CHECK_INT_EQ(cs.ppid, getpid());
	CHECK(cs.starttime >= st.starttime);
	kill(c, SIGKILL);
	for (int i = 0; i < 200 && !(es_proc_stat_read(c, &cs) && cs.state == 'Z'); i++)
		usleep(10000);
	CHECK(cs.state == 'Z');
	waitpid(c, NULL, 0);
	CHECK_INT_EQ(es_proc_stat_read(c, &cs), 0);
	CHECK_INT_EQ(es_proc_stat_read(-1, &cs), 0);
}

int main(void)
{
	T = test_tmpdir();
	test_stat();
	test_descriptors();
	test_no_needless_copy();
	test_signals();
	test_groups();
	test_pdeathsig();
	test_start_failures();
	test_capture();
	test_env();
	test_describe();
	return test_done();
}
