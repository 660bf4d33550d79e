/*
 * par: a loop over [0, n) cut into contiguous parts that run on threads at once. A reader of
 * many small files (status, a job view) uses it: on a distributed file system every file costs
 * round trips to the server, and several in flight at once hide their latency; on a local
 * disk the parts use the cores.
 *
 * Contract: fn(ctx, part, begin, end) runs exactly once for each part; the parts cover [0, n)
 * in order without overlapping, part 0 on the calling thread. fn may write only what its own
 * range owns. A part that fails does not stop the others: es_par_run returns the first
 * nonzero result in part order, and the calling thread then holds that part's message
 * (es_last_error) as if it had reported it itself. A part's thread is quiet when the caller
 * is (log.h es_log_quiet_begin). A thread that cannot start leaves its part to the calling
 * thread, after its own: the loop still runs whole.
 */
#ifndef ESHARD_PAR_H
#define ESHARD_PAR_H

#include <stddef.h>

typedef int (*es_par_fn)(void *ctx, size_t part, size_t begin, size_t end);

/* How many parts for n items: one per min_per_part items, at least 1, at most max_parts. */
size_t es_par_parts(size_t n, size_t min_per_part, size_t max_parts);

/* Run fn over [0, n) in parts (at most n of them; 0 or 1: on the calling thread only). */
int es_par_run(size_t n, size_t parts, es_par_fn fn, void *ctx);

#endif
