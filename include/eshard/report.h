/*
 * report: one self-contained HTML file that shows how a job ran (docs/design.md#observability).
 *
 * Contract: the job folder is only read (manifest, attempt folders, done and failed records,
 * locks, the event logs of state/events); the one file written is the output (in the job folder
 * only its report.html), through es_fs_write_atomic(), so after a crash at any point the output
 * holds its old content or the whole new report (a ".<name>.<32hex>.tmp" beside it may be left
 * by a crash, never a partial report); a stream (a pipe, a terminal) is written directly. Safe to run at any time, from any node, while workers run: each file is judged as
 * it is seen, so a report of a live job is a snapshot that is not atomic. Nothing is printed
 * on stdout; a failure is reported once through es_error().
 *
 * The page has no script, no font and no link to anything outside it (inline CSS and SVG), so
 * it opens from a shared folder on an offline cluster. It holds:
 *   - for a job with failed shards, a red banner at the top ("Job finished with failures: N
 *     failed shard(s)") listing the first 10 failed shards, each with the first line of its
 *     error and an in-page link (#fail-<i>) to the log tail of its last failed attempt shown;
 *   - a summary (shards done/failed/total, rows in and out, wall time) and a per-host table
 *     (workers, attempts, shards done, rows/s while busy, busy %);
 *   - a timeline with hosts as lanes (one row per worker process of a host) and one SVG
 *     element per attempt folder that has an attempt.json: class="attempt" with data-shard,
 *     data-host and data-status (done, failed, superseded, stale, lost, preempted, running) and
 *     a <title> tooltip (times, duration, rows, error); every bar is at least 3 px wide, and
 *     failed (red) and preempted (amber) attempts carry a marker, so they show at any scale;
 *   - rows completed per time bucket, a histogram of the durations of done attempts, the
 *     start-up skew of the workers (first claim relative to the earliest), the stragglers
 *     (slowest done attempts, and those over twice the median), and every failed attempt with
 *     the last lines of its process.log (bounded, escaped).
 * Times come from the event logs when an attempt has events (matched by its token), otherwise
 * from attempt.json (claimed_at_epoch, finished_at, stale_at), so a job folder written by the
 * reference implementation, which has no events, gets a report too. Times a bad clock wrote
 * are left out and counted in the summary (jobview.h "Clocks"). Attempts that retry moved
 * to state/history are not shown.
 */
#ifndef ESHARD_REPORT_H
#define ESHARD_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "eshard/buf.h"

struct es_jobview;

struct es_report_opts {
	double now;              /* "now" for attempts still running (0: the wall clock) */
	int log_tail_lines;      /* lines of each failed attempt's process.log (0: 20) */
	size_t log_tail_bytes;   /* at most this many bytes of it (0: 4096) */
	size_t max_failed_logs;  /* failed attempts shown with their log (0: 50; the rest listed) */
	struct es_jobview *view; /* a view of the job that the caller keeps (NULL: the job is read
	                          * anew): refreshed (es_jobview_refresh, what changed) and left to
	                          * the caller */
};

/* What a report showed, for the caller's one-line summary. */
struct es_report_info {
	size_t attempts;         /* attempt elements in the timeline */
	size_t hosts;
	size_t workers;          /* distinct host + pid */
	size_t events;           /* event lines read */
	int64_t shards_total, shards_done, shards_failed;
};

/*
 * The ticks of a time axis over [0, span] seconds, about `want` of them: a step of 1, 2 or 5
 * x 10^k in the unit that fits the span (ms under 1 s, s under 2 min, min under 2 h, h
 * beyond), so a sub-second job's axis reads "0 ms, 100 ms, ..." and a two-day job's "0 h,
 * 5 h, ...". A span that is not positive and finite is taken as 1 ms.
 */
struct es_report_ticks {
	double step;             /* seconds between two ticks */
	double unit;             /* seconds per unit of the labels: 0.001, 1, 60 or 3600 */
	const char *unit_name;   /* "ms", "s", "min" or "h" */
	int decimals;            /* of a label's number in that unit */
	int n;                   /* ticks at 0, step, ... up to span */
};
void es_report_ticks(double span, int want, struct es_report_ticks *t);

/* The label of the tick at secs ("250 ms", "1.5 h"): trailing zeros of the decimals cut. */
void es_report_tick_label(const struct es_report_ticks *t, double secs, char *out, size_t n);

/* The HTML of job_dir's report, appended to out. opts and info may be NULL. */
int es_report_render(const char *job_dir, const struct es_report_opts *opts, struct es_buf *out,
		     struct es_report_info *info);

/* The report's name in the job folder: run writes it there, and it is the one file of the job
 * folder that report --output may name (es_fs_check_output). */
#define ES_REPORT_NAME "report.html"

/*
 * Render job_dir's report and write it to output (resolved: links followed) atomically, or
 * directly when output is a FIFO or a character device (a pipe such as /dev/stdout, a
 * terminal, /dev/null). ES_EUSAGE when output is empty, a folder, in a folder that does not
 * exist, or inside the job folder but not its report.html; the errors of es_manifest_load()
 * for a missing or foreign job folder. Nothing is written unless the whole report was made.
 */
int es_report_write(const char *job_dir, const char *output, const struct es_report_opts *opts,
		    struct es_report_info *info);

#endif
