/*
 * materialize: an attempt's export (file or folder) to one verified processed.jsonl (see
 * materialize.h).
 */
#include "eshard/materialize.h"
#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/jsonl.h"
#include "eshard/linereader.h"
#include "eshard/log.h"
#include "eshard/prepare.h"
#include "eshard/proc.h"
#include "eshard/sha.h"
#include "eshard/stop.h"
#include "eshard/walk.h"

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
	int rc = es_grow(&s->rel, &s->cap, s->n + 1, sizeof(*s->rel));
	if (rc)
		return rc;
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

/* The part files the reference keeps of its rglob: names that start with neither '.' nor '_'
 * (hidden files, and '_'-prefixed markers). */
static int want_part(const char *name, void *arg)
{
	(void)arg;
	return name[0] != '.' && name[0] != '_';
}

static int take_part(const char *rel, void *arg)
{
	return sources_add(arg, rel);
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

/* ---------------- the hidden row number (--keep-order) ---------------- */

/* End of the JSON string that starts at p (a '"'), just past its closing quote. */
static size_t skip_string(const char *l, size_t len, size_t p)
{
	for (p++; p < len; p++) {
		if (l[p] == '\\')
			p++;
		else if (l[p] == '"')
			return p + 1;
	}
	return len;
}

static size_t skip_ws(const char *l, size_t len, size_t p)
{
	while (p < len && (l[p] == ' ' || l[p] == '\t' || l[p] == '\n' || l[p] == '\r'))
		p++;
	return p;
}

/* End of the JSON value that starts at p. */
static size_t skip_value(const char *l, size_t len, size_t p)
{
	int depth = 0;
	for (; p < len; p++) {
		char c = l[p];
		if (c == '"') {
			p = skip_string(l, len, p) - 1;
			if (!depth)
				return p + 1;
		} else if (c == '{' || c == '[') {
			depth++;
		} else if (c == '}' || c == ']') {
			if (--depth <= 0)
				return depth < 0 ? p : p + 1;
		} else if (!depth && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
			return p;
		}
	}
	return len;
}

/* The top-level members of a validated JSON object line named key (raw bytes, no escapes):
 * how many there are; for the first, [*cut_from, *cut_to) is the span to remove with one of
 * its commas and [*v, *v_end) its value. */
static int find_member(const char *l, size_t len, const char *key, size_t *cut_from, size_t *cut_to, size_t *v,
		       size_t *v_end)
{
	size_t klen = strlen(key), p = skip_ws(l, len, 0), prev_end = 0;
	int found = 0, first = 1;
	if (p >= len || l[p] != '{')
		return 0;
	prev_end = p + 1;
	p = skip_ws(l, len, p + 1);
	while (p < len && l[p] == '"') {
		size_t ks = p, ke = skip_string(l, len, p);
		p = skip_ws(l, len, ke);
		if (p >= len || l[p] != ':')
			break;
		size_t vs = skip_ws(l, len, p + 1), ve = skip_value(l, len, vs);
		p = skip_ws(l, len, ve);
		int hit = ke - ks == klen + 2 && !memcmp(l + ks + 1, key, klen);
		if (hit && !found++) {
			*v = vs;
			*v_end = ve;
			if (first) { /* remove through the comma after it, if any */
				*cut_from = ks;
				*cut_to = p < len && l[p] == ',' ? skip_ws(l, len, p + 1) : ve;
			} else {     /* remove from the comma before it */
				*cut_from = prev_end;
				*cut_to = ve;
			}
		}
		first = 0;
		prev_end = ve;
		if (p < len && l[p] == ',')
			p = skip_ws(l, len, p + 1);
		else
			break;
	}
	return found;
}

/* One output row under --keep-order: its row number, and the row without the field in out. */
static int strip_row(const char *l, size_t len, int64_t max_rows, const char *path, uint64_t lineno, int64_t *row,
		     struct es_buf *out)
{
	size_t from = 0, to = 0, v = 0, ve = 0;
	int n = find_member(l, len, ES_ROW_FIELD, &from, &to, &v, &ve);
	if (n == 0)
		return es_error(ES_EINVAL, "Output row has no \"%s\" field (the hidden row number of order-stable output): "
				"the recipe or processor dropped or renamed it; keep that field, or prepare the job with "
				"--no-keep-order, at %s:%llu", ES_ROW_FIELD, path, (unsigned long long)lineno);
	if (n > 1)
		return es_error(ES_EINVAL, "Output row has \"%s\" more than once, at %s:%llu", ES_ROW_FIELD, path,
				(unsigned long long)lineno);
	int64_t x = 0;
	size_t k = v;
	for (; k < ve && l[k] >= '0' && l[k] <= '9' && x <= (INT64_MAX - 9) / 10; k++)
		x = x * 10 + (l[k] - '0');
	if (k == v || k != ve || (max_rows > 0 && x >= max_rows))
		return es_error(ES_EINVAL, "Output row has \"%s\": %.*s, not a row number of the input (0 to %lld): the "
				"recipe or processor changed eshard-mpi's hidden row number, at %s:%llu", ES_ROW_FIELD,
				(int)(ve - v > 40 ? 40 : ve - v), l + v, (long long)max_rows - 1, path,
				(unsigned long long)lineno);
	*row = x;
	es_buf_reset(out);
	int rc = es_buf_add(out, l, from);
	if (!rc)
		rc = es_buf_add(out, l + to, len - to);
	return rc;
}

struct row_ix {
	int64_t row, off;
	size_t len;
};

struct order {
	struct row_ix *v;
	size_t n, cap;
	int sorted;              /* every row so far came after the one before */
	struct es_buf scratch;
};

static int order_add(struct order *o, int64_t row, int64_t off, size_t len)
{
	int rc = es_grow(&o->v, &o->cap, o->n + 1, sizeof(*o->v));
	if (rc)
		return rc;
	if (o->n && o->v[o->n - 1].row >= row)
		o->sorted = 0;
	o->v[o->n++] = (struct row_ix){ row, off, len };
	return 0;
}

static int cmp_row(const void *a, const void *b)
{
	int64_t x = ((const struct row_ix *)a)->row, y = ((const struct row_ix *)b)->row;
	return x < y ? -1 : x > y;
}

int es_materialize_number_rows(const char *shard_path, const char *out_path, int64_t *rows)
{
	*rows = 0;
	int in, rc = es_fs_open_read(shard_path, O_RDONLY, &in);
	if (rc == 1)
		return es_error_errno(ES_EIO, "cannot open '%s'", shard_path);
	if (rc)
		return rc;
	struct es_buf tmp = ES_BUF_INIT, buf = ES_BUF_INIT;
	int fd = -1;
	rc = es_fs_open_temp(out_path, &tmp, &fd);
	struct es_line_reader *r = rc ? NULL : es_line_reader_new(in, ES_MAX_LINE_BYTES, shard_path);
	if (!rc && !r)
		rc = es_error(ES_ENOMEM, "out of memory");
	const char *line;
	size_t len;
	int has_nl, got;
	int64_t n = 0;
	while (!rc && (got = es_line_reader_next(r, &line, &len, &has_nl)) != 0) {
		if (got < 0) {
			rc = got;
			break;
		}
		size_t a, b, c, d;
		if (len < 2 || line[0] != '{' || line[len - 1] != '}') {
			rc = es_error(ES_EINVAL, "Shard row is not one JSON object, at %s:%lld", shard_path, (long long)n + 1);
			break;
		}
		if (memmem(line, len, "\"" ES_ROW_FIELD "\"", strlen(ES_ROW_FIELD) + 2) &&
		    find_member(line, len, ES_ROW_FIELD, &a, &b, &c, &d)) {
			rc = es_error(ES_EINVAL, "Input row has a field \"%s\" of its own; order-stable output adds a field "
				      "of that name: prepare the job with --no-keep-order, at %s:%lld", ES_ROW_FIELD,
				      shard_path, (long long)n + 1);
			break;
		}
		if (buf.len > ((size_t)1 << 20) && (rc = es_fs_write_all(fd, buf.data, buf.len, tmp.data)) != 0)
			break;
		if (buf.len > ((size_t)1 << 20))
			es_buf_reset(&buf);
		rc = es_buf_add(&buf, line, len - 1);
		if (!rc)
			rc = es_buf_printf(&buf, "%s\"%s\":%lld}\n", len > 2 ? "," : "", ES_ROW_FIELD, (long long)n);
		n++;
	}
	if (!rc && buf.len)
		rc = es_fs_write_all(fd, buf.data, buf.len, tmp.data);
	if (!rc && fsync(fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync '%s'", tmp.data);
	if (fd >= 0 && close(fd) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot close '%s'", tmp.data);
	if (!rc)
		rc = es_fs_rename(tmp.data, out_path);
	if (rc && tmp.len)
		unlink(tmp.data);
	if (!rc)
		*rows = n;
	es_line_reader_free(r);
	close(in);
	es_buf_free(&buf);
	es_buf_free(&tmp);
	return rc;
}

/* ---------------- copying ---------------- */

static int copy_source(struct es_jsonl *jl, const char *path, size_t max_line, struct sink *k,
		       struct es_output_file *f, struct order *ord, int64_t max_rows)
{
	int fd, rc = es_fs_open_read(path, O_RDONLY, &fd);
	if (rc == 1)
		return es_error_errno(ES_EIO, "cannot open '%s'", path);
	if (rc)
		return rc;
	struct es_sha sha;
	rc = es_sha_init(&sha);
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
		if (!rc && ord) {
			int64_t row = 0, off = k->bytes + (int64_t)k->buf.len;
			rc = strip_row(line, len, max_rows, path, es_line_reader_lineno(r), &row, &ord->scratch);
			if (!rc)
				rc = order_add(ord, row, off, ord->scratch.len);
			if (!rc)
				rc = sink_line(k, ord->scratch.data, ord->scratch.len);
		} else if (!rc) {
			rc = sink_line(k, line, len);
		}
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
	/* Like the reference's rglob: links to files count, linked folders are not entered. */
	struct es_walk w = { want_part, take_part, sources, 1 };
	int rc = es_walk_files(export, &w);
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

/* --keep-order, after the first copy (k finished into *tmp, rows in arrival order): when the
 * rows did not arrive in order, sort the index, check that no row number came twice, and write
 * the rows once more in order into a new temporary, which replaces *tmp (m gets its digest). */
static int reorder(struct order *ord, struct sink *k, struct es_buf *tmp, const char *final, struct es_materialized *m)
{
	if (ord->sorted)
		return 0;
	qsort(ord->v, ord->n, sizeof(*ord->v), cmp_row);
	for (size_t i = 1; i < ord->n; i++)
		if (ord->v[i].row == ord->v[i - 1].row)
			return es_error(ES_EINVAL, "Output has row number %lld (\"%s\") twice: the processor duplicated a row, "
					"so its output has no input order; prepare the job with --no-keep-order, at %s",
					(long long)ord->v[i].row, ES_ROW_FIELD, final);
	int in = open(tmp->data, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return es_error_errno(ES_EIO, "cannot open '%s'", tmp->data);
	struct es_buf tmp2 = ES_BUF_INIT;
	struct sink k2 = { .fd = -1, .buf = ES_BUF_INIT, .tick = k->tick, .tick_arg = k->tick_arg,
			   .next_tick = es_time_mono() + 1.0 };
	int rc = es_fs_open_temp(final, &tmp2, &k2.fd);
	k2.path = tmp2.data;
	if (!rc && !(rc = es_sha_init(&k2.sha)))
		k2.sha_live = 1;
	for (size_t i = 0; !rc && i < ord->n; i++) {
		const struct row_ix *x = &ord->v[i];
		if ((i & 4095) == 0 && (rc = sink_tick(&k2)) != 0)
			break;
		es_buf_reset(&ord->scratch);
		if ((rc = es_buf_grow(&ord->scratch, x->len)) != 0)
			break;
		ssize_t got = pread(in, ord->scratch.data, x->len, (off_t)x->off);
		if (got != (ssize_t)x->len) {
			rc = es_error_errno(ES_EIO, "cannot read back '%s'", tmp->data);
			break;
		}
		rc = sink_line(&k2, ord->scratch.data, x->len);
	}
	close(in);
	if (!rc)
		rc = sink_finish(&k2, m);
	if (k2.sha_live)
		es_sha_abort(&k2.sha);
	if (k2.fd >= 0)
		close(k2.fd);
	if (rc) {
		if (tmp2.len)
			unlink(tmp2.data);
	} else {
		unlink(tmp->data);
		es_buf_reset(tmp);
		rc = es_buf_adds(tmp, tmp2.data);
		k->rows = k2.rows;
		k->bytes = k2.bytes;
	}
	es_buf_free(&k2.buf);
	es_buf_free(&tmp2);
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
	struct order ord = { .sorted = 1, .scratch = ES_BUF_INIT };
	struct order *keep = o && o->keep_order ? &ord : NULL;
	int64_t max_rows = o ? o->input_rows : 0;
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
			rc = copy_source(jl, src.data, max_line, &k, f, keep, max_rows);
	}
	if (!rc)
		rc = sink_finish(&k, m);
	if (!rc && keep)
		rc = reorder(keep, &k, &tmp, final.data, m);
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
	free(ord.v);
	es_buf_free(&ord.scratch);
	sources_free(&sources);
	es_buf_free(&k.buf);
	es_buf_free(&export);
	es_buf_free(&tmp);
	es_buf_free(&final);
	es_buf_free(&src);
	return rc;
}
