/* manifest: the reader checks of docs/job-folder.md#manifest and the safety of shard ids and
 * paths. */
#include "testlib.h"

#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/number.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int last_unsharded = -1; /* m.unsharded of the last good load */

/* Load json as the manifest of t/name; the policy it gave into *pol when pol is not NULL. */
static int load_policy_with(const char *t, const char *name, const char *json, struct es_policy *pol)
{
	char dir[4096], p[4200];
	snprintf(dir, sizeof(dir), "%s/%s", t, name);
	es_fs_mkdirs(dir, 0755);
	snprintf(p, sizeof(p), "%s/manifest.json", dir);
	es_fs_write_atomic(p, json, strlen(json));
	struct es_manifest m;
	es_log_quiet_begin();
	int rc = es_manifest_load(dir, &m);
	es_log_quiet_end();
	if (!rc && pol)
		*pol = m.policy;
	if (!rc) {
		last_unsharded = m.unsharded;
		es_manifest_free(&m);
	}
	return rc;
}

static int load_with(const char *t, const char *name, const char *json)
{
	return load_policy_with(t, name, json, NULL);
}

#define OK_EXEC "\"execution\": {\"executor_type\": \"ray\", \"ray_address\": \"local\"}"
#define ONE_SHARD "\"shards\": [{\"id\": \"a\", \"path\": \"shards/a.jsonl\"}]"

/* Policy numbers out of int64's range (fuzz_manifest found the cast of 1e300 undefined):
 * clamped, as "no limit"; a float is truncated like the reference's int(); NaN is refused. */
static void policy_numbers(const char *t)
{
	struct es_policy p;
	memset(&p, 0, sizeof(p));
	CHECK_INT_EQ(load_policy_with(t, "pol-big", "{\"schema_version\": 2, " OK_EXEC ", " ONE_SHARD ", \"policy\": "
				      "{\"lock_timeout_secs\": 1e300, \"max_retries\": -1e300, \"poll_interval_secs\": Infinity}}", &p), 0);
	CHECK(p.lock_timeout_secs == INT64_MAX);
	CHECK(p.max_retries == INT64_MIN);
	CHECK(p.poll_interval_secs == INT64_MAX);
	CHECK_INT_EQ(load_policy_with(t, "pol-float", "{\"schema_version\": 2, " OK_EXEC ", " ONE_SHARD ", \"policy\": "
				      "{\"lock_timeout_secs\": 2.9, \"max_retries\": -2.9, \"poll_interval_secs\": 9223372036854775807}}", &p), 0);
	CHECK_INT_EQ(p.lock_timeout_secs, 2);
	CHECK_INT_EQ(p.max_retries, -2);
	CHECK(p.poll_interval_secs == INT64_MAX);
	CHECK_INT_EQ(load_with(t, "pol-nan", "{\"schema_version\": 2, " OK_EXEC ", " ONE_SHARD ", \"policy\": {\"max_retries\": NaN}}"),
		     ES_EINVAL);
	CHECK(strstr(es_last_error(), "Manifest policy.max_retries is not a number (NaN)") != NULL);
	CHECK(es_i64_of_double(0x1p63) == INT64_MAX);
	CHECK(es_i64_of_double(-0x1p63) == INT64_MIN);
	CHECK(es_i64_of_double(-0x1p63 - 4096) == INT64_MIN);
	CHECK_INT_EQ(es_i64_of_double(-7.5), -7);
}

/* A link planted among the shards' folders is refused by a load that lists attempts/, and not
 * looked for by one told it was done before (run's workers, after rank 0's prepare): that load
 * succeeds, so it did not list attempts/ (the writes and reads that follow refuse the link). */
static void attempts_checked(const char *t)
{
	char dir[4096], p[4200], q[4200];
	snprintf(dir, sizeof(dir), "%s/linked", t);
	CHECK_INT_EQ(load_with(t, "linked", "{\"schema_version\": 2, " OK_EXEC ", " ONE_SHARD "}"), 0);
	snprintf(p, sizeof(p), "%s/attempts", dir);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/attempts/a", dir);
	snprintf(q, sizeof(q), "%s/elsewhere", t);
	CHECK_INT_EQ(es_fs_mkdirs(q, 0755), 0);
	CHECK_INT_EQ(symlink(q, p), 0);
	struct es_manifest m;
	es_log_quiet_begin();
	CHECK_INT_EQ(es_manifest_load(dir, &m), ES_EINVAL);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "is a symbolic link") != NULL);
	if (CHECK_INT_EQ(es_manifest_load_ex(dir, ES_MANIFEST_ATTEMPTS_CHECKED, &m), 0))
		es_manifest_free(&m);
}

int main(void)
{
	char *t = test_tmpdir();
	CHECK_INT_EQ(load_with(t, "good", "{\"schema_version\": 2, " OK_EXEC ", \"shards\": [{\"id\": \"part-00000-of-00001\", "
				 "\"index\": 0, \"path\": \"shards/part-00000-of-00001.jsonl\", \"rows\": 1}]}"), 0);
	CHECK_INT_EQ(last_unsharded, 0);
	/* The extra field of --allow-unsharded (an object); anything else is not it. */
	CHECK_INT_EQ(load_with(t, "unsharded", "{\"schema_version\": 2, " OK_EXEC ", \"unsharded\": {\"reasons\": [\"x\"]}, "
				 "\"shards\": [{\"id\": \"part-00000-of-00001\", \"index\": 0, \"path\": \"shards/part-00000-of-00001.jsonl\"}]}"), 0);
	CHECK_INT_EQ(last_unsharded, 1);
	CHECK_INT_EQ(load_with(t, "unsharded-true", "{\"schema_version\": 2, " OK_EXEC ", \"unsharded\": true, "
				 "\"shards\": [{\"id\": \"part-00000-of-00001\", \"index\": 0, \"path\": \"shards/part-00000-of-00001.jsonl\"}]}"), 0);
	CHECK_INT_EQ(last_unsharded, 0);
	CHECK_INT_EQ(load_with(t, "schema3", "{\"schema_version\": 3, " OK_EXEC ", \"shards\": [{\"id\": \"a\", \"path\": \"shards/a.jsonl\"}]}"), ES_EINVAL);
	CHECK(strstr(es_last_error(), "schema_version") != NULL);
	CHECK_INT_EQ(load_with(t, "noshards", "{\"schema_version\": 2, " OK_EXEC ", \"shards\": []}"), ES_EINVAL);
	CHECK_INT_EQ(load_with(t, "noray", "{\"schema_version\": 2, \"execution\": {\"executor_type\": \"default\", \"ray_address\": \"local\"}, "
				   "\"shards\": [{\"id\": \"a\", \"path\": \"shards/a.jsonl\"}]}"), ES_EINVAL);
	static const char *const bad_paths[] = { "/etc/passwd", "../x.jsonl", "shards/../../x.jsonl", "..", "" };
	for (size_t i = 0; i < sizeof(bad_paths) / sizeof(bad_paths[0]); i++) {
		char json[512], name[32];
		snprintf(name, sizeof(name), "badpath%zu", i);
		snprintf(json, sizeof(json), "{\"schema_version\": 2, " OK_EXEC ", \"shards\": [{\"id\": \"a\", \"path\": \"%s\"}]}", bad_paths[i]);
		CHECK_INT_EQ(load_with(t, name, json), ES_EINVAL);
	}
	static const char *const bad_ids[] = { "../a", "a/b", ".", "..", "" };
	for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
		char json[512], name[32];
		snprintf(name, sizeof(name), "badid%zu", i);
		snprintf(json, sizeof(json), "{\"schema_version\": 2, " OK_EXEC ", \"shards\": [{\"id\": \"%s\", \"path\": \"shards/a.jsonl\"}]}", bad_ids[i]);
		CHECK_INT_EQ(load_with(t, name, json), ES_EINVAL);
	}
	policy_numbers(t);
	attempts_checked(t);
	struct es_manifest m;
	es_log_quiet_begin();
	CHECK_INT_EQ(es_manifest_load("/nonexistent/job", &m), ES_ENOENT);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "manifest") != NULL);
	return test_done();
}
