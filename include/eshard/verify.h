/*
 * verify: the final check of a job (docs/design.md#verify): complete, finished by enough
 * distinct hosts, merged, and the merged file re-read line by line.
 *
 * Contract: verify changes nothing but what merge writes (the output and merge.json), so a
 * crash leaves the job as merge's contract describes; running it again is always safe.
 */
#ifndef ESHARD_VERIFY_H
#define ESHARD_VERIFY_H

#include <stdint.h>

struct es_verify_result {
	int exit_code;        /* the process exit code: 0 PASS; 1 or 2 as status says for an
			       * incomplete job; 2 for every other failure */
	int64_t num_shards;
	int64_t rows;         /* lines of the merged output, re-read */
	int n_hosts;          /* distinct done-record hostnames */
	char sha256[65];      /* of the merged output */
	char *output;         /* resolved output path, or NULL; free() it */
};

/*
 * Prints the status (as `status --all`), "Shard owners:" and "  <host>: <n> shard(s)" sorted
 * by host, merge's line and "PASS: <S> shards were completed by <k> node(s); merged <rows> rows
 * into <O>" on stdout. output NULL means <job_dir>/merged.jsonl; any other output inside the job
 * folder is refused before anything is printed (es_fs_check_output); expect_nodes < 1 means 1.
 * Returns 0 on PASS, or a negative ES_E* code after one es_error() ("Verification stopped: not
 * all shards are complete.", "Verification failed: expected at least E distinct hostnames,
 * found F.", or the failure of merge or of the re-read).
 */
int es_verify_run(const char *job_dir, const char *output, int expect_nodes, struct es_verify_result *r);

/* The same, finishing the merge that follow (es_merge_follow_start on the same job and output)
 * began while the job ran: only what it has not appended and re-read yet is merged and re-read.
 * follow is finished or aborted (freed) whatever the outcome. brief: the status is not printed
 * (run prints its own summary instead of a line per shard). */
/* How long verify waits, collecting the status again once a second, when every shard is done
 * but some results look absent or of another size: what a client that caches metadata (NFS's
 * actimeo and lookupcache, our tests' caching mounts) shows for a while after another node
 * wrote them. 60 s by default (NFS's acregmax and acdirmax); a stop ends the wait. */
void es_verify_set_settle_secs(double secs);

/* view (or NULL): a view of the same job that the caller keeps (jobview.h: rank 0's progress
 * view, es_progress_stop_view), whose manifest and status verify uses instead of reading them
 * again: the shards the status holds as final (done with a record merge accepts, or failed)
 * are not read again, every other one is looked up by name (es_status_refresh without
 * listings). The shards verify reads are left in view->st without their claim times (status.h
 * claims_by_caller) until the caller's next es_jobview_refresh. */
struct es_merge_follow;
struct es_jobview;
int es_verify_run_follow(const char *job_dir, const char *output, int expect_nodes, struct es_merge_follow *follow,
			 int brief, struct es_jobview *view, struct es_verify_result *r);

#endif
