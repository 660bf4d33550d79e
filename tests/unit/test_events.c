/*
 * Unit tests of src/events.c: the append-only event log of a worker process. Every line is
 * read back from the real file and parsed as JSON.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/events.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/log.h"
#include "json.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char *T;

static void job_dir(const char *name, char out[1024])
{
	snprintf(out, 1024, "%s/%s", T, name);
	CHECK_INT_EQ(mkdir(out, 0755), 0);
}

/* The whole file, or "" with a failed check. */
static void read_all(const char *path, struct es_buf *out)
{
	es_buf_reset(out);
	CHECK_INT_EQ(es_fs_read_file(path, out, 0), 0);
}

/* Line i (0-based) of text as a parsed object, or NULL. */
static cJSON *line_json(const char *text, int i)
{
	const char *p = text;
	for (int k = 0; k < i && p; k++) {
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	if (!p || !*p)
		return NULL;
	const char *nl = strchr(p, '\n');
	if (!nl)
		return NULL;
	return es_json_parse(p, (size_t)(nl - p), "event line");
}

static size_t count_char(const char *s, size_t n, char c)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] == c)
			k++;
	return k;
}

/* The keys of o, in file order, joined with ",". */
static void keys_of(const cJSON *o, struct es_buf *out)
{
	es_buf_reset(out);
	for (const cJSON *c = o ? o->child : NULL; c; c = c->next)
		es_buf_printf(out, "%s%s", out->len ? "," : "", c->string);
}

static struct es_event blank_event(const char *name)
{
	struct es_event ev = { name, NULL, 0, NULL, -1, -1, -1.0, NULL };
	return ev;
}

/* Opening makes state/events/ (reference job folders have none) and names the file
 * <host>.<pid>.<token8>.jsonl. */
static void test_open_names_file(void)
{
	char jd[1024];
	job_dir("job1", jd);
	struct es_events e;
	CHECK_INT_EQ(es_events_open(&e, jd, "run-1"), 0);
	CHECK(e.fd >= 0);
	CHECK_STR_EQ(e.run_id, "run-1");
	char prefix[2048];
	snprintf(prefix, sizeof(prefix), "%s/state/events/%s.%d.", jd, es_hostname(), (int)getpid());
	size_t pl = strlen(prefix);
	CHECK(strncmp(e.path.data, prefix, pl) == 0);
	const char *tok = e.path.data + (strlen(e.path.data) >= pl ? pl : 0);
	int hex = strlen(tok) == 8 + strlen(".jsonl") && strcmp(tok + 8, ".jsonl") == 0;
	for (int i = 0; hex && i < 8; i++)
		hex = (tok[i] >= '0' && tok[i] <= '9') || (tok[i] >= 'a' && tok[i] <= 'f');
	if (!CHECK(hex))
		fprintf(stderr, "  path: %s\n", e.path.data);
	struct stat st;
	CHECK(stat(e.path.data, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0);

	/* A second log of the same process is a file of its own. */
	struct es_events f;
	CHECK_INT_EQ(es_events_open(&f, jd, NULL), 0);
	CHECK(f.fd >= 0);
	CHECK(strcmp(e.path.data, f.path.data) != 0);
	es_events_close(&e);
	es_events_close(&f);
	CHECK_INT_EQ(e.fd, -1);
	CHECK_INT_EQ(f.fd, -1);
	es_events_close(&e); /* twice is harmless */

	/* An existing events folder (a second worker) is fine. */
	struct es_events g;
	CHECK_INT_EQ(es_events_open(&g, jd, NULL), 0);
	CHECK(g.fd >= 0);
	es_events_close(&g);
}

/* Every field given: one line of sorted-key JSON with each documented key. */
static void test_full_event(void)
{
	char jd[1024];
	job_dir("job2", jd);
	struct es_events e;
	CHECK_INT_EQ(es_events_open(&e, jd, "run-42"), 0);
	struct es_event ev = {
		.event = "done", .shard = "part-00001-of-00004", .attempt = 3,
		.token = "0123456789abcdef0123456789abcdef", .rows = 1234567890123LL,
		.bytes = 98765, .duration = 12.5, .detail = "all good",
	};
	double before = es_time_epoch();
	es_events_write(&e, &ev);
	double after = es_time_epoch();
	struct es_buf text = ES_BUF_INIT, keys = ES_BUF_INIT;
	read_all(e.path.data, &text);
	CHECK_INT_EQ(count_char(text.data, text.len, '\n'), 1);
	CHECK(text.len > 0 && text.data[text.len - 1] == '\n');
	/* The one-line form (docs/job-folder.md#how-files-are-written): ", " and ": " separators. */
	CHECK(strncmp(text.data, "{\"at\": \"", 8) == 0);
	CHECK(strstr(text.data, "\"attempt\": 3, ") != NULL);
	cJSON *o = line_json(text.data, 0);
	if (CHECK(cJSON_IsObject(o))) {
		keys_of(o, &keys);
		CHECK_STR_EQ(keys.data, "at,attempt,bytes,detail,duration,event,host,pid,rows,run_id,shard,time,token");
		int64_t i;
		double d;
		CHECK_STR_EQ(es_json_get_str(o, "event"), "done");
		CHECK_STR_EQ(es_json_get_str(o, "host"), es_hostname());
		CHECK(es_json_get_i64(o, "pid", &i) == 0 && i == getpid());
		CHECK_STR_EQ(es_json_get_str(o, "shard"), "part-00001-of-00004");
		CHECK(es_json_get_i64(o, "attempt", &i) == 0 && i == 3);
		CHECK_STR_EQ(es_json_get_str(o, "token"), "0123456789abcdef0123456789abcdef");
		CHECK(es_json_get_i64(o, "rows", &i) == 0 && i == 1234567890123LL);
		CHECK(es_json_get_i64(o, "bytes", &i) == 0 && i == 98765);
		CHECK(es_json_get_num(o, "duration", &d) == 0 && d == 12.5);
		CHECK(!es_json_is_int(cJSON_GetObjectItemCaseSensitive(o, "duration"))); /* a float */
		CHECK_STR_EQ(es_json_get_str(o, "detail"), "all good");
		CHECK_STR_EQ(es_json_get_str(o, "run_id"), "run-42");
		/* time: epoch seconds as a float, taken during the write. */
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "time");
		CHECK(cJSON_IsNumber(t));
		CHECK(es_json_get_num(o, "time", &d) == 0 && d >= before - 1e-3 && d <= after + 1e-3);
		/* at: the same moment as an ISO UTC time. */
		const char *at = es_json_get_str(o, "at");
		struct tm tm;
		memset(&tm, 0, sizeof(tm));
		const char *rest = at ? strptime(at, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
		if (CHECK(rest != NULL)) {
			double secs = (double)timegm(&tm);
			CHECK(secs >= (double)(long long)before - 1 && secs <= after + 1);
			size_t rl = strlen(rest);
			CHECK(rl >= 6 && strcmp(rest + rl - 6, "+00:00") == 0);
		}
	}
	cJSON_Delete(o);
	es_events_close(&e);
	es_buf_free(&text);
	es_buf_free(&keys);
}

/* Optional fields are left out when not given; zero counts and durations are given. */
static void test_optional_fields(void)
{
	char jd[1024];
	job_dir("job3", jd);
	struct es_events e;
	CHECK_INT_EQ(es_events_open(&e, jd, NULL), 0);
	struct es_event a = blank_event("claim");
	es_events_write(&e, &a);
	struct es_event b = blank_event("start");
	b.rows = 0;
	b.bytes = 0;
	b.duration = 0.0;
	b.attempt = 1;
	es_events_write(&e, &b);
	struct es_event c = blank_event("lost");
	c.attempt = -2; /* not a positive attempt number: left out */
	c.shard = "";
	es_events_write(&e, &c);

	struct es_buf text = ES_BUF_INIT, keys = ES_BUF_INIT;
	read_all(e.path.data, &text);
	CHECK_INT_EQ(count_char(text.data, text.len, '\n'), 3);
	cJSON *o = line_json(text.data, 0);
	keys_of(o, &keys);
	CHECK_STR_EQ(keys.data, "at,event,host,pid,time");
	CHECK_STR_EQ(es_json_get_str(o, "event"), "claim");
	cJSON_Delete(o);
	o = line_json(text.data, 1);
	keys_of(o, &keys);
	CHECK_STR_EQ(keys.data, "at,attempt,bytes,duration,event,host,pid,rows,time");
	int64_t i = -1;
	double d = -1;
	CHECK(es_json_get_i64(o, "rows", &i) == 0 && i == 0);
	CHECK(es_json_get_i64(o, "bytes", &i) == 0 && i == 0);
	CHECK(es_json_get_num(o, "duration", &d) == 0 && d == 0.0);
	cJSON_Delete(o);
	o = line_json(text.data, 2);
	keys_of(o, &keys);
	CHECK_STR_EQ(keys.data, "at,event,host,pid,shard,time");
	CHECK_STR_EQ(es_json_get_str(o, "shard"), "");
	cJSON_Delete(o);
	es_events_close(&e);
	es_buf_free(&text);
	es_buf_free(&keys);
}

/* A detail with newlines, quotes and control characters stays on its one line. */
static void test_detail_escaped(void)
{
	char jd[1024];
	job_dir("job4", jd);
	struct es_events e;
	CHECK_INT_EQ(es_events_open(&e, jd, "r\"1\n"), 0);
	static const char detail[] = "Traceback:\n  File \"x.py\"\r\n\tboom \\ \x01\x1f \xc3\xa9 \xf0\x9f\x98\x80";
	struct es_event ev = blank_event("failed");
	ev.detail = detail;
	es_events_write(&e, &ev);
	struct es_buf text = ES_BUF_INIT;
	read_all(e.path.data, &text);
	CHECK_INT_EQ(count_char(text.data, text.len, '\n'), 1);
	CHECK_INT_EQ(count_char(text.data, text.len, '\r'), 0);
	CHECK_INT_EQ(count_char(text.data, text.len, '\x01'), 0);
	CHECK(strstr(text.data, "\\u0001\\u001f \xc3\xa9 \xf0\x9f\x98\x80") != NULL); /* UTF-8 raw */
	cJSON *o = line_json(text.data, 0);
	CHECK_STR_EQ(es_json_get_str(o, "detail"), detail);
	CHECK_STR_EQ(es_json_get_str(o, "run_id"), "r\"1\n");
	cJSON_Delete(o);
	es_events_close(&e);
	es_buf_free(&text);
}

/* Append-only: events follow each other in order, and what another descriptor appended to
 * the file meanwhile is never overwritten (the log's descriptor is O_APPEND). */
static void test_append_only(void)
{
	char jd[1024];
	job_dir("job5", jd);
	struct es_events e;
	CHECK_INT_EQ(es_events_open(&e, jd, NULL), 0);
	struct es_event ev = blank_event("claim");
	es_events_write(&e, &ev);
	int fd = open(e.path.data, O_WRONLY | O_APPEND);
	CHECK(fd >= 0);
	CHECK_INT_EQ(write(fd, "{\"other\": 1}\n", 13), 13);
	close(fd);
	enum { N = 50 };
	for (int i = 0; i < N; i++) {
		char d[32];
		snprintf(d, sizeof(d), "n%d", i);
		ev.event = "start";
		ev.detail = d;
		es_events_write(&e, &ev);
	}
	struct es_buf text = ES_BUF_INIT;
	read_all(e.path.data, &text);
	CHECK_INT_EQ(count_char(text.data, text.len, '\n'), 2 + N);
	cJSON *o = line_json(text.data, 0);
	CHECK_STR_EQ(es_json_get_str(o, "event"), "claim");
	cJSON_Delete(o);
	o = line_json(text.data, 1);
	int64_t one = 0;
	CHECK(es_json_get_i64(o, "other", &one) == 0 && one == 1);
	cJSON_Delete(o);
	int bad = 0;
	for (int i = 0; i < N; i++) {
		char d[32];
		snprintf(d, sizeof(d), "n%d", i);
		o = line_json(text.data, 2 + i);
		const char *got = es_json_get_str(o, "detail");
		if (!got || strcmp(got, d) != 0 || !es_json_get_str(o, "event") ||
		    strcmp(es_json_get_str(o, "event"), "start") != 0)
			bad++;
		cJSON_Delete(o);
	}
	CHECK_INT_EQ(bad, 0);
	es_events_close(&e);
	es_buf_free(&text);
}

/* Capture what fn writes on stderr. */
static void capture_stderr(void (*fn)(void *), void *arg, struct es_buf *out)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/stderr.txt", T);
	fflush(stderr);
	int saved = dup(2);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(saved >= 0 && fd >= 0);
	dup2(fd, 2);
	close(fd);
	fn(arg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	es_buf_reset(out);
	CHECK_INT_EQ(es_fs_read_file(p, out, 0), 0);
}

struct open_args {
	struct es_events *e;
	const char *jd;
	int rc;
};

static void do_open(void *a)
{
	struct open_args *o = a;
	o->rc = es_events_open(o->e, o->jd, "r");
}

/* A log that cannot be opened is a warning, not an error; writing to it does nothing. */
static void test_open_failure_is_warning(void)
{
	char jd[1024];
	snprintf(jd, sizeof(jd), "%s/not-a-folder", T);
	FILE *f = fopen(jd, "w");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	struct es_events e;
	struct open_args a = { &e, jd, 99 };
	struct es_buf err = ES_BUF_INIT;
	capture_stderr(do_open, &a, &err);
	CHECK_INT_EQ(a.rc, 0);
	CHECK_INT_EQ(e.fd, -1);
	CHECK(strncmp(err.data, "WARNING: cannot open event log '", 32) == 0);
	CHECK(strstr(err.data, "ERROR") == NULL);
	struct es_event ev = blank_event("claim");
	es_events_write(&e, &ev); /* no-op */
	es_events_close(&e);
	struct stat st;
	CHECK(stat(jd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0);
	es_buf_free(&err);
}

/* After close, writes are dropped. */
static void test_write_after_close(void)
{
	char jd[1024];
	job_dir("job6", jd);
	struct es_events e;
	CHECK_INT_EQ(es_events_open(&e, jd, NULL), 0);
	struct es_event ev = blank_event("claim");
	es_events_write(&e, &ev);
	char path[2048];
	snprintf(path, sizeof(path), "%s", e.path.data); /* close gives the path back */
	es_events_close(&e);
	es_events_write(&e, &ev);
	struct es_buf text = ES_BUF_INIT;
	read_all(path, &text);
	CHECK_INT_EQ(count_char(text.data, text.len, '\n'), 1);
	es_buf_free(&text);
}

int main(void)
{
	T = test_tmpdir();
	test_open_names_file();
	test_full_event();
	test_optional_fields();
	test_detail_escaped();
	test_append_only();
	test_open_failure_is_warning();
	test_write_after_close();
	return test_done();
}
