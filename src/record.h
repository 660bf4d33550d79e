/*
 * record: a shard's done or failed record as every reader (status, merge, verify, report)
 * loads and checks it.
 *
 * The record is state/<kind>/<id>.json. A client of a shared file system that caches "no such
 * file" (NFS lookupcache=all, acdirmax) may not see a record another node just published for
 * up to a minute; the shard's lock, a terminal fence since the record was published, is a file
 * that client does see (an open of an existing name revalidates it) and carries a copy of the
 * record. So when the record file is not visible, its fence's copy is used.
 *
 * A record is never read through a symbolic link (eshard-mpi never makes one in a job folder;
 * a planted one could lead a reader to trust data from outside the folder).
 *
 * Read-only. Private to libeshard: it hands out cJSON trees.
 */
#ifndef ESHARD_RECORD_H
#define ESHARD_RECORD_H

#include <stdint.h>

#include "eshard/buf.h"
#include "eshard/manifest.h"
#include "json.h"

/* 0 with *out (an object; free it), ES_ENOENT (no message) when neither the record nor a fence
 * of that kind with its copy exists, another ES_E* code after es_error() when it is unreadable,
 * not an object, or a symbolic link. */
int es_record_load(const struct es_manifest *m, const char *kind, const char *id, cJSON **out);

/* What merge needs of a done record, checked: output_path (resolved, symbolic links included,
 * it must stay inside the job folder: *output gets it), rows and sha256. 0, or ES_EINVAL after
 * es_error() naming the record and the problem. The output file itself is not read; with
 * result_st not NULL it is stat'ed (fs.h es_fs_resolve_under: st_mode 0 when not found). */
struct es_done_fields {
	int64_t rows;
	int64_t size_bytes;      /* -1 when the record lacks it */
	const char *sha256;      /* points into the record */
	const char *hostname;    /* points into the record, or NULL */
};
struct stat;
int es_record_check_done(const struct es_manifest *m, const char *id, const cJSON *rec, struct es_buf *output,
			 struct es_done_fields *f, struct stat *result_st);

#endif
