/*
 * Unit tests of src/linereader.c: line splitting, the cap (reported before the rest of an
 * over-long line is read), the raw callback, the counters and a read error.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/linereader.h"
#include "eshard/log.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *T; /* this run's temp folder */

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!CHECK(f != NULL))
		return;
	CHECK(fwrite(data, 1, len, f) == len);
	CHECK(fclose(f) == 0);
}

static void raw_collect(void *arg, const void *p, size_t n)
{
	struct es_buf *b = arg;
	es_buf_add(b, p, n);
}

/* Read path with cap; lines are appended to got as "<line>|<has_nl>\n". Returns the last
 * result of next(). */
static int read_all(const char *path, size_t cap, struct es_buf *got, struct es_buf *raw,
		    uint64_t *lines)
{
	int fd = open(path, O_RDONLY);
	if (!CHECK(fd >= 0))
		return -1;
	struct es_line_reader *r = es_line_reader_new(fd, cap, path);
	if (raw)
		es_line_reader_set_raw_cb(r, raw_collect, raw);
	const char *l;
	size_t n;
	int nl, rc;
	uint64_t count = 0;
	while ((rc = es_line_reader_next(r, &l, &n, &nl)) == 1) {
		count++;
		CHECK_INT_EQ(es_line_reader_lineno(r), count);
		es_buf_add(got, l, n);
		es_buf_printf(got, "|%d\n", nl);
	}
	if (lines)
		*lines = count;
	/* After the end, it stays at the end. */
	if (rc == 0)
		CHECK_INT_EQ(es_line_reader_next(r, &l, &n, &nl), 0);
	es_line_reader_free(r);
	close(fd);
	return rc;
}

static void test_line_reader(void)
{
	char path[PATH_MAX];
	struct es_buf got = ES_BUF_INIT, raw = ES_BUF_INIT, want = ES_BUF_INIT;
	snprintf(path, sizeof(path), "%s/lines.jsonl", T);

	write_file(path, "a\nb\r\n\n\r\nlast", 12);
	CHECK_INT_EQ(read_all(path, 100, &got, NULL, NULL), 0);
	CHECK_MEM_EQ(got.data, got.len, "a|1\nb\r|1\n|1\n\r|1\nlast|0\n", 23);

	es_buf_reset(&got);
	write_file(path, "x\n", 2);
	CHECK_INT_EQ(read_all(path, 100, &got, NULL, NULL), 0);
	CHECK_STR_EQ(got.data, "x|1\n");

	es_buf_reset(&got);
	write_file(path, "", 0);
	CHECK_INT_EQ(read_all(path, 100, &got, NULL, NULL), 0);
	CHECK_INT_EQ(got.len, 0);

	es_buf_reset(&got);
	write_file(path, "\n", 1);
	CHECK_INT_EQ(read_all(path, 100, &got, NULL, NULL), 0);
	CHECK_STR_EQ(got.data, "|1\n");

	/* The cap: a line of exactly max bytes is fine, one more byte is an error. */
	char msg[PATH_MAX + 128];
	es_buf_reset(&got);
	write_file(path, "12345\n123456\nz\n", 15);
	CHECK_INT_EQ(read_all(path, 5, &got, NULL, NULL), ES_EINVAL);
	CHECK_STR_EQ(got.data, "12345|1\n");
	snprintf(msg, sizeof(msg), "JSONL line longer than the 5-byte cap at %s:2", path);
	CHECK_STR_EQ(es_last_error(), msg);
	es_buf_reset(&got);
	write_file(path, "1\n123456", 8);
	CHECK_INT_EQ(read_all(path, 5, &got, NULL, NULL), ES_EINVAL);
	CHECK_STR_EQ(es_last_error(), msg);

	/* Over-long line much bigger than a read: reported without reading it all into memory. */
	size_t big = (size_t)5 << 20;
	char *blob = malloc(big + 1);
	if (!CHECK(blob != NULL))
		goto out;
	memset(blob, 'q', big);
	blob[big] = '\n';
	write_file(path, blob, big + 1);
	es_buf_reset(&got);
	CHECK_INT_EQ(read_all(path, (size_t)1 << 20, &got, NULL, NULL), ES_EINVAL);
	snprintf(msg, sizeof(msg), "JSONL line longer than the 1048576-byte cap at %s:1", path);
	CHECK_STR_EQ(es_last_error(), msg);
	free(blob);

	/* Many lines of varied length crossing every read boundary, one line of 3.5 MiB that
	 * spans several reads, no final newline; the raw callback sees every byte in order. */
	struct es_buf file = ES_BUF_INIT;
	uint64_t nlines = 0;
	for (int i = 0; file.len < ((size_t)6 << 20); i++) {
		size_t n = (i == 300) ? ((size_t)7 << 19) : (size_t)(test_rand() % 5000);
		size_t start = file.len;
		es_buf_grow(&file, n + 1);
		for (size_t k = 0; k < n; k++)
			file.data[file.len++] = (char)('a' + (start + k) % 26);
		es_buf_add(&want, file.data + start, n);
		es_buf_adds(&want, "|1\n");
		es_buf_addc(&file, '\n');
		nlines++;
	}
	es_buf_adds(&file, "tail");
	es_buf_adds(&want, "tail|0\n");
	nlines++;
	write_file(path, file.data, file.len);
	es_buf_reset(&got);
	uint64_t count = 0;
	CHECK_INT_EQ(read_all(path, (size_t)4 << 20, &got, &raw, &count), 0);
	CHECK_INT_EQ(count, nlines);
	CHECK(got.len == want.len && memcmp(got.data, want.data, want.len) == 0);
	CHECK(raw.len == file.len && memcmp(raw.data, file.data, file.len) == 0);
	es_buf_free(&file);

	/* Bytes counter and a read error. */
	int fd = open(path, O_RDONLY);
	struct es_line_reader *r = es_line_reader_new(fd, 100, path);
	close(fd);
	const char *l;
	size_t n;
	int nl;
	CHECK(es_line_reader_next(r, &l, &n, &nl) == ES_EIO);
	CHECK(strstr(es_last_error(), "cannot read") != NULL);
	CHECK_INT_EQ(es_line_reader_bytes(r), 0);
	es_line_reader_free(r);
out:
	es_buf_free(&got);
	es_buf_free(&raw);
	es_buf_free(&want);
}


/* Counters after each line, a zero cap, and a pipe that hands the bytes over in pieces. */
static void test_counters_and_pipe(void)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/count.jsonl", T);
	write_file(path, "ab\r\n\ncd", 7);
	int fd = open(path, O_RDONLY);
	if (!CHECK(fd >= 0))
		return;
	struct es_line_reader *r = es_line_reader_new(fd, 100, path);
	const char *l;
	size_t n;
	int nl;
	CHECK_INT_EQ(es_line_reader_lineno(r), 0);
	CHECK_INT_EQ(es_line_reader_bytes(r), 0);
	CHECK_INT_EQ(es_line_reader_next(r, &l, &n, &nl), 1);
	CHECK_MEM_EQ(l, n, "ab\r", 3);
	CHECK_INT_EQ(nl, 1);
	CHECK_INT_EQ(es_line_reader_lineno(r), 1);
	CHECK_INT_EQ(es_line_reader_bytes(r), 7); /* the whole file came in one read */
	CHECK_INT_EQ(es_line_reader_next(r, &l, &n, &nl), 1);
	CHECK(n == 0 && nl == 1);
	CHECK_INT_EQ(es_line_reader_next(r, &l, &n, &nl), 1);
	CHECK_MEM_EQ(l, n, "cd", 2);
	CHECK_INT_EQ(nl, 0);
	CHECK_INT_EQ(es_line_reader_lineno(r), 3);
	CHECK_INT_EQ(es_line_reader_next(r, &l, &n, &nl), 0);
	CHECK_INT_EQ(es_line_reader_lineno(r), 3);
	es_line_reader_free(r);

	/* Cap 0: empty lines only. The fd is left open and where the reader stopped. */
	CHECK(lseek(fd, 0, SEEK_SET) == 0);
	write_file(path, "\n\nx\n", 4);
	r = es_line_reader_new(fd, 0, "p");
	CHECK_INT_EQ(es_line_reader_next(r, &l, &n, &nl), 1);
	CHECK_INT_EQ(es_line_reader_next(r, &l, &n, &nl), 1);
	CHECK_INT_EQ(es_line_reader_next(r, &l, &n, &nl), ES_EINVAL);
	CHECK_STR_EQ(es_last_error(), "JSONL line longer than the 0-byte cap at p:3");
	es_line_reader_free(r);
	CHECK(fcntl(fd, F_GETFD) >= 0);
	close(fd);
	es_line_reader_free(NULL);

	/* A pipe: lines that span writes come out whole. */
	int p[2];
	if (!CHECK(pipe(p) == 0))
		return;
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		const char *parts[] = { "one", "\ntw", "o\n", "", "three" };
		for (size_t i = 0; i < 5; i++) {
			if (write(p[1], parts[i], strlen(parts[i])) < 0)
				_exit(1);
			usleep(20000);
		}
		_exit(0);
	}
	close(p[1]);
	struct es_buf got = ES_BUF_INIT;
	r = es_line_reader_new(p[0], 100, "pipe");
	while (es_line_reader_next(r, &l, &n, &nl) == 1) {
		es_buf_add(&got, l, n);
		es_buf_printf(&got, "|%d\n", nl);
	}
	CHECK_STR_EQ(got.data, "one|1\ntwo|1\nthree|0\n");
	CHECK_INT_EQ(es_line_reader_bytes(r), 13);
	es_line_reader_free(r);
	es_buf_free(&got);
	close(p[0]);
	waitpid(pid, NULL, 0);
}

int main(void)
{
	T = test_tmpdir();
	es_log_quiet_begin();
	test_line_reader();
	test_counters_and_pipe();
	es_log_quiet_end();
	return test_done();
}
