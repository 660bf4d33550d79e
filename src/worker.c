#include "eshard/worker.h"
#include "eshard/attempt.h"
#include "eshard/backup.h"
#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/crash.h"
#include "eshard/djrunner.h"
#include "eshard/events.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/materialize.h"
#include "eshard/proc.h"
#include "eshard/recipe.h"
#include "eshard/sha.h"
#include "eshard/status.h"
#include "json.h"

#include <math.h>
#include <errno.h>
#include <sys/wait.h>
#include <spawn.h>
#include <poll.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

void es_worker_opts_init(struct es_worker_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->max_retries = -1;
}

struct worker {
	const struct es_worker_opts *o;
	struct es_manifest m;
	struct es_claimer c;
	struct es_events ev;
	const char *ray_address;
	struct es_djrunner dj;       /* per-rank mode: the Ray head and the Data-Juicer runner */
	int per_rank;                /* the effective --ray-mode (es_worker_opts.ray_per_rank) */
	char *dj_commit;
	int have_manifest;
	struct es_policy policy;     /* the effective policy */
	double poll;                 /* idle poll interval */
	int capped;                  /* --max-shards reached; waiting for the job's end */
	int64_t done_here;           /* shards this worker completed */
	long long work_left;         /* pending + stale shards at the last count; -1: not counted */
	int broken;                  /* this node cannot start the processor or reach the job folder: the code */
	int unreachable_errno;       /* broken because the job folder stayed away: its errno */
	int kept_errno;              /* a stop could not give its claim back (release_stopped): the errno */
	size_t kept_shard;           /* that claim's shard */
	double fs_failing_since;     /* steps fail transiently since (es_time_mono; 0: the last worked) */
	char last_idle[256];
	/* Backups (backup.h): the attempt in hand is one; the primary token each shard was last
	 * tried for; scratch for the rule; since when a finished job waits for a yield. */
	int backup;
	char (*backup_tried)[33];
	struct es_claim_seen *seen;
	unsigned char *skip;
	double yield_wait_since;
	double backup_due;           /* seconds until a running shard is overdue, -1: none */
	unsigned char *done_seen;    /* the idle loop's counts: shards found done (es_status_count_cached) */
	double scan_mono;            /* when the last claim_next began */
	unsigned char *running_now;  /* idle: shards whose lock that scan read, running and live */
	/* Watching (docs/job-folder.md#the-hint): the last pass read the locks and found every
	 * unfinished shard held by a live lock; the passes that follow read only the hint, until
	 * it changes or next_scan (es_time_mono) comes. counts: that pass's count of the job. */
	int watching;
	double next_scan;
	int hint_news;               /* the hint changed since the last pass that read the locks */
	int recheck;                 /* the next pass reads every lock (a busy pass found nothing) */
	int own_pass;                /* this pass tries only its own shards and known ones (claim_step) */
	double all_pass_mono;        /* when the last pass that tried every shard began */
	struct es_claim_hint_seen hint;
	struct es_status_counts counts;
	size_t owed_hint;            /* 1 + a shard this worker finished since it last replaced the hint */
	const char *owed_event;
	/* Why the attempt in hand ended as it did and what happens next, for its Finished line
	 * (set by the finish_* step; "" for a clean end). */
	char end_why[512];
};

/* ---------------- attempt.json updates ---------------- */

static int attempt_path(const struct worker *w, struct es_buf *out)
{
	return es_jobpath_in_attempt(out, w->m.job_dir, w->c.attempt_rel, ES_ATTEMPT_JSON);
}

static cJSON *load_attempt(const struct worker *w)
{
	struct es_buf p = ES_BUF_INIT;
	cJSON *a = NULL;
	attempt_path(w, &p);
	es_log_quiet_begin();
	es_json_load(p.data, &a);
	es_log_quiet_end();
	es_buf_free(&p);
	if (!cJSON_IsObject(a)) {
		cJSON_Delete(a);
		a = cJSON_CreateObject();
	}
	return a;
}

/* attempt.json as the claim (or backup) has just written it, without reading it back. */
static cJSON *claimed_attempt(struct worker *w)
{
	size_t len = 0;
	char *text = es_claim_take_attempt(&w->c, &len);
	cJSON *a = NULL;
	if (text) {
		es_log_quiet_begin();
		a = es_json_parse(text, len, "attempt.json");
		es_log_quiet_end();
		free(text);
	}
	if (cJSON_IsObject(a))
		return a;
	cJSON_Delete(a);
	return load_attempt(w);
}

static int save_attempt(const struct worker *w, cJSON *a)
{
	struct es_buf p = ES_BUF_INIT;
	attempt_path(w, &p);
	int rc = es_json_write_atomic(p.data, a);
	es_buf_free(&p);
	return rc;
}

/* ---------------- heartbeat tick, called while the child runs ---------------- */

struct tick_arg {
	struct worker *w;
	size_t i;
	int lost;
	int released;        /* the lock was released on a stop, before the child was stopped */
	int superseded;      /* the shard's done record is another attempt's: stop */
	double last_beat;
	double refreshed;    /* the last lease refresh that the job folder answered (es_time_mono) */
	/* The lease refresh fails with a transient error (es_fs_transient) since io_since
	 * (es_time_mono; 0: it works), with io_errno; io_seen: it failed so at least once during
	 * this attempt; unreachable: for longer than the outage budget, so the child was stopped. */
	double io_since;
	int io_errno;
	int io_seen;
	int unreachable;
	/* The lease refresh fails with an error that is not transient (a full disk, a read-only or
	 * forbidden lock: ENOSPC, EROFS, EACCES): its errno and message (refused_errno 0: it works);
	 * unkept: for longer than the outage budget, so the child was stopped. */
	int refused_errno;
	char refused_why[512];
	int unkept;
	int yield_warned;    /* a look for another attempt's done record failed: said once */
};

/* ---------------- a shared file system that goes away for a while ---------------- */

/* How long a step that fails with a transient error (es_fs_transient) is retried: while the
 * lease allows, the lease minus two heartbeats, so that the worker has given up and stopped its
 * child before its lease could run out and another worker take the shard over. The lease is
 * the time the job's owner accepts a silent worker for; a server's restart or failover takes
 * seconds (a Gluster brick restarted a second after its death answered its clients again 3 to
 * 7 s after it, on a loaded test machine). At most ES_WORKER_OUTAGE_SECS, so that with the
 * default lease a dead mount ends the worker within a minute, not two. */
#define ES_WORKER_OUTAGE_SECS 60.0

static int stopped(const struct es_worker_opts *o);

/* The lease and heartbeat of the effective policy; before the manifest is read, this process's
 * --lease-secs and --heartbeat-secs or their defaults. */
static double outage_budget(const struct worker *w)
{
	double lease = w->c.policy.lease_secs, beat = w->c.policy.heartbeat_secs;
	if (lease <= 0) {
		lease = w->o->lease_secs > 0 ? w->o->lease_secs : ES_DEFAULT_LEASE_SECS;
		beat = w->o->heartbeat_secs > 0 ? w->o->heartbeat_secs : ES_DEFAULT_HEARTBEAT_SECS;
	}
	double b = lease - 2 * beat;
	if (b > ES_WORKER_OUTAGE_SECS)
		b = ES_WORKER_OUTAGE_SECS;
	return b > 0.5 ? b : 0.5;
}

/* The job folder: the manifest's (resolved), or the one given before the manifest is read. */
static const char *folder(const struct worker *w)
{
	return w->have_manifest ? w->m.job_dir : w->o->job_dir;
}

/* A step has just failed with a transient error: when the failures in a row began (es_time_mono),
 * now unless a lease refresh or another step failed so before it without a success between.
 * The outage budget counts from there, whichever steps the outage cuts. */
static double outage_start(struct worker *w)
{
	if (!w->fs_failing_since)
		w->fs_failing_since = es_time_mono();
	return w->fs_failing_since;
}

/* 1 when rc (a failed step's code) is a transient file-system error; *err gets its errno. */
static int transient(int rc, int *err)
{
	*err = es_last_errno();
	return rc == ES_EIO && es_fs_transient(*err);
}

/* 1 when the job folder does not answer now, with a transient error (its errno in *err). */
static int folder_away(const struct worker *w, int *err)
{
	es_log_quiet_begin();
	int rc = es_fs_reachable(folder(w));
	es_log_quiet_end();
	return rc && transient(rc, err);
}

/* The job folder failed with errno err since `since` (es_time_mono): probe it (es_fs_reachable)
 * with a bounded backoff, 0.25 s doubling to 2 s, until it answers (0), a stop is asked for (1:
 * the caller goes on as if it answered, and the worker's loop ends as on any stop, so that a
 * SIGTERM or a peer's stop during an outage is not taken for a dead mount) or the outage budget
 * is spent (-1). */
static int ride_out(struct worker *w, double since, int err)
{
	double delay = 0.25, budget = outage_budget(w);
	es_warning("the job folder %s cannot be reached (%s); retrying for up to %g s", folder(w), strerror(err), budget);
	for (double left; (left = budget - (es_time_mono() - since)) > 0 && !stopped(w->o);) {
		es_sleep(delay < left ? delay : left);
		es_log_quiet_begin();
		int rc = es_fs_reachable(folder(w));
		es_log_quiet_end();
		if (!rc) {
			es_log_note("The job folder %s answers again after %.1f s", folder(w), es_time_mono() - since);
			return 0;
		}
		delay = delay * 2 > 2 ? 2 : delay * 2;
	}
	return stopped(w->o) ? 1 : -1;
}

/* The job folder stayed unreachable for the whole budget: a dead mount. Nothing can be written
 * there, so this worker stops with one error; its shard, if it holds one, goes to another worker
 * once its lease runs out (nobody refreshes it any more). Returns the code. */
static int unreachable(struct worker *w, double since, int err)
{
	w->unreachable_errno = err;
	w->broken = es_error(ES_EIO, "the job folder %s cannot be reached: %s (errno %d) for %.1f s; this worker stops, "
				     "its shard (if any) goes to another worker when its lease runs out",
			     folder(w), strerror(err), err, es_time_mono() - since);
	return w->broken;
}

/* A stop: give the claim on shard i back at once (token-checked), so that a resubmitted job
 * resumes now. Quiet: when the job folder cannot be reached the release cannot be made, and the
 * worker's last line (stop_note) says once that the claim was left to run out with its lease,
 * with the folder and the errno. 0 when the lock is no longer this worker's. */
static int release_stopped(struct worker *w, size_t i)
{
	if (w->backup)
		return 0; /* a backup holds no lock */
	es_log_quiet_begin();
	int rc = es_claim_release(&w->c, i, w->c.token);
	es_log_quiet_end();
	if (rc < 0) {
		w->kept_errno = es_last_errno() ? es_last_errno() : EIO;
		w->kept_shard = i;
		return rc;
	}
	w->kept_errno = 0;
	return 0;
}

/* SIGTERM/SIGINT seen while the child runs: give the shard back at once, so a resubmitted job
 * can claim it even if this process is killed before its child is gone; the child can no
 * longer publish anything, since the token check fails. */
static void release_on_stop(void *arg)
{
	struct tick_arg *t = arg;
	if (!t->released && release_stopped(t->w, t->i) == 0)
		t->released = 1;
}

static int stopped(const struct es_worker_opts *o)
{
	if (o->stop_flag && *o->stop_flag)
		return 1;
	if (o->should_stop && o->should_stop(o->should_stop_arg)) {
		if (o->stop_flag)
			*o->stop_flag = SIGTERM;
		return 1;
	}
	return 0;
}

/* A backup's race is over when the shard is terminal (its lock is a fence) or has a done
 * record: the primary won, or failed for good, or another attempt published. */
static int backup_outrun(struct worker *w, size_t i)
{
	struct es_buf lock_path = ES_BUF_INIT;
	struct es_lock_info li;
	if (es_claim_marker_exists(&w->m, "done", w->m.shards[i].id) == 1)
		return 1;
	es_log_quiet_begin();
	int rc = es_jobpath_lock(&lock_path, w->m.job_dir, w->m.shards[i].id);
	if (!rc)
		rc = es_claim_lock_read(lock_path.data, &li);
	es_log_quiet_end();
	es_buf_free(&lock_path);
	return !rc && li.exists && li.terminal;
}

/* A lease refresh failed with an error that is not transient (a full disk, a read-only or
 * forbidden lock): the next refresh may work (space freed), so it is tried again at every
 * heartbeat, said once. A lease that cannot be kept must not run out under a live child: another
 * worker would take the shard over and run it a second time. So once the outage budget after
 * the last refresh that worked is spent, 1 stops the child (finish_unkept), before the lease
 * runs out. */
static int refresh_refused(struct tick_arg *t, int err)
{
	double left = outage_budget(t->w) - (es_time_mono() - t->refreshed);
	if (!t->refused_errno) {
		t->refused_errno = err ? err : EIO;
		snprintf(t->refused_why, sizeof(t->refused_why), "%s", es_last_error());
		es_warning("cannot refresh the lease of %s (%s); trying again at every heartbeat for up to %.1f s, then its "
			   "attempt stops", t->w->m.shards[t->i].id, t->refused_why, left > 0 ? left : 0);
	}
	if (left > 0)
		return 0;
	t->unkept = 1;
	return 1;
}

/* A lease refresh failed. An error that is not transient is refresh_refused's. A transient one
 * (es_fs_transient) is retried at every tick (twice a second) for the outage budget; past it
 * the job folder is unreachable (a dead mount): 1 stops the child. The budget counts from the
 * last refresh that worked, not from this failure: a partitioned client's call hangs until its
 * timeout (an NFS major timeout, Gluster's ping timeout) before it fails, and the lease ran on
 * meanwhile. */
static int refresh_failed(struct tick_arg *t, int rc)
{
	int err;
	if (!transient(rc, &err))
		return refresh_refused(t, err);
	double now = es_time_mono();
	if (!t->io_since) {
		double since = t->w->fs_failing_since;
		t->io_since = since && since < t->refreshed ? since : t->refreshed;
		t->w->fs_failing_since = t->io_since;
		t->io_errno = err;
		t->io_seen = 1;
		double left = outage_budget(t->w) - (now - t->io_since);
		es_warning("cannot refresh the lease of %s (%s), last refreshed %.1f s ago; retrying for up to %.1f s",
			   t->w->m.shards[t->i].id, es_last_error(), now - t->refreshed, left > 0 ? left : 0);
	}
	if (now - t->io_since < outage_budget(t->w))
		return 0;
	t->unreachable = 1;
	return 1;
}

/* Called twice a second while the child runs: refresh the lease when one is due, and
 * notice a stop asked for by the caller (the attempt sees *stop_flag at once). */
static int tick(void *arg)
{
	struct tick_arg *t = arg;
	struct worker *w = t->w;
	es_crash_point("worker-child-running");
	stopped(w->o);
	double now = es_time_mono();
	int beat = now - t->last_beat >= w->c.policy.heartbeat_secs;
	if (beat)
		t->last_beat = now;
	if (w->backup) {
		if (backup_outrun(w, t->i)) {
			t->superseded = 1;
			return 1;
		}
		/* An error is not fatal (claim.h); tick runs inside the quiet es_attempt_run. */
		if (beat && es_claim_backup_beat(&w->c, t->i))
			es_warning("%s; trying again at the next heartbeat", es_last_error());
		return 0;
	}
	/* A backup of this shard may have won: its done record is there. No backup starts before
	 * the attempt is ES_BACKUP_MIN_EXTRA_SECS old, so short attempts never look. */
	if (es_time_epoch() - w->c.claimed_at_epoch >= ES_BACKUP_MIN_EXTRA_SECS) {
		/* Quiet: a look that fails is made again at the next tick, and an outage is said
		 * once by the lease refresh below. */
		es_log_quiet_begin();
		int yielded = es_claim_yield(&w->c, t->i, w->c.token), err;
		es_log_quiet_end();
		if (yielded == 1) {
			t->superseded = 1;
			return 1;
		}
		if (yielded < 0 && !transient(yielded, &err) && !t->yield_warned) {
			t->yield_warned = 1;
			es_warning("cannot look for another attempt's done record of %s (%s); looking again at every "
				   "tick, said once", w->m.shards[t->i].id, es_last_error());
		}
	}
	if (!beat && !t->io_since)
		return 0;
	/* Quiet: refresh_failed says what failed, once per outage for a transient error. */
	es_log_quiet_begin();
	int rc = es_claim_heartbeat(&t->w->c, t->i);
	es_log_quiet_end();
	if (rc == 1) {
		t->lost = 1;
		es_warning("lost the lease on %s (taken over by another worker); stopping its attempt", t->w->m.shards[t->i].id);
		return 1;
	}
	if (rc < 0)
		return refresh_failed(t, rc);
	t->refreshed = es_time_mono();
	t->refused_errno = 0;
	if (t->io_since) {
		es_log_note("The job folder %s answers again after %.1f s", w->m.job_dir, now - t->io_since);
		t->io_since = 0;
		w->fs_failing_since = 0;
	}
	return 0;
}

/* ---------------- one shard ---------------- */

static void event(struct worker *w, const char *name, size_t i, int64_t rows, int64_t bytes, double dur, const char *detail)
{
	struct es_event e = { name, w->m.shards[i].id, w->c.attempt_number, w->c.token, rows, bytes, dur, detail };
	es_events_write(&w->ev, &e);
}

static cJSON *files_json(const struct es_materialized *mat)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t k = 0; k < mat->n_files; k++) {
		cJSON *f = cJSON_CreateObject();
		es_json_set_str(f, "path", mat->files[k].path);
		es_json_set_int(f, "rows", mat->files[k].rows);
		es_json_set_str(f, "sha256", mat->files[k].sha256);
		es_json_set_int(f, "size_bytes", mat->files[k].size_bytes);
		cJSON_AddItemToArray(a, f);
	}
	return a;
}

static cJSON *result_json(const struct es_materialized *mat)
{
	cJSON *r = cJSON_CreateObject();
	es_json_set(r, "ray_output_files", files_json(mat));
	es_json_set_int(r, "rows", mat->rows);
	es_json_set_str(r, "sha256", mat->sha256);
	es_json_set_int(r, "size_bytes", mat->size_bytes);
	return r;
}

/* The line of the attempt's process.log a user would look for first (es_fs_log_error_line). */
static void log_error_line(const struct worker *w, char *out, size_t n)
{
	struct es_buf p = ES_BUF_INIT;
	es_jobpath_in_attempt(&p, w->m.job_dir, w->c.attempt_rel, ES_ATTEMPT_LOG);
	es_fs_log_error_line(p.data, out, n);
	es_buf_free(&p);
}

/* The reason of a failed attempt for its Finished line: the error, then the log's error line
 * when it says more, then next (whether the shard is retried). */
static void set_end_why(struct worker *w, const char *error, const char *next)
{
	char line[256];
	log_error_line(w, line, sizeof(line));
	if (line[0] && error && strstr(error, line))
		line[0] = '\0';
	snprintf(w->end_why, sizeof(w->end_why), "%s%s%s; %s", error ? error : "no error recorded",
		 line[0] ? "; log: " : "", line, next);
}

/* A preempted attempt's reason: the stop this worker got, and what became of its claim. */
static void set_stop_why(struct worker *w)
{
	int sig = w->o->stop_flag ? (int)*w->o->stop_flag : 0;
	char name[32];
	if (w->kept_errno)
		snprintf(w->end_why, sizeof(w->end_why), "stopped by %s; its claim could not be released (%s): the shard "
			 "goes to another worker when its lease runs out", es_proc_signal_name(sig, name, sizeof(name)),
			 strerror(w->kept_errno));
	else if (sig > 0)
		snprintf(w->end_why, sizeof(w->end_why), "stopped by %s; not counted as a failure, the shard is "
			 "released for the next run", es_proc_signal_name(sig, name, sizeof(name)));
	else
		snprintf(w->end_why, sizeof(w->end_why), "stopped; not counted as a failure, the shard is released "
			 "for the next run");
}

/* A stopped attempt: record it "preempted" (a) and give its claim back unless that was done
 * (released), then say why it ended. The record is written quietly like the release: with the
 * job folder away, the worker's last line says so once; a record that fails while the release
 * works is said here. */
static void record_stopped(struct worker *w, size_t i, cJSON *a, int released)
{
	es_json_set_str(a, "status", "preempted");
	es_log_quiet_begin();
	int rc = save_attempt(w, a);
	es_log_quiet_end();
	char *why = rc ? strdup(es_last_error()) : NULL;
	if (!released)
		release_stopped(w, i);
	if (rc && !w->kept_errno)
		es_warning("attempt %d of %s could not be recorded as preempted: %s", w->c.attempt_number, w->m.shards[i].id,
			   why ? why : "out of memory");
	free(why);
	set_stop_why(w);
}

/* Finish an attempt that failed: docs/job-folder.md#failures-and-the-retry-limit. Returns "failed"
 * or "lost". */
static const char *finish_failure(struct worker *w, size_t i, cJSON *a, const char *error)
{
	const char *id = w->m.shards[i].id;
	if (w->backup) {
		/* A backup's failure is not the shard's: it is not counted, and the primary runs on. */
		es_json_set_str(a, "status", "backup_failed");
		es_json_set_str(a, "error", error);
		save_attempt(w, a);
		set_end_why(w, error, "the primary attempt runs on");
		event(w, "backup_failed", i, -1, -1, -1, error);
		return "backup_failed";
	}
	es_json_set_str(a, "status", "failed");
	es_json_set_str(a, "error", error);
	save_attempt(w, a);
	int failures = 0, folders = 0;
	es_claim_count_failures(w->m.job_dir, id, &failures, &folders);
	int rc;
	char next[160];
	if (failures > w->c.policy.max_retries)
		snprintf(next, sizeof(next), "no retries left (%d failed attempt(s), --max-retries %lld): the shard is failed",
			 failures, (long long)w->c.policy.max_retries);
	else
		snprintf(next, sizeof(next), "will be retried (retry %d of %lld)", failures, (long long)w->c.policy.max_retries);
	set_end_why(w, error, next);
	if (failures > w->c.policy.max_retries) {
		char now[40];
		es_time_now_iso(now);
		cJSON *f = cJSON_CreateObject();
		es_json_set_str(f, "failed_at", now);
		es_json_set_int(f, "failures", failures);
		es_json_set_int(f, "last_attempt", w->c.attempt_number);
		es_json_set_str(f, "last_error", error);
		struct es_buf log = ES_BUF_INIT, rec = ES_BUF_INIT;
		es_jobpath_in_attempt(&log, NULL, w->c.attempt_rel, ES_ATTEMPT_LOG);
		es_json_set_str(f, "last_log", log.data);
		es_json_set_str(f, "shard_id", id);
		es_json_set_str(f, "status", "failed");
		es_json_set_str(f, "token", w->c.token);
		if (w->o->run_id)
			es_json_set_str(f, "run_id", w->o->run_id);
		int published = 0;
		rc = es_json_dump(f, 1, &rec);
		if (!rc)
			rc = es_claim_publish(&w->c, i, w->c.token, "failed", rec.data, rec.len, NULL, NULL, &published);
		es_buf_free(&log);
		es_buf_free(&rec);
		cJSON_Delete(f);
	} else {
		rc = es_claim_release(&w->c, i, w->c.token);
	}
	event(w, rc == 1 ? "lost" : "failed", i, -1, -1, -1, error);
	return rc == 1 ? "lost" : "failed";
}

/* Not the owner any more (docs/job-folder.md#publishing-a-result): "stale" if a reclaimer marked
 * it, else "lost". */
static const char *finish_lost(struct worker *w, size_t i)
{
	cJSON *a = load_attempt(w);
	const char *st = es_json_get_str(a, "status");
	if (!st || strcmp(st, "stale")) {
		es_json_set_str(a, "status", "lost");
		save_attempt(w, a);
	}
	cJSON_Delete(a);
	event(w, "lost", i, -1, -1, -1, NULL);
	snprintf(w->end_why, sizeof(w->end_why), "another worker took the shard over (its lease ran out here)");
	return "lost";
}


/* Per-rank mode: make sure this worker's Ray head is up; its address becomes the shard's. */
static int ensure_ray_head(struct worker *w)
{
	int rc = es_djrunner_ensure(&w->dj);
	if (!rc)
		w->ray_address = es_djrunner_address(&w->dj);
	return rc;
}

/* ---------------- stops from outside ----------------
 *
 * A scheduler that ends a job (scancel, a container runtime, a node drain) signals every
 * process of the job, not only the one it started, in no fixed order: the processor, its
 * supervisor, the Data-Juicer runner or the Ray head can die of that signal a moment before
 * this worker gets its own. Such an attempt was preempted, not broken; counted as a failure it
 * would burn a retry each time and, after --max-retries of them, fail a healthy shard.
 */

#define DEFAULT_PREEMPT_GRACE_SECS 5.0

static double preempt_grace(const struct worker *w)
{
	return w->o->preempt_grace_secs > 0 ? w->o->preempt_grace_secs : DEFAULT_PREEMPT_GRACE_SECS;
}

/* Why a failed attempt may have been stopped from outside (a stop signal that no eshard-mpi
 * process sent: the supervisor reports every stop it makes, as timed_out or after our own
 * request), written into buf; NULL when nothing points that way. */
static const char *outside_stop_hint(struct worker *w, const struct es_attempt_outcome *oc, int via_runner,
				     char *buf, size_t n)
{
	int rc = oc->return_code;
	char name[32];
	if (!oc->started || oc->timed_out || oc->aborted || oc->preempted)
		return NULL;
	if (oc->supervisor_signal) {
		snprintf(buf, n, "its supervisor got signal %d (%s)", oc->supervisor_signal,
			 es_proc_signal_name(oc->supervisor_signal, name, sizeof(name)));
		return buf;
	}
	if (rc < 0 && es_proc_is_stop_signal(-rc)) {
		snprintf(buf, n, "it was killed by signal %d (%s), which eshard-mpi did not send", -rc,
			 es_proc_signal_name(-rc, name, sizeof(name)));
		return buf;
	}
	if (rc > 128 && es_proc_is_stop_signal(rc - 128)) {
		snprintf(buf, n, "exit code %d is how a process reports signal %d (%s)", rc, rc - 128,
			 es_proc_signal_name(rc - 128, name, sizeof(name)));
		return buf;
	}
	/* Ray's driver turns SIGTERM into sys.exit(15), so a Data-Juicer run on Ray that was
	 * stopped exits 15. */
	if (w->m.processor.kind == ES_PROC_DATA_JUICER && rc == SIGTERM) {
		snprintf(buf, n, "exit code 15 is how a Ray driver reports SIGTERM");
		return buf;
	}
	if (w->per_rank && es_djrunner_stop_hint(&w->dj, via_runner, buf, n))
		return buf;
	return NULL;
}

/* Wait up to the preemption grace for this worker's own stop; 1 when it came. */
static int await_stop(struct worker *w)
{
	double until = es_time_mono() + preempt_grace(w);
	while (!stopped(w->o)) {
		if (es_time_mono() >= until)
			return 0;
		es_sleep(0.02);
	}
	return 1;
}

/* "Processor killed by signal 15 (SIGTERM)" or "Data-Juicer returned exit code 1". */
static void describe_exit(const struct worker *w, const struct es_attempt_outcome *oc, struct es_buf *out)
{
	const char *what = w->m.processor.kind == ES_PROC_COMMAND ? "Processor" : "Data-Juicer";
	char name[32];
	if (oc->started && oc->return_code < 0)
		es_buf_printf(out, "%s killed by signal %d (%s)", what, -oc->return_code,
			      es_proc_signal_name(-oc->return_code, name, sizeof(name)));
	else
		es_buf_printf(out, "%s returned exit code %d", what, oc->return_code);
}

/* A SIGTERM cut the per-rank head's start short (preempted), or the head cannot start (a
 * failure; by design the worker start path starts the head before claiming, so this is a head
 * that died and could not be restarted). */
static const char *head_unavailable(struct worker *w, size_t i)
{
	cJSON *a = load_attempt(w);
	const char *r = "preempted";
	if (!stopped(w->o))
		r = finish_failure(w, i, a, es_last_error());
	else
		record_stopped(w, i, a, 0);
	cJSON_Delete(a);
	return r;
}

/* One claimed attempt, from its spec to its end, so that each step is a function. */
struct shard_run {
	struct worker *w;
	size_t i;
	const struct es_shard *sh;
	struct es_buf input, adir, rel;   /* rel: scratch for paths relative to the job folder */
	struct es_buf numbered;           /* --keep-order: the attempt's copy of the shard, or "" */
	struct es_attempt_spec spec;
	struct es_processor via_runner;
	int via_runner_used;
	struct tick_arg ta;
	struct es_attempt_outcome oc;
	cJSON *a;                         /* attempt.json */
	char now[40];                     /* when the attempt ended */
	char hint[160];                   /* why its end may be a stop from outside */
	int waited;                       /* the preemption grace was waited for */
	int run_errno;                    /* es_last_errno() of a failed es_attempt_run */
};

/* The attempt's spec and paths (everything of shard_setup but attempt.json). */
static void spec_setup(struct shard_run *r, struct worker *w, size_t i)
{
	memset(r, 0, sizeof(*r));
	r->w = w;
	r->i = i;
	r->sh = &w->m.shards[i];
	r->input = r->adir = r->rel = r->numbered = (struct es_buf)ES_BUF_INIT;
	es_buf_printf(&r->input, "%s/%s", w->m.job_dir, r->sh->path);
	es_jobpath_join(&r->adir, w->m.job_dir, w->c.attempt_rel);
	struct es_attempt_spec *s = &r->spec;
	s->job_dir = w->m.job_dir;
	s->job_id = w->m.job_id;
	s->shard_id = r->sh->id;
	s->input_path = r->input.data;
	s->attempt_dir = r->adir.data;
	s->token = w->c.token;
	s->proc = &w->m.processor;
	const char *runner_cmd = w->per_rank ? es_djrunner_command(&w->dj) : NULL;
	if (runner_cmd) {
		/* The attempt's processor is the runner's client; the dj-process argv follows "--". */
		r->via_runner = w->m.processor;
		r->via_runner.dj_process = (char *)runner_cmd;
		s->proc = &r->via_runner;
		r->via_runner_used = 1;
	}
	s->ray_address = w->ray_address;
	s->supervisor_exe = w->o->supervisor_exe;
	s->timeout_secs = w->o->attempt_timeout_secs;
	/* Twice a second: the lease is refreshed when due, and a primary notices within half a
	 * second that a backup's result won (so the job's end does not wait for it). */
	s->tick_secs = w->c.policy.heartbeat_secs < 0.5 ? w->c.policy.heartbeat_secs : 0.5;
	r->ta = (struct tick_arg){ .w = w, .i = i, .last_beat = es_time_mono(), .refreshed = es_time_mono() };
	s->tick = tick;
	s->tick_arg = &r->ta;
	s->on_stop = release_on_stop;
	s->stop_flag = w->o->stop_flag;
	s->grace_secs = 10;
}

static void shard_setup(struct shard_run *r, struct worker *w, size_t i)
{
	spec_setup(r, w, i);
	r->a = claimed_attempt(w);
}

static void spec_free(struct shard_run *r)
{
	es_buf_free(&r->input);
	es_buf_free(&r->adir);
	es_buf_free(&r->rel);
	es_buf_free(&r->numbered);
}

static void shard_free(struct shard_run *r)
{
	cJSON_Delete(r->a);
	if (r->numbered.len)
		unlink(r->numbered.data); /* only the attempt's own child read it */
	spec_free(r);
}

/* The command (the argv the supervisor runs) appended to out, and the export path relative to
 * the job folder into export_rel. */
static int command_of(struct shard_run *r, struct es_strv *out, struct es_buf *export_rel)
{
	char **argv = NULL;
	size_t argc = 0;
	int rc = es_attempt_argv(&r->spec, &argv, &argc, NULL);
	for (size_t k = 0; !rc && k < argc; k++)
		rc = es_strv_push(out, strdup(argv[k]));
	if (!rc)
		rc = es_jobpath_in_attempt(export_rel, NULL, r->w->c.attempt_rel, ES_ATTEMPT_EXPORT);
	es_argv_free(argv);
	return rc;
}

/* The command and the export path, into attempt a. */
static int set_command(struct shard_run *r, cJSON *a)
{
	struct es_strv argv = ES_STRV_INIT;
	int rc = command_of(r, &argv, &r->rel);
	if (!rc) {
		es_json_set(a, "command", es_json_str_array(argv.v, argv.n));
		es_json_set_str(a, "ray_export_path", r->rel.data);
	}
	es_strv_free(&argv);
	return rc;
}

/* es_claimer.attempt_command: the command in the claim's (or backup's) attempt.json, so that it
 * is written once before the child starts, not twice (at the file server: a create, write,
 * fsync, rename and folder fsync less per shard). Left to record_command when the command is
 * not known yet: a per-rank worker before its Data-Juicer runner started (the runner's client
 * is the command then). */
static int claimed_command(void *arg, size_t i, struct es_strv *out, struct es_buf *export_rel)
{
	struct worker *w = arg;
	if (w->per_rank && !w->dj.head.running)
		return 1;
	struct shard_run r;
	spec_setup(&r, w, i);
	if (w->m.processor.keep_order && !es_path_join(&r.numbered, r.adir.data, ES_ATTEMPT_INPUT))
		r.spec.input_path = r.numbered.data; /* what number_input will make it */
	es_log_quiet_begin();
	int rc = command_of(&r, out, export_rel);
	es_log_quiet_end();
	spec_free(&r);
	return rc;
}

/* --keep-order: the processor reads A/input.jsonl, the shard with a hidden row number per row
 * (materialize.h); the shard in shards/ stays as prepare wrote it. */
static int number_input(struct shard_run *r)
{
	if (!r->w->m.processor.keep_order)
		return 0;
	int64_t rows = 0;
	struct es_buf p = ES_BUF_INIT;
	int rc = es_path_join(&p, r->adir.data, ES_ATTEMPT_INPUT);
	if (!rc)
		rc = es_materialize_number_rows(r->input.data, p.data, &rows);
	if (!rc && rows != r->sh->rows)
		rc = es_error(ES_EINVAL, "Shard %s has %lld rows, the manifest says %lld: %s", r->sh->id, (long long)rows,
			      (long long)r->sh->rows, r->input.data);
	if (!rc) {
		es_buf_reset(&r->numbered);
		rc = es_buf_adds(&r->numbered, p.data);
		r->spec.input_path = r->numbered.data;
	} else {
		unlink(p.data);
	}
	es_buf_free(&p);
	return rc;
}

/* attempt.json gets the command and the export path before the child starts: written by the
 * claim already (claimed_command), or now. */
static int record_command(struct shard_run *r)
{
	if (!cJSON_GetObjectItemCaseSensitive(r->a, "command")) {
		int rc = set_command(r, r->a);
		if (rc)
			return rc;
		save_attempt(r->w, r->a);
	}
	event(r->w, "start", r->i, r->sh->rows, r->sh->size_bytes, -1, NULL);
	return 0;
}

/* The end of the run in attempt.json. */
static void set_run_end(struct shard_run *r)
{
	es_json_set_str(r->a, "finished_at", r->now);
	es_json_set_float(r->a, "duration_secs", r->oc.duration_secs);
	es_json_set_int(r->a, "return_code", r->oc.return_code);
	es_json_set_str(r->a, "output_path", r->rel.data);
}

/* attempt.json as it is on disk now (a reclaimer may have marked it stale meanwhile), with the
 * end of the run. */
static void reload_attempt(struct shard_run *r)
{
	cJSON_Delete(r->a);
	r->a = load_attempt(r->w);
	set_run_end(r);
}

/* Run the child, then judge a failed end against a stop from outside. A launcher that stops a
 * job (scancel, a container runtime, a node's shutdown) signals every process of it at once,
 * in no fixed order: the child can die of that signal before our own arrives. A child that
 * failed while we were being stopped was stopped, not broken, and must not count as a failure;
 * one that died of a stop signal nobody here sent gets the grace to see whether our own stop
 * follows (see outside_stop_hint). attempt.json then gets the end of the run, read again
 * first (a reclaimer may have marked it stale meanwhile) unless the exit was clean. */
static int run_child(struct shard_run *r)
{
	struct worker *w = r->w;
	struct es_attempt_outcome *oc = &r->oc;
	/* Quiet: a run cut off by the job folder's outage is said once, by the outage's end
	 * (process_shard); any other failure is said here. */
	es_log_quiet_begin();
	int rc = es_attempt_run(&r->spec, oc);
	es_log_quiet_end();
	/* Kept now: reading attempt.json again below may fail in other ways. */
	r->run_errno = rc ? es_last_errno() : 0;
	if (rc && !(rc == ES_EIO && es_fs_transient(r->run_errno)))
		es_error(rc, "%s", es_last_error());
	if (!rc && !oc->preempted && oc->return_code != 0) {
		if (stopped(w->o)) {
			oc->preempted = 1;
		} else if (outside_stop_hint(w, oc, r->via_runner_used, r->hint, sizeof(r->hint))) {
			r->waited = 1;
			if (await_stop(w))
				oc->preempted = 1;
		}
	}
	es_time_now_iso(r->now);
	es_jobpath_in_attempt(&r->rel, NULL, w->c.attempt_rel, ES_ATTEMPT_OUTPUT);
	/* A clean exit goes on to publish, which is owner-checked: a stale takeover (the only
	 * other writer of this attempt.json before our record) makes it fail, and every end but
	 * a published one reads the file again (reload_attempt). So the clean exit keeps the
	 * attempt.json this worker wrote last instead of reading it back. */
	if (!rc && oc->started && !oc->preempted && !oc->aborted && !oc->timed_out && oc->return_code == 0 &&
	    !r->ta.lost && !r->ta.superseded)
		set_run_end(r);
	else
		reload_attempt(r);
	return rc;
}

/* Every end but a clean exit: preempted, lost, timed out, failed. NULL for a clean exit. */
/* Stopped by SIGTERM/SIGINT: not the shard's fault, so it does not count toward the retry
 * limit; the lock is released at once so a resubmitted job resumes now. */
static const char *finish_preempted(struct shard_run *r)
{
	struct worker *w = r->w;
	record_stopped(w, r->i, r->a, r->ta.released);
	if (!w->kept_errno) /* else the job folder is away: the event could not be written either */
		event(w, "preempted", r->i, -1, -1, r->oc.duration_secs, NULL);
	return "preempted";
}

/* The processor could not be started at all (a missing program, a broken environment on this
 * node): the node's fault, not the shard's. The attempt is recorded "not_started" (which does
 * not count toward the retry limit), the lock is released for other workers, and this worker
 * stops: on a broken node every shard it claimed would fail the same way. */
static const char *finish_unrunnable(struct shard_run *r, int code, const char *why)
{
	struct worker *w = r->w;
	es_json_set_str(r->a, "status", "not_started");
	es_json_set_str(r->a, "error", why);
	save_attempt(w, r->a);
	if (!w->backup)
		es_claim_release(&w->c, r->i, w->c.token);
	event(w, "not_started", r->i, -1, -1, -1, why);
	snprintf(w->end_why, sizeof(w->end_why), "%s; not counted as a failure, the shard is released for other workers", why);
	w->broken = es_error(code, "%s; this worker stops, and %s was released for other workers", why,
			     w->m.shards[r->i].id);
	return "not_started";
}

static const char *finish_not_started(struct shard_run *r)
{
	struct es_buf why = ES_BUF_INIT;
	es_buf_printf(&why, "cannot start the processor on %s: ", es_hostname());
	describe_exit(r->w, &r->oc, &why);
	es_buf_printf(&why, ": %s", r->oc.start_error);
	/* Where Data-Juicer is may differ between nodes; a resubmission can say where it is. */
	if (r->w->m.processor.kind == ES_PROC_DATA_JUICER)
		es_buf_adds(&why, " (give 'eshard-mpi run' or 'worker' --dj-process, --dj-root or --python of this node's Data-Juicer)");
	const char *res = finish_unrunnable(r, ES_EIO, why.data);
	es_buf_free(&why);
	return res;
}

static const char *finish_outage(struct shard_run *r, double since, int err);

/* The shard file is read by the processor: it must be the job folder's own regular file, not a
 * symbolic link planted to feed it something else. */
static const char *check_input(struct shard_run *r)
{
	struct stat st;
	struct es_buf why = ES_BUF_INIT;
	es_proc_test_hook("ESHARD_TEST_HOOK_BEFORE_INPUT_CHECK");
	int rc = lstat(r->input.data, &st), err = errno;
	/* The job folder went away under the claim (a server restart): not the shard's fault, nor
	 * a reason to stop this worker; ride it out like any other step. */
	if (rc != 0 && es_fs_transient(err))
		return finish_outage(r, outage_start(r->w), err);
	if (rc != 0)
		es_buf_printf(&why, "Shard file %s cannot be read: %s", r->input.data, strerror(err));
	else if (S_ISLNK(st.st_mode))
		es_buf_printf(&why, "Shard file %s is a symbolic link; eshard-mpi does not follow links in a job folder",
			      r->input.data);
	else if (!S_ISREG(st.st_mode))
		es_buf_printf(&why, "Shard file %s is not a regular file", r->input.data);
	const char *res = why.len ? finish_unrunnable(r, ES_EINVAL, why.data) : NULL;
	es_buf_free(&why);
	return res;
}

/* Another attempt's done record is the shard's (a backup beat this primary, or the primary
 * beat this backup): the child was stopped; a primary turns its lock into that record's fence. */
static const char *finish_superseded(struct shard_run *r)
{
	struct worker *w = r->w;
	if (!w->backup)
		es_claim_yield(&w->c, r->i, w->c.token);
	es_json_set_str(r->a, "status", "superseded");
	save_attempt(w, r->a);
	event(w, "superseded", r->i, -1, -1, r->oc.duration_secs, w->backup ? "backup" : NULL);
	return "superseded";
}

/* The lease refresh gave up (tick): the child was stopped on a dead mount. */
static const char *finish_unreachable(struct shard_run *r)
{
	unreachable(r->w, r->ta.io_since, r->ta.io_errno);
	snprintf(r->w->end_why, sizeof(r->w->end_why), "the job folder cannot be reached; this worker stops");
	return "unreachable";
}

/* The lease could not be kept (refresh_refused): the child was stopped before the lease ran out.
 * Not the shard's fault: the attempt ends "preempted" (not counted toward the retry limit) and
 * the lock is released if it can be, else left to run out. The worker stops, as on a node that
 * cannot start its processor: every shard it claimed would end the same way. */
static const char *finish_unkept(struct shard_run *r)
{
	struct worker *w = r->w;
	const struct tick_arg *t = &r->ta;
	double secs = es_time_mono() - t->refreshed;
	es_json_set_str(r->a, "status", "preempted");
	es_json_set_str(r->a, "error", t->refused_why);
	/* Quiet: the lock, and maybe the attempt's folder, cannot be written; the error below
	 * says what became of the shard. */
	es_log_quiet_begin();
	save_attempt(w, r->a);
	int released = es_claim_release(&w->c, r->i, w->c.token) == 0;
	es_log_quiet_end();
	event(w, "preempted", r->i, -1, -1, r->oc.duration_secs, t->refused_why);
	const char *next = released ? "the shard was released for other workers"
				    : "the shard goes to another worker when its lease runs out";
	snprintf(w->end_why, sizeof(w->end_why), "its lease could not be kept; not counted as a failure, %s", next);
	w->broken = es_error(ES_EIO, "cannot refresh the lease of %s for %.1f s: %s (errno %d); its attempt was stopped "
				     "(not counted as a failure) and %s; this worker stops",
			     w->m.shards[r->i].id, secs, t->refused_why, t->refused_errno, next);
	return "preempted";
}

/* A step of the attempt failed while the job folder was away (err since `since`): the shard is
 * not to blame. Once the folder answers again the attempt ends "preempted" (not counted toward
 * the retry limit) and the lock is released, so the shard runs again at once; "released" lets
 * this worker go on claiming. A folder that does not come back is a dead mount; a stop while
 * it is away ends the attempt as any stop does (record_stopped). */
static const char *finish_outage(struct shard_run *r, double since, int err)
{
	struct worker *w = r->w;
	int rode = ride_out(w, since, err);
	if (rode < 0) {
		unreachable(w, since, err);
		return "unreachable";
	}
	reload_attempt(r);
	es_json_set_str(r->a, "error", strerror(err));
	if (rode > 0) {
		record_stopped(w, r->i, r->a, 0);
		if (!w->kept_errno)
			event(w, "preempted", r->i, -1, -1, r->oc.duration_secs, strerror(err));
		return "preempted";
	}
	es_json_set_str(r->a, "status", "preempted");
	save_attempt(w, r->a);
	if (!w->backup)
		es_claim_release(&w->c, r->i, w->c.token);
	event(w, "preempted", r->i, -1, -1, r->oc.duration_secs, strerror(err));
	snprintf(w->end_why, sizeof(w->end_why), "the job folder was unreachable (%s); not counted as a failure, the shard is released",
		 strerror(err));
	return "released";
}

/* A child that failed while the job folder was away failed because of it (it could not read
 * its input or write its output there): 1 with the outage's start and errno when a lease
 * refresh failed so during the attempt or the folder does not answer now. */
static int failed_in_outage(struct shard_run *r, double *since, int *err)
{
	*err = r->ta.io_errno;
	if (!r->ta.io_seen && !folder_away(r->w, err))
		return 0;
	*since = outage_start(r->w);
	return 1;
}

static const char *settle_unclean(struct shard_run *r)
{
	struct worker *w = r->w;
	const struct es_attempt_outcome *oc = &r->oc;
	if (oc->preempted)
		return finish_preempted(r);
	if (r->ta.unreachable)
		return finish_unreachable(r);
	if (r->ta.unkept)
		return finish_unkept(r);
	if (r->ta.superseded)
		return finish_superseded(r);
	if (oc->aborted || r->ta.lost)
		return finish_lost(w, r->i);
	if (!oc->started)
		return finish_not_started(r);
	struct es_buf why = ES_BUF_INIT;
	const char *result = NULL;
	double since;
	int err;
	if (oc->timed_out) {
		es_buf_printf(&why, "Attempt timed out after %g s (--attempt-timeout-secs)", w->o->attempt_timeout_secs);
		result = finish_failure(w, r->i, r->a, why.data);
	} else if (oc->return_code != 0 && failed_in_outage(r, &since, &err)) {
		result = finish_outage(r, since, err);
	} else if (!oc->started || oc->return_code != 0) {
		describe_exit(w, oc, &why);
		if (r->waited)
			es_buf_printf(&why, "; not a preemption: %s, but no stop reached the worker within %g s", r->hint,
				      preempt_grace(w));
		result = finish_failure(w, r->i, r->a, why.data);
	}
	es_buf_free(&why);
	return result;
}

/* The done record (docs/job-folder.md#done-records). */
static cJSON *done_record(const struct shard_run *r, const struct es_materialized *mat)
{
	const struct worker *w = r->w;
	cJSON *d = cJSON_CreateObject();
	es_json_set_int(d, "attempt_number", w->c.attempt_number);
	es_json_set_str(d, "completed_at", r->now);
	es_json_set_str(d, "data_juicer_commit", w->dj_commit ? w->dj_commit : "unknown");
	es_json_set_str(d, "executor_type", "ray");
	es_json_set_str(d, "hostname", es_hostname());
	es_json_set_str(d, "output_path", r->rel.data);
	es_json_set_int(d, "pid", (int64_t)getpid());
	es_json_set_str(d, "ray_address", w->ray_address);
	es_json_set(d, "ray_output_files", files_json(mat));
	es_json_set_int(d, "rows", mat->rows);
	es_json_set_str(d, "sha256", mat->sha256);
	es_json_set_str(d, "shard_id", r->sh->id);
	es_json_set_int(d, "size_bytes", mat->size_bytes);
	es_json_set_str(d, "status", "done");
	es_json_set_str(d, "token", w->c.token);
	if (w->o->run_id)
		es_json_set_str(d, "run_id", w->o->run_id);
	return d;
}

struct settle_arg {
	struct shard_run *r;
	const struct es_materialized *mat;
};

/* The attempt says its outcome: under the lock, before its fence (es_claim_settle_fn). */
static void settle_attempt(void *ctx, int published)
{
	const struct settle_arg *s = ctx;
	es_json_set_str(s->r->a, "status", published ? "done" : "superseded");
	es_json_set(s->r->a, "result", result_json(s->mat));
	save_attempt(s->r->w, s->r->a);
}

/* The publish of the done record failed while the job folder was away: whether the record's
 * link reached the server is unknown, so the step cannot be retried or undone from here. The
 * lock is left as it is, as if this worker had died there: once its lease runs out the worker
 * that takes it over finds the record and fences it, or runs the shard again (the crash matrix's
 * publish cases). Not the shard's fault: no failure is counted. */
static const char *publish_unsure(struct shard_run *r, int err)
{
	struct worker *w = r->w;
	double since = outage_start(w);
	if (ride_out(w, since, err) < 0) {
		unreachable(w, since, err);
		return "unreachable";
	}
	snprintf(w->end_why, sizeof(w->end_why), "its done record may not be in place (%s); the worker that takes its lease over settles it",
		 strerror(err));
	return "released";
}

/* A clean exit: materialize the export, then publish the done record
 * (docs/job-folder.md#publishing-a-result). */
static const char *publish_result(struct shard_run *r)
{
	struct worker *w = r->w;
	struct es_materialized mat;
	/* The heartbeat goes on while the result is copied: a large one can take longer than
	 * the lease. */
	struct es_materialize_opts mo = { 0, tick, &r->ta, w->m.processor.keep_order, r->sh->rows };
	es_log_quiet_begin();
	int rc = es_materialize(w->m.job_dir, r->adir.data, &mo, &mat);
	es_log_quiet_end();
	if (rc == ES_EINTR && r->ta.lost)
		return finish_lost(w, r->i);
	int err;
	if (rc && transient(rc, &err)) /* the result is copied into the attempt's own folder: redone next time */
		return finish_outage(r, outage_start(w), err);
	if (rc) {
		char *why = strdup(es_last_error());
		reload_attempt(r);
		const char *res = rc == ES_EINTR && r->ta.unkept ? finish_unkept(r)
				  : rc == ES_EINTR && r->ta.unreachable ? finish_unreachable(r)
				  : rc == ES_EINTR && r->ta.superseded ? finish_superseded(r)
				  : rc == ES_EINTR && stopped(w->o) ? finish_preempted(r)
				  : finish_failure(w, r->i, r->a, why ? why : "cannot materialize the result");
		free(why);
		return res;
	}
	cJSON *d = done_record(r, &mat);
	struct es_buf rec = ES_BUF_INIT;
	struct settle_arg sa = { r, &mat };
	int published = 0;
	rc = es_json_dump(d, 1, &rec);
	if (!rc && w->backup)
		rc = es_claim_publish_backup(&w->c, r->i, rec.data, rec.len, &published);
	else if (!rc)
		rc = es_claim_publish(&w->c, r->i, w->c.token, "done", rec.data, rec.len, settle_attempt, &sa, &published);
	es_buf_free(&rec);
	cJSON_Delete(d);
	const char *result;
	if (rc < 0 && transient(rc, &err)) {
		result = publish_unsure(r, err);
	} else if (rc < 0) {
		char *why = strdup(es_last_error());
		reload_attempt(r);
		result = finish_failure(w, r->i, r->a, why ? why : "cannot publish the done record");
		free(why);
	} else if (rc == 1) {
		/* a was read before materializing: keep the "stale" mark a reclaimer wrote since
		 * (before its rename), or finish_lost would see "running" and not count it. */
		cJSON *cur = load_attempt(w);
		const char *st = es_json_get_str(cur, "status"), *at = es_json_get_str(cur, "stale_at");
		if (st && !strcmp(st, "stale")) {
			es_json_set_str(r->a, "status", "stale");
			if (at)
				es_json_set_str(r->a, "stale_at", at);
		}
		cJSON_Delete(cur);
		es_json_set(r->a, "result", result_json(&mat));
		save_attempt(w, r->a);
		result = finish_lost(w, r->i);
	} else {
		/* A primary's attempt said it before its fence; a backup's primary fences its
		 * record, and says "done" for it if it died before this. */
		if (w->backup)
			settle_attempt(&sa, published);
		result = published ? "done" : "superseded";
		event(w, result, r->i, mat.rows, mat.size_bytes, r->oc.duration_secs, NULL);
	}
	es_materialized_free(&mat);
	return result;
}

static const char *run_shard(struct worker *w, size_t i)
{
	if (w->per_rank && ensure_ray_head(w))
		return head_unavailable(w, i);
	struct shard_run r;
	shard_setup(&r, w, i);
	const char *result = check_input(&r);
	if (result) {
		shard_free(&r);
		return result;
	}
	int rc = number_input(&r);
	if (!rc)
		rc = record_command(&r);
	if (!rc)
		rc = run_child(&r);
	int err = rc ? (r.run_errno ? r.run_errno : es_last_errno()) : 0;
	if (rc == ES_EIO && es_fs_transient(err)) /* the job folder went away under a step */
		result = finish_outage(&r, outage_start(w), err);
	else if (rc)
		result = finish_failure(w, i, r.a, es_last_error());
	else if (!(result = settle_unclean(&r)))
		result = publish_result(&r);
	shard_free(&r);
	return result;
}

/* run_shard with the shard's folders (attempts/<id>, its attempt folder, state/done ...) walked
 * once for the whole shard, not once per file written there (fs.h es_fs_walk_cache_begin). */
static const char *process_shard(struct worker *w, size_t i)
{
	es_fs_walk_cache_begin();
	const char *r = run_shard(w, i);
	es_fs_walk_cache_end();
	return r;
}

/* ---------------- start-up checks ---------------- */

static int check_recipe_snapshot(const struct es_manifest *m)
{
	struct es_buf p = ES_BUF_INIT;
	char hex[65];
	es_buf_printf(&p, "%s/recipe.yaml", m->job_dir);
	int rc = es_sha_file(p.data, hex, NULL);
	es_buf_free(&p);
	if (rc)
		return rc;
	if (!m->recipe_sha256 || strcmp(hex, m->recipe_sha256))
		return es_error(ES_EINVAL, "Recipe snapshot hash does not match manifest: %s/recipe.yaml", m->job_dir);
	return 0;
}

static int check_version(struct worker *w)
{
	if (w->m.processor.kind != ES_PROC_DATA_JUICER)
		return 0;
	w->dj_commit = es_recipe_dj_identity(w->m.processor.python, es_recipe_default_helper());
	const char *job = w->m.dj_commit ? w->m.dj_commit : "unknown";
	const char *mine = w->dj_commit ? w->dj_commit : "unknown";
	if (!strcmp(job, "unknown") || !strcmp(mine, "unknown") || !strcmp(job, mine))
		return 0;
	if (w->o->allow_version_mismatch) {
		es_warning("Data-Juicer commit mismatch: job=%s, worker=%s (allowed by --allow-version-mismatch)", job, mine);
		return 0;
	}
	return es_error(ES_EINVAL, "Data-Juicer commit mismatch: job=%s, worker=%s; use --allow-version-mismatch only if this is intentional", job, mine);
}

/* Replace *field (the manifest's, malloc'd) with a copy of value. */
static int replace_str(char **field, const char *value)
{
	char *copy = strdup(value);
	if (!copy)
		return es_error(ES_ENOMEM, "out of memory");
	free(*field);
	*field = copy;
	return 0;
}

/* Where the processor is on this node, given to this process (es_worker_opts.python, ...):
 * it replaces the manifest's in memory, which every later step (the version check, the Ray
 * head, the runner, each attempt) reads. The file is not touched. */
static int apply_location(struct worker *w)
{
	const struct es_worker_opts *o = w->o;
	struct es_processor *p = &w->m.processor;
	int rc = 0;
	if ((o->dj_process || o->dj_root) && p->kind != ES_PROC_DATA_JUICER)
		return es_error(ES_EUSAGE, "--%s applies to a Data-Juicer job, and job %s runs --process-cmd",
				o->dj_process ? "dj-process" : "dj-root", w->m.job_dir);
	if (o->python)
		rc = replace_str(&p->python, o->python);
	if (!rc && o->dj_process && !(rc = replace_str(&p->dj_process, o->dj_process))) {
		free(p->dj_root);
		p->dj_root = NULL;
	}
	if (!rc && o->dj_root && !(rc = replace_str(&p->dj_root, o->dj_root))) {
		free(p->dj_process);
		p->dj_process = NULL;
	}
	return rc;
}

/* The manifest, the effective policy (the manifest's with this process's overrides), the
 * checks, the claimer, the per-rank runtime and the event log. */
static int worker_init(struct worker *w)
{
	const struct es_worker_opts *o = w->o;
	es_proc_test_hook("ESHARD_TEST_HOOK_WORKER_START");
	int rc = es_manifest_load_ex(o->job_dir, o->attempts_checked ? ES_MANIFEST_ATTEMPTS_CHECKED : 0, &w->m);
	if (rc)
		return rc;
	w->have_manifest = 1;
	if ((rc = apply_location(w)))
		return rc;
	/* Where the processor is may differ between nodes: a program missing here would fail (or
	 * give up) every shard this worker claims. */
	es_log_quiet_begin();
	rc = es_attempt_check_processor(&w->m.processor);
	es_log_quiet_end();
	if (rc && w->m.processor.kind == ES_PROC_COMMAND)
		return es_error(rc, "%s on %s; install it there, or run this job's workers where it is", es_last_error(), es_hostname());
	if (rc)
		return es_error(rc, "%s on %s; give this node's with --python, --dj-process or --dj-root, or install it", es_last_error(), es_hostname());
	struct es_policy *p = &w->policy;
	*p = w->m.policy;
	if (o->lock_timeout_secs > 0) p->lock_timeout_secs = o->lock_timeout_secs;
	if (o->max_retries >= 0) p->max_retries = o->max_retries;
	if (o->poll_interval_secs > 0) p->poll_interval_secs = o->poll_interval_secs;
	if (o->heartbeat_secs > 0) p->heartbeat_secs = o->heartbeat_secs;
	if (o->lease_secs > 0) p->lease_secs = o->lease_secs;
	if (p->heartbeat_secs * 2 > p->lease_secs)
		return es_error(ES_EUSAGE, "the heartbeat (%g s) must be at most half the lease (%g s): a live shard would be taken over; "
				"set --heartbeat-secs lower or --lease-secs higher", p->heartbeat_secs, p->lease_secs);
	w->ray_address = o->ray_address ? o->ray_address : w->m.ray_address;
	if (!*w->ray_address)
		return es_error(ES_EUSAGE, "--ray-address must not be empty");
	/* The default mode: per-rank for Data-Juicer on a local Ray (the job's address, or this
	 * process's); a Ray cluster's address and a command processor keep per-attempt, which
	 * gives the address to every shard as it is. */
	w->per_rank = o->ray_per_rank;
	if (w->per_rank < 0)
		w->per_rank = w->m.processor.kind == ES_PROC_DATA_JUICER && !strcmp(w->ray_address, "local");
	if ((rc = check_version(w)) || (rc = check_recipe_snapshot(&w->m)))
		return rc;
	if ((rc = es_claimer_init(&w->c, &w->m, p)))
		return rc;
	w->c.attempt_command = claimed_command;
	w->c.attempt_command_arg = w;
	struct es_djrunner_opts djo = { .job_dir = w->m.job_dir, .proc = &w->m.processor,
					.rank_on_host = o->ray_rank_on_host, .ranks_on_host = o->ray_ranks_on_host,
					.num_cpus = o->ray_num_cpus, .no_runner = o->ray_no_runner,
					.cancel = o->stop_flag };
	es_djrunner_init(&w->dj, &djo);
	es_events_open(&w->ev, w->m.job_dir, o->run_id);
	w->poll = o->poll_interval_override > 0 ? o->poll_interval_override : (double)p->poll_interval_secs;
	w->work_left = -1;
	w->backup_due = -1;
	es_say("Worker %s:%d started for %s", es_hostname(), (int)getpid(), w->m.job_id);
	return 0;
}

/* Undo what a worker_init that failed part-way made, so that it can run again. */
static void init_undo(struct worker *w)
{
	es_claimer_free(&w->c);
	memset(&w->c, 0, sizeof(w->c));
	if (w->have_manifest)
		es_manifest_free(&w->m);
	w->have_manifest = 0;
	free(w->dj_commit);
	w->dj_commit = NULL;
}

/* worker_init, through an outage of the job folder like any step: a mount that dies between a
 * run's prepare and this rank's first claim, or a server that restarts as the worker starts.
 * Its errors are said here, once: a step that fails in an outage says only the outage. A folder
 * that stays away is a dead mount (unreachable), which under `run` leaves the work like a rank
 * whose mount dies under a shard; a stop meanwhile ends the worker as a stop (0: the loop sees
 * it at once). */
static int worker_start(struct worker *w)
{
	for (;;) {
		es_log_quiet_begin();
		int rc = worker_init(w), err;
		es_log_quiet_end();
		if (!rc)
			return 0;
		char *why = strdup(es_last_error());
		int away = transient(rc, &err) || folder_away(w, &err);
		if (!away)
			rc = es_error(rc, "%s", why ? why : "out of memory");
		free(why);
		if (!away)
			return rc;
		double since = outage_start(w);
		init_undo(w);
		int rode = ride_out(w, since, err);
		if (rode)
			return rode < 0 ? unreachable(w, since, err) : 0;
	}
}

/* Per-rank mode: the head (and runner) start before a claim, not while holding one: a start
 * can take longer than a lease, and a node that cannot start Ray must not use up the retries
 * of the shards it claims. Whether work is left is known from the last idle poll; only the
 * first pass counts. */
static int head_before_claim(struct worker *w)
{
	if (!w->per_rank || w->capped)
		return 0;
	struct es_status_counts pre;
	if (w->work_left < 0 && !es_status_count(&w->m, (double)w->policy.lock_timeout_secs, &pre))
		w->work_left = pre.pending + pre.stale;
	if (w->dj.head.running || w->work_left <= 0)
		return 0;
	int rc = ensure_ray_head(w);
	if (rc && !stopped(w->o))
		rc = es_error(rc, "cannot start the node-local Ray head on %s; this worker stops: %s", es_hostname(),
			      es_last_error());
	return rc;
}

/* Unknown shards (es_claim_unknown) from which a pass lists state/done first: a lock read is
 * about five requests at a file server (lookup, open, read, flush, release), a listing a few
 * plus one per few hundred names. */
#define ES_WORKER_LIST_FROM 8

/* Claim the first free shard in manifest order: 1 with *i set, 0 when none, negative on error. */
static int claim_next(struct worker *w, size_t *i)
{
	w->scan_mono = es_time_mono();
	/* A pass that tries every shard first learns the finished shards from one listing of
	 * state/done when that is cheaper than the locks it would read: a job resumed, the tail,
	 * and in `run` the pass of every quarter lease, where each rank would otherwise read the
	 * lock of every shard its peers finished since (a name its client never saw: a lookup at
	 * a file server each; 56 a shard at 64 ranks and 2,000 shards). */
	if (!w->own_pass && es_claim_unknown(&w->c) >= ES_WORKER_LIST_FROM + w->m.n_shards / 512) {
		int rc = es_claim_learn_done(&w->c);
		if (rc < 0)
			return rc;
	}
	for (size_t k = 0; !w->capped && k < w->m.n_shards && !stopped(w->o); k++) {
		if (w->own_pass && k % w->o->claim_step != w->o->claim_first && !es_claim_known(&w->c, k))
			continue; /* a peer's, most likely: read at the next pass that reads every lock */
		int rc = es_claim_try(&w->c, k);
		if (rc < 0)
			return rc;
		if (w->c.took_over) {
			struct es_event e = { "stale_takeover", w->m.shards[k].id, w->c.took_over_attempt,
					      w->c.took_over_token, -1, -1, -1, NULL };
			es_events_write(&w->ev, &e);
		}
		if (rc == ES_CLAIM_OK) {
			*i = k;
			return 1;
		}
	}
	return 0;
}

/* A shard this worker finished (its attempt ended r): idle workers learn from the hint that it is
 * terminal, which may be the job's end. The hint is replaced once this worker finds nothing more
 * to claim, or ends (pay_hint): while it goes on claiming, no shard of the job became claimable
 * that idle workers do not learn of otherwise, and a replace per shard would cost every shard a
 * write at the file server. */
static void owe_hint(struct worker *w, size_t i, const char *r)
{
	if (strcmp(r, "done") && strcmp(r, "failed") && strcmp(r, "superseded"))
		return;
	w->owed_hint = i + 1;
	w->owed_event = strcmp(r, "failed") ? "done" : "failed";
}

static void pay_hint(struct worker *w)
{
	if (!w->owed_hint)
		return;
	es_claim_hint(&w->m, w->m.shards[w->owed_hint - 1].id, w->owed_event);
	w->owed_hint = 0;
}

/* Process a claimed shard; 1 when it was preempted (the worker stops). */
static int handle_claim(struct worker *w, size_t i, struct es_worker_result *res)
{
	if (!res->first_claim_epoch)
		res->first_claim_epoch = w->c.claimed_at_epoch;
	if (!w->o->quiet_claims)
		es_say("Claimed %s (attempt %d)", w->m.shards[i].id, w->c.attempt_number);
	event(w, "claim", i, -1, -1, -1, NULL);
	double t0 = es_time_mono();
	w->end_why[0] = '\0';
	const char *r = process_shard(w, i);
	owe_hint(w, i, r);
	if (!strcmp(r, "done"))
		es_say("Finished %s: %s (attempt %d, %.1f s, %lld rows)", w->m.shards[i].id, r, w->c.attempt_number,
		       es_time_mono() - t0, (long long)w->m.shards[i].rows);
	else
		es_say("Finished %s: %s (attempt %d, %.1f s)%s%s", w->m.shards[i].id, r, w->c.attempt_number,
		       es_time_mono() - t0, w->end_why[0] ? ": " : "", w->end_why);
	if (!strcmp(r, "preempted") || w->broken)
		return 1;
	if (!strcmp(r, "released"))
		return 0; /* the file system was away (finish_outage): no shard of this worker's count */
	res->processed++;
	if (!strcmp(r, "done"))
		w->done_here++;
	if (!strcmp(r, "failed"))
		res->failed++;
	return 0;
}

/* Nothing to claim (no pending or stale shard this scan): back up the most overdue running
 * shard (backup.h). 1 when a backup was run, 0 when none was due. */
static int try_backup(struct worker *w, struct es_worker_result *res)
{
	const struct es_worker_opts *o = w->o;
	size_t n = w->m.n_shards;
	w->backup_due = -1;
	if (o->no_backup || w->capped || w->broken || stopped(o))
		return 0;
	if (!w->seen) {
		w->seen = calloc(n, sizeof(*w->seen));
		w->skip = calloc(n, 1);
		w->backup_tried = calloc(n, sizeof(*w->backup_tried));
		if (!w->seen || !w->skip || !w->backup_tried)
			return 0;
	}
	for (size_t i = 0; i < n; i++) {
		es_claim_seen(&w->c, i, &w->seen[i]);
		w->skip[i] = w->seen[i].running && !strcmp(w->backup_tried[i], w->seen[i].token);
	}
	struct es_backup_rule rule = { 0, -1, o->backup_keep_hosts };
	struct es_backup_choice ch;
	long k = es_backup_choose(w->seen, n, w->skip, es_time_epoch(), &rule, &ch);
	w->backup_due = k < 0 ? ch.next_due_secs : -1;
	if (k < 0)
		return 0;
	size_t i = (size_t)k;
	char primary[33], host[256];
	snprintf(primary, sizeof(primary), "%s", w->seen[i].token);
	snprintf(host, sizeof(host), "%s", w->seen[i].host);
	snprintf(w->backup_tried[i], sizeof(w->backup_tried[i]), "%s", primary);
	int rc = es_claim_backup(&w->c, i, primary);
	if (rc != ES_CLAIM_OK)
		return 0; /* it has a backup already (or the marker could not be made: the primary runs on) */
	es_say("Backup of %s (attempt %d): its attempt on %s has run %.1f s, the median shard %.1f s", w->m.shards[i].id,
	       w->c.attempt_number, host, ch.age_secs, ch.median_secs);
	char detail[64];
	snprintf(detail, sizeof(detail), "of %s", primary);
	event(w, "backup", i, -1, -1, -1, detail);
	w->backup = 1;
	w->end_why[0] = '\0';
	const char *r = process_shard(w, i);
	owe_hint(w, i, r);
	w->backup = 0;
	es_say("Finished %s: %s (backup)%s%s", w->m.shards[i].id, r, w->end_why[0] ? ": " : "", w->end_why);
	if (!strcmp(r, "done")) {
		/* A backup that wins is a shard this worker completed (it counts toward a cap). */
		w->done_here++;
		res->processed++;
	}
	return 1;
}

/* A finished job whose shard has a done record of a backup beside its primary's running lock:
 * the primary fences it within a second or so; one whose primary died is taken over once its
 * lease has run out. 1 while the worker should wait for that (never longer than two leases). */
static int await_yields(struct worker *w)
{
	int waiting = 0;
	for (size_t i = 0; i < w->m.n_shards; i++)
		if (!(w->o->leave_end_repair && es_claim_listed_only(&w->c, i)) && es_claim_repair(&w->c, i) == 2)
			waiting = 1;
	if (!waiting) {
		w->yield_wait_since = 0;
		return 0;
	}
	double now = es_time_mono();
	if (!w->yield_wait_since)
		w->yield_wait_since = now;
	if (now - w->yield_wait_since > 2 * w->policy.lease_secs) {
		es_warning("a shard's done record was published by a backup and its primary's lock is still running; "
			   "leaving it for a later worker or status to see");
		return 0;
	}
	return 1;
}

#define ES_WORKER_HINT_GAP_SECS 1.0

/* Whether this pass reads the locks (claim_next, the count): always but while watching, and
 * then once the hint changed, a watched lock could have gone stale, a backup is due or a
 * quarter lease has passed. The hint is looked at in every pass, busy ones too, so that a
 * change made while this worker read the locks is seen at its next pass. */
static int scan_due(struct worker *w)
{
	double now = es_time_mono();
	if (es_claim_hint_changed(&w->m, &w->hint))
		w->hint_news = 1;
	/* The changes of a moment (every rank of a job's tail goes idle and replaces the hint at
	 * once) are read in one pass, not in one pass each: a second apart at most. */
	int news = w->hint_news && now - w->scan_mono >= ES_WORKER_HINT_GAP_SECS;
	if (!w->watching || news || now >= w->next_scan) {
		/* A busy pass (after a claim) trusts what it saw running in the last quarter lease:
		 * at a file server, a claim then costs a read of the locks it can take, not of every
		 * lock its peers hold. A watcher's pass, or one after a change of the hint, reads
		 * every lock not known terminal. */
		w->c.trust_running_secs = !w->watching && !w->hint_news && !w->recheck ? w->policy.lease_secs / 4 : 0;
		/* A busy pass, and the first, tries only this worker's own shards and those it knows
		 * (claim_step), as long as a pass that tried every shard began less than a quarter
		 * lease ago. The worker's start counts as one: the ranks do not all race for the
		 * first shards, and a lock of a resumed job is its owner's to see, or the first
		 * pass's that tries every shard (when the own shards give nothing). */
		int first = !w->all_pass_mono;
		if (first)
			w->all_pass_mono = now;
		w->own_pass = (first || w->c.trust_running_secs > 0) && w->o->claim_step > 1 &&
			      now - w->all_pass_mono < w->policy.lease_secs / 4;
		if (!w->own_pass)
			w->all_pass_mono = now;
		w->hint_news = 0;
		w->recheck = 0;
		return 1;
	}
	return 0;
}

/* After a pass that read the locks and found nothing to claim: watch while every unfinished
 * shard is held by a live lock (nothing pending, nothing stale), until the next read is due:
 * a quarter lease from now, or sooner when a watched lock would be stale by then (its owner
 * died: it is taken over one lease after its lock was last seen changing) or a backup is due. */
static void watch_decide(struct worker *w)
{
	const struct es_status_counts *st = &w->counts;
	double now = es_time_mono(), next = now + w->policy.lease_secs / 4, stale = es_claim_next_stale(&w->c);
	w->watching = !st->pending && !st->stale && st->running > 0 && st->done + st->failed < st->total;
	if (stale < next)
		next = stale;
	if (w->backup_due >= 0 && now + w->backup_due < next)
		next = now + w->backup_due;
	w->next_scan = next;
}

/* The job's count after a pass that read the locks (w->counts). */
static int count_job(struct worker *w)
{
	size_t n = w->m.n_shards ? w->m.n_shards : 1;
	if ((!w->done_seen && !(w->done_seen = calloc(n, 1))) || (!w->running_now && !(w->running_now = calloc(n, 1))))
		return es_error(ES_ENOMEM, "out of memory");
	/* The claim scans have read every lock not known terminal (a busy pass that trusted what
	 * it saw running is followed by one that does not, before this count): the ones found
	 * running and live now are counted so without a second read (their records are still
	 * looked for), and a done fence, which stands for its record, is done without a look for
	 * the record (a worker that never went idle before the job's tail would otherwise look
	 * for every shard's). */
	for (size_t i = 0; i < w->m.n_shards; i++) {
		struct es_claim_seen s;
		es_claim_seen(&w->c, i, &s);
		w->running_now[i] = s.running && s.running_seen_mono >= w->scan_mono;
		if (es_claim_seen_done(&w->c, i))
			w->done_seen[i] = 1;
	}
	return es_status_count_cached(&w->m, (double)w->policy.lock_timeout_secs, w->done_seen, w->running_now,
				      &w->counts);
}

/* Nothing to claim: end when the job is terminal (1, exit code set), else wait one poll (0).
 * full: this pass read the locks; else the counts are the last such pass's (watching). */
static int idle(struct worker *w, struct es_worker_result *res, int *rc, int full)
{
	const struct es_worker_opts *o = w->o;
	if (full && (*rc = count_job(w)))
		return 1;
	if (full)
		watch_decide(w);
	const struct es_status_counts st = w->counts;
	long long total = st.total, done = st.done, failed = st.failed;
	long long pending = st.pending, running = st.running, stale = st.stale;
	w->work_left = pending + stale;
	/* A finished job can still have a running lock: a publisher that died between its record
	 * and its fence (its record makes the shard count as finished). Fence it before leaving,
	 * so that no lock outlives the job; shards this worker knows finished cost nothing. */
	if (done + failed == total && await_yields(w)) {
		es_sleep(0.1);
		return 0;
	}
	if (done == total) {
		if (!o->quiet_end)
			es_say("All %lld shards completed", total);
		res->exit_code = w->capped && res->failed && !o->cap_counts_done ? 2 : 0;
		return 1;
	}
	if (done + failed == total) {
		if (!o->quiet_end)
			es_log_note("Job finished with failures: done=%lld failed=%lld", done, failed);
		res->exit_code = 2;
		return 1;
	}
	char line[256];
	snprintf(line, sizeof(line), "No shard claim available; pending=%lld running=%lld stale=%lld. Waiting %gs...",
		 pending, running, stale, w->poll);
	/* quiet_idle: an idle rank says it waits once, not at every change of the counts. */
	if (!o->quiet_idle || !w->last_idle[0]) {
		es_say("%s", line);
		snprintf(w->last_idle, sizeof(w->last_idle), "%s", line);
	}
	/* Sleep in short steps so that SIGTERM is acted on at once; wake up when a running shard
	 * becomes overdue for a backup. */
	double nap = w->poll;
	if (o->tail_poll_secs > 0 && pending + stale == 0 && running > 0) {
		double tail = o->tail_poll_secs * (double)running;
		if (tail < nap)
			nap = tail;
	}
	if (full && w->backup_due >= 0 && w->backup_due + 0.05 < nap)
		nap = w->backup_due + 0.05;
	double until_scan = w->next_scan - es_time_mono() + 0.05;
	if (w->watching && until_scan < nap)
		nap = until_scan > 0 ? until_scan : 0;
	for (double slept = 0; slept < nap && !stopped(o); slept += 0.1)
		es_sleep(nap - slept < 0.1 ? nap - slept : 0.1);
	return 0;
}

/* --max-shards: 1 when this worker ends now (exit code set), else 0 (maybe capped). */
static int reached_cap(struct worker *w, struct es_worker_result *res)
{
	const struct es_worker_opts *o = w->o;
	if (w->capped || o->max_shards <= 0 || (o->cap_counts_done ? w->done_here : res->processed) < o->max_shards)
		return 0;
	es_say("Reached --max-shards=%lld", (long long)o->max_shards);
	if (!o->wait_for_terminal) {
		/* Counted in shards done, a failed attempt was retried and is not the job's failure. */
		res->exit_code = res->failed && !o->cap_counts_done ? 2 : 0;
		return 1;
	}
	w->capped = 1;
	return 0;
}

/* ---------------- the loop ---------------- */

/* The last line of a stopped worker: its claims were given back, or one could not be
 * (release_stopped): then it is left to run out with its lease, said once, with the job folder
 * and the errno. */
static void stop_note(const struct worker *w, int sig)
{
	char name[32];
	es_proc_signal_name(sig, name, sizeof(name));
	if (!w->kept_errno) {
		es_log_note("Worker %s:%d stopped by %s; its claims were released for other workers", es_hostname(),
			    (int)getpid(), name);
		return;
	}
	es_warning("Worker %s:%d stopped by %s; its claim on %s was left to expire with its lease (another worker takes "
		   "the shard over once it runs out): the job folder %s did not take the release: %s (errno %d)",
		   es_hostname(), (int)getpid(), name, w->m.shards[w->kept_shard].id, w->m.job_dir, strerror(w->kept_errno),
		   w->kept_errno);
}

/* A step of the loop (a claim, the idle count) failed with rc: 0 when it was a transient
 * file-system error that went away (try the step again), else the code to end with. A claim cut
 * off after its lock's create leaves that lock unrefreshed: another worker takes it over once its
 * lease runs out, as after a crash there. */
static int step_outage(struct worker *w, int rc)
{
	int err;
	if (!transient(rc, &err))
		return rc;
	double now = es_time_mono();
	outage_start(w);
	/* The folder may answer while one file in it keeps failing (a handle the restarted server
	 * no longer knows, cached by the client): the budget counts from the first of the failures
	 * in a row, so that the worker ends instead of trying forever. */
	double since = w->fs_failing_since;
	if (now - since < outage_budget(w))
		return ride_out(w, since, err) < 0 ? unreachable(w, since, err) : 0;
	es_log_quiet_begin();
	int away = es_fs_reachable(w->m.job_dir);
	es_log_quiet_end();
	if (away)
		return unreachable(w, since, err);
	return es_error(rc, "%s (failing for %.1f s in a row; this worker stops)", es_last_error(), now - since);
}

int es_worker_run(const struct es_worker_opts *o, struct es_worker_result *res)
{
	struct worker w;
	memset(&w, 0, sizeof(w));
	memset(res, 0, sizeof(*res));
	w.ev.fd = -1; /* so that an early exit does not close descriptor 0 */
	w.hint = (struct es_claim_hint_seen)ES_CLAIM_HINT_SEEN_INIT;
	w.o = o;
	int rc = worker_start(&w), end = rc != 0;
	while (!end) {
		if (stopped(o))
			break;
		if ((end = reached_cap(&w, res)) != 0)
			break;
		if ((rc = head_before_claim(&w)) != 0) {
			if (stopped(o))
				rc = 0;
			else
				end = 1;
			break;
		}
		size_t i = 0;
		int full = scan_due(&w);
		if ((rc = full ? claim_next(&w, &i) : 0) < 0) {
			if (!(rc = step_outage(&w, rc)))
				continue;
			break;
		}
		w.fs_failing_since = 0;
		if (rc == 1) {
			w.watching = 0;
			rc = 0;
			if (handle_claim(&w, i, res)) {
				if ((rc = w.broken) != 0)
					end = 1;
				break;
			}
			continue;
		}
		if (stopped(o))
			break;
		if (full && (w.c.trust_running_secs > 0 || w.own_pass)) {
			/* A busy pass (or one of the own shards) found nothing: before going idle or
			 * backing a shard up, a pass that reads what this one trusted (a shard seen
			 * running may be done) or left alone. */
			w.recheck = 1;
			continue;
		}
		pay_hint(&w);
		if (full && try_backup(&w, res)) {
			w.watching = 0;
			/* A backup cut off by a dead mount ends the worker like a primary. */
			if (w.unreachable_errno) {
				rc = w.broken;
				end = 1;
				break;
			}
			continue;
		}
		end = idle(&w, res, &rc, full);
		if (end && rc < 0 && !(rc = step_outage(&w, rc)))
			end = 0;
		else if (!end)
			w.fs_failing_since = 0;
	}
	if (w.have_manifest)
		pay_hint(&w);
	if (rc < 0 && w.unreachable_errno)
		res->unreachable_errno = w.unreachable_errno;
	if (!end && !rc && stopped(o)) {
		res->stopped_by_signal = 1;
		res->exit_code = 128 + (int)*o->stop_flag;
		stop_note(&w, (int)*o->stop_flag);
	}
	es_djrunner_stop(&w.dj, res->stopped_by_signal);
	es_events_close(&w.ev);
	es_claim_hint_forget(&w.hint);
	es_claimer_free(&w.c);
	free(w.seen);
	free(w.skip);
	free(w.backup_tried);
	free(w.done_seen);
	free(w.running_now);
	if (w.have_manifest)
		es_manifest_free(&w.m);
	free(w.dj_commit);
	return rc;
}
