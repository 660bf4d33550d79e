/*
 * events: an append-only event log per worker process, state/events/<host>.<pid>.<token8>.jsonl.
 *
 * One JSON line per event (claim, start, done, failed, stale_takeover, preempted, lost,
 * superseded), written with a single write() on an O_APPEND descriptor, so a crash loses at
 * most the event being written and never corrupts an earlier one. Only its own process writes
 * a file, so no locking is needed even on NFS. Failures to log are warnings, never errors: the
 * log is for reports, the state machine does not depend on it.
 */
#ifndef ESHARD_EVENTS_H
#define ESHARD_EVENTS_H

#include <stdint.h>

#include "eshard/buf.h"

/* Open with es_events_open (even when it fails) and give back with es_events_close. */
struct es_events {
	int fd;
	struct es_buf path;
	const char *run_id;
};

struct es_event {
	const char *event;
	const char *shard;
	int attempt;
	const char *token;
	int64_t rows, bytes;      /* < 0: left out */
	double duration;          /* < 0: left out */
	const char *detail;       /* optional: error or reason */
};

int es_events_open(struct es_events *e, const char *job_dir, const char *run_id);
void es_events_write(struct es_events *e, const struct es_event *ev);
void es_events_close(struct es_events *e);

#endif
