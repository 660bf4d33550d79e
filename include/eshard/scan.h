/*
 * scan: input discovery and ordering (REFERENCE.md §3 step 5).
 *
 * A file is taken when its last suffix, lower-cased, is ".jsonl" (Python's Path.suffix: a
 * name like ".jsonl" has none), or when it ends in ".jsonl.gz" or ".jsonl.zst" (any case) after
 * a non-empty stem: compressed input, read through the line reader's decoder. In a folder, every regular file (a symlink to a file counts)
 * below it is considered, symlinked folders are not entered, and the list is sorted by the
 * relative path in byte order. Read-only: nothing is written.
 */
#ifndef ESHARD_SCAN_H
#define ESHARD_SCAN_H

#include <stddef.h>

struct es_input_file {
	char *path;          /* absolute: the resolved dataset folder joined with relative */
	char *relative_path; /* POSIX, relative to the dataset folder; the basename for a file */
};

struct es_scan {
	char *dataset_path;  /* resolved absolute dataset path */
	char *media_root;    /* the dataset folder, or the parent folder of a single file */
	struct es_input_file *files;
	size_t n_files;
};

/* dataset_path must already be resolved. No files is an error: "No .jsonl files found under P" (the reference's wording). */
int es_scan_dataset(const char *dataset_path, struct es_scan *out);
void es_scan_free(struct es_scan *s);
/* 1 when name's last suffix is ".jsonl", or its last two ".jsonl.gz" or ".jsonl.zst", in any case. */
int es_scan_is_jsonl_name(const char *name);

#endif
