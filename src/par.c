/*
 * par: a loop cut into contiguous parts that run on threads at once (see par.h).
 */
#include "eshard/par.h"
#include "eshard/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct part {
	es_par_fn fn;
	void *ctx;
	size_t index, begin, end;
	int quiet;       /* the caller's thread is quiet: so is this one */
	int started;     /* a thread runs it (else the caller does) */
	pthread_t th;
	int rc;
	char *msg;       /* the part's es_last_error() when rc != 0 */
	int err;         /* and its es_last_errno() */
};

static void run_part(struct part *p)
{
	if (p->quiet)
		es_log_quiet_begin();
	p->rc = p->fn(p->ctx, p->index, p->begin, p->end);
	if (p->rc) {
		p->msg = strdup(es_last_error());
		p->err = es_last_errno();
	}
	if (p->quiet)
		es_log_quiet_end();
}

static void *part_main(void *arg)
{
	run_part(arg);
	return NULL;
}

size_t es_par_parts(size_t n, size_t min_per_part, size_t max_parts)
{
	size_t k = min_per_part ? n / min_per_part : n;
	if (k > max_parts)
		k = max_parts;
	return k ? k : 1;
}

int es_par_run(size_t n, size_t parts, es_par_fn fn, void *ctx)
{
	if (parts > n)
		parts = n;
	if (parts <= 1)
		return n ? fn(ctx, 0, 0, n) : 0;
	struct part *p = calloc(parts, sizeof(*p));
	if (!p) /* no memory for the parts: the loop on this thread, as one part */
		return fn(ctx, 0, 0, n);
	int quiet = es_log_is_quiet();
	for (size_t i = 0; i < parts; i++) {
		p[i] = (struct part){ .fn = fn, .ctx = ctx, .index = i, .quiet = quiet };
		p[i].begin = n / parts * i + (i < n % parts ? i : n % parts);
		p[i].end = p[i].begin + n / parts + (i < n % parts);
	}
	for (size_t i = 1; i < parts; i++)
		p[i].started = !pthread_create(&p[i].th, NULL, part_main, &p[i]);
	run_part(&p[0]);
	for (size_t i = 1; i < parts; i++) {
		if (p[i].started)
			pthread_join(p[i].th, NULL);
		else
			run_part(&p[i]);
	}
	int rc = 0;
	for (size_t i = 0; i < parts && !rc; i++) {
		rc = p[i].rc;
		if (rc) /* the message of the part whose error is returned, whichever ran last */
			es_log_adopt_error(p[i].msg ? p[i].msg : "", p[i].err);
	}
	for (size_t i = 0; i < parts; i++)
		free(p[i].msg);
	free(p);
	return rc;
}
