/*
 * Unit tests of src/par.c (issue 29: status and a job view read their shards on threads): the
 * parts cover the loop once and in order, a failed part does not stop the others, the first
 * failure in part order is returned with its message on the calling thread, and a part's
 * thread is quiet when the caller is.
 */
#include "testlib.h"

#include "eshard/log.h"
#include "eshard/par.h"

#include <pthread.h>
#include <string.h>

#define N 1000

struct ctx {
	unsigned char seen[N];
	size_t first[8], last[8];
	int quiet[8];
	int other_thread[8];
	pthread_t caller;
	size_t fail_from; /* parts from this one on fail */
};

static int visit(void *p, size_t part, size_t begin, size_t end)
{
	struct ctx *c = p;
	for (size_t i = begin; i < end; i++)
		c->seen[i]++;
	c->first[part] = begin;
	c->last[part] = end;
	c->quiet[part] = es_log_is_quiet();
	c->other_thread[part] = !pthread_equal(pthread_self(), c->caller);
	if (part >= c->fail_from)
		return es_error(ES_EIO - (int)part, "part %zu of the test failed", part);
	return 0;
}

static void run(size_t n, size_t parts, size_t fail_from, int quiet, struct ctx *c, int *rc)
{
	memset(c, 0, sizeof(*c));
	c->caller = pthread_self();
	c->fail_from = fail_from;
	if (quiet)
		es_log_quiet_begin();
	es_clear_error();
	*rc = es_par_run(n, parts, visit, c);
	if (quiet)
		es_log_quiet_end();
}

int main(void)
{
	struct ctx c;
	int rc;

	CHECK_INT_EQ(es_par_parts(0, 1024, 4), 1);
	CHECK_INT_EQ(es_par_parts(2047, 1024, 4), 1);
	CHECK_INT_EQ(es_par_parts(2048, 1024, 4), 2);
	CHECK_INT_EQ(es_par_parts(100000, 1024, 4), 4);
	CHECK_INT_EQ(es_par_parts(5, 0, 4), 4);

	/* Three parts of 1000: contiguous, in order, every item once; parts 1 and 2 on threads. */
	run(N, 3, 8, 1, &c, &rc);
	CHECK_INT_EQ(rc, 0);
	int once = 1;
	for (size_t i = 0; i < N; i++)
		once &= c.seen[i] == 1;
	CHECK(once);
	CHECK(c.first[0] == 0 && c.last[0] == c.first[1] && c.last[1] == c.first[2] && c.last[2] == N);
	CHECK(c.last[0] - c.first[0] >= 333 && c.last[2] - c.first[2] >= 333);
	CHECK(!c.other_thread[0] && c.other_thread[1] && c.other_thread[2]);
	CHECK(c.quiet[0] && c.quiet[1] && c.quiet[2]);
	run(N, 3, 8, 0, &c, &rc);
	CHECK(!c.quiet[0] && !c.quiet[1] && !c.quiet[2]);

	/* Parts 1 and 2 fail: every item is still visited, part 1's error comes back with its
	 * message on this thread. */
	run(N, 3, 1, 1, &c, &rc);
	CHECK_INT_EQ(rc, ES_EIO - 1);
	CHECK_STR_EQ(es_last_error(), "part 1 of the test failed");
	once = 1;
	for (size_t i = 0; i < N; i++)
		once &= c.seen[i] == 1;
	CHECK(once);
	/* Part 0 (this thread) fails first: its own message stays. */
	run(N, 4, 0, 1, &c, &rc);
	CHECK_INT_EQ(rc, ES_EIO);
	CHECK_STR_EQ(es_last_error(), "part 0 of the test failed");

	/* More parts than items: one item a part; one part or none: this thread only. */
	run(3, 8, 8, 1, &c, &rc);
	CHECK(rc == 0 && c.seen[0] == 1 && c.seen[1] == 1 && c.seen[2] == 1 && c.last[2] == 3 && c.last[3] == 0);
	run(N, 1, 8, 1, &c, &rc);
	CHECK(rc == 0 && c.last[0] == N && !c.other_thread[0]);
	run(0, 4, 0, 1, &c, &rc);
	CHECK(rc == 0 && c.last[0] == 0);
	return test_done();
}
