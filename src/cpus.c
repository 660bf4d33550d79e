#include "eshard/cpus.h"
#include "eshard/buf.h"
#include "eshard/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int es_cpus_node(cpu_set_t *node)
{
	cpu_set_t before, all;
	if (sched_getaffinity(0, sizeof(before), &before) != 0)
		return es_error_errno(ES_EIO, "cannot read this process's CPU affinity");
	/* Every CPU the mask can name: the kernel keeps those that are online and in the
	 * process's cpuset, and refuses only when none is. */
	memset(&all, 0xff, sizeof(all));
	if (sched_setaffinity(0, sizeof(all), &all) != 0)
		return es_error_errno(ES_EIO, "cannot widen this process's CPU affinity to its cpuset");
	int rc = 0;
	if (sched_getaffinity(0, sizeof(*node), node) != 0)
		rc = es_error_errno(ES_EIO, "cannot read this process's CPU affinity");
	if (sched_setaffinity(0, sizeof(before), &before) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot restore this process's CPU affinity");
	return rc;
}

/* One CPU of the node and where it sits. */
struct cpu_place {
	long package, core;
	int cpu;
};

static long read_topology(const char *sysfs, int cpu, const char *what)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/cpu%d/topology/%s", sysfs, cpu, what);
	FILE *f = fopen(path, "re");
	long v = -1;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static int cmp_place(const void *a, const void *b)
{
	const struct cpu_place *x = a, *y = b;
	if (x->package != y->package)
		return x->package < y->package ? -1 : 1;
	if (x->core != y->core)
		return x->core < y->core ? -1 : 1;
	return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

void es_cpus_split(const cpu_set_t *node, const char *sysfs, int k, int n, cpu_set_t *share)
{
	struct cpu_place v[CPU_SETSIZE];
	int N = 0;
	if (!sysfs)
		sysfs = ES_CPUS_SYSFS;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, node))
			v[N++] = (struct cpu_place){ read_topology(sysfs, cpu, "physical_package_id"),
						     read_topology(sysfs, cpu, "core_id"), cpu };
	qsort(v, (size_t)N, sizeof(v[0]), cmp_place);
	int first, count;
	if (N >= n) {
		int base = N / n, extra = N % n;
		count = base + (k < extra);
		first = k * base + (k < extra ? k : extra);
	} else {
		count = N ? 1 : 0;
		first = N ? k % N : 0;
	}
	CPU_ZERO(share);
	for (int i = first; i < first + count; i++)
		CPU_SET(v[i].cpu, share);
}

int es_cpus_take_share(int k, int n, struct es_cpus *c)
{
	if (n < 1 || k < 0 || k >= n)
		return es_error(ES_EUSAGE, "CPU share: rank on host %d is not in 0..%d", k, n - 1);
	if (sched_getaffinity(0, sizeof(c->bound), &c->bound) != 0)
		return es_error_errno(ES_EIO, "cannot read this process's CPU affinity");
	int rc = es_cpus_node(&c->node);
	if (rc)
		return rc;
	es_cpus_split(&c->node, NULL, k, n, &c->share);
	if (sched_setaffinity(0, sizeof(c->share), &c->share) != 0) {
		char list[256];
		es_cpus_format(&c->share, list, sizeof(list));
		return es_error_errno(ES_EIO, "cannot give this process its share of the node's CPUs (%s)", list);
	}
	return 0;
}

int es_cpus_was_narrower(const struct es_cpus *c)
{
	return CPU_COUNT(&c->bound) < CPU_COUNT(&c->share);
}

void es_cpus_format(const cpu_set_t *s, char *out, size_t n)
{
	struct es_buf b = ES_BUF_INIT;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, s))
			continue;
		int last = cpu;
		while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, s))
			last++;
		if (last == cpu)
			es_buf_printf(&b, "%s%d", b.len ? "," : "", cpu);
		else
			es_buf_printf(&b, "%s%d-%d", b.len ? "," : "", cpu, last);
		cpu = last;
	}
	if (n == 0) {
		es_buf_free(&b);
		return;
	}
	if (b.len >= n) {
		/* Too long: whole items that fit, then "...". */
		size_t len = n > 5 ? n - 5 : 0;
		while (len && b.data[len] != ',')
			len--;
		es_buf_setlen(&b, len);
		es_buf_adds(&b, len ? ",..." : "...");
	}
	snprintf(out, n, "%s", b.len ? b.data : "");
	es_buf_free(&b);
}

/* The first number of a file, or 0 when it has none (v2's "max" included). */
static long long read_number(const char *dir, const char *name, int *missing)
{
	struct es_buf path = ES_BUF_INIT;
	long long v = 0;
	FILE *f = es_buf_printf(&path, "%s/%s", dir, name) ? NULL : fopen(path.data, "re");
	es_buf_free(&path);
	if (!f) {
		*missing = 1;
		return 0;
	}
	if (fscanf(f, "%lld", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

/* The CPUs the quota of one cgroup folder allows: v2's cpu.max ("<quota> <period>", or "max
 * ..."), v1's cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us; rounded up; 0: none. */
static int quota_in(const char *dir, int v2)
{
	long long quota = 0, period = 0;
	int missing = 0;
	if (v2) {
		struct es_buf path = ES_BUF_INIT;
		FILE *f = es_buf_printf(&path, "%s/cpu.max", dir) ? NULL : fopen(path.data, "re");
		es_buf_free(&path);
		if (!f)
			return 0;
		if (fscanf(f, "%lld %lld", &quota, &period) != 2)
			quota = 0;
		fclose(f);
	} else {
		quota = read_number(dir, "cpu.cfs_quota_us", &missing);
		period = missing ? 0 : read_number(dir, "cpu.cfs_period_us", &missing);
	}
	if (quota <= 0 || period <= 0)
		return 0;
	long long cpus = (quota + period - 1) / period;
	return cpus > CPU_SETSIZE ? CPU_SETSIZE : (int)cpus;
}

/* The smallest quota on the way from root/rel up to root (a parent's quota limits its
 * children too); 0 when none. */
static int quota_up(const char *root, const char *rel, int v2)
{
	struct es_buf dir = ES_BUF_INIT;
	int best = 0;
	if (es_buf_printf(&dir, "%s%s", root, rel))
		return 0;
	size_t lroot = strlen(root);
	for (;;) {
		int q = quota_in(dir.data, v2);
		if (q > 0 && (!best || q < best))
			best = q;
		char *slash = strrchr(dir.data, '/');
		if (!slash || (size_t)(slash - dir.data) < lroot)
			break;
		es_buf_setlen(&dir, (size_t)(slash - dir.data));
	}
	es_buf_free(&dir);
	return best;
}

/* Is "cpu" one of the comma-separated controllers of a cgroup v1 line ("cpu,cpuacct")? */
static int has_cpu_controller(const char *list)
{
	for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, "cpu", 3) && (p[3] == ',' || p[3] == '\0'))
			return 1;
	return 0;
}

int es_cpus_quota(const char *proc_cgroup, const char *cgroup_root)
{
	FILE *f = fopen(proc_cgroup ? proc_cgroup : "/proc/self/cgroup", "re");
	if (!f)
		return 0;
	if (!cgroup_root)
		cgroup_root = "/sys/fs/cgroup";
	char line[1024];
	struct es_buf dir = ES_BUF_INIT;
	int best = 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		/* "<id>:<controllers>:<path>"; v2's controllers are empty. */
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *controllers = c1 + 1, *rel = c2 + 1;
		int q = 0;
		if (!*controllers) {
			/* v2: mounted at the root, or at unified/ beside v1 (a hybrid host). */
			q = quota_up(cgroup_root, rel, 1);
			if (!q && !es_buf_printf(&dir, "%s/unified", cgroup_root))
				q = quota_up(dir.data, rel, 1);
		} else if (has_cpu_controller(controllers)) {
			/* v1: mounted at cpu,cpuacct/ (the line's controllers) or at cpu/. */
			if (!es_buf_printf(&dir, "%s/%s", cgroup_root, controllers))
				q = quota_up(dir.data, rel, 0);
			es_buf_setlen(&dir, 0);
			if (!q && !es_buf_printf(&dir, "%s/cpu", cgroup_root))
				q = quota_up(dir.data, rel, 0);
		}
		es_buf_setlen(&dir, 0);
		if (q > 0 && (!best || q < best))
			best = q;
	}
	fclose(f);
	es_buf_free(&dir);
	return best;
}

int es_cpus_usable(int ranks_on_host)
{
	cpu_set_t set;
	int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
	if (n <= 0) {
		long online = sysconf(_SC_NPROCESSORS_ONLN);
		n = online > 0 ? (int)online : 1;
	}
	int quota = es_cpus_quota(NULL, NULL);
	if (quota > 0 && ranks_on_host > 0) {
		int share = (quota + ranks_on_host - 1) / ranks_on_host;
		if (share < n)
			n = share;
	}
	return n;
}
