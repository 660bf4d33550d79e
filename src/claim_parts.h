/*
 * claim_parts: what the files of module claim share, private to them.
 *
 * claim.c holds the lock file itself (reading, holding, the lease rule, the claim, heartbeat
 * and release), claim_fence.c the terminal fences (publish, repair, the records a fence stands
 * for), claim_takeover.c the stale takeover and claim_backup.c the backup attempts. They are
 * one module cut into files only to keep each short: nothing outside them includes this.
 */
#ifndef ESHARD_CLAIM_PARTS_H
#define ESHARD_CLAIM_PARTS_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "eshard/buf.h"
#include "eshard/claim.h"
#include "json.h"

struct es_lease_obs {
	int valid;
	dev_t dev;
	ino_t ino;
	int64_t mtime_ns;
	uint64_t content_hash;
	double since_mono;   /* when this exact state was first seen */
	/* The shard is terminal (its fence was seen, or written by us). Done fences are final
	 * (retry refuses done shards, nothing removes them) and a failed one goes only by retry,
	 * which no worker runs alongside: es_claim_try need not look again. Without this, a
	 * worker scanning from the first shard made one open() per finished shard for every
	 * claim, O(shards^2) in all, and on NFS each of them is a round trip. */
	int terminal;
	/* What the last look showed, for the backup rule (es_claim_seen). */
	int running;
	double claimed_at_epoch;
	double done_secs;
	char host[256];
	char token[33];
	double running_seen_mono; /* when a live running lock was last seen here (es_claim_seen) */
	double lease;        /* the lease that applies to the observed lock (es_claim_lease_of) */
	int done;            /* terminal by a done fence this claimer read or wrote (es_claim_seen) */
	/* A listing of state/done showed the shard's record (es_claim_learn_done): it is done and
	 * es_claim_try does not read its lock; its fence is not known (es_claim_repair reads it). */
	int listed_done;
};

/* claim.c: the lock file. */
int es_claim_open_lock(const char *path, int flags, int *fd);
int es_claim_same_file(int fd, const char *path, struct stat *fst);
int es_claim_lock_info_fd(int fd, const char *path, struct es_lock_info *li, cJSON **doc);
int es_claim_lock_owned(const char *lock_path, const char *token, int nonblock, int *fd_out, cJSON **doc);
void es_claim_unlock_close(int fd);
cJSON *es_claim_lock_doc(const struct es_claimer *c, const char *shard_id);
int es_claim_make_attempt(struct es_claimer *c, size_t i, cJSON *l);
/* Under the flock of the lock held open as fd (at lock_path, with token), before it is moved or
 * removed by its name (action: "takeover", "release"): the exclusive create of its marker
 * state/lock_ends/<id>.<token> makes this process the one that ends it. A name may lead,
 * through this client's cache, to a lock that another client has moved already, while the file
 * server's name leads to a newer lock, which a rename or unlink by name would hit; whoever moved
 * it made the marker first. When the marker exists, its maker held this flock then and ends the
 * lock before giving the flock back, so it has finished or died: a listing of the locks folder
 * (es_fs_listed_ino) tells which. 0: ours to end; 1: ended by another; negative: error. */
int es_claim_end_lock(const struct es_manifest *m, const char *id, int fd, const char *lock_path, const char *token,
		      const char *action);
/* c->attempt_rel from c->attempt_number and c->token; a name that does not fit is an error. */
int es_claim_set_attempt_rel(struct es_claimer *c, const char *id);

/* claim_fence.c: terminal fences and the records they stand for. */
int es_claim_inside_job(const struct es_manifest *m, const char *rel, struct es_buf *out);
void es_claim_mark_recovered(const struct es_manifest *m, const char *ad, const char *state,
			     const char *record, size_t len);
int es_claim_rewrite_lock(int fd, const char *lock_path, const cJSON *doc, const char *crash_point);
/* After a fence was written for a record its dead publisher left (repair, takeover): remove
 * the record's second names that publisher left in state/<kind> (es_fs_sweep_links_of). */
void es_claim_sweep_record_links(const struct es_manifest *m, const char *kind, const char *id);
/* Under the flock of a lock whose holder is dead (a takeover, a repair): remove the temporaries
 * of the shard's records that it made (maker, the lock's), at any age, and the others once
 * they are lease_secs old or their maker is gone. */
void es_claim_sweep_record_temps(const struct es_manifest *m, const char *id, double lease_secs, const char *maker);
int es_claim_write_fence(int fd, const char *lock_path, cJSON *doc, const char *id, const char *state,
			 const char *record, size_t record_len);
char *es_claim_record_text(const struct es_manifest *m, const char *state, const char *id, size_t *len);
int es_claim_visible_record(const struct es_manifest *m, const char *id, const char **state);
int es_claim_fence_if_recorded(struct es_claimer *c, size_t i, const char *lock_path);

/* claim_takeover.c: the lease rule as one claimer observes it, and the stale takeover. */
int es_claim_observe(struct es_claimer *c, size_t i, const struct es_lock_info *li);
int es_claim_try_takeover(struct es_claimer *c, size_t i, const char *lock_path);

/* claim_backup.c: whether a backup carries a dead primary's shard. */
int es_claim_backup_alive(const struct es_claimer *c, const char *id, const char *token);

#endif
