/*
 * materialize: an attempt's export (file or folder) to one verified processed.jsonl (see
 * materialize.h).
 */
#include "eshard/materialize.h"
#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/jsonl.h"
#include "eshard/linereader.h"
#include "eshard/log.h"
#include "eshard/prepare.h"
#include "eshard/proc.h"
#include "eshard/sha.h"
#include "eshard/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


struct sources {
	char **rel;             /* relative to the export folder */
	size_t n, cap;
};

static int sources_add(struct sources *s, const char *rel)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		char **v = realloc(s->rel, cap * sizeof(*v));
		if (!v)
			return es_error(ES_ENOMEM, "out of memory");
		s->rel = v;
		s->cap = cap;
	}
	if (!(s->rel[s->n] = strdup(rel)))
		return es_error(ES_ENOMEM, "out of memory");
	s->n++;
	return 0;
}

static void sources_free(struct sources *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->rel[i]);
	free(s->rel);
}

/* Collect the regular files below dir (rel is its path below the export root, "" at the
 * top). Like the reference's rglob: symlinks to files count, symlinked folders are not
 * entered, and only a file's own name is filtered. */
static int walk(const char *root, struct es_buf *rel, struct sources *out)
{
	struct es_buf path = ES_BUF_INIT;
	int rc = rel->len ? es_path_join(&path, root, rel->data) : es_buf_adds(&path, root);
	if (rc)
		return rc;
	DIR *d = opendir(path.data);
	if (!d) {
		rc = es_error_errno(ES_EIO, "cannot read folder '%s'", path.data);
		es_buf_free(&path);
		return rc;
	}
	size_t base = rel->len;
	struct dirent *e;
	for (;;) {
		errno = 0;
		if (!(e = readdir(d))) {
			if (errno)
				rc = es_error_errno(ES_EIO, "cannot read folder '%s'", path.data);
			break;
		}
		const char *name = e->d_name;
		if (!strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		struct stat st;
		if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = es_error_errno(ES_EIO, "cannot stat '%s/%s'", path.data, name);
			break;
		}
		es_buf_setlen(rel, base);
		if ((base && (rc = es_buf_addc(rel, '/'))) || (rc = es_buf_adds(rel, name)))
			break;
		if (S_ISDIR(st.st_mode)) {
			if ((rc = walk(root, rel, out)) != 0)
				break;
			continue;
		}
		if (S_ISLNK(st.st_mode) && fstatat(dirfd(d), name, &st, 0) != 0)
			continue; /* a dangling link is not a file */
		if (!S_ISREG(st.st_mode) || name[0] == '.' || name[0] == '_')
			continue;
		if ((rc = sources_add(out, rel->data)) != 0)
			break;
	}
	es_buf_setlen(rel, base);
	closedir(d);
	es_buf_free(&path);
	return rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The processed.jsonl being written: a 1 MiB write buffer whose bytes are hashed and
 * counted exactly as they go to write(). */
struct sink {
	int fd;
	int (*tick)(void *arg);  /* the caller's lease refresh, or NULL */
	void *tick_arg;
	double next_tick;
	int sha_live;            /* sha is initialized and not final yet */
	const char *path;
	struct es_buf buf;
	struct es_sha sha;
	int64_t rows, bytes;
};

static int sink_flush(struct sink *k)
{
	if (!k->buf.len)
		return 0;
	es_sha_update(&k->sha, k->buf.data, k->buf.len);
	k->bytes += (int64_t)k->buf.len;
	int rc = es_fs_write_all(k->fd, k->buf.data, k->buf.len, k->path);
	es_buf_reset(&k->buf);
	return rc;
}

static int sink_line(struct sink *k, const char *line, size_t len)
{
	int rc = 0;
	if (k->buf.len + len + 1 > ((size_t)1 << 20))
		rc = sink_flush(k);
	if (!rc && len + 1 > ((size_t)1 << 20)) {
		/* A line larger than the buffer goes straight out, hashed the same way. */
		es_sha_update(&k->sha, line, len);
		es_sha_update(&k->sha, "\n", 1);
		k->bytes += (int64_t)len + 1;
		rc = es_fs_write_all(k->fd, line, len, k->path);
		if (!rc)
			rc = es_fs_write_all(k->fd, "\n", 1, k->path);
	} else if (!rc) {
		rc = es_buf_add(&k->buf, line, len);
		if (!rc)
			rc = es_buf_addc(&k->buf, '\n');
	}
	if (!rc)
		k->rows++;
	return rc;
}

static void raw_hash(void *arg, const void *p, size_t n)
{
	es_sha_update(arg, p, n);
}

/* Copy one source into the sink; fills its row count, raw size and raw hash. */
/* A stop signal, or the caller's tick once a second (its lease refresh). */
static int sink_tick(struct sink *k)
{
	int rc = es_check_stop("materialize");
	if (rc || !k->tick || es_time_mono() < k->next_tick)
		return rc;
	k->next_tick = es_time_mono() + 1.0;
	return k->tick(k->tick_arg) ? es_error(ES_EINTR, "materialize of '%s' stopped: the attempt lost its lease", k->path) : 0;
}

static int copy_source(struct es_jsonl *jl, const char *path, size_t max_line, struct sink *k,
		       struct es_output_file *f)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return es_error_errno(ES_EIO, "cannot open '%s'", path);
	struct es_sha sha;
	int rc = es_sha_init(&sha);
	if (rc) {
		close(fd);
		return rc;
	}
	struct es_line_reader *r = es_line_reader_new(fd, max_line, path);
	if (!r)
		rc = es_error(ES_ENOMEM, "out of memory");
	else
		es_line_reader_set_raw_cb(r, raw_hash, &sha);
	const char *line;
	size_t len;
	int has_nl, got;
	while (!rc && (got = es_line_reader_next(r, &line, &len, &has_nl)) != 0) {
		if (got < 0) {
			rc = got;
			break;
		}
		if ((es_line_reader_lineno(r) & 4095) == 0 && (rc = sink_tick(k)) != 0)
			break;
		rc = es_jsonl_validate(jl, line, len, path, es_line_reader_lineno(r));
		if (!rc)
			rc = sink_line(k, line, len);
		if (!rc)
			f->rows++;
	}
	if (!rc) {
		f->size_bytes = (int64_t)es_line_reader_bytes(r);
		rc = es_sha_final(&sha, f->sha256);
	} else {
		es_sha_abort(&sha);
	}
	es_line_reader_free(r);
	close(fd);
	return rc;
}

void es_materialized_free(struct es_materialized *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_files; i++)
		free(m->files[i].path);
	free(m->files);
	memset(m, 0, sizeof(*m));
}

/* What the export is: one file (*single, one source "") or a folder of part files, sorted. */
static int find_sources(const char *export, struct sources *sources, int *single)
{
	struct stat st;
	*single = 0;
	if (stat(export, &st) != 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return es_error(ES_ENOENT, "Data-Juicer returned 0 but did not create %s", export);
		return es_error_errno(ES_EIO, "cannot stat '%s'", export);
	}
	if (S_ISREG(st.st_mode)) {
		*single = 1;
		return sources_add(sources, "");
	}
	if (!S_ISDIR(st.st_mode))
		return es_error(ES_EINVAL, "Ray output is neither a file nor a folder: %s", export);
	struct es_buf rel = ES_BUF_INIT;
	int rc = walk(export, &rel, sources);
	es_buf_free(&rel);
	if (!rc && sources->n > 1)
		qsort(sources->rel, sources->n, sizeof(char *), cmp_str);
	return rc;
}

/* Flush, fsync and close the sink, check its size on disk, and take its digest. */
static int sink_finish(struct sink *k, struct es_materialized *m)
{
	int rc = sink_flush(k);
	if (!rc && fsync(k->fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync '%s'", k->path);
	if (!rc) {
		struct stat ts;
		if (fstat(k->fd, &ts) != 0)
			rc = es_error_errno(ES_EIO, "cannot stat '%s'", k->path);
		else if ((int64_t)ts.st_size != k->bytes)
			rc = es_error(ES_EIO, "'%s' holds %lld bytes after writing %lld", k->path, (long long)ts.st_size,
				      (long long)k->bytes);
	}
	if (!rc && close(k->fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot close '%s'", k->path);
	else if (rc)
		close(k->fd);
	k->fd = -1;
	if (!rc) {
		k->sha_live = 0;
		rc = es_sha_final(&k->sha, m->sha256);
	}
	return rc;
}

int es_materialize(const char *job_dir, const char *attempt_dir, const struct es_materialize_opts *o,
		   struct es_materialized *m)
{
	memset(m, 0, sizeof(*m));
	size_t max_line = o && o->max_line ? o->max_line : ES_MAX_LINE_BYTES;
	size_t jl_len = strlen(job_dir);
	while (jl_len > 1 && job_dir[jl_len - 1] == '/')
		jl_len--;
	if (strncmp(attempt_dir, job_dir, jl_len) != 0 || attempt_dir[jl_len] != '/')
		return es_error(ES_EINTERNAL, "attempt folder '%s' is not inside the job folder '%s'",
				attempt_dir, job_dir);

	struct es_buf export = ES_BUF_INIT, tmp = ES_BUF_INIT, final = ES_BUF_INIT, src = ES_BUF_INIT;
	struct sources sources = { 0 };
	struct sink k = { .fd = -1, .buf = ES_BUF_INIT, .tick = o ? o->tick : NULL, .tick_arg = o ? o->tick_arg : NULL,
			  .next_tick = es_time_mono() + 1.0 };
	struct es_jsonl *jl = NULL;
	int single = 0;
	int rc = es_path_join(&export, attempt_dir, "ray-output.jsonl");
	if (!rc)
		rc = es_path_join(&final, attempt_dir, "processed.jsonl");
	if (!rc)
		rc = find_sources(export.data, &sources, &single);
	if (!rc && sources.n && !(m->files = calloc(sources.n, sizeof(*m->files))))
		rc = es_error(ES_ENOMEM, "out of memory");
	if (!rc && !(jl = es_jsonl_new(NULL)))
		rc = es_error(ES_ENOMEM, "out of memory");
	if (!rc)
		rc = es_fs_open_temp(final.data, &tmp, &k.fd);
	k.path = tmp.data;
	if (!rc && !(rc = es_sha_init(&k.sha)))
		k.sha_live = 1;
	for (size_t i = 0; !rc && i < sources.n; i++) {
		struct es_output_file *f = &m->files[i];
		rc = single ? es_buf_adds(&src, export.data) : es_path_join(&src, export.data, sources.rel[i]);
		if (!rc && !(f->path = strdup(src.data + jl_len + 1)))
			rc = es_error(ES_ENOMEM, "out of memory");
		if (rc)
			break;
		m->n_files = i + 1;
		es_proc_test_hook("ESHARD_TEST_HOOK_MATERIALIZE_SOURCE");
		if (!(rc = sink_tick(&k)))
			rc = copy_source(jl, src.data, max_line, &k, f);
	}
	if (!rc)
		rc = sink_finish(&k, m);
	if (!rc)
		rc = es_fs_rename(tmp.data, final.data);
	es_crash_point("materialize-after-rename");
	if (!rc) {
		m->rows = k.rows;
		m->size_bytes = k.bytes;
	}
	if (k.sha_live)
		es_sha_abort(&k.sha);
	if (k.fd >= 0)
		close(k.fd);
	if (rc && tmp.len)
		unlink(tmp.data);
	if (rc)
		es_materialized_free(m);
	es_jsonl_free(jl);
	sources_free(&sources);
	es_buf_free(&k.buf);
	es_buf_free(&export);
	es_buf_free(&tmp);
	es_buf_free(&final);
	es_buf_free(&src);
	return rc;
}
