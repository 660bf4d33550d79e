/*
 * merge: concatenate the shard results in manifest order into one JSONL file
 * (docs/job-folder.md#merge-record).
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

/* The merged output's name in the job folder: the default of run and verify, and the one file
 * of the job folder that merge, verify and run --output may name (es_fs_check_output). */
#define ES_MERGE_OUTPUT_NAME "merged.jsonl"

struct es_merge_result {
	int64_t num_shards;
	int64_t rows;
	uint64_t bytes;
	char sha256[65];       /* of the merged output */
	char *output;          /* resolved output path; free() it */
};

/*
 * The job must be complete (lock_timeout <= 0: the manifest's, only used for the counts in the
 * error message). output is resolved; inside the job folder only <job_dir>/merged.jsonl may be
 * named (es_fs_check_output: ES_EUSAGE); an existing output needs overwrite. Prints
 * "Merged {num_shards} shards and {rows} rows into {output}" unless quiet. res may be NULL.
 * Returns 0 or a negative ES_E* code after one es_error().
 */
int es_merge_run(const char *job_dir, const char *output, int overwrite, double lock_timeout,
		 struct es_merge_result *res, int quiet);

/*
 * Merge while the job runs (run's rank 0). A follower thread appends each shard's result to
 * the output's temporary as soon as it and every earlier shard have a done record (done
 * records are final), checking rows and SHA-256 as es_merge_run does, and re-reads what it
 * appended as verify does; es_merge_follow_finish, once the job is complete, appends only the
 * rest and renames the output into place. The output is byte-identical to es_merge_run's.
 * The follower only waits on a record that is not there yet; it never decides anything from
 * its absence. Any trouble the follower meets (a bad record, a full disk, a stop) ends it
 * silently, and the finish then merges the whole job as es_merge_run, which reports it.
 * An existing output is replaced (as verify does).
 */
struct es_merge_follow;

/* Start the follower (poll_secs between looks for the next record). 0, or a negative error
 * after es_error() (the job's manifest or the output's folder is unusable). */
int es_merge_follow_start(const char *job_dir, const char *output, double poll_secs, struct es_merge_follow **f);

/* Stop the follower, then merge what is left as es_merge_run(job_dir, output, 1, lock_timeout,
 * res, quiet). *reread_from and *reread_rows (may be NULL) get the prefix of the output that was
 * re-read already and its rows (0 when the follower gave up). checked (or NULL): the status in
 * which the caller has just found every shard done with a record merge accepts (verify's, of
 * the same job, each record read by name): merge does not look every record up again to learn
 * that the job is complete, and takes each shard's result path, rows and SHA-256 from it
 * instead of reading its record again (status.h result_path); a follower that gave up merges
 * the whole job as es_merge_run does. Frees f. */
struct es_status;
int es_merge_follow_finish(struct es_merge_follow *f, double lock_timeout, const struct es_status *checked,
			   struct es_merge_result *res, int quiet, uint64_t *reread_from, int64_t *reread_rows);

/* Stop the follower and remove its temporary (the job did not complete). Frees f. */
void es_merge_follow_abort(struct es_merge_follow *f);

/* Re-read a merged output from byte offset from (the start of a line, after from_rows lines)
 * on: no blank line, every line a JSON object. *rows gets the lines read. 0 or a negative ES_E*
 * after es_error() naming path:line. */
int es_merge_reread(const char *path, uint64_t from, int64_t from_rows, int64_t *rows);

#endif
