#include "eshard/backup.h"

#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* 1 when host completed one of the done shards seen (the distinct hosts are few). */
static int host_has_done(const char *const *hosts, size_t n_hosts, const char *host)
{
	for (size_t k = 0; k < n_hosts; k++)
		if (!strcmp(hosts[k], host))
			return 1;
	return 0;
}

long es_backup_choose(const struct es_claim_seen *seen, size_t n, const unsigned char *skip, double now_epoch,
		      const struct es_backup_rule *rule, struct es_backup_choice *ch)
{
	struct es_backup_choice local;
	if (!ch)
		ch = &local;
	memset(ch, 0, sizeof(*ch));
	ch->median_secs = ch->next_due_secs = -1;
	double factor = rule && rule->factor > 0 ? rule->factor : ES_BACKUP_FACTOR;
	double extra = rule && rule->min_extra_secs >= 0 ? rule->min_extra_secs : ES_BACKUP_MIN_EXTRA_SECS;
	double *d = malloc((n ? n : 1) * sizeof(*d));
	const char **hosts = malloc((n ? n : 1) * sizeof(*hosts));
	size_t nd = 0, nh = 0;
	long best = -1;
	if (!d || !hosts)
		goto out;
	int any_running = 0;
	for (size_t i = 0; i < n; i++) {
		const struct es_claim_seen *s = &seen[i];
		any_running |= s->running;
		if (!s->terminal || s->done_secs < 0)
			continue;
		d[nd++] = s->done_secs;
		if (rule && rule->keep_hosts && s->host && *s->host && !host_has_done(hosts, nh, s->host))
			hosts[nh++] = s->host;
	}
	ch->done_seen = nd;
	if (!nd || !any_running)
		goto out;
	qsort(d, nd, sizeof(*d), cmp_double);
	double med = nd % 2 ? d[nd / 2] : (d[nd / 2 - 1] + d[nd / 2]) / 2;
	double thr = factor * med > med + extra ? factor * med : med + extra;
	ch->median_secs = med;
	ch->threshold_secs = thr;
	double best_age = 0;
	for (size_t i = 0; i < n; i++) {
		const struct es_claim_seen *s = &seen[i];
		if (!s->running || s->claimed_at_epoch < 0 || (skip && skip[i]) || !s->token || !*s->token)
			continue;
		if (rule && rule->keep_hosts && !(s->host && host_has_done(hosts, nh, s->host)))
			continue;
		double age = now_epoch - s->claimed_at_epoch;
		if (age <= thr) {
			if (ch->next_due_secs < 0 || thr - age < ch->next_due_secs)
				ch->next_due_secs = thr - age;
			continue;
		}
		if (best >= 0 && age <= best_age)
			continue;
		best = (long)i;
		best_age = age;
	}
	ch->age_secs = best >= 0 ? best_age : 0;
out:
	free(d);
	free(hosts);
	return best;
}
