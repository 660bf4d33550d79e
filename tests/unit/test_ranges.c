/*
 * Unit tests of src/ranges.c: ranges end at line boundaries, cover every byte once and in
 * order; empty files, files smaller than a range, a range inside one huge line, CRLF, a
 * last line without '\n', a compressed file as one range; and reading every range through a
 * line reader limited to it gives the file's lines with their numbers.
 */
#include "testlib.h"

#include "eshard/linereader.h"
#include "eshard/log.h"
#include "eshard/ranges.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *T;

static int open_with(const char *name, const char *data, size_t len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", T, name);
	FILE *f = fopen(path, "wb");
	if (!CHECK(f != NULL))
		return -1;
	CHECK(fwrite(data, 1, len, f) == len);
	CHECK(fclose(f) == 0);
	return open(path, O_RDONLY);
}

/* The ranges of data cut near every target bytes, as "start-end " pairs. */
static void plan(const char *data, uint64_t target, char *out, size_t n)
{
	struct es_ranges r = ES_RANGES_INIT;
	size_t len = strlen(data);
	int fd = open_with("f.jsonl", data, len);
	CHECK_INT_EQ(es_ranges_add_file(&r, 3, fd, len, target, "f.jsonl"), 0);
	close(fd);
	size_t used = 0;
	out[0] = 0;
	uint64_t next = 0;
	for (size_t i = 0; i < r.n; i++) {
		CHECK_INT_EQ(r.v[i].file, 3);
		CHECK_INT_EQ(r.v[i].start, next); /* contiguous, in order */
		CHECK(r.v[i].end > r.v[i].start);
		/* Every range ends just after a '\n' or at the end of the file. */
		CHECK(r.v[i].end == len || data[r.v[i].end - 1] == '\n');
		next = r.v[i].end;
		used += (size_t)snprintf(out + used, n - used, "%llu-%llu ", (unsigned long long)r.v[i].start,
					 (unsigned long long)r.v[i].end);
	}
	CHECK_INT_EQ(next, len);
	es_ranges_free(&r);
}

static void test_cuts(void)
{
	char got[512];
	/* Lines of 4 bytes; a cut at 4 falls just after a '\n': the range ends there. */
	plan("aaa\nbbb\nccc\n", 4, got, sizeof(got));
	CHECK_STR_EQ(got, "0-4 4-8 8-12 ");
	/* A cut inside a line moves to its end. */
	plan("aaa\nbbb\nccc\n", 5, got, sizeof(got));
	CHECK_STR_EQ(got, "0-8 8-12 ");
	/* A file smaller than a range is one range. */
	plan("aaa\nbbb\n", 100, got, sizeof(got));
	CHECK_STR_EQ(got, "0-8 ");
	/* A range inside one huge line: the cuts in it all move to its end. */
	plan("a\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\nb\n", 3, got, sizeof(got));
	CHECK_STR_EQ(got, "0-42 42-44 ");
	plan("a\nb\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\nb\n", 2, got, sizeof(got));
	CHECK_STR_EQ(got, "0-2 2-4 4-44 44-46 ");
	/* A huge last line without '\n': one range to the end. */
	plan("a\nxxxxxxxxxxxxxxxxxxxx", 2, got, sizeof(got));
	CHECK_STR_EQ(got, "0-2 2-22 ");
	/* CRLF: a cut between '\r' and '\n' goes after the '\n'. */
	plan("ab\r\ncd\r\n", 3, got, sizeof(got));
	CHECK_STR_EQ(got, "0-4 4-8 ");
	plan("ab\r\ncd\r\n", 4, got, sizeof(got));
	CHECK_STR_EQ(got, "0-4 4-8 ");
	/* Blank lines are lines. */
	plan("\n\n\n", 1, got, sizeof(got));
	CHECK_STR_EQ(got, "0-1 1-2 2-3 ");
}

static void test_empty_and_whole(void)
{
	struct es_ranges r = ES_RANGES_INIT;
	int fd = open_with("empty.jsonl", "", 0);
	CHECK_INT_EQ(es_ranges_add_file(&r, 0, fd, 0, 10, "empty.jsonl"), 0);
	close(fd);
	CHECK_INT_EQ(r.n, 0); /* an empty plain file has no range */
	CHECK_INT_EQ(es_ranges_add_whole(&r, 1, 0), 0); /* a compressed one has one, even empty */
	CHECK_INT_EQ(es_ranges_add_whole(&r, 2, 12345), 0);
	CHECK_INT_EQ(r.n, 2);
	CHECK_INT_EQ(r.v[0].file, 1);
	CHECK_INT_EQ(r.v[1].end, 12345);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_ranges_add_file(&r, 0, -1, 5, 0, "x"), ES_EINTERNAL);
	es_log_quiet_end();
	es_ranges_free(&r);
	CHECK(r.v == NULL && r.n == 0);
}

/* Many random files, cut at many sizes: each range read through a limited line reader, with
 * the lines numbered from those before it, gives exactly the file's lines. */
static void test_read_back(void)
{
	for (int round = 0; round < 40; round++) {
		char data[600];
		size_t len = test_rand() % sizeof(data);
		for (size_t i = 0; i < len; i++) {
			uint64_t x = test_rand() % 10;
			data[i] = x == 0 ? '\n' : x == 1 ? '\r' : (char)('a' + x);
		}
		int fd = open_with("r.jsonl", data, len);
		struct es_ranges r = ES_RANGES_INIT;
		uint64_t target = 1 + test_rand() % 50;
		CHECK_INT_EQ(es_ranges_add_file(&r, 0, fd, len, target, "r.jsonl"), 0);
		uint64_t lineno = 0, pos = 0;
		for (size_t i = 0; i < r.n; i++) {
			CHECK(lseek(fd, (off_t)r.v[i].start, SEEK_SET) == (off_t)r.v[i].start);
			struct es_line_reader *lr = es_line_reader_new(fd, 1 << 20, "r.jsonl");
			es_line_reader_set_limit(lr, r.v[i].end - r.v[i].start);
			es_line_reader_set_lineno(lr, lineno);
			const char *line;
			size_t n;
			int nl;
			while (es_line_reader_next(lr, &line, &n, &nl) == 1) {
				CHECK(pos + n <= len && !memcmp(line, data + pos, n));
				pos += n + (nl != 0);
				CHECK(!nl || data[pos - 1] == '\n');
			}
			lineno = es_line_reader_lineno(lr);
			CHECK_INT_EQ(es_line_reader_bytes(lr), r.v[i].end - r.v[i].start);
			es_line_reader_free(lr);
		}
		CHECK_INT_EQ(pos, len);
		/* The line count of the ranges is the file's. */
		uint64_t lines = 0;
		for (size_t i = 0; i < len; i++)
			lines += data[i] == '\n';
		lines += len && data[len - 1] != '\n';
		CHECK_INT_EQ(lineno, lines);
		es_ranges_free(&r);
		close(fd);
	}
}

int main(void)
{
	T = test_tmpdir();
	test_cuts();
	test_empty_and_whole();
	test_read_back();
	return test_done();
}
