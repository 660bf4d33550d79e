/* coord: the run key of a submission id, the coordination folder, the formats of the locks and
 * results (the reference's, README "PAI-DLC worker-broadcast jobs"), the abort record's first
 * writer, and the waits: their timeouts, an abort ending the finalize wait, a stop signal
 * ending the abort wait. Short timeouts keep it fast. */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/coord.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/stop.h"
#include "json.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The whole of <c->dir>/<name> in out (NUL-terminated); 0 or negative. */
static int slurp(const struct es_coord *c, const char *name, struct es_buf *out)
{
	struct es_buf path = ES_BUF_INIT;
	int rc = es_path_join(&path, c->dir, name);
	if (!rc)
		rc = es_fs_read_file(path.data, out, 0);
	es_buf_free(&path);
	return rc;
}

/* The reference's run_key (sha256, 20 hex) and the folder beside the job folder. */
static void test_run_key_and_folder(const char *t)
{
	char key[21], job[4096], want[4096];
	struct es_coord c;
	struct stat st;
	CHECK_INT_EQ(es_coord_run_key("sub-1", key), 0);
	CHECK_STR_EQ(key, "0a80627d4936eb43952d");
	snprintf(job, sizeof(job), "%s/job", t);
	if (!CHECK_INT_EQ(es_coord_open(&c, job, "sub-1", 1, 0.05), 0))
		return;
	snprintf(want, sizeof(want), "%s/.job.dlc-coordination/0a80627d4936eb43952d", t);
	CHECK_STR_EQ(c.dir, want);
	CHECK(stat(c.dir, &st) == 0 && S_ISDIR(st.st_mode));
	CHECK(stat(job, &st) != 0); /* the job folder itself is left to prepare */
	es_coord_close(&c);
}

/* A lock is one sorted-key JSON line; one instance wins; results are pretty sorted JSON with
 * an "error" only when given, and their first writer's code stays. */
static void test_formats(const char *t)
{
	char job[4096];
	struct es_coord c;
	struct es_buf text = ES_BUF_INIT;
	int code = -1;
	snprintf(job, sizeof(job), "%s/fjob", t);
	if (!CHECK_INT_EQ(es_coord_open(&c, job, "f", 1, 0.05), 0))
		return;
	CHECK_INT_EQ(es_coord_elect(&c, "prepare"), 0);
	CHECK_INT_EQ(es_coord_elect(&c, "prepare"), 1);
	if (CHECK_INT_EQ(slurp(&c, "prepare.lock", &text), 0)) {
		char *nl = strchr(text.data, '\n');
		CHECK(nl && nl[1] == '\0');
		CHECK(!strncmp(text.data, "{\"created_at\": \"", 16));
		char *h = strstr(text.data, "\"hostname\": "), *p = strstr(text.data, "\"phase\": \"prepare\""),
		     *pid = strstr(text.data, "\"pid\": ");
		CHECK(h && p && pid && h < p && p < pid);
	}
	CHECK_INT_EQ(es_coord_result(&c, "prepare-result.json", &code), 0);
	CHECK_INT_EQ(es_coord_publish_result(&c, "prepare", 3, NULL), 0);
	CHECK_INT_EQ(es_coord_publish_result(&c, "prepare", 0, NULL), 0); /* exists: kept */
	CHECK_INT_EQ(es_coord_result(&c, "prepare-result.json", &code), 1);
	CHECK_INT_EQ(code, 3);
	es_buf_free(&text);
	if (CHECK_INT_EQ(slurp(&c, "prepare-result.json", &text), 0)) {
		CHECK(!strncmp(text.data, "{\n  \"finished_at\": \"", 20));
		CHECK(strstr(text.data, "\n  \"phase\": \"prepare\",\n  \"return_code\": 3\n}\n") != NULL);
		CHECK(strstr(text.data, "error") == NULL);
	}
	CHECK_INT_EQ(es_coord_publish_result(&c, "finalize", 2, "OSError: disk full"), 0);
	es_buf_free(&text);
	if (CHECK_INT_EQ(slurp(&c, "finalize-result.json", &text), 0))
		CHECK(strstr(text.data, "\"error\": \"OSError: disk full\",\n  \"finished_at\"") != NULL);
	es_buf_free(&text);
	/* A return_code that is not an integer is an error, as the reference's ValueError. */
	struct es_buf bad = ES_BUF_INIT;
	static const char doc[] = "{\"return_code\": \"0\"}\n";
	if (CHECK_INT_EQ(es_path_join(&bad, c.dir, "abort.json"), 0) &&
	    CHECK_INT_EQ(es_fs_write_atomic(bad.data, doc, sizeof(doc) - 1), 0))
		CHECK(es_coord_result(&c, "abort.json", &code) < 0);
	es_buf_free(&bad);
	es_coord_close(&c);
}

/* The first aborter's code is everyone's; the record names the phase "worker" and a reason. */
static void test_abort(const char *t)
{
	char job[4096];
	struct es_coord c;
	struct es_buf text = ES_BUF_INIT;
	int code = -1;
	snprintf(job, sizeof(job), "%s/ajob", t);
	if (!CHECK_INT_EQ(es_coord_open(&c, job, "a", 1, 0.05), 0))
		return;
	CHECK_INT_EQ(es_coord_aborted(&c), 0);
	CHECK_INT_EQ(es_coord_abort(&c, 5, "worker on hostname=x exited with code 5", &code), 0);
	CHECK_INT_EQ(code, 5);
	CHECK_INT_EQ(es_coord_abort(&c, 7, "later", &code), 0);
	CHECK_INT_EQ(code, 5);
	CHECK_INT_EQ(es_coord_aborted(&c), 1);
	if (CHECK_INT_EQ(slurp(&c, "abort.json", &text), 0)) {
		CHECK(strstr(text.data, "\"phase\": \"worker\"") != NULL);
		CHECK(strstr(text.data, "\"reason\": \"worker on hostname=x exited with code 5\"") != NULL);
	}
	es_buf_free(&text);
	es_coord_close(&c);
}

/* Every wait ends after its timeout with an error, and not much later. */
static void test_timeouts(const char *t)
{
	char job[4096];
	struct es_coord c;
	int code = -1;
	snprintf(job, sizeof(job), "%s/tjob", t);
	if (!CHECK_INT_EQ(es_coord_open(&c, job, "t", 0.3, 0.05), 0))
		return;
	double t0 = es_time_mono();
	CHECK(es_coord_wait_prepare(&c, job, 0, &code) < 0);
	CHECK(es_time_mono() - t0 >= 0.25 && es_time_mono() - t0 < 3);
	CHECK(strstr(es_last_error(), "timed out after 0.3s waiting for DLC preparation") != NULL);
	t0 = es_time_mono();
	CHECK(es_coord_wait_finalize(&c, &code) < 0);
	CHECK(es_time_mono() - t0 >= 0.25 && es_time_mono() - t0 < 3);
	CHECK(strstr(es_last_error(), "waiting for DLC final verification") != NULL);
	/* A lost abort election whose winner never writes abort.json. */
	CHECK_INT_EQ(es_coord_elect(&c, "abort"), 0);
	t0 = es_time_mono();
	CHECK(es_coord_abort(&c, 2, "r", &code) < 0);
	CHECK(es_time_mono() - t0 < 3);
	es_coord_close(&c);
}

/* Results end the waits at once: prepare-result, and abort.json for the finalize wait (its
 * winner may be gone). A stop signal ends the abort wait with 128 + signal. */
static void test_waits_end(const char *t)
{
	char job[4096];
	struct es_coord c;
	int code = -1;
	snprintf(job, sizeof(job), "%s/wjob", t);
	if (!CHECK_INT_EQ(es_coord_open(&c, job, "w", 5, 0.05), 0))
		return;
	CHECK_INT_EQ(es_coord_publish_result(&c, "prepare", 4, NULL), 0);
	CHECK_INT_EQ(es_coord_wait_prepare(&c, job, 0, &code), 0);
	CHECK_INT_EQ(code, 4);
	CHECK_INT_EQ(es_coord_abort(&c, 6, "r", &code), 0);
	double t0 = es_time_mono();
	code = -1;
	CHECK_INT_EQ(es_coord_wait_finalize(&c, &code), 0);
	CHECK_INT_EQ(code, 6);
	CHECK(es_time_mono() - t0 < 2);
	es_coord_close(&c);

	snprintf(job, sizeof(job), "%s/sjob", t);
	if (!CHECK_INT_EQ(es_coord_open(&c, job, "s", 5, 0.05), 0))
		return;
	static volatile sig_atomic_t flag;
	CHECK_INT_EQ(es_coord_elect(&c, "abort"), 0); /* a winner that never writes */
	flag = SIGTERM;
	es_set_stop_flag(&flag);
	t0 = es_time_mono();
	code = -1;
	CHECK_INT_EQ(es_coord_abort(&c, 2, "r", &code), 0);
	CHECK_INT_EQ(code, 128 + SIGTERM);
	CHECK(es_time_mono() - t0 < 2);
	es_set_stop_flag(NULL);
	es_coord_close(&c);
}

int main(void)
{
	char *t = test_tmpdir();
	test_run_key_and_folder(t);
	test_formats(t);
	test_abort(t);
	test_timeouts(t);
	test_waits_end(t);
	return test_done();
}
