/*
 * workq: one helper thread that runs jobs in the order they were posted, through a bounded
 * queue (a poster waits while it is full). prepare and merge use it to hash and write on a
 * second core while the first one parses and validates.
 *
 * Contract: a job is a fixed-size value copied into the queue. fn runs on the helper thread for
 * every posted job, exactly once and in posting order. Once fn has returned nonzero, the queue
 * keeps that first error and calls fn for every later job with failed = 1, so that the job can
 * release what it owns: nothing leaks and no poster waits forever. Nothing runs after
 * es_workq_finish() returns. A queue is used by one posting thread.
 */
#ifndef ESHARD_WORKQ_H
#define ESHARD_WORKQ_H

#include <stddef.h>
#include <stdint.h>

struct es_workq;

typedef int (*es_workq_fn)(void *ctx, void *job, int failed);

/* 0 with *out set, or ES_ENOMEM / ES_EIO (the thread could not start) after es_error(). */
int es_workq_start(struct es_workq **out, size_t job_size, size_t depth, es_workq_fn fn, void *ctx);

/* Post a copy of job (waits while the queue is full); returns its sequence number (1, 2, ...). */
uint64_t es_workq_post(struct es_workq *q, const void *job);

/* Wait until the job numbered seq, and every earlier one, has run. */
void es_workq_wait(struct es_workq *q, uint64_t seq);

/* Wait until every posted job has run; returns the first error, or 0. */
int es_workq_drain(struct es_workq *q);

/* The first error so far (0: none), without waiting. */
int es_workq_error(struct es_workq *q);

/* Drain, stop and join the thread, free the queue; returns the first error. NULL is a no-op. */
int es_workq_finish(struct es_workq *q);

#endif
