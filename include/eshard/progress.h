/*
 * progress: the live progress line of `run` (rank 0) and `worker`, and the end summary.
 *
 *   Progress: D/S shards done, rows R/T (K kept), X rows/s, Y MB/s, ETA E, running r, stale s,
 *   failed f, retries n, slowest <id> on <host> 12s
 *
 * Rates and ETA follow jobview.h's rule (work time only, a recent window; no ETA when nothing
 * runs or the job is terminal: "ETA -"). The line is made from a jobview of the job folder, so
 * it counts every rank's work, not only this process's.
 *
 * Contract: only reads the job folder (through jobview); prints through log.h's es_say and
 * es_say_sticky, so its lines never cut another line in two. The thread of es_progress_start
 * calls no MPI and nothing that changes a file; es_progress_stop joins it.
 */
#ifndef ESHARD_PROGRESS_H
#define ESHARD_PROGRESS_H

#include "eshard/buf.h"
#include "eshard/jobview.h"

/* The line for v (without a newline), appended to out; window as es_jobview_rate. */
int es_progress_line(const struct es_jobview *v, double window, struct es_buf *out);

/*
 * The end summary, appended to out: shards, rows in and out, wall time (first claim to last
 * end), work time; a per-host table (shards done, attempts, rows/s while busy, busy %); the
 * slowest done shards (at most 5, with host and duration); and the failed or retried shards
 * with their error and log (status's block, at most 20).
 */
int es_progress_summary(const struct es_jobview *v, struct es_buf *out);

struct es_progress;

/* Print a line for job_dir every every_secs seconds (the first after one period) from a thread
 * of its own until es_progress_stop; on a terminal (tty) the line is sticky, redrawn at most
 * once a second. every_secs <= 0: nothing is started (*p = NULL). */
int es_progress_start(const char *job_dir, double every_secs, int tty, struct es_progress **p);
/* Stop and join the thread; clears a sticky line. p may be NULL. */
void es_progress_stop(struct es_progress *p);
/* The same, handing the thread's job view over: 1 when *out got it (the caller refreshes it,
 * es_jobview_refresh, and frees it), 0 when the thread had none (it never refreshed one
 * without an error) or p is NULL. Rank 0 ends a job with it, so that the job's end reads what
 * changed since the last progress line, not every shard again (issue 29). */
int es_progress_stop_view(struct es_progress *p, struct es_jobview *out);

#endif
