/*
 * workq: a bounded in-order job queue served by one helper thread (see workq.h).
 */
#include "eshard/workq.h"
#include "eshard/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct es_workq {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	es_workq_fn fn;
	void *ctx;
	size_t job_size, depth;
	char *jobs;          /* depth slots of job_size bytes */
	char *running;       /* the helper's copy of the job it runs */
	size_t head, count;
	uint64_t posted, done;
	int stop;
	int err;
};

static void *workq_main(void *arg)
{
	struct es_workq *q = arg;
	char *job = q->running;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (!q->count && !q->stop)
			pthread_cond_wait(&q->cv, &q->mu);
		if (!q->count)
			break;
		memcpy(job, q->jobs + q->head * q->job_size, q->job_size);
		int failed = q->err != 0;
		pthread_mutex_unlock(&q->mu);
		int rc = q->fn(q->ctx, job, failed);
		pthread_mutex_lock(&q->mu);
		if (rc && !q->err)
			q->err = rc;
		q->head = (q->head + 1) % q->depth;
		q->count--;
		q->done++;
		pthread_cond_broadcast(&q->cv);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

int es_workq_start(struct es_workq **out, size_t job_size, size_t depth, es_workq_fn fn, void *ctx)
{
	*out = NULL;
	struct es_workq *q = calloc(1, sizeof(*q));
	if (!q || !(q->jobs = calloc(depth, job_size)) || !(q->running = malloc(job_size))) {
		if (q)
			free(q->jobs);
		free(q);
		return es_error(ES_ENOMEM, "out of memory for a work queue");
	}
	q->fn = fn;
	q->ctx = ctx;
	q->job_size = job_size;
	q->depth = depth;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	if (pthread_create(&q->th, NULL, workq_main, q) != 0) {
		pthread_mutex_destroy(&q->mu);
		pthread_cond_destroy(&q->cv);
		free(q->jobs);
		free(q->running);
		free(q);
		return es_error(ES_EIO, "cannot start a helper thread");
	}
	*out = q;
	return 0;
}

uint64_t es_workq_post(struct es_workq *q, const void *job)
{
	pthread_mutex_lock(&q->mu);
	while (q->count == q->depth)
		pthread_cond_wait(&q->cv, &q->mu);
	memcpy(q->jobs + (q->head + q->count) % q->depth * q->job_size, job, q->job_size);
	q->count++;
	uint64_t seq = ++q->posted;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	return seq;
}

void es_workq_wait(struct es_workq *q, uint64_t seq)
{
	pthread_mutex_lock(&q->mu);
	while (q->done < seq)
		pthread_cond_wait(&q->cv, &q->mu);
	pthread_mutex_unlock(&q->mu);
}

int es_workq_drain(struct es_workq *q)
{
	pthread_mutex_lock(&q->mu);
	while (q->count)
		pthread_cond_wait(&q->cv, &q->mu);
	int err = q->err;
	pthread_mutex_unlock(&q->mu);
	return err;
}

int es_workq_error(struct es_workq *q)
{
	pthread_mutex_lock(&q->mu);
	int err = q->err;
	pthread_mutex_unlock(&q->mu);
	return err;
}

int es_workq_finish(struct es_workq *q)
{
	if (!q)
		return 0;
	pthread_mutex_lock(&q->mu);
	q->stop = 1;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	pthread_join(q->th, NULL);
	int err = q->err;
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
	free(q->jobs);
	free(q->running);
	free(q);
	return err;
}
