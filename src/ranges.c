/*
 * ranges: the planner. Each cut is found by reading forward from the nominal cut to the next
 * '\n' with pread, a small buffer at a time, so planning reads little more than one buffer per
 * range, whatever the size of the file (a very long line is read once more, to its end).
 */
#include "eshard/ranges.h"
#include "eshard/buf.h"
#include "eshard/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SCAN_CHUNK ((size_t)64 << 10)

static int push(struct es_ranges *r, size_t file, uint64_t start, uint64_t end)
{
	int rc = es_grow(&r->v, &r->cap, r->n + 1, sizeof(*r->v));
	if (rc)
		return rc;
	r->v[r->n++] = (struct es_range){ file, start, end };
	return 0;
}

/* The offset just after the first '\n' at or after from, or size when there is none. */
static int line_end_from(int fd, uint64_t from, uint64_t size, char *buf, const char *path, uint64_t *out)
{
	uint64_t off = from;
	while (off < size) {
		size_t want = size - off < SCAN_CHUNK ? (size_t)(size - off) : SCAN_CHUNK;
		ssize_t got = pread(fd, buf, want, (off_t)off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return es_error_errno(ES_EIO, "cannot read '%s'", path);
		if (got == 0)
			break; /* shorter than it was: the range readers see that and say so */
		const char *nl = memchr(buf, '\n', (size_t)got);
		if (nl) {
			*out = off + (uint64_t)(nl - buf) + 1;
			return 0;
		}
		off += (uint64_t)got;
	}
	*out = size;
	return 0;
}

int es_ranges_add_file(struct es_ranges *r, size_t file, int fd, uint64_t size, uint64_t target,
		       const char *path)
{
	if (!target)
		return es_error(ES_EINTERNAL, "input range size 0");
	char *buf = malloc(SCAN_CHUNK);
	if (!buf)
		return es_error(ES_ENOMEM, "out of memory planning input ranges");
	int rc = 0;
	uint64_t start = 0;
	while (!rc && start < size) {
		uint64_t end = size;
		/* The cut at start + target moves to the end of the line holding its last byte, so
		 * that a line ending exactly there ends the range. */
		if (size - start > target)
			rc = line_end_from(fd, start + target - 1, size, buf, path, &end);
		if (!rc)
			rc = push(r, file, start, end);
		start = end;
	}
	free(buf);
	return rc;
}

int es_ranges_add_whole(struct es_ranges *r, size_t file, uint64_t size)
{
	return push(r, file, 0, size);
}

void es_ranges_free(struct es_ranges *r)
{
	free(r->v);
	r->v = NULL;
	r->n = r->cap = 0;
}
