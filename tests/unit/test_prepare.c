/*
 * Unit tests of prepare's arithmetic: the automatic shard count at the edges of its inputs
 * (issue 35, item 5: 4 x ranks wrapped past UINT64_MAX and gave 1 shard where one rank less
 * gave one per row), and the split rule and shard ids at the largest counts; and
 * --bad-lines (issue 32): strict stops with a hint at skip, skip leaves bad lines out of the
 * shards and the normalized hash, counts all of them and lists the first ES_BAD_LINES_KEPT.
 */
#include "testlib.h"

#include "eshard/log.h"
#include "eshard/prepare.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
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

int main(void)
{
	ROOT = test_tmpdir();
	test_auto_shards();
	test_split_and_ids();
	test_bad_lines();
	return test_done();
}
