/*
 * linereader: a bounded streaming line reader over a file descriptor.
 *
 * Lines are split on '\n' only; a last line without '\n' is a line (has_nl 0), an empty tail
 * is not. Memory stays near max_line plus one read (1 MiB): a line longer than max_line bytes
 * (without its '\n') is the error "JSONL line longer than the N-byte cap at path:line",
 * reported before the rest of that line is read.
 *
 * Contract: the reader only reads; it never closes, seeks or writes the fd, and it owns its
 * buffer and its copy of the path (freed by es_line_reader_free()). A returned line points
 * into that buffer and stays valid until the next call. After a failed next() (a read
 * error, a line over the cap) the reader is still safe to free, and the lines it returned
 * before were exactly the file's lines up to there; what has been read beyond is unknown to
 * the caller, so a caller stops. A reader is not thread-safe; use one per thread.
 *
 * A reader made with es_line_reader_new_codec(..., ES_CODEC_GZIP or ES_CODEC_ZSTD) decodes
 * the fd's bytes as it reads them and splits the decoded bytes into lines; line numbers count
 * decoded lines, the raw callback and es_line_reader_bytes() see the stored (compressed)
 * bytes. Concatenated gzip members and zstd frames are one stream. Corrupt data, a truncated
 * stream, trailing bytes that are no member or frame, and an empty file are the error
 * "Corrupt <codec> data (<why>) in <path> after line N" (ES_EINVAL).
 */
#ifndef ESHARD_LINEREADER_H
#define ESHARD_LINEREADER_H

#include <stddef.h>
#include <stdint.h>

struct es_line_reader;

enum es_codec { ES_CODEC_PLAIN = 0, ES_CODEC_GZIP = 1, ES_CODEC_ZSTD = 2 };

/* The codec a file name asks for: ".gz" gzip, ".zst" zstd (any case), else plain. */
int es_codec_of_name(const char *name);
/* "plain", "gzip" or "zstd". */
const char *es_codec_name(int codec);

/* NULL when out of memory. path is copied and only used in messages. */
struct es_line_reader *es_line_reader_new(int fd, size_t max_line, const char *path);
/* The same over a compressed fd (enum es_codec). */
struct es_line_reader *es_line_reader_new_codec(int fd, size_t max_line, const char *path, int codec);
/* cb sees every byte read from the fd, in order, chunk by chunk, as soon as it is read
 * (so that a caller can hash the raw file without a second read). */
void es_line_reader_set_raw_cb(struct es_line_reader *r,
			       void (*cb)(void *arg, const void *p, size_t n), void *arg);
/* 1 with *line, *len, *has_nl set (valid until the next call), 0 at end of file, or a
 * negative ES_E* code after es_error() (read failure, line over the cap). */
int es_line_reader_next(struct es_line_reader *r, const char **line, size_t *len, int *has_nl);
/* 1-based number of the line last returned (0 before the first). */
uint64_t es_line_reader_lineno(const struct es_line_reader *r);
/* Read at most limit raw bytes from the fd (from where it stands), then see the end of the
 * file: a byte range of a file (prepare's ranges) reads as a file of its own. 0: no limit. */
void es_line_reader_set_limit(struct es_line_reader *r, uint64_t limit);
/* Number the lines that follow from lineno + 1: a range that starts after line lineno of its
 * file reports its lines (and an over-long one) by their place in the file. */
void es_line_reader_set_lineno(struct es_line_reader *r, uint64_t lineno);
/* Total bytes read from the fd so far (stored bytes, before any decoding). */
uint64_t es_line_reader_bytes(const struct es_line_reader *r);
/* Safe on NULL. */
void es_line_reader_free(struct es_line_reader *r);

#endif
