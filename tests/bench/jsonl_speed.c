/*
 * jsonl_speed: throughput of the JSONL data path on a corpus, in MB/s (1 MB = 10^6 bytes).
 *
 * Not a CTest test: a tool to run by hand after a change to src/jsonl.c.
 *
 *   python3 gen_corpus.py /tmp/c.jsonl 100        (the shared corpus generator, or any JSONL)
 *   cmake --build build --target eshard
 *   cc -O2 -D_GNU_SOURCE -Iinclude tests/bench/jsonl_speed.c build/libeshard.a \
 *      -lcrypto -lcjson -lyaml -lpthread -lm -o /tmp/jsonl_speed
 *   /tmp/jsonl_speed /tmp/c.jsonl [media_root]
 *
 * The file is read into memory once, so that the numbers are about parsing and encoding,
 * not the disk. It reports: the line reader alone, validate, normalize (no options), and
 * normalize with the reference's media and index keys (when media_root is given), each as
 * the best of a few runs.
 */
#include "eshard/jsonl.h"
#include "eshard/linereader.h"
#include "eshard/log.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct line {
	size_t off, len;
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE.jsonl [media_root]\n", argv[0]);
		return 2;
	}
	const char *path = argv[1];
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		perror(path);
		return 2;
	}
	struct stat st;
	fstat(fd, &st);

	/* Line reader alone, from the file (page cache warm after the first run). */
	double best_rd = 1e9;
	for (int run = 0; run < 3; run++) {
		lseek(fd, 0, SEEK_SET);
		struct es_line_reader *r = es_line_reader_new(fd, (size_t)1 << 30, path);
		const char *l;
		size_t n;
		int nl;
		double t0 = now();
		while (es_line_reader_next(r, &l, &n, &nl) == 1)
			;
		double t = now() - t0;
		if (t < best_rd)
			best_rd = t;
		es_line_reader_free(r);
	}

	char *data = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	lseek(fd, 0, SEEK_SET);
	while (got < (size_t)st.st_size) {
		ssize_t k = read(fd, data + got, (size_t)st.st_size - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	size_t nlines = 0, cap = 1024;
	struct line *lines = malloc(cap * sizeof(*lines));
	for (size_t i = 0; i < got;) {
		char *nl = memchr(data + i, '\n', got - i);
		size_t end = nl ? (size_t)(nl - data) : got;
		if (nlines == cap)
			lines = realloc(lines, (cap *= 2) * sizeof(*lines));
		lines[nlines].off = i;
		lines[nlines++].len = end - i;
		i = end + 1;
	}

	struct es_jsonl *plain = es_jsonl_new(NULL);
	const char *media[] = { "images", "audios", "videos" };
	const char *index[] = { "global_index" };
	struct es_jsonl_opts o = { media, 3, argc > 2 ? argv[2] : "/tmp", index, 1 };
	struct es_jsonl *full = es_jsonl_new(&o);
	struct es_buf out = ES_BUF_INIT;
	double best[3] = { 1e9, 1e9, 1e9 };
	size_t outbytes = 0;
	for (int run = 0; run < 5; run++) {
		for (int mode = 0; mode < (argc > 2 ? 3 : 2); mode++) {
			double t0 = now();
			outbytes = 0;
			for (size_t i = 0; i < nlines; i++) {
				const char *l = data + lines[i].off;
				int rc;
				if (mode == 0)
					rc = es_jsonl_validate(plain, l, lines[i].len, path, i + 1);
				else
					rc = es_jsonl_normalize(mode == 1 ? plain : full, l, lines[i].len, i,
								path, i + 1, &out);
				if (rc)
					return 1;
				/* Hand the output on in chunks, as prepare does. */
				if (out.len >= ((size_t)1 << 20)) {
					outbytes += out.len;
					es_buf_reset(&out);
				}
			}
			outbytes += out.len;
			es_buf_reset(&out);
			double t = now() - t0;
			if (t < best[mode])
				best[mode] = t;
		}
	}
	double mb = (double)got / 1e6;
	printf("%s: %.1f MB, %zu lines\n", path, mb, nlines);
	printf("line reader:          %8.0f MB/s\n", mb / best_rd);
	printf("validate:             %8.0f MB/s\n", mb / best[0]);
	printf("normalize:            %8.0f MB/s (%zu bytes out)\n", mb / best[1], outbytes);
	if (argc > 2)
		printf("normalize+media/index:%8.0f MB/s\n", mb / best[2]);
	es_buf_free(&out);
	es_jsonl_free(plain);
	es_jsonl_free(full);
	free(lines);
	free(data);
	return 0;
}
