/*
 * Unit tests of materialize: an attempt's export (a folder of part files with the reference's
 * quirks, a single file, an empty result) becomes one verified processed.jsonl, and every
 * strict-validation error leaves nothing published and no temporary behind.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/materialize.h"
#include "eshard/sha.h"

#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char RT[PATH_MAX];      /* the test folder, symlinks resolved */
static char J[PATH_MAX];       /* the job folder */
static const char *SHARD = "part-00000-of-00001";
static int attempt_no;

/* snprintf that may truncate (every buffer here is far larger than the test's paths). */
static void sfmt(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sfmt(char *out, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, n, fmt, ap);
	va_end(ap);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fputs(text, f);
	fclose(f);
}

static void write_bytes(const char *path, const char *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, n, f) != n) {
		perror(path);
		exit(1);
	}
	fclose(f);
}

/* The whole file as a malloc'd string ("" when missing). */
static char *slurp(const char *path)
{
	struct es_buf b = ES_BUF_INIT;
	es_log_quiet_begin();
	es_fs_read_file(path, &b, 0);
	es_log_quiet_end();
	char *s = strdup(b.data);
	es_buf_free(&b);
	return s;
}

static void mkdirs(const char *path)
{
	if (es_fs_mkdirs(path, 0755) != 0)
		exit(1);
}

static const char *pathf(char *out, const char *fmt, const char *a, const char *b)
{
	sfmt(out, PATH_MAX, fmt, a, b);
	return out;
}

/* A fresh attempt folder A with its token. */
static void new_attempt(char A[PATH_MAX], char tok[33])
{
	es_fs_token(tok);
	sfmt(A, PATH_MAX, "%s/attempts/%s/%04d-%s", J, SHARD, ++attempt_no, tok);
	mkdirs(A);
}

/* ---- materialization ---- */

static void check_file_entry(const struct es_output_file *f, const char *A, const char *rel,
			     int rows, const char *raw_path)
{
	char want[PATH_MAX * 2], hex[65];
	uint64_t size;
	sfmt(want, sizeof(want), "%s/%s", A + strlen(J) + 1, rel);
	CHECK_STR_EQ(f->path, want);
	CHECK_INT_EQ((int)f->rows, rows);
	CHECK_INT_EQ(es_sha_file(raw_path, hex, &size), 0);
	CHECK_STR_EQ(f->sha256, hex);
	CHECK_INT_EQ((int)f->size_bytes, (int)size);
}

/* No ".processed.jsonl.*.tmp" may stay in A. */
static int temporaries_left(const char *A)
{
	int n = 0;
	DIR *d = opendir(A);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		if (!strncmp(e->d_name, ".processed.jsonl.", 17))
			n++;
	if (d)
		closedir(d);
	return n;
}

static void test_materialize_folder(void)
{
	char A[PATH_MAX], tok[33], buf[PATH_MAX * 2], out[PATH_MAX * 2], hex[65];
	new_attempt(A, tok);
	char X[PATH_MAX];
	pathf(X, "%s/%s", A, "ray-output.jsonl");
	mkdirs(pathf(buf, "%s/%s", X, "_temporary/0"));
	mkdirs(pathf(buf, "%s/%s", X, "sub"));
	mkdirs(pathf(buf, "%s/%s", X, ".hidden-dir"));
	write_file(pathf(buf, "%s/%s", X, "part-0.json"), "{\"a\":1}\n{\"a\":2}\n");
	write_file(pathf(buf, "%s/%s", X, "part-1.json"), "{\"b\":\"no newline\"}");
	write_file(pathf(buf, "%s/%s", X, "_SUCCESS"), "not json");
	write_bytes(pathf(buf, "%s/%s", X, ".part-0.json.crc"), "\x00\x01\xff", 3);
	write_file(pathf(buf, "%s/%s", X, "_temporary/0/part-9.json"), "{\"t\":9}\r\n");
	write_file(pathf(buf, "%s/%s", X, "_temporary/0/_part-8.json"), "bad");
	write_file(pathf(buf, "%s/%s", X, "sub/x.json"), "  {\"s\" : [1, 2.50, 1e400]}  \n");
	write_file(pathf(buf, "%s/%s", X, "sub/.y.json"), "bad");
	write_file(pathf(buf, "%s/%s", X, ".hidden-dir/h.json"), "{\"h\":0}\n");
	CHECK(symlink("part-0.json", pathf(buf, "%s/%s", X, "z-link.json")) == 0);
	CHECK(symlink("sub", pathf(buf, "%s/%s", X, "sub-link")) == 0);
	CHECK(symlink("missing", pathf(buf, "%s/%s", X, "dangling.json")) == 0);

	struct es_materialized m;
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), 0);
	/* Sorted by relative path, bytewise: ".hidden-dir/..." < "_temporary/..." < "part-*". Only
	 * the basename is filtered, so files below "_temporary/" and ".hidden-dir/" count (the
	 * reference's quirk); a symlinked file counts, a symlinked folder is not entered. */
	CHECK_INT_EQ((int)m.n_files, 6);
	if (m.n_files == 6) {
		check_file_entry(&m.files[0], A, "ray-output.jsonl/.hidden-dir/h.json", 1,
				 pathf(buf, "%s/%s", X, ".hidden-dir/h.json"));
		check_file_entry(&m.files[1], A, "ray-output.jsonl/_temporary/0/part-9.json", 1,
				 pathf(buf, "%s/%s", X, "_temporary/0/part-9.json"));
		check_file_entry(&m.files[2], A, "ray-output.jsonl/part-0.json", 2,
				 pathf(buf, "%s/%s", X, "part-0.json"));
		check_file_entry(&m.files[3], A, "ray-output.jsonl/part-1.json", 1,
				 pathf(buf, "%s/%s", X, "part-1.json"));
		check_file_entry(&m.files[4], A, "ray-output.jsonl/sub/x.json", 1,
				 pathf(buf, "%s/%s", X, "sub/x.json"));
		check_file_entry(&m.files[5], A, "ray-output.jsonl/z-link.json", 2,
				 pathf(buf, "%s/%s", X, "part-0.json"));
	}
	/* Raw bytes are copied (no re-encoding), with a '\n' added where one was missing. */
	const char *want = "{\"h\":0}\n{\"t\":9}\r\n{\"a\":1}\n{\"a\":2}\n{\"b\":\"no newline\"}\n"
			   "  {\"s\" : [1, 2.50, 1e400]}  \n{\"a\":1}\n{\"a\":2}\n";
	pathf(out, "%s/%s", A, "processed.jsonl");
	char *got = slurp(out);
	CHECK_STR_EQ(got, want);
	free(got);
	CHECK_INT_EQ((int)m.rows, 8);
	CHECK_INT_EQ((int)m.size_bytes, (int)strlen(want));
	uint64_t size;
	CHECK_INT_EQ(es_sha_file(out, hex, &size), 0);
	CHECK_STR_EQ(m.sha256, hex);
	CHECK_INT_EQ(temporaries_left(A), 0);
	es_materialized_free(&m);
	CHECK(m.files == NULL && m.n_files == 0);
}

static void test_materialize_file_and_empty(void)
{
	char A[PATH_MAX], tok[33], buf[PATH_MAX * 2], hex[65];
	struct es_materialized m;
	uint64_t size;

	/* A single file export, last line without '\n'. */
	new_attempt(A, tok);
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl"), "{\"x\":1}\n{\"x\":2}");
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), 0);
	CHECK_INT_EQ((int)m.n_files, 1);
	check_file_entry(&m.files[0], A, "ray-output.jsonl", 2, pathf(buf, "%s/%s", A, "ray-output.jsonl"));
	CHECK_INT_EQ((int)m.files[0].size_bytes, 15);
	char *got = slurp(pathf(buf, "%s/%s", A, "processed.jsonl"));
	CHECK_STR_EQ(got, "{\"x\":1}\n{\"x\":2}\n");
	free(got);
	CHECK_INT_EQ((int)m.rows, 2);
	CHECK_INT_EQ((int)m.size_bytes, 16);
	es_materialized_free(&m);

	/* An empty folder (or one with only _SUCCESS) is a valid, empty result. */
	new_attempt(A, tok);
	mkdirs(pathf(buf, "%s/%s", A, "ray-output.jsonl"));
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl/_SUCCESS"), "");
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), 0);
	CHECK_INT_EQ((int)m.n_files, 0);
	CHECK_INT_EQ((int)m.rows, 0);
	CHECK_INT_EQ((int)m.size_bytes, 0);
	CHECK_STR_EQ(m.sha256, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	CHECK_INT_EQ(es_sha_file(pathf(buf, "%s/%s", A, "processed.jsonl"), hex, &size), 0);
	CHECK_INT_EQ((int)size, 0);
	es_materialized_free(&m);

	/* An empty file export: zero rows. */
	new_attempt(A, tok);
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl"), "");
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), 0);
	CHECK_INT_EQ((int)m.n_files, 1);
	CHECK_INT_EQ((int)m.rows, 0);
	es_materialized_free(&m);
}

static void test_materialize_errors(void)
{
	char A[PATH_MAX], tok[33], buf[PATH_MAX * 2], want[PATH_MAX * 2];
	struct es_materialized m;

	/* Missing export: the reference's message, with its own code. */
	new_attempt(A, tok);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), ES_ENOENT);
	es_log_quiet_end();
	sfmt(want, sizeof(want), "Data-Juicer returned 0 but did not create %s/ray-output.jsonl", A);
	CHECK_STR_EQ(es_last_error(), want);
	CHECK(es_fs_exists(pathf(buf, "%s/%s", A, "processed.jsonl")) == 0);

	/* A bad line: path:line in the message, nothing published, no temporary left. */
	new_attempt(A, tok);
	mkdirs(pathf(buf, "%s/%s", A, "ray-output.jsonl"));
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl/part-0.json"), "{\"a\":1}\n");
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl/part-1.json"), "{\"a\":1}\n{\"a\":\n{}\n");
	es_log_quiet_begin();
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), ES_EINVAL);
	es_log_quiet_end();
	sfmt(want, sizeof(want), "%s/ray-output.jsonl/part-1.json:2", A);
	CHECK(strstr(es_last_error(), want) != NULL);
	CHECK(m.n_files == 0 && m.files == NULL);
	CHECK(es_fs_exists(pathf(buf, "%s/%s", A, "processed.jsonl")) == 0);
	CHECK_INT_EQ(temporaries_left(A), 0);

	/* Other strict rules apply too: a blank line, a non-object. */
	new_attempt(A, tok);
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl"), "{}\n   \n");
	es_log_quiet_begin();
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), ES_EINVAL);
	es_log_quiet_end();
	sfmt(want, sizeof(want), "Blank JSONL record at %s/ray-output.jsonl:2", A);
	CHECK_STR_EQ(es_last_error(), want);
	new_attempt(A, tok);
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl"), "[1]\n");
	es_log_quiet_begin();
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), ES_EINVAL);
	es_log_quiet_end();
	sfmt(want, sizeof(want), "JSONL record must be an object at %s/ray-output.jsonl:1", A);
	CHECK_STR_EQ(es_last_error(), want);

	/* A line over the cap. */
	new_attempt(A, tok);
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl"), "{\"long\":\"0123456789012345678901234567890\"}\n");
	es_log_quiet_begin();
	CHECK(es_materialize(J, A, &(struct es_materialize_opts){ .max_line = 16 }, &m) < 0);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "16-byte cap") != NULL);
	CHECK_INT_EQ(temporaries_left(A), 0);

	/* Neither a file nor a folder. */
	new_attempt(A, tok);
	CHECK(mkfifo(pathf(buf, "%s/%s", A, "ray-output.jsonl"), 0644) == 0);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), ES_EINVAL);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "neither a file nor a folder") != NULL);
}

/* --keep-order: the numbered input copy, and materialization that strips the field and sorts. */
static void test_keep_order(void)
{
	char A[PATH_MAX], tok[33], buf[PATH_MAX * 2], src[PATH_MAX * 2];
	struct es_materialized m;
	int64_t rows = 0;
	struct es_materialize_opts ko = { .keep_order = 1, .input_rows = 4 };

	new_attempt(A, tok);
	pathf(src, "%s/%s", A, "shard.jsonl");
	write_file(src, "{\"id\":0,\"t\":\"a,\\\"}\"}\n{}\n{\"n\":{\"__eshard_row__\":9}}\n{\"id\":3}\n");
	CHECK_INT_EQ(es_materialize_number_rows(src, pathf(buf, "%s/%s", A, "input.jsonl"), &rows), 0);
	CHECK_INT_EQ((int)rows, 4);
	char *got = slurp(buf);
	CHECK_STR_EQ(got, "{\"id\":0,\"t\":\"a,\\\"}\",\"__eshard_row__\":0}\n{\"__eshard_row__\":1}\n"
			  "{\"n\":{\"__eshard_row__\":9},\"__eshard_row__\":2}\n{\"id\":3,\"__eshard_row__\":3}\n");
	free(got);
	CHECK_INT_EQ(temporaries_left(A), 0);

	/* A processor that moved the field, re-spaced the row and changed the order (two part
	 * files); row 1 was filtered out. */
	mkdirs(pathf(buf, "%s/%s", A, "ray-output.jsonl"));
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl/0_a.json"),
		   "{\"__eshard_row__\":3, \"id\":3}\n{\"n\":{\"__eshard_row__\":9},\"__eshard_row__\":2}\n");
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl/1_b.json"), "{\"id\":0, \"__eshard_row__\" : 0 ,\"t\":1}\n");
	CHECK_INT_EQ(es_materialize(J, A, &ko, &m), 0);
	got = slurp(pathf(buf, "%s/%s", A, "processed.jsonl"));
	CHECK_STR_EQ(got, "{\"id\":0 ,\"t\":1}\n{\"n\":{\"__eshard_row__\":9}}\n{\"id\":3}\n");
	CHECK_INT_EQ((int)m.rows, 3);
	CHECK_INT_EQ((int)m.size_bytes, (int)strlen(got));
	char hex[65];
	CHECK_INT_EQ(es_sha_file(buf, hex, NULL), 0);
	CHECK_STR_EQ(m.sha256, hex);
	free(got);
	es_materialized_free(&m);
	CHECK_INT_EQ(temporaries_left(A), 0);

	/* Already in order: one pass, same result shape. */
	new_attempt(A, tok);
	write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl"), "{\"__eshard_row__\":0}\n{\"a\":1,\"__eshard_row__\":2}\n");
	CHECK_INT_EQ(es_materialize(J, A, &ko, &m), 0);
	got = slurp(pathf(buf, "%s/%s", A, "processed.jsonl"));
	CHECK_STR_EQ(got, "{}\n{\"a\":1}\n");
	free(got);
	es_materialized_free(&m);

	/* Dropped, duplicated, changed or out of range: a clear error, nothing published. */
	static const char *const bad[][2] = {
		{ "{\"id\":1}\n", "has no \"__eshard_row__\" field" },
		{ "{\"__eshard_row__\":1}\n{\"__eshard_row__\":1}\n", "row number 1 (\"__eshard_row__\") twice" },
		{ "{\"__eshard_row__\":1.0}\n", "not a row number of the input" },
		{ "{\"__eshard_row__\":4}\n", "not a row number of the input (0 to 3)" },
		{ "{\"__eshard_row__\":1,\"__eshard_row__\":2}\n", "more than once" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		new_attempt(A, tok);
		write_file(pathf(buf, "%s/%s", A, "ray-output.jsonl"), bad[i][0]);
		es_log_quiet_begin();
		CHECK_INT_EQ(es_materialize(J, A, &ko, &m), ES_EINVAL);
		es_log_quiet_end();
		CHECK(strstr(es_last_error(), bad[i][1]) != NULL);
		CHECK(access(pathf(buf, "%s/%s", A, "processed.jsonl"), F_OK) != 0);
		CHECK_INT_EQ(temporaries_left(A), 0);
	}

	/* An input row with the field of its own is refused. */
	new_attempt(A, tok);
	write_file(src, "{\"a\":1}\n{\"__eshard_row__\":5}\n");
	es_log_quiet_begin();
	CHECK_INT_EQ(es_materialize_number_rows(src, pathf(buf, "%s/%s", A, "input.jsonl"), &rows), ES_EINVAL);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "of its own") != NULL && strstr(es_last_error(), ":2") != NULL);
	CHECK(access(buf, F_OK) != 0);
}

int main(void)
{
	const char *T = test_tmpdir();
	if (!realpath(T, RT)) {
		perror(T);
		return 1;
	}
	char buf[PATH_MAX * 2];
	pathf(J, "%s/%s", RT, "job");
	mkdirs(pathf(buf, "%s/%s", J, "attempts"));
	test_materialize_folder();
	test_materialize_file_and_empty();
	test_materialize_errors();
	test_keep_order();
	return test_done();
}
