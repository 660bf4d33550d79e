/*
 * Unit tests of backup: the rule that picks the shard for a backup attempt (backup.h): the
 * median of the done shards seen, the factor and the floor, the oldest overdue shard first,
 * skipped shards, strict mode's host rule, and how soon the next one is due.
 */
#include "testlib.h"

#include "eshard/backup.h"

#include <string.h>

#define NOW 1000000.0

static struct es_claim_seen done(double secs, const char *host)
{
	return (struct es_claim_seen){ 1, 0, -1, secs, host, "", -1 };
}

static struct es_claim_seen running(double age, const char *host, const char *token)
{
	return (struct es_claim_seen){ 0, 1, NOW - age, -1, host, token, 0 };
}

static void test_rule(void)
{
	struct es_backup_choice ch;
	struct es_backup_rule r = { 0, -1, 0 };
	/* No done shard seen: no reference duration, no backup. */
	struct es_claim_seen a[] = { running(100, "n2", "t1"), running(5, "n2", "t2") };
	CHECK_INT_EQ(es_backup_choose(a, 2, NULL, NOW, &r, &ch), -1);
	CHECK(ch.median_secs < 0);
	CHECK_INT_EQ((int)ch.done_seen, 0);

	/* Median 1 s: overdue past max(2 x 1, 1 + 2) = 3 s. */
	struct es_claim_seen b[] = { done(1, "n1"), running(2.9, "n2", "t1"), done(0.5, "n1"), done(4, "n1") };
	CHECK_INT_EQ(es_backup_choose(b, 4, NULL, NOW, &r, &ch), -1);
	CHECK(ch.median_secs == 1);
	CHECK(ch.threshold_secs == 3);
	CHECK(ch.next_due_secs > 0.09 && ch.next_due_secs < 0.11);
	b[1] = running(3.5, "n2", "t1");
	CHECK_INT_EQ(es_backup_choose(b, 4, NULL, NOW, &r, &ch), 1);
	CHECK(ch.age_secs > 3.49 && ch.age_secs < 3.51);

	/* Long shards: the factor decides (median 100 s: 200 s, not 102 s). Even count: the mean
	 * of the middle two. */
	struct es_claim_seen c[] = { done(90, "n1"), done(110, "n1"), running(150, "n2", "t1"), running(210, "n3", "t2"),
				     running(250, "n3", "t3") };
	CHECK_INT_EQ(es_backup_choose(c, 5, NULL, NOW, &r, &ch), 4); /* the oldest */
	CHECK(ch.median_secs == 100);
	CHECK(ch.threshold_secs == 200);
	unsigned char skip[5] = { 0, 0, 0, 0, 1 };
	CHECK_INT_EQ(es_backup_choose(c, 5, skip, NOW, &r, &ch), 3); /* the oldest not skipped */
	skip[3] = 1;
	CHECK_INT_EQ(es_backup_choose(c, 5, skip, NOW, &r, &ch), -1);
	CHECK(ch.next_due_secs > 49.9 && ch.next_due_secs < 50.1); /* shard 2, at 200 s */

	/* Explicit factor and floor. */
	struct es_backup_rule r2 = { 1.5, 0, 0 };
	CHECK_INT_EQ(es_backup_choose(c, 5, NULL, NOW, &r2, &ch), 4);
	CHECK(ch.threshold_secs == 150);

	/* Strict mode: only a shard whose host completed another one. */
	struct es_backup_rule strict = { 0, -1, 1 };
	struct es_claim_seen d[] = { done(1, "n1"), running(60, "n2", "t1"), running(30, "n1", "t2") };
	CHECK_INT_EQ(es_backup_choose(d, 3, NULL, NOW, &r, &ch), 1);
	CHECK_INT_EQ(es_backup_choose(d, 3, NULL, NOW, &strict, &ch), 2);
	d[0] = done(1, "n3");
	CHECK_INT_EQ(es_backup_choose(d, 3, NULL, NOW, &strict, &ch), -1);

	/* A running lock without a claim time or token is never chosen. */
	struct es_claim_seen e[] = { done(1, "n1"), { 0, 1, -1, -1, "n2", "t", 0 }, { 0, 1, NOW - 50, -1, "n2", "", 0 } };
	CHECK_INT_EQ(es_backup_choose(e, 3, NULL, NOW, &r, &ch), -1);
	CHECK_INT_EQ(es_backup_choose(NULL, 0, NULL, NOW, &r, &ch), -1);
}

int main(void)
{
	test_rule();
	return test_done();
}
