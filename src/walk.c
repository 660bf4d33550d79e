/*
 * walk: the one walk of a folder tree (walk.h).
 */
#include "eshard/walk.h"
#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

/* 1 when the entry name of folder d (whose lstat is st) is a file the walk hands over. */
static int is_file(DIR *d, const char *name, const struct stat *st, const struct es_walk *w)
{
	if (w->want && !w->want(name, w->arg))
		return 0;
	if (S_ISREG(st->st_mode))
		return 1;
	struct stat target;
	return w->file_links && S_ISLNK(st->st_mode) && fstatat(dirfd(d), name, &target, 0) == 0 &&
	       S_ISREG(target.st_mode);
}

/* One entry of the folder at path (rel below the root, already extended by the entry). */
static int visit(DIR *d, const char *path, const char *name, const char *root, struct es_buf *rel,
		 const struct es_walk *w);

/* The folder root/rel ("" for the root itself), entry by entry. */
static int walk_dir(const char *root, struct es_buf *rel, const struct es_walk *w)
{
	struct es_buf path = ES_BUF_INIT;
	int rc = rel->len ? es_path_join(&path, root, rel->data) : es_buf_adds(&path, root);
	DIR *d = rc ? NULL : opendir(path.data);
	if (!rc && !d)
		rc = es_error_errno(ES_EIO, "cannot read folder '%s'", path.data);
	size_t base = rel->len;
	while (d && !rc) {
		errno = 0;
		struct dirent *e = readdir(d);
		if (!e) {
			if (errno)
				rc = es_error_errno(ES_EIO, "cannot read folder '%s'", path.data);
			break;
		}
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			rc = visit(d, path.data, e->d_name, root, rel, w);
		es_buf_setlen(rel, base);
	}
	if (d)
		closedir(d);
	es_buf_free(&path);
	return rc;
}

static int visit(DIR *d, const char *path, const char *name, const char *root, struct es_buf *rel,
		 const struct es_walk *w)
{
	struct stat st;
	if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return es_error_errno(ES_EIO, "cannot stat '%s/%s'", path, name);
	int rc = rel->len ? es_buf_addc(rel, '/') : 0;
	if (!rc)
		rc = es_buf_adds(rel, name);
	if (rc)
		return rc;
	if (S_ISDIR(st.st_mode))
		return walk_dir(root, rel, w);
	return is_file(d, name, &st, w) ? w->take(rel->data, w->arg) : 0;
}

int es_walk_files(const char *root, const struct es_walk *w)
{
	struct es_buf rel = ES_BUF_INIT;
	int rc = walk_dir(root, &rel, w);
	es_buf_free(&rel);
	return rc;
}
