/*
 * Unit tests of src/cpus.c: the CPU list format, the even split of a node's CPUs between the
 * ranks of a host (by number, and by a fake sysfs topology of sockets, cores and hyperthreads),
 * and taking a share for real: a thread bound to one CPU (as mpirun binds a
 * rank) gets back every CPU of its cpuset, and a child it starts inherits that.
 */
#include "testlib.h"

#include "eshard/cpus.h"
#include "eshard/log.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A set from a list of CPU numbers ending in -1. */
static cpu_set_t set_of(const int *cpus)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	for (; *cpus >= 0; cpus++)
		CPU_SET(*cpus, &s);
	return s;
}

static void format_is(const int *cpus, size_t n, const char *want, int line)
{
	cpu_set_t s = set_of(cpus);
	char out[64];
	memset(out, 'Z', sizeof(out));
	es_cpus_format(&s, out, n);
	test_check_str(out, want, "es_cpus_format", "want", __FILE__, line);
}

static void test_format(void)
{
	format_is((int[]){ -1 }, 64, "", __LINE__);
	format_is((int[]){ 0, -1 }, 64, "0", __LINE__);
	format_is((int[]){ 0, 1, 2, 3, -1 }, 64, "0-3", __LINE__);
	format_is((int[]){ 0, 2, 3, 7, 9, 10, 11, 1023, -1 }, 64, "0,2-3,7,9-11,1023", __LINE__);
	/* Cut at a whole item, with room for the mark and the NUL. */
	format_is((int[]){ 0, 2, 4, 6, 8, 10, -1 }, 10, "0,2,4,...", __LINE__);
	format_is((int[]){ 0, 2, 4, 6, 8, 10, -1 }, 12, "0,2,4,6,...", __LINE__);
	format_is((int[]){ 0, 2, 4, 6, 8, 10, -1 }, 13, "0,2,4,6,8,10", __LINE__);
	format_is((int[]){ 100, 200, -1 }, 6, "...", __LINE__);
}

/* The share as a CPU list; sysfs: a topology folder, or one that does not exist (no topology:
 * the CPUs are cut in the order of their numbers). */
static const char *split_in(const char *sysfs, const int *node_cpus, int k, int n)
{
	static char out[128];
	cpu_set_t node = set_of(node_cpus), share;
	es_cpus_split(&node, sysfs, k, n, &share);
	es_cpus_format(&share, out, sizeof(out));
	return out;
}
#define split_of(cpus, k, n) split_in("/nonexistent/eshard-topology", (cpus), (k), (n))

/* A topology folder like the kernel's for 2 sockets of 4 cores with 2 hyperthreads each,
 * numbered as x86 machines usually are: CPUs 0-3 socket 0, 4-7 socket 1, then their second
 * threads, 8-11 and 12-15. */
static const char *fake_topology(void)
{
	static char root[512];
	snprintf(root, sizeof(root), "%s", test_tmpdir());
	for (int cpu = 0; cpu < 16; cpu++) {
		char path[700];
		snprintf(path, sizeof(path), "%s/cpu%d", root, cpu);
		CHECK(mkdir(path, 0755) == 0);
		snprintf(path, sizeof(path), "%s/cpu%d/topology", root, cpu);
		CHECK(mkdir(path, 0755) == 0);
		const char *what[2] = { "physical_package_id", "core_id" };
		int value[2] = { (cpu % 8) / 4, cpu % 4 };
		for (int i = 0; i < 2; i++) {
			snprintf(path, sizeof(path), "%s/cpu%d/topology/%s", root, cpu, what[i]);
			FILE *f = fopen(path, "w");
			if (CHECK(f != NULL)) {
				fprintf(f, "%d\n", value[i]);
				fclose(f);
			}
		}
	}
	return root;
}

static void test_split_topology(void)
{
	static const int sixteen[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, -1 };
	const char *topo = fake_topology();
	/* Two ranks: a socket each, with both threads of its cores (not the first threads of every
	 * core for one rank and the second threads for the other). */
	CHECK_STR_EQ(split_in(topo, sixteen, 0, 2), "0-3,8-11");
	CHECK_STR_EQ(split_in(topo, sixteen, 1, 2), "4-7,12-15");
	/* Four ranks: two whole cores each. */
	CHECK_STR_EQ(split_in(topo, sixteen, 0, 4), "0-1,8-9");
	CHECK_STR_EQ(split_in(topo, sixteen, 3, 4), "6-7,14-15");
	/* A cpuset of socket 1's cores, one thread each, and their siblings. */
	static const int part[] = { 5, 6, 13, 14, -1 };
	CHECK_STR_EQ(split_in(topo, part, 0, 2), "5,13");
	CHECK_STR_EQ(split_in(topo, part, 1, 2), "6,14");
	CHECK_STR_EQ(split_in(topo, sixteen, 0, 1), "0-15");
}

static void put(const char *root, const char *rel, const char *text)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
		*p = '\0';
		mkdir(path, 0755);
		*p = '/';
	}
	FILE *f = fopen(path, "w");
	if (CHECK(f != NULL)) {
		fputs(text, f);
		fclose(f);
	}
}

/* CFS quotas in fake cgroup trees: v2 (also a parent's smaller quota, and "max"), v1 at
 * cpu,cpuacct/ and at cpu/ (-1: none), and no quota at all. */
static void test_quota(void)
{
	char root[600], proc[700], tree[700];
	snprintf(root, sizeof(root), "%s", test_tmpdir());
	snprintf(proc, sizeof(proc), "%s/cgroup", root);
#define TREE(name) (snprintf(tree, sizeof(tree), "%s/%s", root, (name)), tree)

	put(root, "cgroup", "0::/job/step\n");
	put(root, "v2/job/step/cpu.max", "250000 100000\n");
	CHECK_INT_EQ(es_cpus_quota(proc, TREE("v2")), 3);
	put(root, "v2/cpu.max", "max 100000\n");
	put(root, "v2/job/cpu.max", "150000 100000\n");
	CHECK_INT_EQ(es_cpus_quota(proc, TREE("v2")), 2);

	put(root, "cgroup", "12:pids:/\n4:cpu,cpuacct:/docker/abc\n0::/\n");
	put(root, "v1/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "400000\n");
	put(root, "v1/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
	CHECK_INT_EQ(es_cpus_quota(proc, TREE("v1")), 4);

	put(root, "cgroup", "3:cpuacct,cpu:/\n");
	put(root, "v1b/cpu/cpu.cfs_quota_us", "-1\n");
	put(root, "v1b/cpu/cpu.cfs_period_us", "100000\n");
	CHECK_INT_EQ(es_cpus_quota(proc, TREE("v1b")), 0);
	put(root, "v1b/cpu/cpu.cfs_quota_us", "50000\n");
	CHECK_INT_EQ(es_cpus_quota(proc, TREE("v1b")), 1);

	put(root, "cgroup", "0::/\n");
	CHECK_INT_EQ(es_cpus_quota(proc, TREE("none")), 0);
	CHECK_INT_EQ(es_cpus_quota("/nonexistent/cgroup", NULL), 0);
#undef TREE
}

static void test_split(void)
{
	static const int eight[] = { 0, 1, 2, 3, 4, 5, 6, 7, -1 };
	CHECK_STR_EQ(split_of(eight, 0, 1), "0-7");
	CHECK_STR_EQ(split_of(eight, 0, 2), "0-3");
	CHECK_STR_EQ(split_of(eight, 1, 2), "4-7");
	/* 8 CPUs for 3 ranks: 3, 3, 2, disjoint, covering all. */
	CHECK_STR_EQ(split_of(eight, 0, 3), "0-2");
	CHECK_STR_EQ(split_of(eight, 1, 3), "3-5");
	CHECK_STR_EQ(split_of(eight, 2, 3), "6-7");
	/* A cpuset with holes (a container's, a Slurm job's): the split follows its CPUs. */
	static const int holes[] = { 2, 3, 8, 9, 10, 11, -1 };
	CHECK_STR_EQ(split_of(holes, 0, 2), "2-3,8");
	CHECK_STR_EQ(split_of(holes, 1, 2), "9-11");
	/* More ranks than CPUs: one each, round robin. */
	static const int two[] = { 4, 5, -1 };
	CHECK_STR_EQ(split_of(two, 0, 3), "4");
	CHECK_STR_EQ(split_of(two, 1, 3), "5");
	CHECK_STR_EQ(split_of(two, 2, 3), "4");
}

/* Cpus_allowed_list of a child started after the share was taken. */
static void child_cpus(char *out, size_t n)
{
	int fd[2];
	out[0] = '\0';
	if (!CHECK(pipe(fd) == 0))
		return;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(fd[1], 1);
		execl("/bin/sh", "sh", "-c", "sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status", (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	ssize_t got = read(fd[0], out, n - 1);
	out[got > 0 ? got : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
	close(fd[0]);
	waitpid(pid, NULL, 0);
}

static void test_take_share(void)
{
	cpu_set_t start, node, now;
	CHECK(sched_getaffinity(0, sizeof(start), &start) == 0);
	if (!CHECK(es_cpus_node(&node) == 0))
		return;
	CHECK(CPU_COUNT(&node) >= CPU_COUNT(&start));
	CHECK(sched_getaffinity(0, sizeof(now), &now) == 0 && CPU_EQUAL(&now, &start)); /* left as it was */
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	CHECK(CPU_COUNT(&node) >= 1 && CPU_COUNT(&node) <= online);

	/* Bound to the node's first CPU, as mpirun binds a rank: the only rank of its host gets
	 * the whole node back, and so does its child. */
	int first = 0;
	while (!CPU_ISSET(first, &node))
		first++;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);
	struct es_cpus c;
	if (CHECK(es_cpus_take_share(0, 1, &c) == 0)) {
		CHECK(CPU_EQUAL(&c.bound, &one));
		CHECK(CPU_EQUAL(&c.node, &node));
		CHECK(CPU_EQUAL(&c.share, &node));
		CHECK_INT_EQ(es_cpus_was_narrower(&c), CPU_COUNT(&node) > 1);
		CHECK(sched_getaffinity(0, sizeof(now), &now) == 0 && CPU_EQUAL(&now, &node));
		char want[256], got[256];
		es_cpus_format(&node, want, sizeof(want));
		child_cpus(got, sizeof(got));
		CHECK_STR_EQ(got, want);
	}
	/* The last of two ranks of a host takes the second half (the last CPU when there is one). */
	if (CHECK(es_cpus_take_share(1, 2, &c) == 0)) {
		cpu_set_t want;
		es_cpus_split(&node, NULL, 1, 2, &want);
		CHECK(CPU_EQUAL(&c.share, &want));
		CHECK(sched_getaffinity(0, sizeof(now), &now) == 0 && CPU_EQUAL(&now, &want));
		CHECK_INT_EQ(es_cpus_was_narrower(&c), 0);
	}
	es_log_quiet_begin();
	CHECK_INT_EQ(es_cpus_take_share(2, 2, &c), ES_EUSAGE);
	CHECK_INT_EQ(es_cpus_take_share(0, 0, &c), ES_EUSAGE);
	es_log_quiet_end();
	CHECK(sched_setaffinity(0, sizeof(start), &start) == 0);
}

int main(void)
{
	test_format();
	test_split();
	test_split_topology();
	test_quota();
	test_take_share();
	return test_done();
}
