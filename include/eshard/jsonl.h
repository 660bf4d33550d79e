/*
 * jsonl: the data path. A strict JSONL line validator, the canonical re-encoder of
 * docs/job-folder.md#normalized-lines (Python's json.loads then json.dumps(ensure_ascii=False,
 * separators=(",", ":")), byte for byte). Lines come from the line reader (linereader.h);
 * floats are written by pyfloat.h.
 *
 * No cJSON here on purpose: it would lose big integers and the order of duplicate keys.
 * The parser keeps integers as their digits, resolves duplicate keys like a Python dict
 * (last value, first position) and never recurses, so the nesting depth is bounded only by
 * the line length.
 *
 * Contract: nothing here writes files. A failing call reports once through es_error() and
 * leaves its output buffer exactly as it was, so a caller can stop or skip the line. All
 * scratch memory lives in the context and grows with the largest line seen, never with the
 * number of lines. A context is not thread-safe; use one per thread.
 */
#ifndef ESHARD_JSONL_H
#define ESHARD_JSONL_H

#include <stddef.h>
#include <stdint.h>

#include "eshard/buf.h"

struct es_jsonl_opts {
	const char *const *media_keys; /* top-level list-of-path fields to make absolute */
	size_t n_media;
	const char *media_root;        /* resolved folder that relative media paths are under */
	const char *const *index_keys; /* keys that get the global row index when missing */
	size_t n_index;
};

/* Opaque context with scratch buffers, reused per line. */
struct es_jsonl;

/* opts may be NULL (no media or index handling); its strings are copied. NULL when out of
 * memory. */
struct es_jsonl *es_jsonl_new(const struct es_jsonl_opts *opts);
void es_jsonl_free(struct es_jsonl *j);

/*
 * Validate one line (its bytes without the trailing '\n'; a '\r' is part of the line) and
 * append its canonical encoding plus '\n' to out. Checks, in the reference's order: blank
 * line, strict UTF-8, UTF-8 BOM, JSON syntax (Python's wording and column), top level is
 * an object, media fields, and finally lone surrogate escapes (which Python can parse but
 * not encode). Returns 0, ES_EINVAL after es_error() with a message naming path:lineno, or
 * ES_ENOMEM. On error out is left as it was.
 */
int es_jsonl_normalize(struct es_jsonl *j, const char *line, size_t len, uint64_t global_index,
		       const char *path, uint64_t lineno, struct es_buf *out);

/*
 * Strict validation only (processor output and merge): blank, UTF-8, BOM, JSON syntax and
 * the object check, with the same messages as es_jsonl_normalize(). Like Python's
 * json.loads it accepts lone surrogate escapes and duplicate keys.
 */
int es_jsonl_validate(struct es_jsonl *j, const char *line, size_t len, const char *path,
		      uint64_t lineno);

#endif
