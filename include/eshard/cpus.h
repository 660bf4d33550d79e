/*
 * cpus: the CPUs a rank's work runs on (README "CPUs, GPUs and binding").
 *
 * A launcher binds each rank: Open MPI's mpirun to one core when np <= 2 and to one socket
 * when np > 2, Slurm's task/affinity to --cpus-per-task CPUs. Every child inherits its
 * parent's CPU mask, so a node-local Ray head started by a bound rank would run the node's
 * whole Data-Juicer pipeline on that one core. A rank therefore works out the CPUs its node
 * lets the job use and takes its share of them before it starts any child or thread:
 *  - the node's CPUs are the kernel's answer to "every CPU": sched_setaffinity() narrows any
 *    mask to the online CPUs of the process's cpuset (cgroup v1 or v2, a container's or a
 *    Slurm job's), so asking for all of them and reading the mask back gives exactly the
 *    CPUs this process may use, whatever binding the launcher chose inside them;
 *  - the share: all of them for the only rank of its host, an even split between the ranks of
 *    one host (rank k of n takes the k-th part; with N CPUs the first N % n parts are one CPU
 *    larger), one CPU each, round robin, when there are more ranks than CPUs. The CPUs are cut
 *    in the order of their package, then core (sysfs topology), so that a part holds whole
 *    cores, the hyperthreads of a core being usually numbered far apart, and stays within a
 *    socket when it can; a CPU whose topology cannot be read sorts by its number.
 * The mask is set on the calling thread only: threads and children started by it later
 * inherit it, threads started before (an MPI library's own) keep the launcher's binding.
 * Contract: nothing is written to any file; each function reports its own failure once.
 */
#ifndef ESHARD_CPUS_H
#define ESHARD_CPUS_H

#include <sched.h>
#include <stddef.h>

struct es_cpus {
	cpu_set_t node;   /* the CPUs the node lets this process use (its cpuset, online) */
	cpu_set_t bound;  /* the calling thread's mask before: the launcher's binding */
	cpu_set_t share;  /* the calling thread's mask after: its children inherit it */
};

/* The node's CPUs for this process, into *node; the calling thread's mask is left as it was.
 * 0, or ES_EIO when the kernel refused (message says so). */
int es_cpus_node(cpu_set_t *node);

/* Where the kernel describes the CPUs' topology (cpu<N>/topology/core_id, ...). */
#define ES_CPUS_SYSFS "/sys/devices/system/cpu"

/* Rank k's share of node among n ranks of one host (0 <= k < n), into *share; sysfs: the
 * topology folder (NULL: ES_CPUS_SYSFS; tests give a folder of their own). */
void es_cpus_split(const cpu_set_t *node, const char *sysfs, int k, int n, cpu_set_t *share);

/* Fill c (node, bound, share for rank k of n on this host) and give the calling thread the
 * share. 0 or ES_EIO (the thread's mask is then unchanged), or ES_EUSAGE for a bad k or n. */
int es_cpus_take_share(int k, int n, struct es_cpus *c);

/* The CPUs a CFS quota of this process's cgroups allows (cgroup v2 cpu.max, v1
 * cpu.cfs_quota_us / cpu.cfs_period_us, the smallest on the way up to the root, rounded up), or
 * 0 when there is none: a container limited by a quota rather than a cpuset sees every CPU of
 * its host in its mask. proc_cgroup (NULL: /proc/self/cgroup) and cgroup_root (NULL:
 * /sys/fs/cgroup) are for tests. Reports nothing. */
int es_cpus_quota(const char *proc_cgroup, const char *cgroup_root);

/* How many CPUs the calling thread may run on (its mask; the online CPUs when it cannot be
 * read), capped by a CFS quota's share for one of ranks_on_host ranks (es_cpus_quota): a
 * container limited by a quota still shows every CPU of its host in its mask. At least 1. */
int es_cpus_usable(int ranks_on_host);
/* 1 when the launcher had bound the thread to fewer CPUs than its share. */
int es_cpus_was_narrower(const struct es_cpus *c);

/* The set as a CPU list ("0-3,8,10-11", the form of /proc/<pid>/status Cpus_allowed_list and
 * taskset -c), cut with "..." to fit n bytes; "" for the empty set. */
void es_cpus_format(const cpu_set_t *s, char *out, size_t n);

#endif
