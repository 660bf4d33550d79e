#include "eshard/scan.h"
#include "eshard/buf.h"
#include "eshard/linereader.h"
#include "eshard/log.h"
#include "eshard/walk.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* The length of a compression suffix that name ends with (".gz", ".zst", any case), else 0. */
static size_t codec_suffix_len(const char *name)
{
	int codec = es_codec_of_name(name);
	return codec == ES_CODEC_GZIP ? 3 : codec == ES_CODEC_ZSTD ? 4 : 0;
}

int es_scan_is_jsonl_name(const char *name)
{
	/* Python's PurePath.suffix: the part from the last dot, if that dot is neither the
	 * first nor the last character of the name. A compressed file's name is a JSONL name
	 * followed by its codec's suffix (".gz", ".zst"): "x.jsonl.gz" is taken, ".jsonl.gz",
	 * whose stem would be empty, is not, as ".jsonl" is not. */
	size_t n = strlen(name) - codec_suffix_len(name);
	/* At least one character before the dot of ".jsonl". */
	return n >= 7 && strncasecmp(name + n - 6, ".jsonl", 6) == 0;
}

struct list {
	struct es_input_file *v;
	size_t n, cap;
	unsigned flags;
	size_t n_skipped;    /* compressed members left out (no ES_SCAN_COMPRESSED) */
	char *first_skipped; /* the first of them in path order */
};

static int push(struct list *l, const char *root, const char *rel)
{
	int rc = es_grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v));
	if (rc)
		return rc;
	struct es_buf b = ES_BUF_INIT;
	rc = es_buf_printf(&b, "%s%s%s", root, strcmp(root, "/") ? "/" : "", rel);
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

/* A folder's JSONL member: taken, or, when compressed and ES_SCAN_COMPRESSED is not given,
 * left out as the reference leaves it (counted, so that prepare can say so). */
static int take(struct list *l, const char *root, const char *rel)
{
	if ((l->flags & ES_SCAN_COMPRESSED) || !codec_suffix_len(rel))
		return push(l, root, rel);
	l->n_skipped++;
	if (l->first_skipped && strcmp(rel, l->first_skipped) >= 0)
		return 0;
	char *r = strdup(rel);
	if (!r)
		return es_error(ES_ENOMEM, "out of memory listing input files");
	free(l->first_skipped);
	l->first_skipped = r;
	return 0;
}

/* The state es_walk_files hands to want and take: the list and the root it is below. */
struct scan_walk {
	struct list *l;
	const char *root;
};

static int want_jsonl(const char *name, void *arg)
{
	(void)arg;
	return es_scan_is_jsonl_name(name);
}

static int take_walked(const char *rel, void *arg)
{
	struct scan_walk *s = arg;
	return take(s->l, s->root, rel);
}

static int cmp_rel(const void *a, const void *b)
{
	return strcmp(((const struct es_input_file *)a)->relative_path,
		      ((const struct es_input_file *)b)->relative_path);
}

/* Relative paths ordered by what they are less their compression suffix: 0 for x.jsonl,
 * x.jsonl.gz and x.jsonl.ZST alike (the suffix in any case, the rest exactly: x.JSONL.gz is
 * another file's copy). */
static int cmp_stem_only(const char *x, const char *y)
{
	size_t nx = strlen(x) - codec_suffix_len(x), ny = strlen(y) - codec_suffix_len(y);
	int c = memcmp(x, y, nx < ny ? nx : ny);
	return c ? c : nx < ny ? -1 : nx > ny;
}

/* By stem, then whole: the pair that refuse_twins names does not depend on the folder's order. */
static int cmp_stem(const void *a, const void *b)
{
	const char *x = (*(const struct es_input_file *const *)a)->relative_path;
	const char *y = (*(const struct es_input_file *const *)b)->relative_path;
	int c = cmp_stem_only(x, y);
	return c ? c : strcmp(x, y);
}

/* Two members that are one file less the compression suffix hold the same records (a gzip copy
 * beside its source): reading both would double them silently. */
static int refuse_twins(const struct es_input_file *files, size_t n)
{
	if (n < 2)
		return 0;
	const struct es_input_file **v = malloc(n * sizeof(*v));
	if (!v)
		return es_error(ES_ENOMEM, "out of memory listing input files");
	for (size_t i = 0; i < n; i++)
		v[i] = &files[i];
	qsort(v, n, sizeof(*v), cmp_stem);
	int rc = 0;
	for (size_t i = 1; !rc && i < n; i++) {
		const struct es_input_file *a = v[i - 1], *b = v[i];
		if (cmp_stem_only(a->relative_path, b->relative_path))
			continue;
		/* The plain one sorts first: if a is compressed, both are. */
		rc = codec_suffix_len(a->relative_path)
		     ? es_error(ES_EINVAL, "Input file present twice, compressed twice: %s and %s; remove one",
				a->path, b->path)
		     : es_error(ES_EINVAL, "Input file present twice, plain and compressed: %s and %s; remove one, "
				"or leave out --compressed to read only the plain one", a->path, b->path);
	}
	free(v);
	return rc;
}

/* The error when nothing was taken: the reference's wording, plus the compressed members left
 * out, if any: a folder of compressed files alone is read with one option more. */
static int no_files(const char *dataset_path, const struct list *l)
{
	if (!l->n_skipped)
		return es_error(ES_EINVAL, "No .jsonl files found under %s", dataset_path);
	return es_error(ES_EINVAL, "No .jsonl files found under %s (it holds %zu compressed file%s, first: %s; "
			"--compressed reads them)", dataset_path, l->n_skipped, l->n_skipped == 1 ? "" : "s", l->first_skipped);
}

int es_scan_dataset(const char *dataset_path, unsigned flags, struct es_scan *out)
{
	memset(out, 0, sizeof(*out));
	struct stat st;
	if (stat(dataset_path, &st) != 0)
		return es_error_errno(ES_ENOENT, "Dataset path does not exist: %s", dataset_path);
	struct list l = { .flags = flags };
	int rc = 0;
	out->dataset_path = strdup(dataset_path);
	if (S_ISDIR(st.st_mode)) {
		out->media_root = strdup(dataset_path);
		/* The README's input rules: a link to a file counts, a linked folder is not entered. */
		struct scan_walk s = { &l, dataset_path };
		struct es_walk w = { want_jsonl, take_walked, &s, 1 };
		rc = es_walk_files(dataset_path, &w);
		if (!rc && l.n > 1)
			qsort(l.v, l.n, sizeof(*l.v), cmp_rel);
		if (!rc && (flags & ES_SCAN_COMPRESSED))
			rc = refuse_twins(l.v, l.n);
	} else {
		/* A file named directly is read whatever its codec: the user chose it. */
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
	out->n_skipped = l.n_skipped;
	out->first_skipped = l.first_skipped;
	if (!rc && (!out->dataset_path || !out->media_root))
		rc = es_error(ES_ENOMEM, "out of memory listing input files");
	if (!rc && l.n == 0)
		rc = no_files(dataset_path, &l);
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
	free(s->first_skipped);
	memset(s, 0, sizeof(*s));
}
