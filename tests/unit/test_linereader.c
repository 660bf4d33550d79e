/*
 * Unit tests of src/linereader.c: line splitting, the cap (reported before the rest of an
 * over-long line is read), the raw callback, the counters and a read error; compressed input
 * (gzip, zstd: decoded lines, the raw callback on the stored bytes, members and frames,
 * corrupt, truncated and empty files, the cap).
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
#include <zlib.h>
#include <zstd.h>

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
static int read_codec(const char *path, int codec, size_t cap, struct es_buf *got, struct es_buf *raw,
		      uint64_t *lines)
{
	int fd = open(path, O_RDONLY);
	if (!CHECK(fd >= 0))
		return -1;
	struct es_line_reader *r = es_line_reader_new_codec(fd, cap, path, codec);
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

static int read_all(const char *path, size_t cap, struct es_buf *got, struct es_buf *raw,
		    uint64_t *lines)
{
	return read_codec(path, ES_CODEC_PLAIN, cap, got, raw, lines);
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

/* data compressed as one gzip member, appended to out. */
static void gzip_append(struct es_buf *out, const char *data, size_t len)
{
	z_stream z;
	memset(&z, 0, sizeof(z));
	if (!CHECK(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK))
		return;
	size_t bound = deflateBound(&z, len);
	es_buf_grow(out, bound);
	z.next_in = (Bytef *)data;
	z.avail_in = (uInt)len;
	z.next_out = (Bytef *)out->data + out->len;
	z.avail_out = (uInt)bound;
	CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
	out->len += bound - z.avail_out;
	deflateEnd(&z);
}

/* data compressed as one zstd frame with its content checksum (as the zstd tool writes it),
 * appended to out. */
static void zstd_append(struct es_buf *out, const char *data, size_t len)
{
	size_t bound = ZSTD_compressBound(len);
	es_buf_grow(out, bound);
	ZSTD_CCtx *c = ZSTD_createCCtx();
	if (!CHECK(c != NULL))
		return;
	CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)));
	size_t n = ZSTD_compress2(c, out->data + out->len, bound, data, len);
	if (CHECK(!ZSTD_isError(n)))
		out->len += n;
	ZSTD_freeCCtx(c);
}

static void compress_append(int codec, struct es_buf *out, const char *data, size_t len)
{
	if (codec == ES_CODEC_GZIP)
		gzip_append(out, data, len);
	else
		zstd_append(out, data, len);
}

/* The lines of a compressed file are those of its plain bytes; the raw callback and the byte
 * counter see the stored bytes; members and frames join into one stream; corrupt, truncated,
 * trailing and empty data are errors naming the file and the last good line. */
static void test_codec(int codec)
{
	const char *ext = codec == ES_CODEC_GZIP ? "gz" : "zst";
	char path[PATH_MAX], msg[PATH_MAX + 128];
	snprintf(path, sizeof(path), "%s/lines.jsonl.%s", T, ext);
	CHECK_INT_EQ(es_codec_of_name(path), codec);

	/* Varied lines, one of 3.5 MiB (several decoded reads), random enough not to shrink to
	 * nothing, no final newline. */
	struct es_buf plain = ES_BUF_INIT, want = ES_BUF_INIT, z = ES_BUF_INIT;
	struct es_buf got = ES_BUF_INIT, raw = ES_BUF_INIT;
	uint64_t nlines = 0;
	for (int i = 0; plain.len < ((size_t)6 << 20); i++) {
		size_t n = (i == 300) ? ((size_t)7 << 19) : (size_t)(test_rand() % 5000);
		size_t start = plain.len;
		es_buf_grow(&plain, n + 1);
		for (size_t k = 0; k < n; k++)
			plain.data[plain.len++] = (char)('a' + test_rand() % 26);
		es_buf_add(&want, plain.data + start, n);
		es_buf_adds(&want, "|1\n");
		es_buf_addc(&plain, '\n');
		nlines++;
	}
	es_buf_adds(&plain, "tail");
	es_buf_adds(&want, "tail|0\n");
	nlines++;
	compress_append(codec, &z, plain.data, plain.len);
	write_file(path, z.data, z.len);
	uint64_t count = 0;
	CHECK_INT_EQ(read_codec(path, codec, (size_t)4 << 20, &got, &raw, &count), 0);
	CHECK_INT_EQ(count, nlines);
	CHECK(got.len == want.len && memcmp(got.data, want.data, want.len) == 0);
	CHECK(raw.len == z.len && memcmp(raw.data, z.data, z.len) == 0);

	/* Three members or frames, cut inside a line and inside "\r\n": one stream. */
	es_buf_reset(&z);
	compress_append(codec, &z, "one\ntw", 6);
	compress_append(codec, &z, "o\r", 2);
	compress_append(codec, &z, "\nthree\n", 7);
	write_file(path, z.data, z.len);
	es_buf_reset(&got);
	CHECK_INT_EQ(read_codec(path, codec, 100, &got, NULL, &count), 0);
	CHECK_STR_EQ(got.data, "one|1\ntwo\r|1\nthree|1\n");
	CHECK_INT_EQ(count, 3);
	/* A member or frame of no bytes at all is part of the stream too. */
	compress_append(codec, &z, "", 0);
	write_file(path, z.data, z.len);
	es_buf_reset(&got);
	CHECK_INT_EQ(read_codec(path, codec, 100, &got, NULL, &count), 0);
	CHECK_INT_EQ(count, 3);

	/* Truncated: the lines before the cut come out, then the error after the last one. */
	es_buf_reset(&z);
	compress_append(codec, &z, plain.data, plain.len);
	write_file(path, z.data, z.len / 2);
	es_buf_reset(&got);
	CHECK_INT_EQ(read_codec(path, codec, (size_t)4 << 20, &got, NULL, &count), ES_EINVAL);
	CHECK(count > 0 && count < nlines);
	CHECK(got.len < want.len && memcmp(got.data, want.data, got.len) == 0);
	snprintf(msg, sizeof(msg), "Corrupt %s data (truncated) in %s after line %llu",
		 es_codec_name(codec), path, (unsigned long long)count);
	CHECK_STR_EQ(es_last_error(), msg);

	/* A flipped byte in the middle: corrupt (gzip's CRC, zstd's block checks). */
	z.data[z.len / 2] ^= 0x55;
	z.data[z.len / 2 + 1] ^= 0x55;
	write_file(path, z.data, z.len);
	es_buf_reset(&got);
	CHECK_INT_EQ(read_codec(path, codec, (size_t)4 << 20, &got, NULL, NULL), ES_EINVAL);
	CHECK(strstr(es_last_error(), "Corrupt ") == es_last_error());
	CHECK(strstr(es_last_error(), path) != NULL);

	/* Trailing bytes that are no member or frame; a plain file under a compressed name; an
	 * empty file. */
	es_buf_reset(&z);
	compress_append(codec, &z, "a\n", 2);
	es_buf_adds(&z, "garbage!");
	write_file(path, z.data, z.len);
	es_buf_reset(&got);
	CHECK_INT_EQ(read_codec(path, codec, 100, &got, NULL, &count), ES_EINVAL);
	CHECK_STR_EQ(got.data, "a|1\n");
	CHECK(strstr(es_last_error(), " after line 1") != NULL);
	write_file(path, "{\"a\": 1}\n", 9);
	CHECK_INT_EQ(read_codec(path, codec, 100, &got, NULL, NULL), ES_EINVAL);
	snprintf(msg, sizeof(msg), "Corrupt %s data (", es_codec_name(codec));
	CHECK(strstr(es_last_error(), msg) == es_last_error());
	write_file(path, "", 0);
	CHECK_INT_EQ(read_codec(path, codec, 100, &got, NULL, NULL), ES_EINVAL);
	snprintf(msg, sizeof(msg), "Corrupt %s data (empty file) in %s after line 0", es_codec_name(codec), path);
	CHECK_STR_EQ(es_last_error(), msg);

	/* The cap counts decoded bytes: 64 MiB of one line (a few KiB stored) fails at once. */
	size_t big = (size_t)64 << 20;
	char *blob = malloc(big);
	if (CHECK(blob != NULL)) {
		memset(blob, 'q', big);
		memcpy(blob, "x\n", 2);
		es_buf_reset(&z);
		compress_append(codec, &z, blob, big);
		write_file(path, z.data, z.len);
		es_buf_reset(&raw);
		CHECK_INT_EQ(read_codec(path, codec, (size_t)1 << 20, &got, &raw, NULL), ES_EINVAL);
		snprintf(msg, sizeof(msg), "JSONL line longer than the 1048576-byte cap at %s:2", path);
		CHECK_STR_EQ(es_last_error(), msg);
		free(blob);
	}
	es_buf_free(&plain);
	es_buf_free(&want);
	es_buf_free(&z);
	es_buf_free(&got);
	es_buf_free(&raw);
}

static void test_codec_names(void)
{
	CHECK_INT_EQ(es_codec_of_name("a.jsonl"), ES_CODEC_PLAIN);
	CHECK_INT_EQ(es_codec_of_name("a.jsonl.gz"), ES_CODEC_GZIP);
	CHECK_INT_EQ(es_codec_of_name("/x/A.JSONL.GZ"), ES_CODEC_GZIP);
	CHECK_INT_EQ(es_codec_of_name("a.jsonl.zst"), ES_CODEC_ZSTD);
	CHECK_INT_EQ(es_codec_of_name("a.jsonl.Zst"), ES_CODEC_ZSTD);
	CHECK_INT_EQ(es_codec_of_name("a.zstd"), ES_CODEC_PLAIN);
	CHECK_INT_EQ(es_codec_of_name(".gz"), ES_CODEC_PLAIN);
	CHECK_STR_EQ(es_codec_name(ES_CODEC_ZSTD), "zstd");
}

int main(void)
{
	T = test_tmpdir();
	es_log_quiet_begin();
	test_line_reader();
	test_counters_and_pipe();
	test_codec_names();
	test_codec(ES_CODEC_GZIP);
	test_codec(ES_CODEC_ZSTD);
	es_log_quiet_end();
	return test_done();
}
