/*
 * backup: which running shard deserves a backup attempt (speculative execution, README
 * "Failure handling"). The mechanics (marker, attempt, publication, the primary's yield) are in claim.h;
 * this is the rule alone, a pure function of what a claimer saw, so it can be tested alone.
 *
 * The rule. A worker that found nothing to claim (no pending or stale shard) looks at the
 * running shards. The reference duration is the median claim-to-fence time of the done shards
 * it has seen (at least one is needed). A running shard is overdue when its age (now minus its
 * claim time, both wall clocks: clock skew between nodes shifts the age by the skew) is more
 * than factor times that median and more than min_extra_secs beyond it: the factor keeps
 * shards that are merely a little slow from being run twice, the floor keeps jobs of very
 * short shards, whose durations are mostly noise, from churning. The most overdue shard (the
 * oldest) is backed up first; a shard whose primary attempt has a backup already, or that this
 * worker tried, is skipped (skip[]). In strict mode (keep_hosts), a shard is backed up only
 * when its owner host has completed another shard, so that a backup that wins never leaves a
 * node without a shard of its own.
 */
#ifndef ESHARD_BACKUP_H
#define ESHARD_BACKUP_H

#include <stddef.h>

#include "eshard/claim.h"

#define ES_BACKUP_FACTOR 2.0
#define ES_BACKUP_MIN_EXTRA_SECS 2.0

struct es_backup_rule {
	double factor;          /* <= 0: ES_BACKUP_FACTOR */
	double min_extra_secs;  /* < 0: ES_BACKUP_MIN_EXTRA_SECS */
	int keep_hosts;         /* strict mode */
};

struct es_backup_choice {
	double median_secs;     /* of the done shards seen */
	double age_secs;        /* of the chosen shard's primary attempt */
	double threshold_secs;  /* the age past which a shard is overdue */
	size_t done_seen;
	double next_due_secs;   /* when none is overdue: how soon the first running one will be (-1: never) */
};

/* The index of the shard to back up, or -1 when none is overdue (ch filled either way when
 * not NULL; median_secs -1 when no done shard was seen). skip may be NULL. */
long es_backup_choose(const struct es_claim_seen *seen, size_t n, const unsigned char *skip, double now_epoch,
		      const struct es_backup_rule *rule, struct es_backup_choice *ch);

#endif
