/*
 * jobview: how a job ran, from its folder: every attempt (times from the event logs where an
 * attempt has events, matched by its token, else from attempt.json), its workers (host + pid)
 * and hosts with their sums, and the status snapshot. The report draws it; run's end summary,
 * the live progress line and status --prometheus count from it, so they all agree.
 *
 * Contract: the job folder is only read (manifest, attempt folders, done and failed records,
 * locks, the event logs of state/events); nothing is written, so it is safe at any time, from any node,
 * while workers run, and a crash has no effect. The view is a snapshot that is not atomic: each
 * file is judged as it is seen. Attempts that retry moved to state/history are not in it.
 *
 * Clocks: every time in the view was written by some node's clock. A time that is not finite,
 * or that lies before the job was made (the manifest's created_at) by more than
 * ES_JV_SKEW_BEFORE, or after now by more than ES_JV_SKEW_AFTER, is ignored and counted in
 * bad_times (an event with such a time is dropped whole; an attempt.json time or duration, or a
 * done record's completed_at, counts as absent), so that a node whose clock was never set
 * (time 0) or a corrupt line (1e300, NaN) cannot stretch the rates, the wall time or the
 * report's axes. A manifest without created_at (or with one that is no time in that range
 * itself) gives ES_JV_TIME_FLOOR as the earliest time.
 */
#ifndef ESHARD_JOBVIEW_H
#define ESHARD_JOBVIEW_H

#include <stddef.h>
#include <stdint.h>

#include "eshard/manifest.h"
#include "eshard/status.h"

/* The clock skew between nodes that a recorded time may show (README "Watching a job"): a day
 * before the job was made (it may have been prepared on a login node whose clock is not the
 * workers'), an hour after this reader's now (the workers' clocks against the reader's). */
#define ES_JV_SKEW_BEFORE (24 * 3600.0)
#define ES_JV_SKEW_AFTER 3600.0
/* The earliest time of a job whose manifest says nothing usable of when it was made:
 * 2024-01-01T00:00:00Z, before any eshard-mpi job ran. */
#define ES_JV_TIME_FLOOR 1704067200.0

enum es_jv_status { ES_JV_DONE, ES_JV_FAILED, ES_JV_SUPERSEDED, ES_JV_STALE, ES_JV_LOST, ES_JV_PREEMPTED, ES_JV_RUNNING, ES_JV_BACKUP_FAILED,
       ES_JV_NOT_STARTED, ES_JV_N };

/* How an attempt's end is known: recorded (event or attempt.json), live (its lock is held:
 * drawn to now), or unknown (drawn to the last time the job shows). */
enum { ES_JV_END_RECORDED, ES_JV_END_LIVE, ES_JV_END_UNKNOWN };

struct es_jv_attempt {
	char *shard;
	long shard_index;          /* in the manifest, -1 when not there */
	int number;
	char token[33];
	char *host;
	int64_t pid;
	int status;
	char *raw_status;          /* what attempt.json says, when it is not one of es_jv_status_names */
	double claim, start, end;  /* epoch seconds, < 0 when unknown */
	double finished_at, stale_at; /* what attempt.json says of the end, < 0 when absent */
	int end_kind;
	double proc_secs;          /* the processor's own run time (duration_secs), < 0 unknown */
	int64_t rows_in, rows_out; /* < 0 unknown */
	int has_rc;
	int64_t rc;
	char *error;
	char *dir;                 /* absolute attempt folder */
	int timed_by_events;
	int backup;                /* a backup attempt (attempt.json "backup": true) */
	size_t worker;             /* index into es_jobview.w */
	/* As attempt.json gave them, before the events and the fallbacks of a refresh: */
	double read_claim, read_proc_secs;
	int64_t read_rows_out;
	size_t read_bad_times;     /* its times that were ignored */
	int unreadable;            /* attempt.json could not be read */
	int error_from_event;      /* error is an end event's detail */
	int64_t json_ino, json_size, json_mtime_ns; /* attempt.json when it was read */
	double json_claim;         /* its claimed_at_epoch (else claimed_at) unchecked, < 0 when
	                            * absent: the status's claim time of the shard it published
	                            * (status.h claims_by_caller) */
};

struct es_jv_event {
	char token[33];
	char name[24];
	double time;
	int64_t rows;
	double duration;
	char *detail;
};

struct es_jv_worker {
	const char *host;          /* points at an attempt's host */
	int64_t pid;
	double first_claim;
	size_t host_index;
};

struct es_jv_host {
	const char *host;
	size_t n_workers;
	int64_t attempts, done, failed, rows_in, rows_out;
	double busy, busy_done, first_claim;
};

struct es_jobview {
	/* What was read. */
	struct es_manifest m;
	int have_manifest;
	struct es_status st;
	int have_status;
	struct es_jv_attempt *a;
	size_t n_a, cap_a;
	struct es_jv_event *ev;
	size_t n_ev, cap_ev;
	size_t n_event_files, bad_event_lines, unreadable_attempts;
	size_t bad_times;          /* recorded times ignored (see "Clocks" above) */
	double time_lo, time_hi;   /* the range of times taken: [made - skew, now + skew] */
	struct es_jv_worker *w;
	size_t n_w;
	struct es_jv_host *h;
	size_t n_h;
	double t0, t1, now;
	double median;             /* of the durations of done attempts, < 0 when none */
	size_t by_status[ES_JV_N];
	size_t n_backups, n_backups_won;
	double lock_timeout;       /* as given to es_jobview_init */
	int list_whole;            /* set by a reader that needs every change now (the job's end):
	                            * a refresh lists each folder that changed (es_jobview_refresh) */
	struct es_jv_cache *cache; /* what es_jobview_refresh keeps between calls */
};

/* "done", "failed", "superseded", "stale", "lost", "preempted", "running", "backup_failed",
 * "not_started" (indexed by enum es_jv_status). */
extern const char *const es_jv_status_names[ES_JV_N];

/* Read job_dir into v (free it with es_jobview_free, also after an error). now (0: the wall
 * clock) is where live attempts end; lock_timeout as for es_status_collect (<= 0: the
 * manifest's). The errors of es_manifest_load() and es_status_collect(). */
int es_jobview_load(const char *job_dir, double now, double lock_timeout, struct es_jobview *v);
void es_jobview_free(struct es_jobview *v);

/*
 * The same view kept up to date, for a reader that looks again and again (rank 0's progress
 * line, status --watch): es_jobview_init reads the manifest (and, on a second thread at once,
 * makes the listings below: a first refresh that comes within a second of their start uses
 * them), each es_jobview_refresh what changed, and es_jobview_load is the two at once.
 *
 * A refresh costs: the listing of state/events and each event log's new bytes (a stat, then a
 * read from where the last one ended; a line is taken once its newline is there); the listings
 * of state/done, state/failed, state/locks and attempts/ that changed since the last one (a
 * stat of each folder otherwise: fs.h es_fs_list_dir_if_changed); and what they show changed:
 * the records and locks of the shards not final yet (es_status_refresh: a done or failed shard
 * is read once) and the attempt folders of those shards (a final shard's, none of which says
 * it runs, once). A shard that a new event names is read again even when final. While events
 * come and list_whole is not set, a folder that changed is listed once a minute (longer for a
 * large one: jobview.c relist_secs; and once that long passed since the last event), and in
 * between stands as last listed plus what the new events name there (every event its shard's
 * lock and attempt folder, a done or superseded its done record, a failed its failed record): what
 * changed without an event (a worker of the reference's, one that died between its record and
 * its event, a retry that no claim followed yet) shows that much later, and a name an event
 * implies that is absent costs a lookup. A listing cut short by an error is never kept.
 *
 * The view equals a fresh load but where what a reader cannot see without reading changed: a
 * shard that failed again within one refresh, retried in between, keeps its earlier failure's
 * details; a time that a moving now would bring into the range of "Clocks" stays ignored; a
 * backup attempt whose folder appears after its shard was seen final is not shown. Each
 * attempt.json is read once (the status takes its claim times from the view: status.h
 * claims_by_caller), and the shards' records, locks and attempt folders are read on
 * v->st.threads threads (status.h, par.h).
 */
int es_jobview_init(const char *job_dir, double lock_timeout, struct es_jobview *v);
int es_jobview_refresh(struct es_jobview *v, double now);

/* An attempt's duration from claim to end, < 0 when unknown. */
double es_jv_duration(const struct es_jv_attempt *a);
/* The durations of the done attempts, sorted (malloc'd, *n of them; NULL when out of memory). */
double *es_jobview_done_durations(const struct es_jobview *v, size_t *n);

/*
 * Honest rates (issue 10, item 3). A work span is one attempt's [start, end] (a live attempt
 * ends at now); done spans also carry their shard's input rows and bytes. Then:
 *   work_secs      = the length of the union of the spans (time when anything ran: the
 *                    downtime between two submissions of a job is in no span, so not counted);
 *   rows_per_sec   = rows of the done spans / work_secs (unknown, < 0, when work_secs is 0);
 *   window rate    = rows of the done spans that ended in [now - window, now] / the length of
 *                    the union clipped to that window; when the window saw no work, the
 *                    overall rate stands in;
 *   eta_secs       = rows_left / the window rate, only while something runs (running > 0) and
 *                    the job is not terminal; otherwise unknown (< 0): a finished or a stopped
 *                    job has no ETA.
 * Bytes work the same way as rows.
 */
struct es_work_span {
	double start, end;
	int done;                /* the span published its shard's result */
	int64_t rows, bytes;     /* input rows and bytes of that shard (done spans) */
};

struct es_rate {
	double work_secs;
	double rows_per_sec, bytes_per_sec;               /* over the whole job */
	double window_rows_per_sec, window_bytes_per_sec; /* over the recent window */
	double eta_secs;
};

void es_rate_compute(const struct es_work_span *spans, size_t n, double now, double window, int64_t rows_left,
		     int64_t running, int terminal, struct es_rate *out);

/* The rule on a job: spans from the attempts (stale and lost attempts are left out: their end
 * is when another worker noticed them, which can be after a downtime), rows_left and running
 * from the status. window <= 0: 60 s. */
int es_jobview_rate(const struct es_jobview *v, double window, struct es_rate *out);

/* es_jobview_rate with a 60 s window written into v->st (rate_rows_per_sec, eta_secs), so that
 * status's output shows the honest figures. */
int es_jobview_rate_status(struct es_jobview *v);

/*
 * The Prometheus text exposition format (version 0.0.4, for node_exporter's textfile collector),
 * appended to out. Every sample carries job="<job_id>"; the families, each with HELP and TYPE:
 *   eshard_shards{state="pending|running|stale|done|failed"}   gauge
 *   eshard_shards_total, eshard_rows_total, eshard_bytes_total  gauge (the manifest's)
 *   eshard_rows_done, eshard_bytes_done     gauge: input rows / bytes of the done shards
 *   eshard_result_rows_done                 gauge: rows of their results
 *   eshard_attempts{outcome="<attempt status>"} gauge: attempt folders by status (every status)
 *   eshard_host_shards_done{host="h"}       gauge: done shards by the host that published them
 *   eshard_job_complete, eshard_job_terminal gauge: 0 or 1
 *   eshard_bad_times                        gauge: recorded times ignored ("Clocks" above)
 *   eshard_work_seconds                     gauge: work time (es_jobview_rate)
 *   eshard_rows_per_second, eshard_eta_seconds gauge, only when known
 */
int es_jobview_format_prometheus(const struct es_jobview *v, struct es_buf *out);

#endif
