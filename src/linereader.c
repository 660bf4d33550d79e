/*
 * linereader: lines out of an fd with memory bounded by the line cap.
 *
 * The buffer holds [pos, fill): the next line starts at pos and no '\n' lies in [pos, scan),
 * so each byte is searched once however many reads a long line takes. Before a read the
 * partial line moves to the front when the free tail is short, and the buffer grows by one
 * read only when the partial line itself needs it; the cap check comes first.
 *
 * A compressed file (gzip or zstd) is read through a fixed input buffer of ZIN_CHUNK bytes
 * and decoded straight into the line buffer, one read's worth at a time, so memory stays the
 * same as for a plain file plus the decoder's own state (zlib: 32 KiB window; zstd: its
 * window, at most 128 MiB by the format's default limit for streaming).
 */
#include "eshard/linereader.h"
#include "eshard/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define RD_CHUNK ((size_t)1 << 20)
#define ZIN_CHUNK ((size_t)256 << 10)

/* The decoder of a compressed file: raw bytes in zin[zpos, zfill). */
struct codec {
	int kind;             /* enum es_codec */
	unsigned char *zin;
	size_t zpos, zfill;
	int raw_eof;
	int in_frame;         /* a gzip member or zstd frame is started and not finished */
	int frames;           /* finished members or frames */
	z_stream z;
	int z_init;
	ZSTD_DStream *zs;
};

struct es_line_reader {
	int fd;
	int eof;
	size_t max_line;
	char *path;
	char *buf;
	size_t cap, pos, fill, scan; /* next line starts at pos; no '\n' in [pos, scan) */
	uint64_t lineno, bytes;
	uint64_t limit;              /* 0: read to end of file; else the raw bytes to read at most */
	void (*cb)(void *arg, const void *p, size_t n);
	void *cb_arg;
	struct codec c;
};

int es_codec_of_name(const char *name)
{
	size_t n = strlen(name);
	if (n > 3 && !strcasecmp(name + n - 3, ".gz"))
		return ES_CODEC_GZIP;
	if (n > 4 && !strcasecmp(name + n - 4, ".zst"))
		return ES_CODEC_ZSTD;
	return ES_CODEC_PLAIN;
}

const char *es_codec_name(int codec)
{
	return codec == ES_CODEC_GZIP ? "gzip" : codec == ES_CODEC_ZSTD ? "zstd" : "plain";
}

static int codec_init(struct codec *c, int kind)
{
	c->kind = kind;
	if (kind == ES_CODEC_PLAIN)
		return 0;
	if (!(c->zin = malloc(ZIN_CHUNK)))
		return -1;
	if (kind == ES_CODEC_GZIP) {
		/* 16 + MAX_WBITS: a gzip header and trailer (CRC-32 and length checked). */
		if (inflateInit2(&c->z, 16 + MAX_WBITS) != Z_OK)
			return -1;
		c->z_init = 1;
		return 0;
	}
	c->zs = ZSTD_createDStream();
	return c->zs && !ZSTD_isError(ZSTD_initDStream(c->zs)) ? 0 : -1;
}

static void codec_free(struct codec *c)
{
	if (c->z_init)
		inflateEnd(&c->z);
	ZSTD_freeDStream(c->zs);
	free(c->zin);
}

struct es_line_reader *es_line_reader_new_codec(int fd, size_t max_line, const char *path, int codec)
{
	struct es_line_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->fd = fd;
	r->max_line = max_line;
	r->path = strdup(path ? path : "");
	r->cap = 2 * RD_CHUNK;
	r->buf = malloc(r->cap);
	if (!r->path || !r->buf || codec_init(&r->c, codec)) {
		es_line_reader_free(r);
		return NULL;
	}
	return r;
}

struct es_line_reader *es_line_reader_new(int fd, size_t max_line, const char *path)
{
	return es_line_reader_new_codec(fd, max_line, path, ES_CODEC_PLAIN);
}

void es_line_reader_set_raw_cb(struct es_line_reader *r,
			       void (*cb)(void *arg, const void *p, size_t n), void *arg)
{
	r->cb = cb;
	r->cb_arg = arg;
}

/* read(2) into p, retried on EINTR; the raw callback and the byte count see what came. */
static ssize_t raw_read(struct es_line_reader *r, void *p, size_t n)
{
	ssize_t got;
	if (r->limit && n > r->limit - r->bytes)
		n = (size_t)(r->limit - r->bytes);
	if (!n)
		return 0;
	do
		got = read(r->fd, p, n);
	while (got < 0 && errno == EINTR);
	if (got < 0)
		return es_error_errno(ES_EIO, "cannot read '%s'", r->path);
	if (got > 0 && r->cb)
		r->cb(r->cb_arg, p, (size_t)got);
	r->bytes += (uint64_t)got;
	return got;
}

static int corrupt(struct es_line_reader *r, const char *what)
{
	return es_error(ES_EINVAL, "Corrupt %s data (%s) in %s after line %" PRIu64,
			es_codec_name(r->c.kind), what, r->path, r->lineno);
}

/* Decode the pending raw bytes into out[0, room); *made is what it wrote (0 when it needs more
 * input). Finished members and frames are counted; after one, the next may start. */
static int decode_some(struct es_line_reader *r, char *out, size_t room, size_t *made)
{
	struct codec *c = &r->c;
	*made = 0;
	if (c->kind == ES_CODEC_GZIP) {
		if (!c->in_frame && c->frames > 0 && inflateReset(&c->z) != Z_OK)
			return corrupt(r, "cannot restart the decoder");
		c->z.next_in = c->zin + c->zpos;
		c->z.avail_in = (uInt)(c->zfill - c->zpos);
		c->z.next_out = (Bytef *)out;
		c->z.avail_out = (uInt)room;
		int zr = inflate(&c->z, Z_NO_FLUSH);
		size_t used = (c->zfill - c->zpos) - c->z.avail_in;
		c->zpos += used;
		*made = room - c->z.avail_out;
		if (zr == Z_STREAM_END) {
			c->in_frame = 0;
			c->frames++;
			return 0;
		}
		if (zr != Z_OK && zr != Z_BUF_ERROR)
			return corrupt(r, c->z.msg ? c->z.msg : "inflate failed");
		if (used || *made)
			c->in_frame = 1;
		return 0;
	}
	ZSTD_inBuffer in = { c->zin + c->zpos, c->zfill - c->zpos, 0 };
	ZSTD_outBuffer o = { out, room, 0 };
	size_t zr = ZSTD_decompressStream(c->zs, &o, &in);
	c->zpos += in.pos;
	*made = o.pos;
	if (ZSTD_isError(zr))
		return corrupt(r, ZSTD_getErrorName(zr));
	if (zr == 0) {
		/* A frame is complete and flushed. */
		if (c->in_frame || in.pos)
			c->frames++;
		c->in_frame = 0;
	} else if (in.pos || o.pos) {
		c->in_frame = 1;
	}
	return 0;
}

/* Fill out[0, room) with decoded bytes: > 0 how many, 0 at the end of a well-formed stream,
 * or a negative ES_E* code (a read error, corrupt or truncated data). */
static ssize_t decoded_read(struct es_line_reader *r, char *out, size_t room)
{
	struct codec *c = &r->c;
	for (;;) {
		/* A started frame may hold decoded bytes that did not fit last time, even when
		 * every raw byte is consumed. */
		if (c->zpos < c->zfill || c->in_frame) {
			size_t made, before = c->zpos;
			int rc = decode_some(r, out, room, &made);
			if (rc)
				return rc;
			if (made)
				return (ssize_t)made;
			if (c->zpos != before)
				continue; /* input consumed without output: a header, a member's end */
			if (c->zpos < c->zfill)
				return corrupt(r, "decoder stalled");
		}
		if (c->raw_eof) {
			if (c->in_frame)
				return corrupt(r, "truncated");
			if (!c->frames)
				return corrupt(r, "empty file");
			return 0;
		}
		ssize_t got = raw_read(r, c->zin, ZIN_CHUNK);
		if (got < 0)
			return got;
		c->zpos = 0;
		c->zfill = (size_t)got;
		if (got == 0)
			c->raw_eof = 1;
	}
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
		ssize_t got = r->c.kind == ES_CODEC_PLAIN ? raw_read(r, r->buf + r->fill, r->cap - r->fill)
							  : decoded_read(r, r->buf + r->fill, r->cap - r->fill);
		if (got < 0)
			return (int)got;
		if (got == 0) {
			r->eof = 1;
			continue;
		}
		r->fill += (size_t)got;
	}
}

uint64_t es_line_reader_lineno(const struct es_line_reader *r) { return r->lineno; }

void es_line_reader_set_limit(struct es_line_reader *r, uint64_t limit) { r->limit = limit; }

void es_line_reader_set_lineno(struct es_line_reader *r, uint64_t lineno) { r->lineno = lineno; }

uint64_t es_line_reader_bytes(const struct es_line_reader *r) { return r->bytes; }

void es_line_reader_free(struct es_line_reader *r)
{
	if (!r)
		return;
	codec_free(&r->c);
	free(r->buf);
	free(r->path);
	free(r);
}
