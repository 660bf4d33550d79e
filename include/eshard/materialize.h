/*
 * materialize: turn an attempt's export A/ray-output.jsonl (a file, or a folder of part files)
 * into one verified A/processed.jsonl (docs/job-folder.md#attempt-output).
 *
 * Contract after a crash at any point: processed.jsonl either does not exist or is complete:
 * it appears by one rename of a fully written and fsynced "A/.processed.jsonl.<32hex>.tmp". A
 * crash can leave such a temporary behind; nothing reads it. The export itself is only read.
 */
#ifndef ESHARD_MATERIALIZE_H
#define ESHARD_MATERIALIZE_H

#include <stddef.h>
#include <stdint.h>

struct es_output_file {
	char *path;                  /* relative to the job folder */
	int64_t rows, size_bytes;    /* raw bytes of the source file */
	char sha256[65];             /* of the raw bytes */
};

struct es_materialized {
	struct es_output_file *files; /* the sources, in the order they were copied */
	size_t n_files;
	int64_t rows, size_bytes;    /* of processed.jsonl */
	char sha256[65];             /* of processed.jsonl */
};

/*
 * docs/job-folder.md#attempt-output: A/ray-output.jsonl (a file, or a folder whose regular files
 * below it with a basename not starting with '.' or '_' are taken, sorted by relative path; folder
 * names are not filtered, like the reference) becomes A/processed.jsonl. Every line is
 * validated strictly (es_jsonl_validate) and copied raw; a missing final '\n' is added.
 * No source file at all gives an empty, valid processed.jsonl.
 *
 * processed.jsonl is not read back: its rows, size and hash are computed from the very bytes
 * handed to write(), every line of which was just validated; after the fsync its size is
 * checked with fstat. A re-read would double the I/O and, on NFS, read the client's own
 * page cache rather than the server, so it would prove nothing more.
 *
 * o may be NULL. o->max_line caps one line (0: ES_MAX_LINE_BYTES of prepare.h). o->tick, when
 * set, is called about once a second (between lines and files): the worker refreshes its lease
 * there, since a large result can take longer than a lease to copy; a nonzero return stops the
 * copy with ES_EINTR ("... lost its lease"). A stop signal (es_check_stop) stops it with
 * ES_EINTR too. Returns 0; ES_ENOENT with the reference's
 * "Data-Juicer returned 0 but did not create <path>" when the export path does not exist
 * (so that the caller can tell an all-filtered, never-created output apart); ES_EINVAL with
 * "<message> at <path>:<line>" on a bad line or when the export path is neither a file nor
 * a folder; ES_EIO / ES_ENOMEM otherwise. On error m is empty and the temporary is removed;
 * processed.jsonl exists only if nothing but the final folder fsync failed. Free m with
 * es_materialized_free() (also after an error: it is then a no-op).
 */
struct es_materialize_opts {
	size_t max_line;
	int (*tick)(void *arg);
	void *tick_arg;
	/* Order-stable output (--keep-order): the processor read a copy of the shard made by
	 * es_materialize_number_rows(). Every output row must hold ES_ROW_FIELD, a distinct
	 * integer below input_rows (ES_EINVAL naming the file and line otherwise: the processor
	 * dropped, renamed, changed or duplicated it); the field is removed from the row (the
	 * rest of its bytes are copied as they are) and processed.jsonl lists the rows in that
	 * order, i.e. in input order. An export already in order is copied in one pass; another
	 * is written once more in order from the first copy (one index entry per row in memory). */
	int keep_order;
	int64_t input_rows;
};

/* The hidden row number of order-stable output. */
#define ES_ROW_FIELD "__eshard_row__"

/*
 * The processor's input under --keep-order: a copy of the shard shard_path (canonical JSONL,
 * one object per line) with ES_ROW_FIELD: <0-based line number> added as each object's last
 * member, written to out_path by temp + fsync + rename (a crash leaves no partial out_path).
 * The shard itself is only read. ES_EINVAL when a row has a top-level ES_ROW_FIELD of its
 * own or is not an object; *rows gets the row count.
 */
int es_materialize_number_rows(const char *shard_path, const char *out_path, int64_t *rows);

int es_materialize(const char *job_dir, const char *attempt_dir, const struct es_materialize_opts *o,
		   struct es_materialized *m);
void es_materialized_free(struct es_materialized *m);

#endif
