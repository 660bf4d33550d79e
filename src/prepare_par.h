/*
 * prepare_par: pass 1 over byte ranges of the input, on threads, a private part of prepare
 * (prepare.c keeps pass 1 in order, pass 2, the manifest and the publish). What the two
 * files share: the facts pass 1 gathers, the per-line steps both readings use, and the
 * entry point of the parallel reading.
 */
#ifndef ESHARD_PREPARE_PAR_H
#define ESHARD_PREPARE_PAR_H

#include "eshard/jsonl.h"
#include "eshard/prepare.h"
#include "eshard/scan.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* The size of every read and write of the input and the normalized stream. */
#define CHUNK ((size_t)1 << 20)

/* ---------------- input file facts ---------------- */

struct in_file {
	uint64_t rows;       /* kept lines */
	uint64_t bad;        /* lines left out (--bad-lines skip) */
	uint64_t size;
	int64_t mtime_ns;
	char sha[65];
};

static inline int64_t es_prepare_mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

/* The decompression bomb guard (prepare.h, max_input_bytes), checked line by line. */
struct size_guard {
	int64_t max_input;   /* > 0: the cap on the decoded bytes of all input; 0: the ratio rule */
	uint64_t total;      /* decoded bytes of every file so far */
	uint64_t file;       /* decoded bytes of the current file */
	uint64_t stored;     /* the current file's stored size */
	int compressed;
};

/* A line left out by --bad-lines skip: where, and why (the message without its place). */
struct bad_line {
	size_t file;
	uint64_t lineno;
	char reason[192];
};

struct pass1 {
	uint64_t rows, bytes;
	char norm_sha[65];
	uint64_t bad;               /* lines left out, all files */
	size_t files_bad;           /* files with a line left out */
	struct bad_line *first;     /* the first ES_BAD_LINES_KEPT of them (malloc'd) */
	size_t n_first, cap_first;  /* grown as lines come: a range (of thousands) may keep few */
};

/* The normalized stream, as the temporaries that hold it in order: one (pass 1 in order) or one
 * per input range (the ranges in parallel). */
struct piece {
	char *path;
	uint64_t off, len;   /* where its bytes lie in the normalized stream */
};

/* One line of len bytes (has_nl: with its '\n') against the guard; 0 or ES_EINVAL, said. */
int es_prepare_guard_line(struct size_guard *g, size_t len, int has_nl, const char *path, uint64_t lineno);

/* One line through the normalizer into out, as row number global: 0, 1 when --bad-lines skip
 * (skip) left it out (counted in res and files[file]), or an error, said. */
int es_prepare_normalize_line(struct es_jsonl *jl, int skip, const char *line, size_t len, uint64_t global,
			      const char *path, uint64_t lineno, struct es_buf *out, struct pass1 *res,
			      struct in_file *files, size_t file);

struct par_in {
	const struct es_prepare_opts *o;
	const struct es_scan *scan;
	const struct es_jsonl_opts *jo;
	const char *stage;
	size_t max_line;
	int threads;
	atomic_int *abandon;
};

/* Pass 1 over ranges on in->threads threads: files' facts into files, the input's into res,
 * the normalized stream's pieces into *pieces (*n_pieces of them, the caller frees). */
int es_prepare_par_pass1(const struct par_in *in, struct in_file *files, struct pass1 *res, struct piece **pieces,
			 size_t *n_pieces);

#endif
