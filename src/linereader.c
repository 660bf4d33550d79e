/*
 * linereader: lines out of an fd with memory bounded by the line cap.
 *
 * The buffer holds [pos, fill): the next line starts at pos and no '\n' lies in [pos, scan),
 * so each byte is searched once however many reads a long line takes. Before a read the
 * partial line moves to the front when the free tail is short, and the buffer grows by one
 * read only when the partial line itself needs it; the cap check comes first.
 */
#include "eshard/linereader.h"
#include "eshard/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RD_CHUNK ((size_t)1 << 20)

struct es_line_reader {
	int fd;
	int eof;
	size_t max_line;
	char *path;
	char *buf;
	size_t cap, pos, fill, scan; /* next line starts at pos; no '\n' in [pos, scan) */
	uint64_t lineno, bytes;
	void (*cb)(void *arg, const void *p, size_t n);
	void *cb_arg;
};

struct es_line_reader *es_line_reader_new(int fd, size_t max_line, const char *path)
{
	struct es_line_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->fd = fd;
	r->max_line = max_line;
	r->path = strdup(path ? path : "");
	r->cap = 2 * RD_CHUNK;
	r->buf = malloc(r->cap);
	if (!r->path || !r->buf) {
		es_line_reader_free(r);
		return NULL;
	}
	return r;
}

void es_line_reader_set_raw_cb(struct es_line_reader *r,
			       void (*cb)(void *arg, const void *p, size_t n), void *arg)
{
	r->cb = cb;
	r->cb_arg = arg;
}

static int over_cap(struct es_line_reader *r)
{
	return es_error(ES_EINVAL, "JSONL line longer than the %zu-byte cap at %s:%" PRIu64,
			r->max_line, r->path, r->lineno + 1);
}

int es_line_reader_next(struct es_line_reader *r, const char **line, size_t *len, int *has_nl)
{
	for (;;) {
		char *nl = memchr(r->buf + r->scan, '\n', r->fill - r->scan);
		if (nl) {
			size_t n = (size_t)(nl - (r->buf + r->pos));
			if (n > r->max_line)
				return over_cap(r);
			*line = r->buf + r->pos;
			*len = n;
			*has_nl = 1;
			r->pos = r->scan = (size_t)(nl - r->buf) + 1;
			r->lineno++;
			return 1;
		}
		r->scan = r->fill;
		size_t part = r->fill - r->pos;
		/* Fail before reading the rest of an over-long line: memory stays bounded. */
		if (part > r->max_line)
			return over_cap(r);
		if (r->eof) {
			if (!part)
				return 0;
			*line = r->buf + r->pos;
			*len = part;
			*has_nl = 0;
			r->pos = r->scan = r->fill;
			r->lineno++;
			return 1;
		}
		if (r->cap - r->fill < RD_CHUNK && r->pos > 0) {
			memmove(r->buf, r->buf + r->pos, part);
			r->fill = r->scan = part;
			r->pos = 0;
		}
		if (r->cap - r->fill < RD_CHUNK) {
			size_t ncap = r->fill + RD_CHUNK;
			char *nb = realloc(r->buf, ncap);
			if (!nb)
				return es_error(ES_ENOMEM, "out of memory reading '%s'", r->path);
			r->buf = nb;
			r->cap = ncap;
		}
		ssize_t got;
		do
			got = read(r->fd, r->buf + r->fill, r->cap - r->fill);
		while (got < 0 && errno == EINTR);
		if (got < 0)
			return es_error_errno(ES_EIO, "cannot read '%s'", r->path);
		if (got == 0) {
			r->eof = 1;
			continue;
		}
		if (r->cb)
			r->cb(r->cb_arg, r->buf + r->fill, (size_t)got);
		r->fill += (size_t)got;
		r->bytes += (uint64_t)got;
	}
}

uint64_t es_line_reader_lineno(const struct es_line_reader *r) { return r->lineno; }

uint64_t es_line_reader_bytes(const struct es_line_reader *r) { return r->bytes; }

void es_line_reader_free(struct es_line_reader *r)
{
	if (!r)
		return;
	free(r->buf);
	free(r->path);
	free(r);
}
