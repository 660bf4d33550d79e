/*
 * retry: requeue failed shards (docs/job-folder.md#retry-and-history).
 *
 * For each selected shard that has a failed marker, the attempt folder attempts/<id>/ is moved
 * to state/history/attempts/<id>.<suffix>/ and then the marker state/failed/<id>.json to
 * state/history/failed/<id>.<suffix>.json, with suffix "<unix seconds>.<32hex>". Attempt
 * numbers then start again from 0001.
 *
 * Contract after a crash at any point: every shard is either still failed (its marker is in
 * place; its attempts may already be in history, and a second retry finishes the job) or
 * requeued. The attempts move first on purpose: workers can claim a shard only once its failed
 * marker is gone, and by then its old failed attempts no longer count toward the retry limit.
 * All targets are checked (no done marker; no lock, or its failed fence, a lock past its lease,
 * or the running lock whose token the failed record carries) before anything moves, and each is
 * judged again with its lock held under flock just before its moves: a shard that another retry
 * requeued meanwhile (and a worker may have claimed) is skipped, "Skipped <id>: ...".
 */
#ifndef ESHARD_RETRY_H
#define ESHARD_RETRY_H

#include <stddef.h>

/*
 * all_failed: every failed shard of the manifest; otherwise the n ids (unknown ids are an
 * error "Unknown shard IDs: a, b"; selected shards that are not failed are skipped). Prints
 * "Requeued <id>" per shard, or "No failed shards selected", on stdout unless quiet.
 * Returns 0 (also when nothing was selected) or a negative ES_E* code after one es_error().
 */
int es_retry_run(const char *job_dir, int all_failed, const char *const *ids, size_t n, int quiet);

#endif
