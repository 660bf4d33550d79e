/*
 * libFuzzer target: the done and failed record readers (src/record.c): es_record_load() of a
 * record file, and of a lock that is a terminal fence with the record's copy (what a reader
 * uses when it cannot see the record yet), then es_record_check_done() of what loaded.
 *
 * The input is used twice: as state/done/<id>.json, loaded as a done record; then, with the
 * record removed, as state/locks/<id>.lock, loaded as a done and as a failed record.
 * Properties: the calls return 0, ES_ENOENT (only when no record is there) or a documented
 * ES_E* code; a loaded record is a JSON object; a checked done record names an output inside
 * the job folder (merge trusts it) and a sha256.
 */
#include "fuzzlib.h"

#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "record.h"

#include <string.h>

#define ID "part-00000-of-00001"

static struct es_manifest m;
static char record[600], lock[600];

static void setup(void)
{
	static char job[512];
	char p[600];
	snprintf(job, sizeof(job), "%s/job", fuzz_scratch());
	const char *dirs[] = { "state/done", "state/failed", "state/locks", "attempts/" ID "/a1" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", job, dirs[i]);
		fuzz_mkdirs(p);
	}
	/* The output the seed records name, so that a resolved output_path can exist. */
	snprintf(p, sizeof(p), "%s/attempts/%s/a1/output.jsonl", job, ID);
	fuzz_write(p, (const uint8_t *)"{\"a\":1}\n", 8);
	snprintf(record, sizeof(record), "%s/state/done/%s.json", job, ID);
	snprintf(lock, sizeof(lock), "%s/state/locks/%s.lock", job, ID);
	m.job_dir = job;
	m.job_id = (char *)"job";
	es_log_quiet_begin();
}

static void check(const char *kind)
{
	cJSON *rec = NULL;
	int rc = es_record_load(&m, kind, ID, &rec);
	FUZZ_CHECK(rc == 0 || rc == ES_ENOENT || rc == ES_EINVAL || rc == ES_EIO || rc == ES_ENOMEM);
	FUZZ_CHECK(!rc == !!rec);
	if (rc)
		return;
	FUZZ_CHECK(cJSON_IsObject(rec));
	if (!strcmp(kind, "done")) {
		struct es_buf out = ES_BUF_INIT;
		struct es_done_fields f;
		rc = es_record_check_done(&m, ID, rec, &out, &f, NULL);
		FUZZ_CHECK(rc == 0 || rc == ES_EINVAL || rc == ES_EIO || rc == ES_ENOMEM);
		if (rc == 0) {
			size_t lj = strlen(m.job_dir);
			FUZZ_CHECK(out.data && !strncmp(out.data, m.job_dir, lj) && out.data[lj] == '/');
			FUZZ_CHECK(f.sha256 != NULL);
		}
		es_buf_free(&out);
	}
	cJSON_Delete(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!m.job_dir)
		setup();
	unlink(lock);
	fuzz_write(record, data, size);
	check("done");
	unlink(record);
	fuzz_write(lock, data, size);
	check("done");
	check("failed");
	return 0;
}
