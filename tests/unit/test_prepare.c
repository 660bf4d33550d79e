/*
 * Unit tests of prepare's arithmetic: the automatic shard count at the edges of its inputs
 * (issue 35, item 5: 4 x ranks wrapped past UINT64_MAX and gave 1 shard where one rank less
 * gave one per row), and the split rule and shard ids at the largest counts; and
 * --bad-lines (issue 32): strict stops with a hint at skip, skip leaves bad lines out of the
 * shards and the normalized hash, counts all of them and lists the first ES_BAD_LINES_KEPT;
 * and the ranks' share of pass 1 (issue 30) through hooks that play the other ranks in this
 * process: the slices tile the ranges, the job is that of one thread, the first bad line in
 * input order is said, and counts that come back malformed fail the prepare.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/prepare.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static char *ROOT;

/* Prepare ROOT/<name> from a file of the given bytes: the result code, the manifest in *doc. */
static int prepare_text(const char *name, const char *text, int skip, struct es_prepare_result *res, cJSON **doc)
{
	char data[4096], recipe[4096], job[4096];
	snprintf(recipe, sizeof(recipe), "%s/recipe.yaml", ROOT);
	snprintf(data, sizeof(data), "%s/%s.jsonl", ROOT, name);
	snprintf(job, sizeof(job), "%s/%s", ROOT, name);
	FILE *f = fopen(recipe, "w");
	CHECK(f && fputs("executor_type: ray\nprocess:\n  - whitespace_normalization_mapper: {}\n", f) >= 0);
	CHECK(f && fclose(f) == 0);
	f = fopen(data, "w");
	CHECK(f && fputs(text, f) >= 0);
	CHECK(f && fclose(f) == 0);
	struct es_prepare_opts o;
	es_prepare_opts_init(&o);
	o.config = recipe;
	o.dataset_path = data;
	o.job_dir = job;
	o.num_shards = 1;
	o.quiet = 1;
	o.helper = ""; /* the naming convention: no Python started */
	o.processor.kind = ES_PROC_COMMAND;
	o.processor.command = "cp {input} {output}";
	o.skip_bad_lines = skip;
	memset(res, 0, sizeof(*res));
	es_log_quiet_begin();
	int rc = es_prepare_run(&o, res);
	es_log_quiet_end();
	free(res->job_dir);
	*doc = NULL;
	if (!rc) {
		char man[4200];
		snprintf(man, sizeof(man), "%s/manifest.json", job);
		CHECK_INT_EQ(es_json_load(man, doc), 0);
	}
	return rc;
}

static void test_bad_lines(void)
{
	struct es_prepare_result res;
	cJSON *clean, *doc;
	CHECK_INT_EQ(prepare_text("clean", "{\"a\": 1}\n{\"a\": 2}\n", 0, &res, &clean), 0);
	CHECK(!cJSON_GetObjectItem(clean, "bad_lines"));

	/* Strict: the trailing blank line stops prepare; the message names the option. */
	CHECK_INT_EQ(prepare_text("strict", "{\"a\": 1}\n{\"a\": 2}\n\n", 0, &res, &doc), ES_EINVAL);
	CHECK(strstr(es_last_error(), "Blank JSONL record at ") != NULL);
	CHECK(strstr(es_last_error(), "strict.jsonl:3 (--bad-lines skip leaves out") != NULL);

	/* Skip: the kept lines make the very job of the clean input (the normalized hash covers
	 * only them), the bad line and the blank one are counted and listed. */
	CHECK_INT_EQ(prepare_text("skip", "{\"a\": 1}\n[2]\n{\"a\": 2}\n \n", 1, &res, &doc), 0);
	CHECK_INT_EQ(res.rows, 2);
	CHECK_INT_EQ(res.bad_lines, 2);
	CHECK_STR_EQ(es_json_get_str(doc, "normalized_sha256"), es_json_get_str(clean, "normalized_sha256"));
	const cJSON *b = cJSON_GetObjectItem(doc, "bad_lines");
	int64_t v = -1;
	CHECK(!es_json_get_i64(b, "count", &v) && v == 2);
	CHECK_STR_EQ(es_json_get_str(b, "policy"), "skip");
	const cJSON *first = cJSON_GetObjectItem(b, "first");
	CHECK_INT_EQ(cJSON_GetArraySize(first), 2);
	CHECK(!es_json_get_i64(cJSON_GetArrayItem(first, 0), "line", &v) && v == 2);
	CHECK_STR_EQ(es_json_get_str(cJSON_GetArrayItem(first, 0), "reason"), "JSONL record must be an object");
	CHECK(!es_json_get_i64(cJSON_GetArrayItem(first, 1), "line", &v) && v == 4);
	CHECK_STR_EQ(es_json_get_str(cJSON_GetArrayItem(first, 1), "reason"), "Blank JSONL record");
	CHECK_STR_EQ(es_json_get_str(cJSON_GetArrayItem(first, 1), "relative_path"), "skip.jsonl");
	CHECK(!es_json_get_i64(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "files"), 0), "count", &v) && v == 2);
	struct es_manifest m;
	char job[4096];
	snprintf(job, sizeof(job), "%s/skip", ROOT);
	CHECK_INT_EQ(es_manifest_load(job, &m), 0);
	CHECK_INT_EQ(m.bad_lines, 2);
	CHECK_INT_EQ(m.total_rows, 2);
	es_manifest_free(&m);
	snprintf(job, sizeof(job), "%s/clean", ROOT);
	CHECK_INT_EQ(es_manifest_load(job, &m), 0);
	CHECK_INT_EQ(m.bad_lines, -1);
	es_manifest_free(&m);
	cJSON_Delete(doc);
	cJSON_Delete(clean);

	/* Past ES_BAD_LINES_KEPT: every line is counted, the first ones are listed. */
	size_t cap = 1000 + 12 * (ES_BAD_LINES_KEPT + 5);
	char *text = malloc(cap), *p = text;
	p += snprintf(p, cap, "{\"a\": 1}\n");
	for (int i = 0; i < ES_BAD_LINES_KEPT + 5; i++)
		p += snprintf(p, cap - (size_t)(p - text), "{\"a\": }\n");
	snprintf(p, cap - (size_t)(p - text), "{\"a\": 2}\n");
	CHECK_INT_EQ(prepare_text("many", text, 1, &res, &doc), 0);
	free(text);
	CHECK_INT_EQ(res.rows, 2);
	CHECK_INT_EQ(res.bad_lines, ES_BAD_LINES_KEPT + 5);
	b = cJSON_GetObjectItem(doc, "bad_lines");
	CHECK_INT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(b, "first")), ES_BAD_LINES_KEPT);
	CHECK(!es_json_get_i64(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "first"), ES_BAD_LINES_KEPT - 1), "line", &v) &&
	      v == ES_BAD_LINES_KEPT + 1);
	CHECK_STR_EQ(es_json_get_str(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "first"), 0), "reason"),
		     "Invalid JSON: Expecting value: column 7");
	cJSON_Delete(doc);
}

static void test_rank_slices(void)
{
	for (int size = 1; size <= 7; size++)
		for (size_t n = 0; n <= 40; n++) {
			size_t at = 0, lo, hi;
			for (int r = 0; r < size; r++) {
				es_prepare_rank_slice(n, size, r, &lo, &hi);
				CHECK(lo == at && hi >= lo);
				at = hi;
			}
			CHECK_INT_EQ(at, n);
			/* Rank 0 hashes and writes the shards too: never more than another rank. */
			es_prepare_rank_slice(n, size, 0, &lo, &hi);
			size_t lo1, hi1;
			es_prepare_rank_slice(n, size, size - 1, &lo1, &hi1);
			CHECK(size == 1 || hi - lo <= hi1 - lo1);
		}
	size_t n;
	es_log_quiet_begin();
	CHECK(es_prepare_plan_check("not a plan", 10, &n) != 0);
	es_log_quiet_end();
}

/* The other ranks of a `run`, played in this process: at the share, each reads its slice at
 * once; at the gather, their counts follow this rank's (cut short when broken). */
struct fake_ranks {
	int size, broken;
	struct es_buf others;
};

static int fake_share(void *arg, const void *plan, size_t len, size_t n, size_t *lo, size_t *hi)
{
	struct fake_ranks *f = arg;
	size_t seen;
	if (es_prepare_plan_check(plan, len, &seen) || seen != n)
		return es_error(ES_EINTERNAL, "the fake ranks cannot read the plan");
	es_buf_reset(&f->others);
	for (int r = 1; r < f->size; r++) {
		struct es_buf c = ES_BUF_INIT;
		CHECK_INT_EQ(es_prepare_ranges_run(plan, len, r, f->size, 2, &c), 0);
		CHECK_INT_EQ(es_buf_add(&f->others, c.data, c.len - (f->broken && c.len ? 1 : 0)), 0);
		es_buf_free(&c);
	}
	es_prepare_rank_slice(n, f->size, 0, lo, hi);
	return 0;
}

static int fake_gather(void *arg, const void *mine, size_t len, struct es_buf *all)
{
	struct fake_ranks *f = arg;
	es_buf_reset(all);
	int rc = es_buf_add(all, mine, len);
	return rc ? rc : es_buf_add(all, f->others.data, f->others.len);
}

/* Prepare data (the file at ROOT/<name>.jsonl) into ROOT/<name>-<tag>, with ranks (f) or on one
 * thread; the manifest, less created_at, into *man. */
static int prepare_ranked(const char *name, const char *tag, struct fake_ranks *f, char **man)
{
	char data[4096], job[4096], path[4200];
	snprintf(data, sizeof(data), "%s/%s.jsonl", ROOT, name);
	snprintf(job, sizeof(job), "%s/%s-%s", ROOT, name, tag);
	struct es_prepare_ranks ranks = { f ? f->size : 0, fake_share, fake_gather, f };
	struct es_prepare_opts o;
	es_prepare_opts_init(&o);
	o.dataset_path = data;
	o.job_dir = job;
	o.num_shards = 3;
	o.quiet = 1;
	o.processor.kind = ES_PROC_COMMAND;
	o.processor.command = "cp {input} {output}";
	o.threads = f ? 2 : 1;
	o.ranks = f ? &ranks : NULL;
	struct es_prepare_result res;
	es_log_quiet_begin();
	int rc = es_prepare_run(&o, &res);
	es_log_quiet_end();
	free(res.job_dir);
	*man = NULL;
	cJSON *doc = NULL;
	snprintf(path, sizeof(path), "%s/manifest.json", job);
	if (!rc && CHECK_INT_EQ(es_json_load(path, &doc), 0)) {
		cJSON_DeleteItemFromObject(doc, "created_at");
		cJSON_DeleteItemFromObject(doc, "job_id"); /* the folder's name */
		*man = cJSON_PrintUnformatted(doc);
	}
	cJSON_Delete(doc);
	snprintf(path, sizeof(path), "%s/.ranks-probe", job);
	CHECK(access(path, F_OK) != 0); /* the probe served the share and is gone */
	return rc;
}

static void write_rows(const char *name, long bad1, long bad2)
{
	char data[4096];
	snprintf(data, sizeof(data), "%s/%s.jsonl", ROOT, name);
	FILE *f = fopen(data, "w");
	for (long i = 1; f && i <= 400; i++)
		fprintf(f, i == bad1 || i == bad2 ? "{\"broken\": \n" : "{\"id\": %ld, \"text\": \"%.*s\"}\r\n", i,
			(int)(i % 37), "abcdefghijklmnopqrstuvwxyz0123456789-");
	CHECK(f && fclose(f) == 0);
}

static void test_ranks(void)
{
	/* Tiny ranges (a test build), so that every fake rank reads some. */
	setenv("ESHARD_TEST_RANGE_BYTES", "300", 1);
	struct fake_ranks f = { 3, 0, ES_BUF_INIT };
	char *one, *ranked;
	write_rows("rows", 0, 0);
	CHECK_INT_EQ(prepare_ranked("rows", "t1", NULL, &one), 0);
	CHECK_INT_EQ(prepare_ranked("rows", "r3", &f, &ranked), 0);
	CHECK(one && ranked && !strcmp(one, ranked));
	for (int i = 1; i <= 3; i++) {
		char a[4200], b[4200];
		snprintf(a, sizeof(a), "%s/rows-t1/shards/part-0000%d-of-00003.jsonl", ROOT, i - 1);
		snprintf(b, sizeof(b), "%s/rows-r3/shards/part-0000%d-of-00003.jsonl", ROOT, i - 1);
		struct es_buf x = ES_BUF_INIT, y = ES_BUF_INIT;
		CHECK(!es_fs_read_file(a, &x, 0) && !es_fs_read_file(b, &y, 0) && x.len && !strcmp(x.data, y.data));
		es_buf_free(&x);
		es_buf_free(&y);
	}
	free(one);
	free(ranked);

	/* A bad line in the first range and one in the last (another rank's): the first is said. */
	write_rows("bad", 2, 399);
	CHECK_INT_EQ(prepare_ranked("bad", "t1", NULL, &one), ES_EINVAL);
	char said[1024];
	snprintf(said, sizeof(said), "%s", es_last_error());
	CHECK(strstr(said, "bad.jsonl:2: ") != NULL);
	CHECK_INT_EQ(prepare_ranked("bad", "r3", &f, &ranked), ES_EINVAL);
	CHECK_STR_EQ(es_last_error(), said);

	/* Counts that come back cut short: prepare fails, and says so. */
	f.broken = 1;
	CHECK_INT_EQ(prepare_ranked("rows", "broken", &f, &ranked), ES_EINTERNAL);
	CHECK(strstr(es_last_error(), "came malformed or incomplete from the other ranks") != NULL);
	char job[4200];
	snprintf(job, sizeof(job), "%s/rows-broken", ROOT);
	CHECK(access(job, F_OK) != 0);
	es_buf_free(&f.others);
	unsetenv("ESHARD_TEST_RANGE_BYTES");
}

int main(void)
{
	ROOT = test_tmpdir();
	test_auto_shards();
	test_split_and_ids();
	test_bad_lines();
	test_rank_slices();
	test_ranks();
	return test_done();
}
