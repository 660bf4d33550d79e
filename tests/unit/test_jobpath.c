/*
 * Unit tests of jobpath: every path it builds is one that docs/job-folder.md names (built
 * with the documents' own placeholders, such as "<shard>", and looked up in the document's
 * text), absolute ones are the relative ones under the job folder, and a job folder too long
 * for a path fails with one error line naming it instead of being cut short.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct es_buf doc = ES_BUF_INIT;

/* docs/job-folder.md, the contract the paths must match. */
static int load_doc(void)
{
	const char *src = getenv("ESHARD_SOURCE_DIR");
	struct es_buf p = ES_BUF_INIT;
	int ok = CHECK(src != NULL) && CHECK_INT_EQ(es_path_join(&p, src, "docs/job-folder.md"), 0) &&
		 CHECK_INT_EQ(es_fs_read_file(p.data, &doc, 0), 0);
	es_buf_free(&p);
	return ok;
}

/* Replace the first occurrence of what in b by with (to put a placeholder back). */
static void put_back(struct es_buf *b, const char *what, const char *with)
{
	char *at = strstr(b->data, what);
	if (!CHECK(at != NULL))
		return;
	struct es_buf out = ES_BUF_INIT;
	es_buf_add(&out, b->data, (size_t)(at - b->data));
	es_buf_adds(&out, with);
	es_buf_adds(&out, at + strlen(what));
	es_buf_reset(b);
	es_buf_add(b, out.data, out.len);
	es_buf_free(&out);
}

/* The relative path rel is written in the document, starting a word, and ending one too
 * unless it is a folder's "name/" (which the document follows with what is in it). */
static int in_doc(const char *rel)
{
	size_t n = strlen(rel);
	int folder = n && rel[n - 1] == '/';
	for (const char *at = strstr(doc.data, rel); at; at = strstr(at + 1, rel)) {
		char before = at == doc.data ? ' ' : at[-1], after = at[n];
		if (strchr(" `(\n", before) && (folder || (after && strchr(" `/),\n", after))))
			return 1;
	}
	fprintf(stderr, "  not in docs/job-folder.md: %s\n", rel);
	return 0;
}

/* Every builder, relative (job_dir NULL) with the document's placeholders, is in the document;
 * the same builder under a job folder gives "<job>/" and the relative path. */
static void test_matches_doc(void)
{
	struct es_buf b = ES_BUF_INIT, abs = ES_BUF_INIT;
	CHECK_INT_EQ(es_jobpath_shard(&b, NULL, "<id>"), 0);
	CHECK_STR_EQ(b.data, "shards/<id>.jsonl");
	CHECK(in_doc(b.data));
	CHECK_INT_EQ(es_jobpath_lock(&b, NULL, "<shard>"), 0);
	CHECK(in_doc(b.data));
	CHECK_INT_EQ(es_jobpath_lock(&abs, "/jobs/j1", "<shard>"), 0);
	CHECK_STR_EQ(abs.data, "/jobs/j1/state/locks/<shard>.lock");
	CHECK_INT_EQ(es_jobpath_lock(&abs, "/jobs/j1/", "<shard>"), 0);
	CHECK_STR_EQ(abs.data, "/jobs/j1/state/locks/<shard>.lock");
	CHECK_INT_EQ(es_jobpath_record(&b, NULL, "done", "<shard>"), 0);
	CHECK(in_doc(b.data));
	CHECK_INT_EQ(es_jobpath_record(&b, NULL, "failed", "<shard>"), 0);
	CHECK(in_doc(b.data));
	CHECK_INT_EQ(es_jobpath_stale_lock(&b, NULL, "<shard>", 1733000123LL, "<hex>"), 0);
	put_back(&b, "1733000123", "<secs>");
	CHECK(in_doc(b.data));
	CHECK_INT_EQ(es_jobpath_backup(&b, NULL, "<id>", "<primary token>"), 0);
	CHECK(in_doc(b.data));
	CHECK_INT_EQ(es_jobpath_events(&b, NULL, "<host>", 4242, "<token8>0123456789abcdef0123456789ab"), 0);
	put_back(&b, "4242", "<pid>");
	CHECK(in_doc(b.data));
	CHECK_INT_EQ(es_jobpath_attempts(&b, NULL, "<id>"), 0);
	CHECK(in_doc(b.data));
	CHECK_INT_EQ(es_jobpath_attempt(&b, NULL, "<shard>", 7, "<token>"), 0);
	put_back(&b, "0007", "<NNNN>");
	CHECK(in_doc(b.data));
	CHECK_INT_EQ(es_jobpath_attempt(&b, NULL, "s", 12345, "t"), 0);
	CHECK_STR_EQ(b.data, "attempts/s/12345-t"); /* four digits or more */
	CHECK_INT_EQ(es_jobpath_in_attempt(&abs, "/j", "attempts/s/0001-t", ES_ATTEMPT_JSON), 0);
	CHECK_STR_EQ(abs.data, "/j/attempts/s/0001-t/attempt.json");
	static const char *const hist[] = { "attempts", "failed", "claims" };
	for (size_t i = 0; i < 3; i++) {
		CHECK_INT_EQ(es_jobpath_history(&b, NULL, hist[i], "<id>", "<suffix>"), 0);
		CHECK(in_doc(b.data));
	}
	es_log_quiet_begin();
	CHECK_INT_EQ(es_jobpath_history(&b, NULL, "locks", "<id>", "<suffix>"), ES_EINTERNAL);
	es_log_quiet_end();
	CHECK_INT_EQ((long long)b.len, 0);
	es_buf_free(&b);
	es_buf_free(&abs);
}

/* The names of the layout: every folder (each after its parent), top-level file and attempt
 * file is in the document. */
static void test_names_in_doc(void)
{
	struct es_buf b = ES_BUF_INIT;
	size_t n = 0;
	for (; es_jobpath_folders[n]; n++) {
		es_buf_reset(&b);
		es_buf_printf(&b, "%s/", es_jobpath_folders[n]);
		CHECK(in_doc(b.data));
		const char *slash = strrchr(es_jobpath_folders[n], '/');
		int parent_first = !slash;
		for (size_t k = 0; slash && k < n; k++)
			parent_first |= strlen(es_jobpath_folders[k]) == (size_t)(slash - es_jobpath_folders[n]) &&
					!strncmp(es_jobpath_folders[k], es_jobpath_folders[n], (size_t)(slash - es_jobpath_folders[n]));
		if (!CHECK(parent_first))
			fprintf(stderr, "  %s comes before its parent\n", es_jobpath_folders[n]);
	}
	CHECK_INT_EQ((long long)n, 14);
	static const char *const files[] = { ES_JOB_MANIFEST, ES_JOB_RECIPE, ES_JOB_MERGE_RECORD, ES_ATTEMPT_JSON,
					     ES_ATTEMPT_LOG, ES_ATTEMPT_EXPORT, ES_ATTEMPT_OUTPUT, ES_ATTEMPT_INPUT };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		CHECK(in_doc(files[i]));
	es_buf_free(&b);
}

/* A job folder whose paths would reach PATH_MAX: one error line naming the folder, nothing
 * built; one byte shorter works. */
static void test_too_long(void)
{
	struct es_buf b = ES_BUF_INIT;
	const char *tail = "/state/locks/x.lock";
	size_t jl = PATH_MAX - strlen(tail); /* the whole path is PATH_MAX bytes: one too many */
	char *jd = malloc(jl + 1);
	if (!CHECK(jd != NULL))
		return;
	jd[0] = '/';
	memset(jd + 1, 'a', jl - 1);
	jd[jl] = '\0';
	es_log_quiet_begin();
	CHECK_INT_EQ(es_jobpath_lock(&b, jd, "x"), ES_EINVAL);
	es_log_quiet_end();
	CHECK_INT_EQ((long long)b.len, 0);
	CHECK_STR_EQ(b.data, "");
	const char *msg = es_last_error();
	CHECK(strncmp(msg, "path too long (4096 bytes, at most 4095) in job folder '/aaaa", 60) == 0);
	CHECK(strchr(msg, '\n') == NULL);
	jd[jl - 1] = '\0'; /* one byte shorter: PATH_MAX - 1 bytes */
	CHECK_INT_EQ(es_jobpath_lock(&b, jd, "x"), 0);
	CHECK_INT_EQ((long long)b.len, PATH_MAX - 1);
	/* Relative names are checked too, and the error says so. */
	es_log_quiet_begin();
	CHECK_INT_EQ(es_jobpath_attempt(&b, NULL, jd, 1, jd), ES_EINVAL);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "in job folder '.'") != NULL);
	free(jd);
	es_buf_free(&b);
}

int main(void)
{
	if (load_doc()) {
		test_matches_doc();
		test_names_in_doc();
	}
	test_too_long();
	es_buf_free(&doc);
	return test_done();
}
