/*
 * prepare: validate the recipe and the input, cut the input into deterministic, contiguous,
 * byte-balanced, non-empty shards, and publish the job folder
 * (docs/job-folder.md#publishing-a-prepared-job).
 *
 * The job folder may be missing, this very job (a no-op), or an existing folder that holds no
 * job: an empty one, or one holding only what a prepare of it leaves (stage folders, temporaries).
 * A folder that holds anything else, or another job, is refused (ES_EINVAL, naming what is
 * there) before anything is written. A folder is a job once it holds manifest.json: every
 * reader (worker, status, merge, a later prepare) refuses one without.
 *
 * Publishing, and the contract after a crash at any point:
 *  - By a rename (the folder is missing, or empty and neither a mount point nor the working
 *    folder of this process): everything is written into a stage folder
 *    "<parent>/.<name>.preparing.<32hex>" that one rename of the fully written and fsynced
 *    stage publishes (over an empty folder, atomically; its group and permission bits are
 *    kept). The job folder is either missing (or still empty) or complete. Of concurrent
 *    prepares one rename wins; the others find its job.
 *  - Inside the folder (a mount point, which no rename can replace; a folder whose parent this
 *    process cannot write; the working folder; or a folder holding a prepare's debris): the
 *    stage is "<job>/.<name>.preparing.<32hex>". Once it is complete, the exclusive marker
 *    "<job>/.eshard-publish" (temp + link, naming the stage) decides which stage becomes the
 *    job; its entries are then moved up one by one, manifest.json last, and the emptied stage
 *    removed. The marker stays, as the fence that tells every later prepare whose job this
 *    is. A crash before the marker leaves a folder without a manifest that a rerun takes
 *    (removing the dead stage); a crash after it leaves the marker and the rest of that stage:
 *    any later prepare of the folder finishes that publish first (whatever it was asked for),
 *    then compares the job as usual. Concurrent prepares never mix: only the stage named by
 *    the marker is moved, by whoever gets there, and each entry once.
 * A crash can leave a stage folder behind; nothing reads it, a failure that the process sees
 * removes it, and a later successful prepare removes one whose maker is gone. Memory is bounded
 * by the largest line (capped at ES_MAX_LINE_BYTES) plus a few MiB of buffers, whatever the
 * input size.
 */
#ifndef ESHARD_PREPARE_H
#define ESHARD_PREPARE_H

#include <stdint.h>

#include "eshard/buf.h"
#include "eshard/manifest.h"

#define ES_MAX_LINE_BYTES ((size_t)256 << 20)
/* The automatic shard count's default target shard size (README "Commands": why 128 MiB). */
#define ES_TARGET_SHARD_BYTES ((int64_t)128 << 20)
/* The most a compressed input file may decode to, in times its stored size, without
 * --max-input-bytes: JSONL compresses 3 to 20 times, rarely 100 (gzip can reach about 1030 at
 * most); a bomb goes far past that (README "Compressed input"). */
#define ES_MAX_DECODE_RATIO 1000
/* --bad-lines skip: how many skipped lines the manifest lists by place (all are counted). */
#define ES_BAD_LINES_KEPT 100

struct es_prepare_opts {
	const char *config;         /* required: the Data-Juicer recipe */
	const char *dataset_path;   /* optional: overrides the recipe's dataset_path */
	/* required: missing, an empty folder, or this very job: the same dataset and input files,
	 * recipe bytes, shard count (when given) and processor command and order. The node-local
	 * options (processor.python, .dj_process, .dj_root, ray_address) are not compared, and an
	 * existing manifest keeps its own: run and worker override them per process (worker.h). */
	const char *job_dir;
	int64_t num_shards;         /* > 0, or 0: automatic (es_prepare_auto_shards) */
	int64_t auto_ranks;         /* automatic: the ranks (or nodes) that will work, 0: unknown */
	int64_t target_shard_bytes; /* automatic: the largest shard wanted, 0: ES_TARGET_SHARD_BYTES */
	struct es_policy policy;    /* saved in the manifest; heartbeat and lease are extra fields */
	const char *ray_address;    /* NULL (not given): "local"; stripped; empty is an error */
	struct es_processor processor; /* recorded in the manifest (extra field "processor") */
	const char *helper;         /* scripts/dj_op_kinds.py, or NULL to find it beside the binary */
	size_t max_line_bytes;      /* 0: ES_MAX_LINE_BYTES */
	/* The decompression bomb guard (README "Compressed input"), checked line by line as pass 1
	 * decodes: > 0, prepare fails (ES_EINVAL) once the decoded bytes of all input files pass
	 * it; 0 (the default), a compressed file fails once it decodes to more than
	 * ES_MAX_DECODE_RATIO times its stored size, plain files have no cap. Not recorded. */
	int64_t max_input_bytes;
	int quiet;                  /* do not print the summary line */
	/* --allow-unsharded: a recipe that is not shard-safe (recipe.h) makes a job of one shard,
	 * the whole dataset, run once (manifest field "unsharded" with the reasons); an explicit
	 * --num-shards above 1 is then a usage error. A shard-safe recipe is sharded as always. */
	int allow_unsharded;
	/* --compressed: a dataset folder's .jsonl.gz and .jsonl.zst files are read too (scan.h
	 * ES_SCAN_COMPRESSED); by default only its .jsonl files, as the reference. Not recorded:
	 * the manifest's input_files are what was read, and a re-prepare is the same job only
	 * when its scan finds the same files. */
	int compressed;
	/* --bad-lines skip: a line that fails validation (a blank line, bad JSON or UTF-8, not an
	 * object, a bad media field) is left out instead of stopping prepare (the reference's rule,
	 * the default). Each input file's rows, total_rows and the shards count only the kept
	 * lines; the extra manifest field "bad_lines" records the policy, the count per file and
	 * the first ES_BAD_LINES_KEPT places with their reason. */
	int skip_bad_lines;
	/* --threads: the threads that validate and re-encode the input (README "Prepare at
	 * scale"), 0: the CPUs this process may use (es_cpus_usable). With more than one the input
	 * is cut into byte ranges at line ends, read in parallel; the job folder is byte for byte
	 * the one of a single thread, and an error the first in input order. Not recorded. */
	int64_t threads;
	/* > 0: a progress line on stderr every progress_secs seconds while the input is read. */
	double progress_secs;
	/* `run` with more than one rank: the ranks share pass 1 where threads could (not where
	 * pass 1 must read in order). NULL: this process alone. Not recorded. */
	const struct es_prepare_ranks *ranks;
};

/*
 * The ranks of `run` share pass 1 (README "Prepare at scale"): the preparing rank plans the
 * input's byte ranges and hands the plan to the front end, which carries it to every rank; each
 * rank reads its slice of the ranges (es_prepare_ranges_run) into temporaries in the stage
 * folder, which every rank must see; the front end gathers every rank's counts back, and the
 * preparing rank hashes, writes the shards and publishes as with threads alone. The library
 * calls no MPI: these hooks are the front end's.
 */
struct es_prepare_ranks {
	int size;                   /* ranks, > 1 */
	/* The plan of n ranges (len bytes) to every rank, and whether they can all read the stage
	 * (es_prepare_plan_check): 0 with this rank's slice in [*lo, *hi) (es_prepare_rank_slice),
	 * 1 when this rank reads every range alone (gather is then not called), or an error,
	 * said (the other ranks are then released). */
	int (*share)(void *arg, const void *plan, size_t len, size_t n, size_t *lo, size_t *hi);
	/* This rank's counts (len bytes) to every rank, everybody's, in rank order, into all;
	 * called once after a share that returned 0, even when this rank failed. */
	int (*gather)(void *arg, const void *mine, size_t len, struct es_buf *all);
	void *arg;
};

/* The slice [*lo, *hi) of n ranges that rank reads of size ranks. Rank 0 also hashes the
 * normalized stream and writes the shards: it reads a smaller slice. */
void es_prepare_rank_slice(size_t n, int size, int rank, size_t *lo, size_t *hi);
/* On a rank that got a plan (len bytes): whether it sees the plan's stage folder (the probe
 * file the preparing rank wrote there). 0 with the plan's range count in *n, or an error,
 * kept quiet (es_last_error() says what), so that the caller can fall back. */
int es_prepare_plan_check(const void *plan, size_t len, size_t *n);
/* On rank (of size, rank > 0): its slice of plan's ranges (es_prepare_rank_slice), read on
 * threads threads (0: the CPUs this process may use) into their temporaries in the plan's stage
 * folder; rank 1 also hashes the input files, on one more thread. Their counts and hashes (or
 * failures, each kept with its message, to be said by the preparing rank in input order) into
 * counts. 0, or ES_ENOMEM when not even the counts could be made. */
int es_prepare_ranges_run(const void *plan, size_t len, int rank, int size, int64_t threads, struct es_buf *counts);

struct es_prepare_result {
	int already_prepared;       /* 1: an unchanged job existed, nothing was written */
	int unsharded;              /* 1: the job runs unsharded (manifest field "unsharded") */
	int64_t num_shards, rows, bytes;
	int64_t bad_lines;          /* lines left out by --bad-lines skip */
	char *job_dir;              /* resolved; caller frees */
};

/* The automatic shard count: at least 4 shards per rank (ranks > 0; 4 x ranks saturates, so
 * any rank count past UINT64_MAX / 4 asks for a shard per row), no shard larger than target
 * bytes on average, never more shards than rows, at least 1. */
uint64_t es_prepare_auto_shards(uint64_t bytes, uint64_t rows, int64_t ranks, int64_t target);

/* Whether a prepare of job_dir looks under way (for status while the job folder does not exist
 * yet): a stage folder "<parent>/.<name>.preparing.<32hex>" beside it whose maker is not known
 * to be gone (es_fs_temp_owner: a live process of this host, or a process of another host that
 * cannot be checked from here, so a prepare that crashed there still counts). 1 with the most
 * recently changed one's path in stage and the seconds since it or an entry of it (or of its
 * shards/) last changed in *idle_secs, so that a caller can show a stalled one; 0 when there is
 * none; or a negative ES_E* code. Read-only. */
int es_prepare_find_stage(const char *job_dir, struct es_buf *stage, double *idle_secs);

/* Default options (policy defaults, no Ray address given: "local"). */
void es_prepare_opts_init(struct es_prepare_opts *o);
int es_prepare_run(const struct es_prepare_opts *o, struct es_prepare_result *res);

/* The split rule of docs/design.md#the-split-rule: after appending a row, does shard k end here?
 * w: bytes written so far (all shards), r: rows written so far, t/rows: totals, n: shards. */
int es_prepare_split_after(uint64_t w, uint64_t r, uint64_t t, uint64_t rows, uint64_t n, uint64_t k);
/* The shard id: "part-<index>-of-<n>", both zero-padded to max(5, digits of n). */
int es_prepare_shard_id(uint64_t index, uint64_t n, char *out, size_t outsz);

#endif
