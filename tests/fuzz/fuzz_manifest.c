/*
 * libFuzzer target: the manifest reader (src/manifest.c, es_manifest_load()) and the metadata
 * JSON reader and writer under it (src/json.c), on the bytes of a job folder's manifest.json.
 *
 * Properties:
 * - es_manifest_load() returns 0 or a documented ES_E* code, and on success every shard has a
 *   plain id and a path that stays in the job folder (what workers rely on), the policy is
 *   usable, and es_manifest_find() finds each shard at or before its own index;
 * - what es_json_parse() reads, es_json_dump() writes (both forms), and the dump reads back
 *   and dumps to the same bytes (the writer emits only what the reader takes).
 */
#include "fuzzlib.h"

#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "json.h"

#include <string.h>

static char job[512], manifest[600];

static void setup(void)
{
	snprintf(job, sizeof(job), "%s/job", fuzz_scratch());
	snprintf(manifest, sizeof(manifest), "%s/manifest.json", job);
	fuzz_mkdirs(job);
	es_log_quiet_begin();
}

static void check_manifest(const struct es_manifest *m)
{
	FUZZ_CHECK(m->n_shards > 0 && m->shards && m->job_dir && m->job_id);
	FUZZ_CHECK(m->executor_type && !strcmp(m->executor_type, "ray") && m->ray_address && *m->ray_address);
	FUZZ_CHECK(m->policy.heartbeat_secs > 0 && m->policy.lease_secs > 0);
	FUZZ_CHECK(m->processor.kind != ES_PROC_COMMAND || (m->processor.command && *m->processor.command));
	for (size_t i = 0; i < m->n_shards; i++) {
		const struct es_shard *s = &m->shards[i];
		FUZZ_CHECK(s->id && *s->id && !strchr(s->id, '/') && strcmp(s->id, ".") && strcmp(s->id, ".."));
		FUZZ_CHECK(s->path && *s->path && s->path[0] != '/' && strncmp(s->path, "../", 3) &&
			   !strstr(s->path, "/../") && strcmp(s->path, ".."));
		FUZZ_CHECK(strlen(s->sha256) < sizeof(s->sha256));
		long at = es_manifest_find(m, s->id);
		FUZZ_CHECK(at >= 0 && (size_t)at <= i);
	}
	for (size_t i = 0; i < m->n_inputs; i++)
		FUZZ_CHECK(strlen(m->inputs[i].sha256) < sizeof(m->inputs[i].sha256));
}

static void json_round_trip(const uint8_t *data, size_t size)
{
	cJSON *doc = es_json_parse((const char *)data, size, "fuzz.json");
	if (!doc)
		return;
	for (int pretty = 0; pretty <= 1; pretty++) {
		struct es_buf a = ES_BUF_INIT, b = ES_BUF_INIT;
		FUZZ_CHECK(es_json_dump(doc, pretty, &a) == 0);
		cJSON *back = es_json_parse(a.data, a.len, "dumped.json");
		FUZZ_CHECK(back != NULL);
		FUZZ_CHECK(es_json_dump(back, pretty, &b) == 0);
		FUZZ_CHECK(a.len == b.len && !memcmp(a.data, b.data, a.len));
		cJSON_Delete(back);
		es_buf_free(&a);
		es_buf_free(&b);
	}
	cJSON_Delete(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!job[0])
		setup();
	fuzz_write(manifest, data, size);
	struct es_manifest m;
	int rc = es_manifest_load(job, &m);
	FUZZ_CHECK(rc == 0 || rc == ES_EINVAL || rc == ES_ENOMEM || rc == ES_EIO);
	if (rc == 0) {
		check_manifest(&m);
		es_manifest_free(&m);
	}
	json_round_trip(data, size);
	return 0;
}
