/*
 * Unit tests of retry (docs/job-folder.md#retry-and-history, docs/design.md#reference-tests 11): a
 * failed marker and its attempts move to state/history with one "<seconds>.<32hex>" suffix; unknown
 * and unsafe ids; selected shards that are not failed are skipped; a lock or a done marker refuses
 * the whole call before anything moves; --all-failed.
 */
#include "testlib.h"
#include "jobfix.h"

#include "eshard/log.h"
#include "eshard/retry.h"

#include <dirent.h>

static const char *T;

/* The one entry of dir whose name starts with prefix, or "" (and a failed check). */
static void only_entry(const char *dir, const char *prefix, char *out, size_t n)
{
	DIR *d = opendir(dir);
	int found = 0;
	out[0] = '\0';
	if (!d) {
		CHECK(d != NULL);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (!strncmp(e->d_name, prefix, strlen(prefix))) {
			found++;
			snprintf(out, n, "%s", e->d_name);
		}
	closedir(d);
	CHECK_INT_EQ(found, 1);
}

static int suffix_ok(const char *name, const char *id, const char *ext)
{
	size_t li = strlen(id);
	if (strncmp(name, id, li) || name[li] != '.')
		return 0;
	const char *p = name + li + 1;
	int digits = 0;
	while (*p >= '0' && *p <= '9') {
		p++;
		digits++;
	}
	if (!digits || *p++ != '.')
		return 0;
	for (int i = 0; i < 32; i++, p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return !strcmp(p, ext);
}

static void test_requeue_moves_history(void)
{
	int rows[] = { 2, 2, 2 };
	struct jf j;
	char p[2048], q[4096], name[512];
	jf_make(&j, T, "retry", 3, rows, NULL);
	/* Reference test 11: a manual failed marker plus attempts/<id>/old-attempt. */
	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[1]);
	jf_writes(p, "{\"shard_id\": \"part-00001-of-00003\", \"status\": \"failed\"}\n");
	jf_path(&j, p, sizeof(p), "attempts/%s/old-attempt", j.id[1]);
	jf_mkdirs(p);
	jf_path(&j, p, sizeof(p), "attempts/%s/old-attempt/attempt.json", j.id[1]);
	jf_writes(p, "{\"status\": \"failed\"}\n");

	const char *ids[] = { j.id[1], j.id[0] }; /* shard 0 is not failed: skipped quietly */
	CHECK_INT_EQ(es_retry_run(j.dir, 0, ids, 2, 1), 0);
	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[1]);
	CHECK(!jf_exists(p));
	jf_path(&j, p, sizeof(p), "attempts/%s", j.id[1]);
	CHECK(!jf_exists(p));
	snprintf(p, sizeof(p), "%s/state/history/failed", j.dir);
	only_entry(p, j.id[1], name, sizeof(name));
	CHECK(suffix_ok(name, j.id[1], ".json"));
	snprintf(q, sizeof(q), "%s/%s", p, name);
	char *d = jf_read(q, NULL);
	CHECK(d && strstr(d, "\"failed\""));
	free(d);
	snprintf(p, sizeof(p), "%s/state/history/attempts", j.dir);
	only_entry(p, j.id[1], name, sizeof(name));
	CHECK(suffix_ok(name, j.id[1], ""));
	snprintf(q, sizeof(q), "%s/%s/old-attempt/attempt.json", p, name);
	CHECK(jf_exists(q));

	/* Nothing failed any more: "No failed shards selected", rc 0. */
	CHECK_INT_EQ(es_retry_run(j.dir, 0, ids, 2, 1), 0);
	CHECK_INT_EQ(es_retry_run(j.dir, 1, NULL, 0, 1), 0);
}

static void test_unknown_and_unsafe_ids(void)
{
	int rows[] = { 1, 1 };
	struct jf j;
	jf_make(&j, T, "ids", 2, rows, NULL);
	const char *unknown[] = { "zz", j.id[0], "aa", "zz" };
	CHECK_INT_EQ(es_retry_run(j.dir, 0, unknown, 4, 1), ES_EUSAGE);
	CHECK_STR_EQ(es_last_error(), "Unknown shard IDs: aa, zz");
	const char *bad[] = { "../ids" };
	CHECK(es_retry_run(j.dir, 0, bad, 1, 1) < 0);
	CHECK(strstr(es_last_error(), "Invalid shard ID '../ids'") != NULL);
	const char *dots[] = { ".." }, *empty[] = { "" }, *slash[] = { "a/b" };
	CHECK(es_retry_run(j.dir, 0, dots, 1, 1) < 0);
	CHECK(es_retry_run(j.dir, 0, empty, 1, 1) < 0);
	CHECK(es_retry_run(j.dir, 0, slash, 1, 1) < 0);
	CHECK(strstr(es_last_error(), "Invalid shard ID 'a/b'") != NULL);
	char p[2048];
	snprintf(p, sizeof(p), "%s/no-job", T);
	CHECK_INT_EQ(es_retry_run(p, 1, NULL, 0, 1), ES_ENOENT);
}

/* retry --shard-id of a done shard, or of one still held, is refused (its help says so), not
 * "No failed shards selected" with exit 0; a pending one is passed over. */
static void test_named_shard_not_failed(void)
{
	int rows[] = { 1, 1, 1 };
	struct jf j;
	char p[2048];
	jf_make(&j, T, "named", 3, rows, NULL);
	jf_failed(&j, 2, "h", "e2");
	jf_done(&j, 0, "h");
	const char *done_and_failed[] = { j.id[0], j.id[2] };
	CHECK_INT_EQ(es_retry_run(j.dir, 0, done_and_failed, 2, 1), ES_EINVAL);
	CHECK_STR_EQ(es_last_error(), "Cannot retry part-00000-of-00003: it is already complete");
	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[2]);
	CHECK(jf_exists(p));
	jf_lock(&j, 1, "h", 1, 1);
	const char *held[] = { j.id[1] };
	CHECK_INT_EQ(es_retry_run(j.dir, 0, held, 1, 1), ES_EINVAL);
	CHECK(!strncmp(es_last_error(), "Cannot retry part-00001-of-00003: a lock still exists (", 55));
}

static void test_refusals_move_nothing(void)
{
	int rows[] = { 1, 1, 1, 1 };
	struct jf j;
	char p[2048];
	jf_make(&j, T, "refuse", 4, rows, NULL);
	jf_failed(&j, 0, "h", "e0");
	jf_failed(&j, 2, "h", "e2");
	jf_failed(&j, 3, "h", "e3");
	jf_lock(&j, 2, "h", 1, 1);
	CHECK_INT_EQ(es_retry_run(j.dir, 1, NULL, 0, 1), ES_EINVAL);
	/* The reference's words, then who holds the lock. */
	CHECK(!strncmp(es_last_error(), "Cannot retry part-00002-of-00004: a lock still exists (", 55));
	CHECK(strstr(es_last_error(), "held by h pid 4242)") != NULL);
	for (int i = 0; i < 4; i += i == 0 ? 2 : 1) {
		jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[i]);
		CHECK(jf_exists(p));
		jf_path(&j, p, sizeof(p), "attempts/%s", j.id[i]);
		CHECK(jf_exists(p));
	}
	jf_path(&j, p, sizeof(p), "state/locks/%s.lock", j.id[2]);
	unlink(p);
	jf_done(&j, 3, "h");
	CHECK_INT_EQ(es_retry_run(j.dir, 1, NULL, 0, 1), ES_EINVAL);
	CHECK_STR_EQ(es_last_error(), "Cannot retry part-00003-of-00004: it is already complete");
	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[0]);
	CHECK(jf_exists(p));

	/* Only the listed shard moves. */
	const char *one[] = { j.id[2] };
	CHECK_INT_EQ(es_retry_run(j.dir, 0, one, 1, 1), 0);
	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[2]);
	CHECK(!jf_exists(p));
	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[0]);
	CHECK(jf_exists(p));

	/* --all-failed after the done marker of shard 3 goes away: shards 0 and 3 move. */
	jf_path(&j, p, sizeof(p), "state/done/%s.json", j.id[3]);
	unlink(p);
	CHECK_INT_EQ(es_retry_run(j.dir, 1, NULL, 0, 1), 0);
	for (int i = 0; i < 4; i++) {
		jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[i]);
		CHECK(!jf_exists(p));
	}
	int n = 0;
	snprintf(p, sizeof(p), "%s/state/history/failed", j.dir);
	DIR *d = opendir(p);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	CHECK_INT_EQ(n, 3);
}

/* Failed fences: a failed shard's lock stays as its fence; retry archives it last, into
 * state/history/claims. A running lock past its lease beside a failed record (its owner died
 * between the record and the fence) no longer blocks retry; a live one does. A done fence is a
 * complete shard. */
static void test_fences(void)
{
	int rows[] = { 1, 1, 1, 1 };
	struct jf j;
	char p[2048];
	jf_make(&j, T, "fences", 4, rows, NULL);
	jf_failed(&j, 0, "h", "e0");
	jf_fence(&j, 0, "failed");
	jf_failed(&j, 1, "h", "e1");
	jf_lock(&j, 1, "h", 500, 7);     /* past the 120 s lease */
	jf_failed(&j, 2, "h", "e2");
	jf_lock(&j, 2, "h", 1, 7);       /* live */
	jf_fence(&j, 3, "failed");        /* a retry that stopped between the record and the fence */
	const char *live[] = { j.id[2] };
	CHECK_INT_EQ(es_retry_run(j.dir, 0, live, 1, 1), ES_EINVAL);
	CHECK(strstr(es_last_error(), "a lock still exists") != NULL);
	const char *ok[] = { j.id[0], j.id[1], j.id[3] };
	CHECK_INT_EQ(es_retry_run(j.dir, 0, ok, 3, 1), 0);
	for (int i = 0; i < 4; i++) {
		if (i == 2)
			continue;
		jf_path(&j, p, sizeof(p), "state/locks/%s.lock", j.id[i]);
		CHECK(!jf_exists(p));
		jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[i]);
		CHECK(!jf_exists(p));
	}
	int n = 0;
	snprintf(p, sizeof(p), "%s/state/history/claims", j.dir);
	DIR *d = opendir(p);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		n += e->d_name[0] != '.' && strstr(e->d_name, ".lock") != NULL;
	if (d)
		closedir(d);
	CHECK_INT_EQ(n, 3);
	/* A done fence: complete. */
	jf_path(&j, p, sizeof(p), "state/locks/%s.lock", j.id[2]);
	unlink(p);
	jf_fence(&j, 2, "done");
	CHECK_INT_EQ(es_retry_run(j.dir, 0, live, 1, 1), ES_EINVAL);
	CHECK(strstr(es_last_error(), "it is already complete") != NULL);
}

int main(void)
{
	T = test_tmpdir();
	test_requeue_moves_history();
	test_unknown_and_unsafe_ids();
	test_refusals_move_nothing();
	test_named_shard_not_failed();
	test_fences();
	return test_done();
}
