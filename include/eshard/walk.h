/*
 * walk: the one walk of a folder tree, for input discovery (scan) and an attempt's export
 * folder (materialize).
 *
 * Folders are entered through real folders only: a symbolic link to a folder is never entered,
 * so a link loop cannot be walked into and nothing outside the tree is reached through a folder
 * link. Whether a link to a regular file is a file is the caller's choice (file_links); both of
 * today's callers say yes, as the reference's rglob() does (docs/design.md#input-discovery). A
 * dangling link, or a link to anything but a regular file, is never a file; nor is a FIFO, a
 * socket or a device. Files are handed over in the order readdir() gives them: callers sort.
 */
#ifndef ESHARD_WALK_H
#define ESHARD_WALK_H

struct es_walk {
	/* 1 when a file of this name is wanted. Called with the own name of every entry that is
	 * not a folder, before a link is followed (a link whose name is not wanted costs no
	 * stat). NULL wants every name; folders are entered whatever their name. */
	int (*want)(const char *name, void *arg);
	/* Called for each wanted file with its path relative to the root ("a/b.jsonl"); a nonzero
	 * return (an ES_E* code, reported) stops the walk and is returned. */
	int (*take)(const char *rel, void *arg);
	void *arg;
	int file_links; /* 1: a link to a regular file is a file; 0: every link is left out */
};

/* Walk the folder root (itself a folder or a link to one). 0, the first nonzero return of
 * take, or ES_EIO "cannot read folder '<path>'" / "cannot stat '<path>'" when a folder of the
 * tree cannot be read or an entry of it cannot be looked at. */
int es_walk_files(const char *root, const struct es_walk *w);

#endif
