/*
 * agree: non-blocking collectives polled with a sleep, and the stop notices (see agree.h).
 */
#include "agree.h"

#include "eshard/clock.h"
#include "eshard/log.h"
#include "eshard/number.h"

#include <stdlib.h>
#include <string.h>

#define TAG_STOP 7101

/* Wait for a request without spinning on the core. A collective makes progress only while its
 * ranks call MPI_Test, and each of its rounds waits for the slowest poller: the pause stays
 * short (at most 10 ms; these waits last only while the ranks hand over). */
static void wait_watching(MPI_Request *r, void (*watch)(void *), void *arg)
{
	int done = 0;
	double pause = 0.001;
	for (;;) {
		MPI_Test(r, &done, MPI_STATUS_IGNORE);
		if (done)
			return;
		if (watch)
			watch(arg);
		es_sleep(pause);
		if (pause < 0.01)
			pause *= 2;
	}
}

static void wait_request(MPI_Request *r)
{
	wait_watching(r, NULL, NULL);
}

#if defined(MPICH_VERSION)
#define LINKED_MPI "MPICH"
#elif defined(OMPI_MAJOR_VERSION)
#define LINKED_MPI "Open MPI"
#else
#define LINKED_MPI "this MPI"
#endif

/* A launcher of another MPI (Open MPI's mpirun for an MPICH build, hydra for an Open MPI one)
 * starts every process as a singleton: N jobs of one rank each, every one of them rank 0,
 * preparing and merging the same job folder. The launcher's own size variable tells. */
static int check_launcher(const struct agree *a)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE" };
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		int64_t n;
		if (!v || es_parse_i64(v, &n) || n <= 1 || n == a->size)
			continue;
		return es_error(ES_EINVAL, "the launcher started %lld processes (%s=%s) but MPI sees a world of %d: "
				"eshard-mpi is linked against " LINKED_MPI " and was started by another MPI's launcher; "
				"start it with " LINKED_MPI "'s mpiexec", (long long)n, vars[i], v, a->size);
	}
	return 0;
}

int agree_init(struct agree *a)
{
	memset(a, 0, sizeof(*a));
	MPI_Comm_rank(MPI_COMM_WORLD, &a->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &a->size);
	a->stop_recv = MPI_REQUEST_NULL; /* agree_finish after an early return */
	if (a->size > 1) {
		a->stop_sends = calloc((size_t)a->size - 1, sizeof(*a->stop_sends));
		if (!a->stop_sends)
			return es_error(ES_ENOMEM, "out of memory for %d ranks", a->size);
		for (int i = 0; i < a->size - 1; i++)
			a->stop_sends[i] = MPI_REQUEST_NULL;
	}
	MPI_Irecv(&a->stop_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_STOP, MPI_COMM_WORLD, &a->stop_recv);
	return check_launcher(a);
}

int agree_bcast_int(int value)
{
	MPI_Request r;
	MPI_Ibcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD, &r);
	wait_request(&r);
	return value;
}

void agree_bcast_bytes(void *buf, int n)
{
	MPI_Request r;
	MPI_Ibcast(buf, n, MPI_CHAR, 0, MPI_COMM_WORLD, &r);
	wait_request(&r);
}

int agree_max_int(int value)
{
	int out = 0;
	MPI_Request r;
	MPI_Iallreduce(&value, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r);
	wait_request(&r);
	return out;
}

int agree_sum_int(int value)
{
	int out = 0;
	MPI_Request r;
	MPI_Iallreduce(&value, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
	wait_request(&r);
	return out;
}

void agree_max_doubles(const double *mine, double *out, int n, void (*watch)(void *), void *arg)
{
	MPI_Request r;
	MPI_Iallreduce(mine, out, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &r);
	wait_watching(&r, watch, arg);
}

void agree_allgather(const void *mine, void *all, int n)
{
	MPI_Request r;
	MPI_Iallgather(mine, n, MPI_CHAR, all, n, MPI_CHAR, MPI_COMM_WORLD, &r);
	wait_request(&r);
}

void agree_gather(const void *mine, void *all, int n)
{
	MPI_Request r;
	MPI_Igather(mine, n, MPI_CHAR, all, n, MPI_CHAR, 0, MPI_COMM_WORLD, &r);
	wait_request(&r);
}

void agree_gatherv(const void *mine, int len, void *all, const int *counts, const int *displs)
{
	MPI_Request r;
	MPI_Igatherv(mine, len, MPI_CHAR, all, counts, displs, MPI_CHAR, 0, MPI_COMM_WORLD, &r);
	wait_request(&r);
}

void agree_send_stop(struct agree *a, int code)
{
	if (a->stop_sent)
		return;
	a->stop_sent = 1;
	a->stop_code = code;
	for (int i = 0, k = 0; i < a->size; i++)
		if (i != a->rank)
			MPI_Isend(&a->stop_code, 1, MPI_INT, i, TAG_STOP, MPI_COMM_WORLD, &a->stop_sends[k++]);
}

int agree_peer_stopped(void *arg)
{
	struct agree *a = arg;
	if (a->stopped_by_peer)
		return 1;
	if (a->stop_recv != MPI_REQUEST_NULL) {
		int got = 0;
		MPI_Test(&a->stop_recv, &got, MPI_STATUS_IGNORE);
		if (got) {
			a->stopped_by_peer = 1;
			return 1;
		}
	}
	return 0;
}

void agree_finish(struct agree *a)
{
	if (a->stop_recv != MPI_REQUEST_NULL) {
		int got = 0;
		MPI_Test(&a->stop_recv, &got, MPI_STATUS_IGNORE);
		if (!got) {
			MPI_Cancel(&a->stop_recv);
			MPI_Wait(&a->stop_recv, MPI_STATUS_IGNORE);
		}
	}
	/* One MPI_Wait per send, not MPI_Waitall(..., MPI_STATUSES_IGNORE): MPICH defines that
	 * sentinel as (MPI_Status *)1 and declares the parameter as an array, so GCC 11+ checks
	 * the count against an object of size 0 (-Wstringop-overflow, pmodels/mpich#5687).
	 * MPI_Wait's status is a plain pointer, and no status array is needed for ignored ones. */
	if (a->stop_sent)
		for (int i = 0; i < a->size - 1; i++)
			MPI_Wait(&a->stop_sends[i], MPI_STATUS_IGNORE);
	free(a->stop_sends);
	a->stop_sends = NULL;
}
