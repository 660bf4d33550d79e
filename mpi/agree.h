/*
 * agree: the MPI hand-offs of `eshard-mpi run` and nothing else (MPI only for the phase
 * hand-offs, every rank agreeing before it moves on: docs/design.md#mpi-only-in-mpi).
 *
 * Every wait is a non-blocking collective polled with a short, growing sleep: Open MPI
 * busy-polls inside blocking collectives, and a waiting rank must not burn the core its node's
 * processor needs. A rank that stops (SIGTERM, or a worker that cannot start) tells every other
 * rank with a point-to-point message, so the whole job ends together with one code.
 */
#ifndef ESHARD_AGREE_H
#define ESHARD_AGREE_H

#include <mpi.h>

struct agree {
	int rank, size;
	MPI_Request stop_recv;       /* a peer's stop notice, posted once */
	int stop_buf;                /* its exit code */
	int stopped_by_peer;         /* a notice arrived (seen through agree_peer_stopped) */
	int stop_sent;
	int stop_code;               /* the buffer of the stop sends: it must outlive them */
	MPI_Request *stop_sends;     /* one per other rank (size - 1 of them) */
};

/* After MPI_Init: rank, size, and the receive of a stop notice. 0, ES_ENOMEM, or ES_EINVAL when
 * another MPI's launcher started this process (it then sees a world of one). */
int agree_init(struct agree *a);

/* rank 0's value, learnt by all. */
int agree_bcast_int(int value);
void agree_bcast_bytes(void *buf, int n);

/* The largest value of any rank. */
int agree_max_int(int value);
/* The sum of every rank's value. */
int agree_sum_int(int value);
/* The element-wise largest of every rank's n doubles, in one collective. watch (may be NULL)
 * is called with arg between the polls: a rank that waits there for long (one that left the
 * work early) must still act on its own stop signal. */
void agree_max_doubles(const double *mine, double *out, int n, void (*watch)(void *), void *arg);

/* Every rank's n bytes of mine, in rank order, into all (size * n bytes). */
void agree_allgather(const void *mine, void *all, int n);

/* Every rank's n bytes of mine, in rank order, into rank 0's all (size * n bytes; the other
 * ranks' all is not used). */
void agree_gather(const void *mine, void *all, int n);
/* Every rank's len bytes of mine, concatenated in rank order, into rank 0's all, at rank 0's
 * displs (counts: every rank's len; both used on rank 0 only). */
void agree_gatherv(const void *mine, int len, void *all, const int *counts, const int *displs);

/* Tell every other rank, once, that this one stops with exit code `code`. */
void agree_send_stop(struct agree *a, int code);

/* The worker's should_stop callback (arg: struct agree): 1 once a peer told this rank to stop. */
int agree_peer_stopped(void *arg);

/* Before MPI_Finalize: cancel the pending receive, complete the sends, free. */
void agree_finish(struct agree *a);

#endif
