/*
 * Unit tests of prepare's arithmetic: the automatic shard count at the edges of its inputs
 * (issue 35, item 5: 4 x ranks wrapped past UINT64_MAX and gave 1 shard where one rank less
 * gave one per row), and the split rule and shard ids at the largest counts.
 */
#include "testlib.h"

#include "eshard/prepare.h"

#include <string.h>

#define MIB ((uint64_t)1 << 20)

static void test_auto_shards(void)
{
	/* The rule: max(4 x ranks, ceil(bytes / target)), at most the rows, at least 1. */
	CHECK_INT_EQ(es_prepare_auto_shards(2600000, 6000, 3, 0), 12);
	CHECK_INT_EQ(es_prepare_auto_shards(2600000, 6000, 0, MIB), 3);
	CHECK_INT_EQ(es_prepare_auto_shards(2 * MIB, 6000, 0, MIB), 2);
	CHECK_INT_EQ(es_prepare_auto_shards(2 * MIB + 1, 6000, 0, MIB), 3);
	CHECK_INT_EQ(es_prepare_auto_shards(2600000, 2, 4, 0), 2);
	CHECK_INT_EQ(es_prepare_auto_shards(0, 0, 0, 0), 1);
	CHECK_INT_EQ(es_prepare_auto_shards(10, 5, -3, -1), 1);
	/* Ranks whose 4 x passes UINT64_MAX ask for more shards than any input has rows: the
	 * rows, as for one rank less, never the wrapped product. */
	CHECK_INT_EQ(es_prepare_auto_shards(2600000, 5000, (int64_t)1 << 62, 0), 5000);
	CHECK_INT_EQ(es_prepare_auto_shards(2600000, 5000, ((int64_t)1 << 62) - 1, 0), 5000);
	CHECK_INT_EQ(es_prepare_auto_shards(2600000, 5000, ((int64_t)1 << 62) + 1, 0), 5000);
	CHECK_INT_EQ(es_prepare_auto_shards(2600000, 5000, INT64_MAX, 0), 5000);
	CHECK(es_prepare_auto_shards(1, UINT64_MAX, INT64_MAX, 0) == UINT64_MAX);
	CHECK(es_prepare_auto_shards(1, UINT64_MAX, ((int64_t)1 << 62) - 1, 0) == UINT64_MAX - 3);
	/* The size rule at its edges: a target of 1 byte, the largest target. */
	CHECK(es_prepare_auto_shards(UINT64_MAX, UINT64_MAX, 0, 1) == UINT64_MAX);
	CHECK_INT_EQ(es_prepare_auto_shards(UINT64_MAX, 10, 0, INT64_MAX), 3);
	CHECK_INT_EQ(es_prepare_auto_shards(UINT64_MAX, 10, 1, INT64_MAX), 4);
}

static void test_split_and_ids(void)
{
	char id[64];
	/* Shard k ends once the bytes written reach (k + 1) / n of the total (128-bit products). */
	CHECK(es_prepare_split_after(UINT64_MAX / 2 + 1, 1, UINT64_MAX, UINT64_MAX, 2, 0));
	CHECK(!es_prepare_split_after(UINT64_MAX / 2, 1, UINT64_MAX, UINT64_MAX, 2, 0));
	CHECK(!es_prepare_split_after(UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, 2, 1)); /* the last shard */
	CHECK_INT_EQ(es_prepare_shard_id(7, 16, id, sizeof(id)), 0);
	CHECK_STR_EQ(id, "part-00007-of-00016");
	CHECK_INT_EQ(es_prepare_shard_id(UINT64_MAX - 1, UINT64_MAX, id, sizeof(id)), 0);
	CHECK_STR_EQ(id, "part-18446744073709551614-of-18446744073709551615");
}

int main(void)
{
	test_auto_shards();
	test_split_and_ids();
	return test_done();
}
