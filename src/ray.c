/*
 * ray: a node-local Ray head per rank. See include/eshard/ray.h for the contract; the measured
 * behaviour of `ray start`/`ray stop` this follows is in docs/dj-notes.md.
 */
#include "eshard/ray.h"
#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/cpus.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/proc.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define TOKEN_VAR "ESHARD_RAY_HEAD"
#define MIN_OBJECT_STORE (75LL << 20)  /* Ray refuses less */
#define MAX_GPUS 256

/* ---- small helpers ---- */

/* Read a whole (small, /proc or /sys) file into out without reporting anything: these files
 * vanish with their process, which is an answer, not an error. -1 when unreadable. */
static int read_quiet(const char *path, struct es_buf *out, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	es_buf_reset(out);
	for (;;) {
		if (es_buf_grow(out, 4096) != 0) {
			close(fd);
			return -1;
		}
		ssize_t n = read(fd, out->data + out->len, out->cap - out->len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		out->len += (size_t)n;
		out->data[out->len] = '\0';
		if (out->len > max)
			break;
	}
	close(fd);
	return 0;
}


/* ---- the head's processes: group and token ---- */

struct member {
	pid_t pid;
	unsigned long long start;  /* /proc/<pid>/stat starttime: tells a reused pid apart */
	char comm[32];
};

struct members {
	struct member *v;
	size_t n, cap;
};

/* Parse /proc/<pid>/stat. 0 and *pi filled, or -1 when the process is gone. A zombie or
 * dead process counts as gone: it holds no port, no file and no GPU, and whether it is reaped
 * soon depends on its parent (often init), not on us. */
static int proc_stat(pid_t pid, struct member *m, pid_t *pgrp)
{
	struct es_proc_stat st;
	if (!es_proc_stat_read(pid, &st) || st.state == 'Z' || st.state == 'X' || st.state == 'x')
		return -1;
	m->pid = pid;
	m->start = st.starttime;
	snprintf(m->comm, sizeof(m->comm), "%s", st.comm);
	*pgrp = st.pgrp;
	return 0;
}

/* 1 when the environment of pid holds ESHARD_RAY_HEAD=<token>. */
static int proc_has_token(pid_t pid, const char *token)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	struct es_buf b = ES_BUF_INIT;
	int found = 0;
	if (read_quiet(path, &b, (size_t)16 << 20) == 0) {
		size_t want = strlen(TOKEN_VAR) + 1 + strlen(token);
		for (size_t i = 0; i < b.len;) {
			const char *e = b.data + i;
			size_t len = strnlen(e, b.len - i);
			if (len == want && !strncmp(e, TOKEN_VAR "=", strlen(TOKEN_VAR) + 1) &&
			    !strcmp(e + strlen(TOKEN_VAR) + 1, token)) {
				found = 1;
				break;
			}
			i += len + 1;
		}
	}
	es_buf_free(&b);
	return found;
}

/* Every live process in the head's group that carries its token. Requiring both means that
 * a group id reused after the head died names nobody: a new group with that id cannot hold
 * a process with our token, since every holder was in our group and the id is reused only
 * after the last one is gone. */
static int list_members(const struct es_ray_head *h, struct members *out)
{
	out->n = 0;
	DIR *d = opendir("/proc");
	if (!d)
		return es_error_errno(ES_EIO, "cannot list /proc");
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		const char *s = de->d_name;
		if (!isdigit((unsigned char)s[0]))
			continue;
		char *end;
		long v = strtol(s, &end, 10);
		if (*end || v <= 0)
			continue;
		struct member m;
		pid_t pgrp;
		if (proc_stat((pid_t)v, &m, &pgrp) != 0 || pgrp != h->pgid)
			continue;
		if (!proc_has_token(m.pid, h->token))
			continue;
		int rc = es_grow(&out->v, &out->cap, out->n + 1, sizeof(*out->v));
		if (rc) {
			closedir(d);
			return rc;
		}
		out->v[out->n++] = m;
	}
	closedir(d);
	return 0;
}

static int member_gone(const struct member *m)
{
	struct member now;
	pid_t pgrp;
	return proc_stat(m->pid, &now, &pgrp) != 0 || now.start != m->start;
}

/* Wait until every listed member is gone or the deadline (monotonic) passes. */
static void wait_gone(const struct members *ms, double deadline)
{
	for (;;) {
		size_t left = 0;
		for (size_t i = 0; i < ms->n; i++)
			if (!member_gone(&ms->v[i]))
				left++;
		if (!left || es_time_mono() >= deadline)
			return;
		es_sleep(0.05);
	}
}

enum which { ONLY_RAYLET, ALL_BUT_GCS, ONLY_GCS };

/* One graceful step of `ray stop`'s order: SIGTERM the chosen members, wait for them. */
static int term_step(const struct es_ray_head *h, enum which w, double timeout)
{
	struct members all = { 0 }, chosen = { 0 };
	int rc = list_members(h, &all);
	if (rc)
		goto out;
	chosen.v = calloc(all.n ? all.n : 1, sizeof(*chosen.v));
	if (!chosen.v) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < all.n; i++) {
		int is_raylet = !strcmp(all.v[i].comm, "raylet");
		int is_gcs = !strcmp(all.v[i].comm, "gcs_server");
		if ((w == ONLY_RAYLET && is_raylet) || (w == ONLY_GCS && is_gcs) ||
		    (w == ALL_BUT_GCS && !is_gcs))
			chosen.v[chosen.n++] = all.v[i];
	}
	for (size_t i = 0; i < chosen.n; i++)
		if (!member_gone(&chosen.v[i]))
			kill(chosen.v[i].pid, SIGTERM);
	wait_gone(&chosen, es_time_mono() + timeout);
out:
	free(all.v);
	free(chosen.v);
	return rc;
}

/* SIGKILL the whole group (only while a member with our token proves the group is ours),
 * then wait a little for the kernel to take the processes down. */
static int kill_rest(const struct es_ray_head *h)
{
	struct members ms = { 0 };
	int rc = list_members(h, &ms);
	for (int round = 0; !rc && ms.n && round < 5; round++) {
		if ((rc = es_proc_kill_group(h->pgid, SIGKILL)) != 0)
			break;
		wait_gone(&ms, es_time_mono() + 2.0);
		rc = list_members(h, &ms);
	}
	if (!rc && ms.n)
		rc = es_error(ES_EIO, "%zu process(es) of the Ray head in process group %d (%s, pid %d) are still running after SIGKILL",
			      ms.n, (int)h->pgid, ms.v[0].comm, (int)ms.v[0].pid);
	free(ms.v);
	return rc;
}

/* Reap the head's processes that are our children (es_ray_head_start makes this process their
 * subreaper): killed, they stay zombies, listed by ps as raylet and gcs_server, until their
 * parent waits for them, and a rank that exited first left that to init, which may take a
 * second. Waits up to timeout for the last of them; says so when one is left. */
static void reap_group(const struct es_ray_head *h, double timeout)
{
	double deadline = es_time_mono() + timeout;
	for (;;) {
		pid_t w = waitpid(-h->pgid, NULL, WNOHANG);
		if (w > 0 || (w < 0 && errno == EINTR))
			continue;
		if (w < 0) /* ECHILD: no child of ours is left in the group */
			return;
		if (es_time_mono() >= deadline) {
			es_warning("a process of the Ray head (process group %d) has not exited %g s after it was stopped; "
				   "this rank exits without waiting for it", (int)h->pgid, timeout);
			return;
		}
		es_sleep(0.02);
	}
}

static void stop_watchdog(struct es_ray_head *h)
{
	if (h->watchdog_pid > 0) {
		/* Signal it only while it is still our unreaped child: once reaped (by us here, or
		 * by a waitpid(-1) elsewhere in the process) its pid may belong to anyone. */
		if (es_proc_wait(h->watchdog_pid, NULL, 1) == 0) {
			kill(h->watchdog_pid, SIGKILL);
			es_proc_wait(h->watchdog_pid, NULL, 0);
		}
		h->watchdog_pid = 0;
	}
	if (h->watchdog_fd >= 0) {
		close(h->watchdog_fd);
		h->watchdog_fd = -1;
	}
}

static int stop_impl(struct es_ray_head *h, int graceful)
{
	if (!h->running)
		return 0;
	/* The watchdog goes first: it must not fire (SIGKILL to the group) in the middle of the
	 * graceful order, and it is no Ray process. */
	stop_watchdog(h);
	int rc = 0;
	if (graceful) {
		double t = h->stop_step_timeout_secs > 0 ? h->stop_step_timeout_secs : 10.0;
		/* The order of `ray stop`: SIGTERM to the whole group at once left gcs_server and
		 * the autoscaler monitor hanging for more than 10 s (docs/dj-notes.md). */
		rc = term_step(h, ONLY_RAYLET, t);
		if (!rc)
			rc = term_step(h, ALL_BUT_GCS, t);
		if (!rc)
			rc = term_step(h, ONLY_GCS, t);
	}
	int rc2 = kill_rest(h);
	if (!rc)
		rc = rc2;
	reap_group(h, h->stop_step_timeout_secs > 0 ? h->stop_step_timeout_secs : 10.0);
	if (rc)
		return rc;
	h->running = 0;
	if (!h->keep_temp_dir && h->temp_dir[0])
		rc = es_fs_remove_tree(h->temp_dir);
	return rc;
}

int es_ray_head_stop(struct es_ray_head *h)
{
	return stop_impl(h, 1);
}

int es_ray_head_kill(struct es_ray_head *h)
{
	return stop_impl(h, 0);
}

int es_ray_head_count(const struct es_ray_head *h)
{
	if (!h->running)
		return 0;
	struct members ms = { 0 };
	int rc = list_members(h, &ms);
	free(ms.v);
	return rc ? rc : (int)ms.n;
}

/* 1 when something accepts a TCP connection on 127.0.0.1:port within timeout_ms. */
static int port_accepts(int port, int timeout_ms)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	struct sockaddr_in a = { 0 };
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int ok = 0;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
		ok = 1;
	} else if (errno == EINPROGRESS) {
		struct pollfd p = { fd, POLLOUT, 0 };
		int err = 0;
		socklen_t len = sizeof(err);
		if (poll(&p, 1, timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && !err)
			ok = 1;
	}
	close(fd);
	return ok;
}

int es_ray_head_alive(const struct es_ray_head *h)
{
	if (!h->running)
		return 0;
	struct members ms = { 0 };
	int have_raylet = 0, have_gcs = 0;
	if (list_members(h, &ms) == 0) {
		for (size_t i = 0; i < ms.n; i++) {
			have_raylet |= !strcmp(ms.v[i].comm, "raylet");
			have_gcs |= !strcmp(ms.v[i].comm, "gcs_server");
		}
	}
	free(ms.v);
	return have_raylet && have_gcs && port_accepts(h->port, 2000);
}

/* ---- resources: CPUs, GPUs, object store ---- */

struct gpus {
	char *id[MAX_GPUS];
	int n;
	int from_env;  /* the list came from CUDA_VISIBLE_DEVICES */
};

static void gpus_free(struct gpus *g)
{
	for (int i = 0; i < g->n; i++)
		free(g->id[i]);
	g->n = 0;
}

/* The GPUs this process may use: CUDA_VISIBLE_DEVICES when set (a scheduler such as Slurm
 * may have narrowed it), else one per /dev/nvidia<N>. */
static int find_gpus(char *const *env, struct gpus *g)
{
	g->n = 0;
	g->from_env = 0;
	const char *cvd = es_env_get(env, "CUDA_VISIBLE_DEVICES");
	if (cvd) {
		g->from_env = 1;
		const char *p = cvd;
		while (*p && g->n < MAX_GPUS) {
			const char *comma = strchr(p, ',');
			size_t len = comma ? (size_t)(comma - p) : strlen(p);
			/* CUDA stops at the first invalid entry; "-1" is the usual "no GPU". */
			if (len == 0 || (len >= 1 && p[0] == '-'))
				break;
			if (!(g->id[g->n] = strndup(p, len)))
				return es_error(ES_ENOMEM, "out of memory");
			g->n++;
			if (!comma)
				break;
			p = comma + 1;
		}
		return 0;
	}
	DIR *d = opendir("/dev");
	if (!d)
		return 0;
	struct dirent *de;
	int count = 0;
	while ((de = readdir(d)) != NULL) {
		const char *s = de->d_name;
		if (strncmp(s, "nvidia", 6) != 0 || !s[6])
			continue;
		int digits = 1;
		for (const char *q = s + 6; *q; q++)
			if (!isdigit((unsigned char)*q))
				digits = 0;
		if (digits)
			count++;
	}
	closedir(d);
	for (int i = 0; i < count && i < MAX_GPUS; i++) {
		char num[16];
		snprintf(num, sizeof(num), "%d", i);
		if (!(g->id[g->n] = strdup(num)))
			return es_error(ES_ENOMEM, "out of memory");
		g->n++;
	}
	return 0;
}

/* Pick this rank's GPUs: a contiguous slice when there are at least as many GPUs as ranks
 * (so a rank's GPUs stay close together), one shared GPU each when there are fewer (GPU
 * operators then queue on the same card instead of waiting forever for a GPU that Ray
 * thinks this head lacks). An explicit num_gpus takes that many, starting at rank*num_gpus. */
static int choose_gpus(const struct es_ray_opts *o, const struct gpus *g, struct es_ray_head *h)
{
	int r = o->rank_on_host, R = o->ranks_on_host;
	int first = 0, count = 0;
	h->cuda_visible_devices[0] = '\0';
	if (o->num_gpus > 0) {
		count = (int)ceil(o->num_gpus - 1e-9);
		if (g->n == 0) {
			h->num_gpus = count;
			return 0;
		}
		if (count > g->n)
			count = g->n;
		first = (int)(((long long)r * count) % g->n);
	} else if (g->n == 0) {
		/* Nothing NVIDIA-like is visible: leave detection to Ray (0 on a CPU node). */
		h->num_gpus = -1;
		return 0;
	} else if (g->n >= R) {
		int base = g->n / R, extra = g->n % R;
		count = base + (r < extra);
		first = r * base + (r < extra ? r : extra);
	} else {
		count = 1;
		first = r % g->n;
		es_warning("%d GPU(s) for %d ranks on this host: ranks share GPUs", g->n, R);
	}
	struct es_buf b = ES_BUF_INIT;
	for (int i = 0; i < count; i++)
		es_buf_printf(&b, "%s%s", i ? "," : "", g->id[(first + i) % g->n]);
	if (b.len >= sizeof(h->cuda_visible_devices)) {
		es_buf_free(&b);
		return es_error(ES_EINVAL, "CUDA_VISIBLE_DEVICES for the Ray head would be longer than %zu bytes",
				sizeof(h->cuda_visible_devices) - 1);
	}
	memcpy(h->cuda_visible_devices, b.data, b.len + 1);
	es_buf_free(&b);
	h->num_gpus = count;
	return 0;
}

static long long read_limit(const char *path)
{
	struct es_buf b = ES_BUF_INIT;
	long long v = -1;
	if (read_quiet(path, &b, 256) == 0 && b.len && isdigit((unsigned char)b.data[0]))
		v = strtoll(b.data, NULL, 10);
	es_buf_free(&b);
	return v;
}

/* 30% of the memory (Ray's own default share) and 80% of free /dev/shm, split between the
 * ranks of the host: with several heads per host Ray's default would promise each of them the
 * whole share, and an object store larger than /dev/shm falls back to (slow) disk. */
static long long object_store_share(int ranks)
{
	long long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	long long mem = pages > 0 && psize > 0 ? pages * psize : 0;
	long long cg = read_limit("/sys/fs/cgroup/memory.max");
	if (cg > 0 && (mem == 0 || cg < mem))
		mem = cg;
	cg = read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
	if (cg > 0 && (mem == 0 || cg < mem))
		mem = cg;
	long long share = (long long)(0.3 * (double)mem / ranks);
	struct statvfs sv;
	if (statvfs("/dev/shm", &sv) == 0) {
		long long shm = (long long)((double)sv.f_bavail * sv.f_frsize * 0.8 / ranks);
		if (shm < share)
			share = shm;
	}
	return share < MIN_OBJECT_STORE ? MIN_OBJECT_STORE : share;
}

/* ---- ports ---- */

/* 1 when nothing is bound to port on the IPv4 or IPv6 wildcard or any address: Linux
 * refuses a wildcard bind while any socket listens on the port (SO_REUSEADDR only forgives
 * TIME_WAIT leftovers, which is what a server binding later will do as well). */
static int port_free(int port)
{
	int families[2] = { AF_INET, AF_INET6 };
	for (int i = 0; i < 2; i++) {
		int fd = socket(families[i], SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			if (families[i] == AF_INET6)
				continue; /* no IPv6 on this host */
			return 0;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		int rc;
		if (families[i] == AF_INET) {
			struct sockaddr_in a = { 0 };
			a.sin_family = AF_INET;
			a.sin_port = htons((uint16_t)port);
			a.sin_addr.s_addr = htonl(INADDR_ANY);
			rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
		} else {
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
			struct sockaddr_in6 a = { 0 };
			a.sin6_family = AF_INET6;
			a.sin6_port = htons((uint16_t)port);
			a.sin6_addr = in6addr_any;
			rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
			if (rc != 0 && errno == EADDRNOTAVAIL)
				rc = 0; /* IPv6 disabled on every interface */
		}
		close(fd);
		if (rc != 0)
			return 0;
	}
	return 1;
}

static void ephemeral_range(int *lo, int *hi)
{
	*lo = 32768;
	*hi = 60999;
	struct es_buf b = ES_BUF_INIT;
	if (read_quiet("/proc/sys/net/ipv4/ip_local_port_range", &b, 256) == 0) {
		char *end;
		long a = strtol(b.data, &end, 10);
		long c = strtol(end, NULL, 10);
		if (a > 0 && c >= a && c < 65536) {
			*lo = (int)a;
			*hi = (int)c;
		}
	}
	es_buf_free(&b);
}

static int block_free(int first)
{
	for (int p = first; p < first + ES_RAY_PORT_BLOCK; p++)
		if (!port_free(p))
			return 0;
	return 1;
}

/* The first free block of this rank at or after block from_k (from_k is one of its blocks). */
static int choose_ports(const struct es_ray_opts *o, struct es_ray_head *h, long long from_k)
{
	int base = o->port_base > 0 ? o->port_base : ES_RAY_PORT_BASE;
	int lo, hi, tried = 0;
	ephemeral_range(&lo, &hi);
	for (long long k = from_k;; k += o->ranks_on_host) {
		long long first = base + k * ES_RAY_PORT_BLOCK, last = first + ES_RAY_PORT_BLOCK - 1;
		if (last > 65535)
			break;
		if (first <= hi && last >= lo)
			continue;
		tried++;
		if (block_free((int)first)) {
			h->port = (int)first;
			h->port_block = (int)k;
			return 0;
		}
	}
	return es_error(ES_EIO, "no free block of %d TCP ports for a Ray head of rank %d of %d on this host "
			"(tried %d block(s) from port %d, outside the ephemeral range %d-%d)",
			ES_RAY_PORT_BLOCK, o->rank_on_host, o->ranks_on_host, tried, base, lo, hi);
}

/* ---- start ---- */

/* The head's environment (proc's es_env_child: without the launcher's identity), with the
 * token that marks its processes, no usage reports, and its own CUDA_VISIBLE_DEVICES when it
 * gets a slice of the GPUs. */
static int build_env(const struct es_ray_opts *o, const struct es_ray_head *h, struct es_strv *env)
{
	struct es_buf token = ES_BUF_INIT, cvd = ES_BUF_INIT;
	const char *vars[4] = { "RAY_USAGE_STATS_ENABLED=0", NULL, NULL, NULL };
	int rc = es_buf_printf(&token, "%s=%s", TOKEN_VAR, h->token);
	vars[1] = token.data;
	if (!rc && h->cuda_visible_devices[0]) {
		rc = es_buf_printf(&cvd, "CUDA_VISIBLE_DEVICES=%s", h->cuda_visible_devices);
		vars[2] = cvd.data;
	}
	struct es_env_spec es = { .base = o->env, .vars = vars };
	if (!rc)
		rc = es_env_child(&es, env);
	es_buf_free(&token);
	es_buf_free(&cvd);
	return rc;
}

static int is_executable(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

/* The `ray` to run: the given one, else the one beside the processor's python (its venv),
 * else the first on PATH. */
static int find_ray(const struct es_ray_opts *o, struct es_buf *out)
{
	const char *name = o->ray_exe && *o->ray_exe ? o->ray_exe : "ray";
	es_buf_reset(out);
	if (strchr(name, '/')) {
		if (!is_executable(name))
			return es_error(ES_ENOENT, "Ray command '%s' is not an executable file", name);
		return es_buf_adds(out, name);
	}
	if (!(o->ray_exe && *o->ray_exe) && o->python && strchr(o->python, '/')) {
		const char *slash = strrchr(o->python, '/');
		es_buf_add(out, o->python, (size_t)(slash - o->python) + 1);
		es_buf_adds(out, "ray");
		if (is_executable(out->data))
			return 0;
		es_buf_reset(out);
	}
	const char *path = es_env_get(o->env, "PATH");
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		const char *colon = strchr(path, ':');
		size_t len = colon ? (size_t)(colon - path) : strlen(path);
		if (len) {
			es_buf_reset(out);
			es_buf_add(out, path, len);
			es_buf_addc(out, '/');
			es_buf_adds(out, name);
			if (is_executable(out->data))
				return 0;
		}
		if (!colon)
			break;
		path = colon + 1;
	}
	es_buf_reset(out);
	/* The python (or dj-process) is the job's or the one given to this run or worker: name
	 * the options that point it at the environment where Ray is installed. */
	return es_error(ES_ENOENT, "cannot find Ray's '%s' command%s%s%s on PATH; give 'eshard-mpi run' or 'worker' "
			"--python (or --dj-process) of the environment where Ray is installed on this node",
			name, o->python ? " beside '" : "", o->python ? o->python : "", o->python ? "' or" : "");
}

/* The base dir holds other users' nothing: create it private, and refuse one we do not own
 * (a shared /tmp lets anyone create /tmp/eshard-ray-<uid> first). */
static int prepare_base(const char *base)
{
	int rc = es_fs_mkdirs(base, 0700);
	if (rc)
		return rc;
	struct stat st;
	if (lstat(base, &st) != 0)
		return es_error_errno(ES_EIO, "cannot stat the Ray base folder '%s'", base);
	if (!S_ISDIR(st.st_mode))
		return es_error(ES_EINVAL, "Ray base folder '%s' is not a folder", base);
	if (st.st_uid != geteuid())
		return es_error(ES_EINVAL, "Ray base folder '%s' belongs to uid %u, not to us (uid %u)", base,
				(unsigned)st.st_uid, (unsigned)geteuid());
	return 0;
}

/* The last lines of `ray start`'s output on one line, for the error message. */
static void output_tail(const char *log, struct es_buf *out)
{
	struct es_buf b = ES_BUF_INIT;
	es_buf_reset(out);
	if (read_quiet(log, &b, (size_t)1 << 20) != 0 || !b.len) {
		es_buf_adds(out, "(no output)");
		es_buf_free(&b);
		return;
	}
	size_t end = b.len;
	while (end && (b.data[end - 1] == '\n' || b.data[end - 1] == ' '))
		end--;
	size_t start = end, lines = 0;
	while (start && lines < 6 && end - start < 1200) {
		start--;
		if (b.data[start] == '\n')
			lines++;
	}
	for (size_t i = start; i < end; i++) {
		char c = b.data[i];
		if (c == '\n') {
			if (out->len)
				es_buf_adds(out, " | ");
		} else if ((unsigned char)c >= 0x20 || c == '\t') {
			es_buf_addc(out, c);
		}
	}
	es_buf_free(&b);
}

/* A process of the head: in the head's group (pgroup > 0) or leading a new one (0), stdin
 * /dev/null, stdout and stderr out_fd, extra_fd (when >= 0) as 3, nothing else: the head lives
 * for the whole run and must not keep the rank's descriptors (MPI sockets, lock files whose
 * flock would outlive a release). */
static int spawn_in_group(pid_t *pid, char *const *argv, char *const *envp, pid_t pgroup, int out_fd, int extra_fd)
{
	struct es_proc_spec ps;
	es_proc_spec_init(&ps, argv);
	ps.envp = envp;
	ps.fd[0] = ES_PROC_DEVNULL;
	ps.fd[1] = ps.fd[2] = out_fd;
	if (extra_fd >= 0) {
		ps.extra = &extra_fd;
		ps.n_extra = 1;
	}
	if (pgroup > 0)
		ps.join_group = pgroup;
	else
		ps.new_group = 1;
	struct es_proc p;
	int rc = es_proc_spawn(&ps, &p);
	*pid = p.pid;
	return rc;
}

/* The watchdog: a shell in the head's group that waits for EOF on a pipe whose write end only
 * this process holds, then SIGKILLs the group. When the rank dies in any way (SIGKILL and
 * OOM included) the kernel closes the write end, so the head does not outlive its rank. */
static int start_watchdog(struct es_ray_head *h, char *const *envp)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return es_error_errno(ES_EIO, "cannot create the Ray head's watchdog pipe");
	char *argv[] = { "/bin/sh", "-c", "read -r _ <&3; kill -KILL 0", "eshard-ray-watchdog", NULL };
	pid_t pid = 0;
	int rc = spawn_in_group(&pid, argv, envp, h->pgid, ES_PROC_DEVNULL, p[0]);
	close(p[0]);
	if (rc) {
		close(p[1]);
		return es_error(rc, "cannot start the Ray head's watchdog /bin/sh: %s", es_last_error());
	}
	h->watchdog_pid = pid;
	h->watchdog_fd = p[1];
	return 0;
}

static int cancelled(const struct es_ray_opts *o)
{
	return o->cancel && *o->cancel;
}

/* Read "<ip>:<port>" that `ray start` wrote, and check it names our port. */
static void read_address(struct es_ray_head *h)
{
	struct es_buf path = ES_BUF_INIT, b = ES_BUF_INIT;
	char want[16];
	snprintf(want, sizeof(want), ":%d", h->port);
	snprintf(h->address, sizeof(h->address), "127.0.0.1:%d", h->port);
	if (es_path_join(&path, h->temp_dir, "ray_current_cluster") == 0 &&
	    read_quiet(path.data, &b, 4096) == 0) {
		while (b.len && isspace((unsigned char)b.data[b.len - 1]))
			b.data[--b.len] = '\0';
		size_t wl = strlen(want);
		if (b.len > wl && b.len < sizeof(h->address) && !strcmp(b.data + b.len - wl, want) &&
		    !strpbrk(b.data, " \t\n"))
			memcpy(h->address, b.data, b.len + 1);
	}
	es_buf_free(&path);
	es_buf_free(&b);
}

static int check_opts(const struct es_ray_opts *o)
{
	if (o->ranks_on_host < 1 || o->rank_on_host < 0 || o->rank_on_host >= o->ranks_on_host)
		return es_error(ES_EUSAGE, "Ray head: rank on host %d is not in 0..%d", o->rank_on_host,
				o->ranks_on_host - 1);
	if (o->base_dir && o->base_dir[0] != '/')
		return es_error(ES_EUSAGE, "Ray base folder must be an absolute path: %s", o->base_dir);
	if (o->port_base < 0 || o->port_base > 65535 - ES_RAY_PORT_BLOCK)
		return es_error(ES_EUSAGE, "Ray port base %d is out of range", o->port_base);
	return 0;
}

static int build_argv(const struct es_ray_head *h, const char *ray, struct es_strv *argv)
{
	int P = h->port;
	int rc = es_strv_pushf(argv, "%s", ray);
	if (!rc) rc = es_strv_pushf(argv, "start");
	if (!rc) rc = es_strv_pushf(argv, "--head");
	if (!rc) rc = es_strv_pushf(argv, "--temp-dir=%s", h->temp_dir);
	if (!rc) rc = es_strv_pushf(argv, "--port=%d", P);
	if (!rc) rc = es_strv_pushf(argv, "--node-manager-port=%d", P + 1);
	if (!rc) rc = es_strv_pushf(argv, "--object-manager-port=%d", P + 2);
	if (!rc) rc = es_strv_pushf(argv, "--include-dashboard=false");
	/* The minimal dashboard process still gets a port argument (it does not listen on it
	 * in 2.52), and the agents listen on theirs: all of them stay inside the block. No
	 * --ray-client-server-port: plain `ray` (without [client]) refuses it. */
	if (!rc) rc = es_strv_pushf(argv, "--dashboard-port=%d", P + 3);
	if (!rc) rc = es_strv_pushf(argv, "--dashboard-agent-listen-port=%d", P + 4);
	if (!rc) rc = es_strv_pushf(argv, "--dashboard-agent-grpc-port=%d", P + 5);
	if (!rc) rc = es_strv_pushf(argv, "--runtime-env-agent-port=%d", P + 6);
	if (!rc) rc = es_strv_pushf(argv, "--metrics-export-port=%d", P + 7);
	if (!rc) rc = es_strv_pushf(argv, "--min-worker-port=%d", P + ES_RAY_FIXED_PORTS);
	if (!rc) rc = es_strv_pushf(argv, "--max-worker-port=%d", P + ES_RAY_PORT_BLOCK - 1);
	if (!rc) rc = es_strv_pushf(argv, "--num-cpus=%d", h->num_cpus);
	if (!rc && h->num_gpus >= 0)
		rc = es_strv_pushf(argv, "--num-gpus=%d", h->num_gpus);
	if (!rc) rc = es_strv_pushf(argv, "--object-store-memory=%lld", h->object_store_bytes);
	if (!rc) rc = es_strv_pushf(argv, "--disable-usage-stats");
	return rc;
}

/* Kill what a failed launch left and empty the temp dir for the next one. */
static void undo_launch(struct es_ray_head *h)
{
	if (h->running) {
		int keep = h->keep_temp_dir;
		h->keep_temp_dir = 1;
		es_log_quiet_begin();
		stop_impl(h, 0);
		es_log_quiet_end();
		h->keep_temp_dir = keep;
		h->running = 0;
	}
}

/* One `ray start` on the block in h->port. 0 when the head is up; *race is set when it failed
 * because someone else bound a port of the block after choose_ports() found it free (another
 * job's head with the same rank number starting at the same moment); *exited when `ray start`
 * itself ended with a failure status (not cut off by the deadline or a stop). */
static int launch(const struct es_ray_opts *o, struct es_ray_head *h, const char *ray, char *const *envp,
		  double deadline, int *race, int *exited)
{
	struct es_strv argv = { 0 };
	struct es_buf log = ES_BUF_INIT, tail = ES_BUF_INIT;
	int log_fd = -1, status = 0;
	*race = *exited = 0;
	int rc = build_argv(h, ray, &argv);
	if (!rc)
		rc = es_path_join(&log, h->temp_dir, "ray-start.log");
	if (rc)
		goto out;
	log_fd = open(log.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (log_fd < 0) {
		rc = es_error_errno(ES_EIO, "cannot create '%s'", log.data);
		goto out;
	}
	pid_t pid;
	if ((rc = spawn_in_group(&pid, argv.v, envp, 0, log_fd, -1)) != 0)
		goto out;
	h->pgid = pid;
	/* From here the group exists; a failure must take it down (undo_launch). */
	h->running = 1;

	for (;;) {
		int w = es_proc_wait(pid, &status, 1);
		if (w == 1)
			break;
		if (w < 0) {
			rc = w;
			break;
		}
		if (cancelled(o)) {
			rc = es_error(ES_EINTR, "Ray head start was interrupted");
			break;
		}
		if (es_time_mono() > deadline) {
			output_tail(log.data, &tail);
			rc = es_error(ES_EIO, "`ray start` did not finish within %.0f seconds; last output: %s",
				      o->start_timeout_secs > 0 ? o->start_timeout_secs : 120.0, tail.data);
			break;
		}
		es_sleep(0.05);
	}
	if (rc) {
		/* `ray start` itself is still running: the group is certainly ours. */
		es_proc_kill_group(pid, SIGKILL);
		es_proc_wait(pid, NULL, 0);
		goto out;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		undo_launch(h);
		if (!block_free(h->port)) {
			*race = 1;
			rc = ES_EEXIST;
			goto out;
		}
		output_tail(log.data, &tail);
		*exited = WIFEXITED(status);
		if (WIFEXITED(status))
			rc = es_error(ES_EIO, "`ray start --head` (ports %d-%d, temp dir %s) exited with status %d; last output: %s",
				      h->port, h->port + ES_RAY_PORT_BLOCK - 1, h->temp_dir, WEXITSTATUS(status), tail.data);
		else
			rc = es_error(ES_EIO, "`ray start --head` was killed by signal %d; last output: %s",
				      WTERMSIG(status), tail.data);
		goto out;
	}
	read_address(h);

	/* `ray start` returns when the head is up; confirm it, so that a head that died right
	 * away is reported here and not as a failed first shard. */
	while (!es_ray_head_alive(h)) {
		if (cancelled(o)) {
			rc = es_error(ES_EINTR, "Ray head start was interrupted");
			goto out;
		}
		if (es_time_mono() > deadline) {
			output_tail(log.data, &tail);
			rc = es_error(ES_EIO, "Ray head at %s (temp dir %s) is not running after `ray start` succeeded; last output: %s",
				      h->address, h->temp_dir, tail.data);
			goto out;
		}
		es_sleep(0.1);
	}
out:
	if (log_fd >= 0)
		close(log_fd);
	es_strv_free(&argv);
	es_buf_free(&log);
	es_buf_free(&tail);
	return rc;
}

/* Print the kept message of a failure that was made quietly; returns code. */
static int say_again(int code)
{
	char *msg = strdup(es_last_error());
	if (!msg)
		return es_error(code, "`ray start --head` failed (out of memory for its message)");
	es_error(code, "%s", msg);
	free(msg);
	return code;
}

int es_ray_head_start(const struct es_ray_opts *o, struct es_ray_head *h)
{
	memset(h, 0, sizeof(*h));
	h->watchdog_fd = -1;
	h->stop_step_timeout_secs = o->stop_step_timeout_secs;
	h->keep_temp_dir = o->keep_temp_dir;
	int rc = check_opts(o);
	if (rc)
		return rc;
	/* `ray start` exits once the head is up, and its daemons are reparented: to this process,
	 * so that stopping the head can wait for them until they are gone (reap_group). */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
		es_warning("cannot make this process the subreaper of its Ray head (%s): its stopped processes "
			   "are left to init to reap", strerror(errno));

	struct es_buf ray = ES_BUF_INIT, base = ES_BUF_INIT;
	struct es_strv env = { 0 };
	struct gpus g = { { 0 }, 0, 0 };
	int temp_made = 0;

	if ((rc = find_ray(o, &ray)) != 0)
		goto out;
	if (o->base_dir && *o->base_dir)
		rc = es_buf_adds(&base, o->base_dir);
	else
		rc = es_buf_printf(&base, "/tmp/eshard-ray-%u", (unsigned)geteuid());
	while (!rc && base.len > 1 && base.data[base.len - 1] == '/')
		es_buf_setlen(&base, base.len - 1);
	if (rc || (rc = prepare_base(base.data)) != 0)
		goto out;
	if ((rc = es_fs_token(h->token)) != 0)
		goto out;
	int n = snprintf(h->temp_dir, sizeof(h->temp_dir), "%s/%d-%.8s", base.data, o->rank_on_host, h->token);
	if (n < 0 || (size_t)n > ES_RAY_TEMP_DIR_MAX) {
		rc = es_error(ES_EUSAGE, "Ray temp folder '%s' is longer than %d bytes (Unix socket paths under it are "
			      "limited to 107 bytes); choose a shorter Ray base folder than '%s'",
			      h->temp_dir, ES_RAY_TEMP_DIR_MAX, base.data);
		goto out;
	}

	/* Resources. */
	/* lround of a count past INT_MAX would not fit the int Ray takes. */
	int cpus = o->num_cpus >= INT_MAX ? INT_MAX : o->num_cpus > 0 ? (int)lround(o->num_cpus) : es_cpus_usable(o->ranks_on_host);
	h->num_cpus = cpus < 1 ? 1 : cpus;
	if ((rc = find_gpus(o->env ? o->env : environ, &g)) != 0 || (rc = choose_gpus(o, &g, h)) != 0)
		goto out;
	h->object_store_bytes = o->object_store_bytes > 0 ? o->object_store_bytes : object_store_share(o->ranks_on_host);
	if ((rc = build_env(o, h, &env)) != 0)
		goto out;

	double deadline = es_time_mono() + (o->start_timeout_secs > 0 ? o->start_timeout_secs : 120.0);
	long long from_k = o->rank_on_host;
	int retried = 0;
	for (int attempt = 1;; attempt++) {
		if ((rc = choose_ports(o, h, from_k)) != 0)
			goto out;
		if (mkdir(h->temp_dir, 0700) != 0) {
			rc = es_error_errno(ES_EIO, "cannot create the Ray temp folder '%s'", h->temp_dir);
			goto out;
		}
		temp_made = 1;
		int race, exited;
		/* Quiet while a failure may still be retried: said below, once, as what it is. */
		es_log_quiet_begin();
		rc = launch(o, h, ray.data, env.v, deadline, &race, &exited);
		es_log_quiet_end();
		if (!rc)
			break;
		if (exited && !retried && attempt < 3 && es_time_mono() + ES_RAY_RETRY_MIN_SECS < deadline) {
			/* On a node loaded past its cores, Ray's own waits inside `ray start` (for
			 * its GCS, for the raylet) can run out although nothing is wrong: one more
			 * start on a fresh temp folder, within the same deadline, before the rank
			 * gives up (which stops the job: docs/dj-notes.md). */
			retried = 1;
			es_warning("%s; starting the Ray head once more", es_last_error());
		} else if (!race || attempt == 3) {
			if (rc != ES_EEXIST)
				rc = say_again(rc);
			break;
		} else {
			es_warning("Ray head ports %d-%d were taken while it started; trying the next block", h->port,
				   h->port + ES_RAY_PORT_BLOCK - 1);
			from_k = h->port_block + o->ranks_on_host;
		}
		es_fs_remove_tree(h->temp_dir);
		temp_made = 0;
	}
	if (rc == ES_EEXIST)
		rc = es_error(ES_EIO, "Ray head ports were taken by someone else while it started, 3 times in a row");
	if (!rc)
		rc = start_watchdog(h, env.v);

out:
	if (rc)
		undo_launch(h);
	if (rc && temp_made && !o->keep_temp_dir)
		es_fs_remove_tree(h->temp_dir);
	gpus_free(&g);
	es_strv_free(&env);
	es_buf_free(&ray);
	es_buf_free(&base);
	return rc;
}
