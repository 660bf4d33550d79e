/*
 * claim: lock files, leases and heartbeats, stale takeover, token checks
 * (docs/job-folder.md#locks-and-fences, docs/job-folder.md#claiming-a-shard). One module in
 * four files: src/claim.c (the lock, the claim), claim_fence.c, claim_takeover.c and
 * claim_backup.c, which share src/claim_parts.h.
 *
 * Who processes a shard is decided by O_CREAT|O_EXCL on state/locks/<id>.lock; whether a result
 * counts is decided by the token check done under flock() at publish time, so a worker whose
 * lock was taken over can neither release the new lock nor publish. Done and failed markers
 * are published with link(), so exactly one of several publishers wins.
 *
 * Leases: the owner rewrites its lock in place (same inode) every heartbeat with a growing
 * "heartbeat" counter, keeping every reference field. An observer calls a lock stale when its
 * mtime is older than lock_timeout_secs (the reference rule, so reference workers agree) or
 * when neither its mtime nor its content changed for lease_secs measured on the observer's own
 * monotonic clock (immune to clock skew between nodes and the file server).
 *
 * After a crash at any point: a lock may be left (taken over after one lease), possibly naming
 * an attempt folder that was not made yet (the folder is made only after the lock is won, so
 * that losers of a race never add folders the winner would count); an attempt folder without
 * attempt.json may be left (it counts toward the attempt number only, as in the reference); a
 * done or failed marker is either absent or complete.
 */
#ifndef ESHARD_CLAIM_H
#define ESHARD_CLAIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eshard/buf.h"
#include "eshard/manifest.h"

struct es_lease_obs; /* what this process has seen of each lock, for the lease rule */

struct es_claimer {
	const struct es_manifest *m;
	struct es_policy policy;     /* effective policy */
	struct es_lease_obs *obs;    /* one per manifest shard */
	/* es_claim_try does not read again a lock it saw running less than this long ago, while
	 * that lock cannot be stale yet (unchanged for less than its lease since first seen so):
	 * such a shard cannot be claimed now. 0 (the default): every try reads the lock. A worker
	 * sets it while it claims one shard after another, and clears it for a pass that must see
	 * what changed (a hint, a watcher's quarter-lease read). */
	double trust_running_secs;
	/* Asked before a claim's (or a backup's) attempt.json is written: the command the attempt
	 * will run (appended to argv) and its export path relative to the job folder, which then go
	 * into that one write instead of a second one before the child starts; nonzero when the
	 * owner does not know them yet (nothing is added). NULL: never asked. */
	int (*attempt_command)(void *arg, size_t i, struct es_strv *argv, struct es_buf *export_rel);
	void *attempt_command_arg;
	/* Filled by es_claim_try on success: */
	char token[33];
	int attempt_number;
	char attempt_rel[512];       /* attempts/<id>/<NNNN>-<token> */
	char claimed_at[40];
	double claimed_at_epoch;
	int64_t heartbeat;
	/* Set by es_claim_try when it took over a stale lock on its way. */
	int took_over;
	char took_over_token[33];
	int took_over_attempt;       /* the taken-over lock's attempt_number, 0 when unknown */
	/* Set by es_claim_backup: the primary token of the backup in hand. */
	char backup_of[33];
	/* The attempt.json text that the last claim or backup wrote (es_claim_take_attempt). */
	char *attempt_text;
	size_t attempt_text_len;
	double attempt_text_mono;
};

enum es_claim_result { ES_CLAIM_NONE = 0, ES_CLAIM_OK = 1, ES_CLAIM_FAILED_LIMIT = 2 };

/* Whether es_claim_try skips the read of shard i's lock now: this claimer saw it running less
 * than trust_running_secs ago and it cannot be stale before its next read. A lock without a
 * lease (the reference's, judged by its age alone) is always read. */
int es_claim_trusts_running(const struct es_claimer *c, size_t i);
/* Whether this claimer has read shard i's lock (running or terminal) or listed its record. */
int es_claim_known(const struct es_claimer *c, size_t i);
/* Learn from one listing of state/done which shards have a done record: es_claim_try no longer
 * reads their locks, es_claim_seen and es_claim_seen_done count them done. A listed record is
 * there (records are never removed from state/done); a record missing from a cached listing
 * only leaves its shard to the lock reads, as before. Their fences stay unknown: es_claim_repair
 * still reads such a lock. The number of shards learned, or negative on error. */
int es_claim_learn_done(struct es_claimer *c);
/* Shard i is known done from a listing only (its fence not seen). */
int es_claim_listed_only(const struct es_claimer *c, size_t i);
/* The shards whose locks es_claim_try reads: known neither terminal nor listed done, nor
 * trusted running (trust_running_secs). */
size_t es_claim_unknown(const struct es_claimer *c);

int es_claimer_init(struct es_claimer *c, const struct es_manifest *m, const struct es_policy *p);
void es_claimer_free(struct es_claimer *c);

/* The attempt.json that the last successful es_claim_try or es_claim_backup wrote, so that the
 * worker starts from it instead of reading back what it has just written (each read is a walk
 * and an open on NFS). NULL when there is none, or when it was written long enough ago (a
 * quarter of the lease or of the lock timeout) that a stale takeover could have marked the
 * attempt since: read the file then. The caller frees it; the claimer forgets it either way. */
char *es_claim_take_attempt(struct es_claimer *c, size_t *len);

/* Try to claim shard index i. Returns ES_CLAIM_OK (c->token etc. set, lock and attempt.json
 * written), ES_CLAIM_NONE, ES_CLAIM_FAILED_LIMIT (the retry limit was reached: the failed
 * record is published), or a negative error. A shard whose done marker this claimer has seen
 * (or published) is answered ES_CLAIM_NONE without touching the file system again: done
 * markers are final, and a worker scans every shard from the first one for each claim. */
int es_claim_try(struct es_claimer *c, size_t i);

/* A running lock whose shard has a visible record (done, else failed) with the lock's own
 * token: its owner published and died before writing the fence (or is writing it now). Write
 * the fence (and mark the attempt done or failed, recovered_at). 1 when repaired, 0 when there
 * was nothing to repair, negative on error. Safe at any time: the fence it writes is the one
 * the owner would write. A running lock beside a done record of another token (a backup won)
 * is its owner's to fence (es_claim_yield); it is repaired here only once it is stale (the
 * owner is gone), and 2 means "not yet: its owner has a lease left". */
int es_claim_repair(struct es_claimer *c, size_t i);

/* ---- backup attempts (speculative execution; the rule that picks a shard is in backup.h) ----
 *
 * A backup runs a second attempt of a shard whose (primary) attempt is still running and
 * overdue. It takes no lock: at most one backup per primary attempt is made sure of by the
 * exclusive create of state/backups/<id>.<primary token>.json, and the result counts through
 * the same exclusive link of state/done/<id>.json as a primary's, so exactly one of the two
 * results is the shard's. A backup never writes the primary's lock: the primary sees the done
 * record that is not its own (es_claim_yield), stops its child and turns its lock into the
 * fence of that record; a dead primary's lock is taken over after one lease, and the takeover
 * writes the fence. While a backup runs, its owner touches the marker (es_claim_backup_beat):
 * a dead primary's lock is not taken over while its backup's marker changed within one lease,
 * since the backup is running the shard already (a takeover would run it a third time and
 * one of the two would be thrown away); a dead backup stops touching it, and the takeover
 * follows one lease later. A backup's attempt.json says "backup": true and "backup_of": <token>; its
 * ends are done, superseded, backup_failed, preempted or not_started, none of which counts
 * toward the retry limit. */

/* Start a backup of shard i whose running lock has primary_token: the marker, then the
 * attempt folder and attempt.json (c->token, attempt_number, attempt_rel, claimed_at set as
 * for a claim). ES_CLAIM_OK, ES_CLAIM_NONE (this primary attempt has a backup already), or a
 * negative error. */
int es_claim_backup(struct es_claimer *c, size_t i, const char *primary_token);

/* The lease of the backup in hand (es_claim_backup): set the marker's mtime to now. 0, or a
 * negative error (not fatal: a missed beat lets a takeover run the shard too, which the
 * done-record link fences). */
int es_claim_backup_beat(struct es_claimer *c, size_t i);

/* A backup's result: the done record is linked unless the shard is terminal already (a fence,
 * or a failed record); *published tells whether it is the shard's. 0, or a negative error. */
int es_claim_publish_backup(struct es_claimer *c, size_t i, const char *record, size_t record_len,
			    int *published);

/* The primary holding token: when the shard's done record is visible (a backup won; never our
 * own, since we have not published), our lock becomes the fence of that record. 1 when the
 * record is there (stop the attempt: it is superseded), 0 when not, negative on error. */
int es_claim_yield(struct es_claimer *c, size_t i, const char *token);

/* What the last look of this claimer at a shard's lock showed (es_claim_try's scan). */
struct es_claim_seen {
	int terminal;                /* a fence (or a record this claimer published) */
	int running;                 /* a running lock that was not stale */
	double claimed_at_epoch;     /* a running lock's claim time (owner's clock), -1 unknown */
	double done_secs;            /* a done shard's claim-to-fence time, -1 unknown */
	const char *host;            /* a running lock's owner, a done shard's completer ("" unknown) */
	const char *token;           /* a running lock's token */
	double running_seen_mono;    /* when the running lock was last seen (es_time_mono), -1 */
};
void es_claim_seen(const struct es_claimer *c, size_t i, struct es_claim_seen *s);
/* 1 when that look was a done fence (read, or written by this claimer): the shard is done, as
 * its record says (docs/job-folder.md#status-of-a-shard), without a look for the record. */
int es_claim_seen_done(const struct es_claimer *c, size_t i);

/* Refresh the lease: rewrite the lock in place with heartbeat+1. Returns 0, 1 when the lock is
 * no longer ours (taken over: stop working on it), or negative on an I/O error. */
int es_claim_heartbeat(struct es_claimer *c, size_t i);

/* Token-checked release: 0 released, 1 not the owner any more, negative on error. */
int es_claim_release(struct es_claimer *c, size_t i, const char *token);

/* Called by es_claim_publish of kind "done" after the record's link and before the fence,
 * with the lock held: the caller saves its attempt's outcome (published: done, else
 * superseded). A lock that is a fence is never repaired, so an attempt that has not said its
 * outcome by then would say "running" for good if its worker died. */
typedef void (*es_claim_settle_fn)(void *ctx, int published);

/* Owner-checked publication of a marker (done or failed) plus release of the lock, in one
 * critical section under flock. kind "done": published only if no failed marker exists;
 * "failed": only if no done marker exists. *published is set to whether the link succeeded.
 * settle (may be NULL; kind "done" only) is called between the link and the fence.
 * Returns 0 when we were the owner, 1 when not the owner, negative on error. */
int es_claim_publish(struct es_claimer *c, size_t i, const char *token, const char *kind,
		     const char *record, size_t record_len, es_claim_settle_fn settle, void *settle_ctx,
		     int *published);

/* Count the attempts of a shard whose attempt.json says failed or stale
 * (docs/job-folder.md#claiming-a-shard, step 3; not read when failures is NULL), and the number of
 * attempt sub-folders. */
int es_claim_count_failures(const char *job_dir, const char *shard_id, int *failures, int *folders);

/* What a lock file says, read once from one open descriptor (mtime and content of the same
 * inode). Strings are "" and numbers 0 (claimed_at_epoch -1) when the lock lacks them. */
struct es_lock_info {
	int exists;                /* 0: no lock at the path */
	int readable;              /* its content is a JSON object */
	int64_t mtime_ns;
	dev_t dev;
	ino_t ino;
	uint64_t content_hash;     /* of the raw bytes: a changed content shows a live owner */
	char token[33];
	char hostname[256];
	char attempt_dir[512];     /* relative to the job folder */
	int64_t attempt_number;
	int has_pid;
	int64_t pid;
	int has_heartbeat;         /* an eshard-mpi lock, refreshed by its owner (a lease) */
	int64_t heartbeat;
	double lease_secs;         /* the owner's lease, 0 when absent */
	char maker[25];            /* the owner's es_fs_temp_maker(), "" when absent or malformed */
	double claimed_at_epoch;
	char state[16];            /* "running" (also when absent: a reference lock), "done", "failed" */
	int terminal;              /* state is done or failed: a terminal fence */
	char terminal_path[600];   /* a fence's record, relative to the job folder */
	double terminal_at_epoch;  /* a fence's terminal_at, -1 when absent */
	char record_host[256];     /* a fence's copy of its record: the hostname that completed it */
};

/* Read the lock at path without locking it (open(): a fresh answer on NFS). 0 with li->exists
 * telling whether there is one, or negative on an I/O error. */
int es_claim_lock_read(const char *path, struct es_lock_info *li);

/* Open the lock at path and hold it under an exclusive flock(), the one every owner's rewrite,
 * release, publish and every takeover take, so that none of them changes it while the holder
 * decides (retry requeueing a shard). 0 with *fd and li (of the file held, still the one at the
 * path), 1 when there is no lock at the path, negative on error. A lock that is a symbolic link
 * is refused. Give it back with es_claim_lock_unhold (a no-op for fd < 0). */
int es_claim_lock_hold(const char *path, int *fd, struct es_lock_info *li);
void es_claim_lock_unhold(int fd);

/* The lease that applies to a lock: 0 for one without a heartbeat (a reference worker never
 * refreshes its lock: only lock_timeout judges it, and its live shard must not be taken over
 * after one lease), else the longer of job_lease and the owner's own (a worker started with a
 * longer --lease-secs is not judged by a shorter one); an unreadable (torn or empty) lock gets
 * job_lease, since its owner would have rewritten it. */
double es_claim_lease_of(const struct es_lock_info *li, double job_lease);

/* The one stale rule: older than policy lock_timeout_secs by its mtime (age_secs, the
 * reference rule, so that reference workers agree), or under a lease and unchanged for it.
 * unchanged_secs is how long the observer has seen neither mtime nor content change, on its
 * own monotonic clock (the claimer watches across polls; a one-shot reader such as status
 * can only pass the mtime age, so clock skew moves what it shows, never what a claimer does). */
int es_claim_lock_stale(const struct es_lock_info *li, double age_secs, double unchanged_secs,
			const struct es_policy *p);

/* ---- the hint (docs/job-folder.md#the-hint) ----
 *
 * The lock files stay the ledger; the hint only tells idle workers when to read them again.
 * Whoever makes a shard claimable or terminal (a release, a fence, a requeue) replaces
 * state/hint.json atomically, and an idle worker looks at it with one fstat() per poll instead
 * of reading every held lock: a changed hint means "scan now". A hint can be overwritten by the
 * next one before a worker looked, or never seen on a client that caches it; so a worker never
 * decides from it that there is nothing to do, and reads the held locks anyway once per quarter
 * lease. */

/* Replace the hint: shard_id became claimable or terminal (event "released", "done",
 * "failed", "requeued"). Quiet, and never fatal: a hint that cannot be written costs idle
 * workers up to a quarter lease, nothing else. 0 or a negative code. es_claim_release, every
 * fence written for another worker's record (a repair, a takeover, a yield, a fresh lock that
 * found a record) and retry's requeue replace it; after its own publish (es_claim_publish) a
 * worker replaces it once it finds nothing more to claim (docs/job-folder.md#the-hint). */
int es_claim_hint(const struct es_manifest *m, const char *shard_id, const char *event);

/* What fstat() said of a file or folder a watcher keeps open. */
struct es_claim_hint_stat {
	dev_t dev;
	ino_t ino;
	nlink_t nlink;
	int64_t mtime_ns, ctime_ns;
	off_t size;
};

/* What a watcher last saw: the folder that holds the hint (state/) and the hint itself, each
 * kept open (-1: none; the hint may not exist yet), and what fstat() said of them. Start from
 * ES_CLAIM_HINT_SEEN_INIT; give it back with es_claim_hint_forget. */
struct es_claim_hint_seen {
	int known;
	int dir_fd, fd;
	struct es_claim_hint_stat dir, file;
};
#define ES_CLAIM_HINT_SEEN_INIT { 0, -1, -1, { 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0 } }

/* Has the hint been replaced since *seen? Two fstat() calls of what the watcher keeps open,
 * which a client that caches attributes with the server's invalidation (GlusterFS's md-cache)
 * answers without asking the server while nothing changed (a lookup of the hint's name would
 * ask it every second):
 *   - the folder state/: a replace renames a new file into it, which changes the folder's
 *     mtime and ctime. GlusterFS invalidates a folder's cached attributes on every client when
 *     an entry in it changes, but never a file's that the watching client created or replaced
 *     itself: a watcher that kept such a file open saw it unchanged for ever (the lost wake-ups
 *     of tests/e2e/test_dfs_hint.sh), so the folder is what a watcher relies on;
 *   - the hint kept open: a replace leaves the kept file without a link (or ESTALE on NFS,
 *     whose clients revalidate a file's attributes sooner than a folder's).
 * A watcher's own replace changes both, so it is news to itself too: one more read of the
 * locks, never a missed one. Then both are looked at again (the hint opened anew, no walk from
 * the boundary, O_NOFOLLOW). 1 when something changed (also the first look, and a look that
 * fails: the caller then reads the locks, which is always safe), 0 when nothing did. */
int es_claim_hint_changed(const struct es_manifest *m, struct es_claim_hint_seen *seen);
void es_claim_hint_forget(struct es_claim_hint_seen *seen);

/* The earliest time (es_time_mono) at which a running lock this claimer has watched would be
 * stale by its lease if it does not change (the observer's clock, as es_claim_lock_stale
 * judges); INFINITY when no watched lock has a lease. An idle worker reads the locks again then,
 * so that a dead owner's shard is taken over one lease after its lock was last seen changing. */
double es_claim_next_stale(const struct es_claimer *c);

/* Does the shard's done or failed record (kind) exist, as the file server answers an open? 1
 * yes, 0 no, negative on error. A lock's path comes from es_jobpath_lock (jobpath.h). */
int es_claim_marker_exists(const struct es_manifest *m, const char *kind, const char *shard_id);

#endif
