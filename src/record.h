/*
 * record: a shard's done or failed record as every reader (status, merge, verify) loads it.
 *
 * The record is state/<kind>/<id>.json. A client of a shared file system that caches "no such
 * file" (NFS lookupcache=all, acdirmax) may not see a record another node just published for
 * up to a minute; the shard's lock, a terminal fence since the record was published, is a file
 * that client does see (an open of an existing name revalidates it) and carries a copy of the
 * record. So when the record file is not visible, its fence's copy is used.
 *
 * Read-only. Private to libeshard: it hands out cJSON trees.
 */
#ifndef ESHARD_RECORD_H
#define ESHARD_RECORD_H

#include "eshard/manifest.h"
#include "json.h"

/* 0 with *out (an object; free it), ES_ENOENT (no message) when neither the record nor a fence
 * of that kind with its copy exists, another ES_E* code after es_error() when unreadable. */
int es_record_load(const struct es_manifest *m, const char *kind, const char *id, cJSON **out);

#endif
