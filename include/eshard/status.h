/*
 * status: a read-only snapshot of a job folder (docs/job-folder.md#status-of-a-shard), plus
 * progress, rate, ETA and a per-host table (docs/design.md#observability).
 *
 * Contract: nothing here creates, changes or removes a file, so it is safe to run at any time,
 * from any node, while workers run; a crash has no effect on the job. The snapshot is not
 * atomic: each shard is judged from the files seen at the moment it is looked at.
 *
 * Classification, per shard in manifest order (the first rule that matches wins):
 *   1. state/done/<id>.json exists   -> done    (owner = the record's hostname)
 *   2. state/failed/<id>.json exists -> failed  (error = the record's last_error)
 *   3. state/locks/<id>.lock exists  -> running, or stale when age > lock_timeout_secs (the
 *      reference rule) or, for a lock that carries eshard-mpi's "heartbeat" field, age >
 *      the longer of policy.lease_secs and the lock's own lease_secs (leases), where
 *      age = max(0, now - the lock's mtime)
 *   4. otherwise                     -> pending
 * Leases: the lock owner rewrites its lock in place every heartbeat_secs, so a live lock's mtime
 * is never older than about one heartbeat. A one-shot read can only compare that mtime with
 * this host's clock, so clock skew against the file server moves the point where status says
 * "stale". The worker's own takeover decision (claim module) does not rely on it: it watches
 * the lock's mtime and content change on its own monotonic clock across polls, and takes over
 * only when nothing changed for lease_secs. Status is therefore an estimate for humans and for
 * completeness checks; it never reclaims anything.
 */
#ifndef ESHARD_STATUS_H
#define ESHARD_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "eshard/buf.h"
#include "eshard/manifest.h"

enum es_shard_state {
	ES_SHARD_PENDING = 0,
	ES_SHARD_RUNNING,
	ES_SHARD_STALE,
	ES_SHARD_DONE,
	ES_SHARD_FAILED,
};

/* "pending", "running", "stale", "done", "failed". */
const char *es_shard_state_name(enum es_shard_state s);

/* Bounds of the log tail that status shows per failed or retried shard, and the number of
 * shards that get one (the others still get their error and log path). */
#define ES_STATUS_TAIL_LINES 5
#define ES_STATUS_TAIL_BYTES 2048
#define ES_STATUS_MAX_TAILS 100

/* Why a shard failed, or why it needed another attempt: its latest attempt that ended without
 * a result (failed, stale, lost, preempted, ...). */
struct es_shard_problem {
	int attempt;               /* the attempt's number, 0 when unknown */
	char *status;              /* its attempt.json status, or NULL */
	char *error;               /* its error (the failed record's last_error for a failed shard) */
	char *host;                /* the host it ran on, or NULL */
	char *log_path;            /* absolute path of its process.log, or NULL */
	char *log_tail;            /* the last lines of that log (bounded, see above), or NULL */
	int log_cut;               /* log_tail is not the whole log */
};

struct es_shard_status {
	const char *shard_id;      /* points into the manifest */
	int64_t rows;              /* manifest (input) rows of the shard */
	enum es_shard_state state;
	int metadata_error;        /* the done record or the lock could not be read */
	char *owner;               /* done: record hostname; running/stale: lock hostname; or NULL */
	char *error;               /* failed: last_error, or NULL */
	char *failed_host;         /* failed: hostname of the last attempt's attempt.json, or NULL */
	int has_pid;
	int64_t pid;               /* running/stale: the lock's pid */
	double lock_age_secs;      /* running/stale: max(0, now - lock mtime) */
	int has_heartbeat;         /* the lock carries eshard-mpi lease fields */
	int64_t heartbeat;         /* its heartbeat counter */
	double claim_age_secs;     /* running/stale: now - the lock's claimed_at_epoch, or -1 */
	int64_t done_rows;         /* done: rows of the result (the done record's rows), or -1 */
	double claimed_at_epoch;   /* done: claimed_at_epoch of the attempt that published; running,
	                            * stale: the lock's; or -1 */
	double completed_at_epoch; /* done: the record's completed_at, or -1 */
	char *record_error;        /* done: why merge would refuse its record, or NULL */
	int record_unseen;         /* record_error is what a caching client shows for a while: the
	                            * result looks absent or of another size, or the fence's record
	                            * is not visible yet (verify waits for it: es_verify_set_settle_secs
	                            * in verify.h) */
	int64_t attempt_number;    /* done, running, stale: the current attempt's number; failed: the
	                            * last one; 0 when unknown */
	int has_problem;           /* failed, or retried (attempt_number > 1): problem is filled */
	struct es_shard_problem problem;
	int tail_read;             /* problem's log tail was looked for (ES_STATUS_MAX_TAILS) */
	char lock_token[33];       /* running/stale: the lock's token ("" when it has none) */
	char *published_dir;       /* done, with claims_by_caller: the attempt folder of the record's
	                            * output_path (absolute), or NULL */
	char *result_path;         /* done: the record's output_path resolved as merge resolves it,
	                            * or NULL when the record is unusable */
	char *result_sha256;       /* done: the record's sha256 (with result_path), or NULL */
	int attempts_clean;        /* done, in a job view (jobview.h): the view found one folder in
	                            * the shard's folder while the shard was final (a listing of one
	                            * entry, or a link count of 3), the attempt that published, whose
	                            * attempt.json says done: its writer finished its last write
	                            * there, so no temporary of a killed writer can be in it
	                            * (merge's sweep passes it by) */
};

struct es_status_counts {
	int64_t total, pending, running, stale, done, failed;
};

/* One row of the per-host table. */
struct es_status_host {
	char *host;
	int64_t done, running, stale, failed;
};

struct es_status {
	struct es_status_counts counts;
	int complete;               /* done == total and no done record merge would refuse */
	int64_t bad_records;        /* done shards with a record_error */
	int64_t unseen_records;     /* of them, the ones with record_unseen */
	int terminal;               /* done + failed == total */
	double lock_timeout_secs;   /* the values the classification used */
	double lease_secs;
	struct es_shard_status *shards; /* manifest order */
	size_t n_shards;
	/* Progress (see es_status_collect for the definitions). */
	int64_t rows_total;         /* manifest total rows (input rows) */
	int64_t rows_done;          /* input rows of the done shards */
	int64_t result_rows_done;   /* rows of the done results (after filtering) */
	double rate_rows_per_sec;   /* < 0 when unknown */
	double eta_secs;            /* < 0 when unknown; 0 when complete */
	int64_t bad_times;          /* recorded times ignored as out of range (jobview.h "Clocks";
	                             * es_jobview_load fills it, es_status_collect leaves 0) */
	struct es_status_host *hosts; /* sorted by host name */
	size_t n_hosts, cap_hosts;
	int claims_by_caller;       /* set before the first refresh by a caller that reads every
	                             * attempt.json itself (jobview.h): a done shard's
	                             * claimed_at_epoch is then not read but left -1, published_dir
	                             * says which attempt's it is, and the caller fills it (from
	                             * attempt.json's claimed_at_epoch, else its claimed_at) and
	                             * makes the sums again (es_status_sum). One read of each
	                             * attempt.json, not two. */
	unsigned threads;           /* how many threads a refresh reads with (par.h), set before
	                             * the first one and kept: 0 for the default, one thread per
	                             * ES_STATUS_PART shards, at most ES_STATUS_THREADS */
};

/* A refresh reads the shards on up to ES_STATUS_THREADS threads at once, one per ES_STATUS_PART
 * shards: the files of a shard cost round trips on a distributed file system, and several in
 * flight hide them (issue 29: `status` of 100,000 shards). */
#define ES_STATUS_THREADS 4
#define ES_STATUS_PART 1024

/*
 * Classify every shard and fill out (free it with es_status_free, also after an error).
 * lock_timeout <= 0 means the manifest's policy.lock_timeout_secs.
 *
 * Progress is defined simply so that it can be checked by hand:
 *   rows_done = sum of the manifest rows of the done shards;
 *   t0 = the earliest claimed_at_epoch among the attempts that published a done record (read
 *        from the attempt.json beside the record's output_path) and the running locks;
 *   t1 = the latest completed_at among the done records;
 *   rate = rows_done / (t1 - t0) when t1 > t0, else unknown;
 *   eta  = (rows_total - rows_done) / rate, assuming the current parallelism goes on, and only
 *          while a shard runs and the job is not terminal (unknown otherwise; 0 when complete).
 * This rate counts the downtime between submissions; jobview.h's es_jobview_rate_status()
 * replaces it with the rate over work time only (what `status` shows).
 * Unreadable or missing attempt files just leave the rate unknown.
 */
int es_status_collect(const struct es_manifest *m, double lock_timeout, struct es_status *out);

/*
 * What the listings of state/done, state/failed and state/locks show of each shard, one byte
 * per shard in seen (m->n_shards of them): ES_SEEN_DONE, ES_SEEN_FAILED, ES_SEEN_LOCK. Three
 * folder reads however many shards there are (made by the view, jobview.c list_job, each on a
 * thread of its own: each listing and its sort take a tenth of a second at 100,000 shards);
 * es_status_seen matches m's shards against them on the status's threads. A listing can be
 * stale on a client that caches metadata, as a lookup can: a view (status, progress) may use
 * it, nothing that decides work (worker, merge, verify) does.
 */
enum { ES_SEEN_DONE = 1, ES_SEEN_FAILED = 2, ES_SEEN_LOCK = 4, ES_SEEN_ALL = 7 };
/* Not a listing's: a view's mark on a shard that a new event named (jobview.c), which
 * es_status_refresh reads again even when it holds it as final (a retry moves a failed record
 * away without a word: its shard's next claim is what tells). */
enum { ES_SEEN_AGAIN = 8 };
int es_status_seen(const struct es_manifest *m, const struct es_strv v[3], unsigned char *seen);

/*
 * es_status_collect that reads only what can have changed. out holds the last result (or is
 * zeroed: then every shard is read). seen (es_status_seen, or NULL: look every name up) says
 * which per-shard names exist: a shard in no listing is pending without any per-shard call. A
 * shard that out holds as final (done with a record merge accepts, or failed) and that the
 * listings still show so is kept as it is; every other one is read again, on out->threads
 * threads (par.h; each keeps its own walk cache, fs.h). The sums (counts, rows, hosts, rate)
 * are made again from the shards.
 */
int es_status_refresh(const struct es_manifest *m, double lock_timeout, const unsigned char *seen,
		      struct es_status *out);

/* The threads a refresh of s reads with: s->threads, else the default (ES_STATUS_PART). */
size_t es_status_threads(const struct es_status *s);

/* The sums over out's shards (counts, rows, hosts, rate), made again: es_status_refresh makes
 * them; a caller that changed a shard's claimed_at_epoch (claims_by_caller) makes them again. */
int es_status_sum(struct es_status *out);

/*
 * The counts only, with the same classification, without reading done or failed records or
 * attempt files (what a worker's idle loop or a completeness check needs).
 */
int es_status_count(const struct es_manifest *m, double lock_timeout, struct es_status_counts *c);

/* The same for a caller that looks again and again (an idle worker): done_seen (one byte per
 * shard, zeroed by the caller) remembers the shards found done, which are final, so that each
 * later call touches the file system only for the shards not done yet. running_now (one byte
 * per shard, or NULL) names the shards whose lock the caller has just read and found running
 * and live (a claim scan a moment ago): without a visible done or failed record, such a shard
 * counts as running without its lock being read a second time. */
int es_status_count_cached(const struct es_manifest *m, double lock_timeout, unsigned char *done_seen,
			   const unsigned char *running_now, struct es_status_counts *c);

void es_status_free(struct es_status *s);

/* What a user does next about an incomplete job, one sentence for a message (appended to out):
 * "retry --all-failed" then the same command again for failed shards, the same command again
 * (it resumes) for pending, running or stale ones. Nothing when the job is complete. */
int es_status_advice(const struct es_status_counts *c, const char *job_dir, struct es_buf *out);

/* The "Failed <id> ..." / "Retried <id> ..." block of the text status for every shard with a
 * problem (at most max_shards of them, 0: all; the rest counted), appended to out. */
int es_status_format_problems(const struct es_status *s, size_t max_shards, struct es_buf *out);

/* Process exit code of `status`: 0 complete, 2 any failed, otherwise 1 (counts only). */
int es_status_exit_code(const struct es_status_counts *c);
/* The same for a full status: 2 also when a done record is one merge would refuse. */
int es_status_exit(const struct es_status *s);

/* The reference's object (pretty, sorted keys, trailing newline) with extra fields
 * "progress", "hosts", "lock_timeout_secs" and "lease_secs", appended to out. */
int es_status_format_json(const struct es_manifest *m, const struct es_status *s, struct es_buf *out);

/* The reference's summary line, the progress line, the host table and, with all, one line per
 * shard ("  <id>: <status>[ owner=<o>]"), appended to out. */
int es_status_format_text(const struct es_manifest *m, const struct es_status *s, int all,
			  struct es_buf *out);


#endif
