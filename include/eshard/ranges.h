/*
 * ranges: the input cut into byte ranges at line boundaries, so that prepare's threads (and
 * ranks) can validate and re-encode the ranges independently and still agree with a reading of
 * the whole input in order.
 *
 * A range never splits a line: it starts at the start of a file or just after a '\n', and ends
 * just after a '\n' or at the end of its file. Lines are split on '\n' only, so a "\r\n" stays
 * whole in one range. A plain file is cut near every target bytes (a cut moves forward to the
 * end of the line it falls in; a line longer than target makes a longer range); an empty plain
 * file has no range. A compressed file cannot be entered in the middle: it is one range, even
 * when empty (its reader then reports the empty stream). Ranges come in input order: by file,
 * then by offset.
 *
 * Contract: reading only (pread, which leaves the fd's offset alone); on error the list keeps
 * the ranges added before, and es_ranges_free() releases it.
 */
#ifndef ESHARD_RANGES_H
#define ESHARD_RANGES_H

#include <stddef.h>
#include <stdint.h>

struct es_range {
	size_t file;         /* the index of its input file */
	uint64_t start, end; /* stored byte offsets in that file, start < end (or 0, 0: empty file) */
};

struct es_ranges {
	struct es_range *v;
	size_t n, cap;
};

#define ES_RANGES_INIT { NULL, 0, 0 }

/* Append the ranges of the plain file fd (size bytes, file index file, path for messages),
 * each about target bytes (> 0) or one line longer. 0, ES_EIO or ES_ENOMEM after es_error(). */
int es_ranges_add_file(struct es_ranges *r, size_t file, int fd, uint64_t size, uint64_t target,
		       const char *path);
/* Append one range over a whole file of size bytes (a compressed file). 0 or ES_ENOMEM. */
int es_ranges_add_whole(struct es_ranges *r, size_t file, uint64_t size);
void es_ranges_free(struct es_ranges *r);

#endif
