#include "eshard/cpus.h"
#include "eshard/buf.h"
#include "eshard/log.h"

#include <stdio.h>
#include <string.h>

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

void es_cpus_split(const cpu_set_t *node, int k, int n, cpu_set_t *share)
{
	int N = CPU_COUNT(node);
	int first, count;
	if (N >= n) {
		int base = N / n, extra = N % n;
		count = base + (k < extra);
		first = k * base + (k < extra ? k : extra);
	} else {
		count = 1;
		first = N ? k % N : 0;
	}
	CPU_ZERO(share);
	for (int cpu = 0, i = 0; cpu < CPU_SETSIZE && i < first + count; cpu++) {
		if (!CPU_ISSET(cpu, node))
			continue;
		if (i >= first)
			CPU_SET(cpu, share);
		i++;
	}
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
	es_cpus_split(&c->node, k, n, &c->share);
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
