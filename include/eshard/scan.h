/*
 * scan: input discovery and ordering (docs/design.md#input-discovery).
 *
 * A dataset path that names one file takes it when its last suffix, lower-cased, is ".jsonl"
 * (Python's Path.suffix: a name like ".jsonl" has none), or when it ends in ".jsonl.gz" or
 * ".jsonl.zst" (any case) after a non-empty stem: the user named it, and it is read through
 * the line reader's decoder. In a folder, every regular file (a symlink to a file counts)
 * below it is considered, symlinked folders are not entered, and the list is sorted by the
 * relative path in byte order. A folder's member is taken as the reference takes it: ".jsonl"
 * only. With ES_SCAN_COMPRESSED its ".jsonl.gz" and ".jsonl.zst" members are taken too, and
 * two members whose relative paths are the same less the compression suffix (x.jsonl beside
 * x.jsonl.gz, or x.jsonl.gz beside x.jsonl.zst) are refused: the same records would be read
 * twice. Read-only: nothing is written.
 */
#ifndef ESHARD_SCAN_H
#define ESHARD_SCAN_H

#include <stddef.h>

/* es_scan_dataset flags: also take a folder's compressed members (prepare --compressed). */
#define ES_SCAN_COMPRESSED 1u

struct es_input_file {
	char *path;          /* absolute: the resolved dataset folder joined with relative */
	char *relative_path; /* POSIX, relative to the dataset folder; the basename for a file */
};

struct es_scan {
	char *dataset_path;  /* resolved absolute dataset path */
	char *media_root;    /* the dataset folder, or the parent folder of a single file */
	struct es_input_file *files;
	size_t n_files;
	/* Without ES_SCAN_COMPRESSED: the folder's compressed members left out, and the first of
	 * them in path order (relative, NULL when none), so that prepare can say so. */
	size_t n_skipped;
	char *first_skipped;
};

/* dataset_path must already be resolved; flags: 0 or ES_SCAN_COMPRESSED. No files is an error:
 * "No .jsonl files found under P" (the reference's wording). */
int es_scan_dataset(const char *dataset_path, unsigned flags, struct es_scan *out);
void es_scan_free(struct es_scan *s);
/* 1 when name's last suffix is ".jsonl", or its last two ".jsonl.gz" or ".jsonl.zst", in any case. */
int es_scan_is_jsonl_name(const char *name);

#endif
