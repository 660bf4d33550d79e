#include "eshard/scan.h"
#include "eshard/buf.h"
#include "eshard/linereader.h"
#include "eshard/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

int es_scan_is_jsonl_name(const char *name)
{
	/* Python's PurePath.suffix: the part from the last dot, if that dot is neither the
	 * first nor the last character of the name. A compressed file's name is a JSONL name
	 * followed by its codec's suffix (".gz", ".zst"): "x.jsonl.gz" is taken, ".jsonl.gz",
	 * whose stem would be empty, is not, as ".jsonl" is not. */
	size_t n = strlen(name);
	int codec = es_codec_of_name(name);
	if (codec != ES_CODEC_PLAIN)
		n -= codec == ES_CODEC_GZIP ? 3 : 4;
	/* At least one character before the dot of ".jsonl". */
	return n >= 7 && strncasecmp(name + n - 6, ".jsonl", 6) == 0;
}

struct list {
	struct es_input_file *v;
	size_t n, cap;
};

static int push(struct list *l, const char *root, const char *rel)
{
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 64;
		void *p = realloc(l->v, nc * sizeof(*l->v));
		if (!p)
			return es_error(ES_ENOMEM, "out of memory listing input files");
		l->v = p;
		l->cap = nc;
	}
	struct es_buf b = ES_BUF_INIT;
	int rc = es_buf_printf(&b, "%s%s%s", root, strcmp(root, "/") ? "/" : "", rel);
	char *r = strdup(rel);
	if (rc || !r) {
		es_buf_free(&b);
		free(r);
		return rc ? rc : es_error(ES_ENOMEM, "out of memory listing input files");
	}
	l->v[l->n].path = es_buf_detach(&b, NULL);
	l->v[l->n].relative_path = r;
	l->n++;
	return 0;
}

static int walk(const char *root, struct es_buf *rel, struct list *l)
{
	struct es_buf dirpath = ES_BUF_INIT;
	int rc = es_buf_printf(&dirpath, "%s%s%s", root, rel->len ? "/" : "", rel->data);
	if (rc)
		return rc;
	DIR *d = opendir(dirpath.data);
	if (!d) {
		rc = es_error_errno(ES_EIO, "cannot read folder '%s'", dirpath.data);
		es_buf_free(&dirpath);
		return rc;
	}
	struct dirent *e;
	size_t base = rel->len;
	errno = 0;
	while (!rc && (e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		es_buf_setlen(rel, base);
		if (base)
			rc = es_buf_addc(rel, '/');
		if (!rc)
			rc = es_buf_adds(rel, e->d_name);
		if (rc)
			break;
		struct es_buf full = ES_BUF_INIT;
		struct stat lst, st;
		rc = es_buf_printf(&full, "%s/%s", root, rel->data);
		if (!rc && lstat(full.data, &lst) != 0)
			rc = es_error_errno(ES_EIO, "cannot stat '%s'", full.data);
		if (!rc && S_ISDIR(lst.st_mode)) {
			rc = walk(root, rel, l);
		} else if (!rc && es_scan_is_jsonl_name(e->d_name)) {
			/* A symlink to a regular file counts; a dangling link or a link to a folder
			 * is not a file. */
			if (S_ISREG(lst.st_mode) || (S_ISLNK(lst.st_mode) && stat(full.data, &st) == 0 && S_ISREG(st.st_mode)))
				rc = push(l, root, rel->data);
		}
		es_buf_free(&full);
		errno = 0;
	}
	if (!rc && errno)
		rc = es_error_errno(ES_EIO, "cannot read folder '%s'", dirpath.data);
	closedir(d);
	es_buf_setlen(rel, base);
	es_buf_free(&dirpath);
	return rc;
}

static int cmp_rel(const void *a, const void *b)
{
	return strcmp(((const struct es_input_file *)a)->relative_path,
		      ((const struct es_input_file *)b)->relative_path);
}

int es_scan_dataset(const char *dataset_path, struct es_scan *out)
{
	memset(out, 0, sizeof(*out));
	struct stat st;
	if (stat(dataset_path, &st) != 0)
		return es_error_errno(ES_ENOENT, "Dataset path does not exist: %s", dataset_path);
	struct list l = { 0 };
	int rc = 0;
	out->dataset_path = strdup(dataset_path);
	if (S_ISDIR(st.st_mode)) {
		out->media_root = strdup(dataset_path);
		struct es_buf rel = ES_BUF_INIT;
		rc = walk(dataset_path, &rel, &l);
		es_buf_free(&rel);
		if (!rc && l.n > 1)
			qsort(l.v, l.n, sizeof(*l.v), cmp_rel);
	} else {
		const char *slash = strrchr(dataset_path, '/');
		const char *name = slash ? slash + 1 : dataset_path;
		out->media_root = slash == dataset_path ? strdup("/") : strndup(dataset_path, (size_t)(slash - dataset_path));
		if (S_ISREG(st.st_mode) && es_scan_is_jsonl_name(name)) {
			if (!(l.v = calloc(1, sizeof(*l.v))) || !(l.v[0].path = strdup(dataset_path)) ||
			    !(l.v[0].relative_path = strdup(name)))
				rc = es_error(ES_ENOMEM, "out of memory listing input files");
			l.n = 1;
		}
	}
	out->files = l.v;
	out->n_files = l.n;
	if (!rc && (!out->dataset_path || !out->media_root))
		rc = es_error(ES_ENOMEM, "out of memory listing input files");
	if (!rc && l.n == 0)
		rc = es_error(ES_EINVAL, "No .jsonl files found under %s", dataset_path);
	if (rc)
		es_scan_free(out);
	return rc;
}

void es_scan_free(struct es_scan *s)
{
	for (size_t i = 0; i < s->n_files; i++) {
		free(s->files[i].path);
		free(s->files[i].relative_path);
	}
	free(s->files);
	free(s->dataset_path);
	free(s->media_root);
	memset(s, 0, sizeof(*s));
}
