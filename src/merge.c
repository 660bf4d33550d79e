#include "eshard/merge.h"
#include "eshard/fs.h"
#include "eshard/jsonl.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/prepare.h"
#include "eshard/sha.h"
#include "eshard/status.h"
#include "eshard/util.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK ((size_t)4 << 20)
#define NBUF 3
#define QLEN 8
/* Start write-back every this many bytes, so that the final fsync has little left to do. */
#define WRITEBACK_STEP ((uint64_t)32 << 20)

struct mbuf {
	char *data;
	size_t cap;
	int busy;            /* a hasher job still reads it */
};

enum job_kind { JOB_BEGIN_FILE, JOB_DATA, JOB_NEWLINE, JOB_END_FILE };

struct job {
	enum job_kind kind;
	const char *p;
	size_t n;
	struct mbuf *buf;
	int64_t off;         /* JOB_DATA: write the bytes at this output offset too; -1: not */
};

/* The second thread hashes the result file and the output, and writes every other block of the
 * output; the reading thread validates the lines and writes the other blocks (pwrite at known
 * offsets, so the order does not matter). The two halves then take about the same time, which
 * is what makes two cores pay off: one SHA-256 pass costs about as much as the validation. */
struct hasher {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job q[QLEN];
	size_t head, count;
	int stop;
	int err;             /* first error (reported by the hasher thread) */
	int file_open;       /* file_sha is initialised */
	int file_ready;      /* file_hex holds the digest of the last finished file */
	char file_hex[65];
	struct es_sha file_sha, out_sha;
	int out_fd;
	const char *tmp_path;
};

static int pwrite_all(int fd, const char *p, size_t n, int64_t off, const char *what)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return es_error_errno(ES_EIO, "cannot write '%s'", what);
		}
		p += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

static void hasher_do(struct hasher *h, const struct job *j)
{
	int rc = 0;
	switch (j->kind) {
	case JOB_BEGIN_FILE:
		if (!(rc = es_sha_init(&h->file_sha)))
			h->file_open = 1;
		break;
	case JOB_DATA:
		es_sha_update(&h->file_sha, j->p, j->n);
		es_sha_update(&h->out_sha, j->p, j->n);
		if (j->off >= 0)
			rc = pwrite_all(h->out_fd, j->p, j->n, j->off, h->tmp_path);
		break;
	case JOB_NEWLINE:
		/* The result's own hash is over its raw bytes; only the output gets the '\n'. */
		es_sha_update(&h->out_sha, "\n", 1);
		break;
	case JOB_END_FILE:
		h->file_open = 0;
		rc = es_sha_final(&h->file_sha, h->file_hex);
		break;
	}
	if (rc && !h->err)
		h->err = rc;
}

static void *hasher_main(void *arg)
{
	struct hasher *h = arg;
	pthread_mutex_lock(&h->mu);
	for (;;) {
		while (!h->count && !h->stop)
			pthread_cond_wait(&h->cv, &h->mu);
		if (!h->count && h->stop)
			break;
		struct job j = h->q[h->head];
		pthread_mutex_unlock(&h->mu);
		/* After an error the jobs are only drained, so the reader never waits forever. */
		if (!h->err)
			hasher_do(h, &j);
		else if (j.kind == JOB_END_FILE && h->file_open) {
			es_sha_abort(&h->file_sha);
			h->file_open = 0;
		}
		pthread_mutex_lock(&h->mu);
		h->head = (h->head + 1) % QLEN;
		h->count--;
		if (j.buf)
			j.buf->busy = 0;
		if (j.kind == JOB_END_FILE)
			h->file_ready = 1;
		pthread_cond_broadcast(&h->cv);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

static void hasher_post(struct hasher *h, enum job_kind kind, const char *p, size_t n, struct mbuf *b,
			int64_t off)
{
	pthread_mutex_lock(&h->mu);
	while (h->count == QLEN)
		pthread_cond_wait(&h->cv, &h->mu);
	if (b)
		b->busy = 1;
	if (kind == JOB_END_FILE)
		h->file_ready = 0;
	h->q[(h->head + h->count) % QLEN] = (struct job){ kind, p, n, b, off };
	h->count++;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

static void hasher_wait_buf(struct hasher *h, struct mbuf *b)
{
	pthread_mutex_lock(&h->mu);
	while (b->busy)
		pthread_cond_wait(&h->cv, &h->mu);
	pthread_mutex_unlock(&h->mu);
}

/* Wait until the hasher has finished everything posted; returns its error, if any. */
static int hasher_drain(struct hasher *h)
{
	pthread_mutex_lock(&h->mu);
	while (h->count)
		pthread_cond_wait(&h->cv, &h->mu);
	int err = h->err;
	pthread_mutex_unlock(&h->mu);
	return err;
}

static int buf_reserve(struct mbuf *b, size_t need)
{
	if (b->cap >= need)
		return 0;
	char *p = realloc(b->data, need);
	if (!p)
		return es_error(ES_ENOMEM, "out of memory: a %zu-byte merge buffer", need);
	b->data = p;
	b->cap = need;
	return 0;
}

struct reader {
	struct hasher *h;
	struct mbuf bufs[NBUF];
	struct es_jsonl *jl;
	size_t max_line;
	int out_fd;
	const char *tmp_path;
	uint64_t written, synced;
	uint64_t blocks;
};

/* Append n bytes to the output: this thread writes them, or the hasher does (every other
 * block) when it hashes them. */
static int out_write(struct reader *rd, const char *p, size_t n, struct mbuf *b)
{
	int rc = 0;
	if (b && rd->blocks++ % 2)
		hasher_post(rd->h, JOB_DATA, p, n, b, (int64_t)rd->written);
	else {
		if (b)
			hasher_post(rd->h, JOB_DATA, p, n, b, -1);
		rc = pwrite_all(rd->out_fd, p, n, (int64_t)rd->written, rd->tmp_path);
	}
	rd->written += n;
	if (!rc && rd->written - rd->synced >= WRITEBACK_STEP) {
		/* Only a hint to start write-back early; the fsync at the end is what counts. */
		sync_file_range(rd->out_fd, (off_t)rd->synced, (off_t)(rd->written - rd->synced),
				SYNC_FILE_RANGE_WRITE);
		rd->synced = rd->written;
	}
	return rc;
}

/*
 * Copy one result file into the output through the hasher, validating every line here.
 * rows gets its line count; the file's sha256 is left in h->file_hex.
 */
static int merge_file(struct reader *rd, const char *path, int64_t *rows)
{
	struct hasher *h = rd->h;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return es_error_errno(ES_EIO, "cannot open result '%s'", path);
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	hasher_post(h, JOB_BEGIN_FILE, NULL, 0, NULL, -1);
	int rc = 0;
	uint64_t lineno = 0;
	size_t k = 0, carry = 0;
	struct mbuf *cur = NULL;
	const char *tail = NULL;
	*rows = 0;
	for (;;) {
		struct mbuf *b;
		if (cur && carry > BLOCK / 2) {
			/* A long line: keep growing it in place rather than copying it every block. */
			b = cur;
			hasher_wait_buf(h, b);
			memmove(b->data, tail, carry);
		} else {
			b = &rd->bufs[k++ % NBUF];
			hasher_wait_buf(h, b);
			if ((rc = buf_reserve(b, carry + BLOCK)))
				break;
			if (carry)
				memcpy(b->data, tail, carry); /* tail lives in another buffer */
		}
		if ((rc = buf_reserve(b, carry + BLOCK)))
			break;
		ssize_t n = read(fd, b->data + carry, BLOCK);
		if (n < 0) {
			if (errno == EINTR) {
				tail = b->data;
				cur = b;
				continue;
			}
			rc = es_error_errno(ES_EIO, "cannot read result '%s'", path);
			break;
		}
		cur = b;
		tail = b->data;
		if (n == 0)
			break;
		if ((rc = out_write(rd, b->data + carry, (size_t)n, b)))
			break;
		const char *p = b->data, *end = b->data + carry + (size_t)n, *scan = b->data + carry;
		const char *nl;
		while ((nl = memchr(scan, '\n', (size_t)(end - scan))) != NULL) {
			lineno++;
			if ((rc = es_jsonl_validate(rd->jl, p, (size_t)(nl - p), path, lineno)))
				break;
			p = scan = nl + 1;
		}
		if (rc)
			break;
		tail = p;
		carry = (size_t)(end - p);
		if (carry > rd->max_line) {
			rc = es_error(ES_EINVAL, "JSONL line longer than the %zu-byte cap at %s:%llu",
				      rd->max_line, path, (unsigned long long)(lineno + 1));
			break;
		}
	}
	if (!rc && carry) {
		/* A last line without '\n': it is a record, and the output gets the newline. */
		lineno++;
		rc = es_jsonl_validate(rd->jl, tail, carry, path, lineno);
		if (!rc) {
			hasher_post(h, JOB_NEWLINE, NULL, 0, NULL, -1);
			rc = out_write(rd, "\n", 1, NULL);
		}
	}
	hasher_post(h, JOB_END_FILE, NULL, 0, NULL, -1);
	int herr = hasher_drain(h);
	close(fd);
	*rows = (int64_t)lineno;
	return rc ? rc : herr;
}

/* The done record's result, resolved; it must stay inside the job folder. */
static int result_path(const struct es_manifest *m, const char *id, const char *rel, struct es_buf *out)
{
	struct es_buf joined = ES_BUF_INIT;
	int rc = rel[0] == '/' ? es_buf_adds(&joined, rel) : es_path_join(&joined, m->job_dir, rel);
	if (!rc)
		rc = es_fs_resolve(joined.data, out);
	es_buf_free(&joined);
	if (rc)
		return rc;
	size_t lj = strlen(m->job_dir);
	if (strncmp(out->data, m->job_dir, lj) || out->data[lj] != '/')
		return es_error(ES_EINVAL, "Done record for %s points outside the job folder: %s", id, rel);
	return 0;
}

static int write_merge_json(const struct es_manifest *m, const struct es_merge_result *r)
{
	cJSON *o = cJSON_CreateObject();
	char now[40];
	struct es_buf p = ES_BUF_INIT;
	es_time_now_iso(now);
	if (!o)
		return es_error(ES_ENOMEM, "out of memory writing merge.json");
	int rc = es_json_set_str(o, "job_id", m->job_id);
	rc = rc ? rc : es_json_set_str(o, "merged_at", now);
	rc = rc ? rc : es_json_set_int(o, "num_shards", r->num_shards);
	rc = rc ? rc : es_json_set_str(o, "output_path", r->output);
	rc = rc ? rc : es_json_set_int(o, "rows", r->rows);
	rc = rc ? rc : es_json_set_str(o, "sha256", r->sha256);
	rc = rc ? rc : es_path_join(&p, m->job_dir, "merge.json");
	if (!rc)
		rc = es_json_write_atomic(p.data, o);
	cJSON_Delete(o);
	es_buf_free(&p);
	return rc;
}

/* Open "<dir>/.<name>.<32hex>.tmp" next to the output, so that the final rename is atomic. */
static int open_temp(const char *out, struct es_buf *tmp, int *fd)
{
	return es_fs_open_temp(out, tmp, fd);
}

static int merge_all(const struct es_manifest *m, struct reader *rd, struct es_merge_result *r)
{
	struct es_buf dpath = ES_BUF_INIT, rpath = ES_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; !rc && i < m->n_shards; i++) {
		const char *id = m->shards[i].id;
		cJSON *rec = NULL;
		es_buf_reset(&dpath);
		es_buf_printf(&dpath, "%s/state/done/%s.json", m->job_dir, id);
		if ((rc = es_json_load_required(dpath.data, "Done record", &rec)))
			break;
		const char *rel = es_json_get_str(rec, "output_path");
		const char *sha = es_json_get_str(rec, "sha256");
		int64_t want_rows, rows = 0;
		if (!cJSON_IsObject(rec) || !rel || !*rel || !sha || es_json_get_i64(rec, "rows", &want_rows)) {
			rc = es_error(ES_EINVAL, "Done record for %s lacks output_path, rows or sha256: %s", id, dpath.data);
		} else if (!(rc = result_path(m, id, rel, &rpath))) {
			rc = merge_file(rd, rpath.data, &rows);
			if (!rc && (rows != want_rows || strcmp(rd->h->file_hex, sha)))
				rc = es_error(ES_EINVAL, "Result checksum or row count mismatch for %s: %s", id, rpath.data);
			r->rows += rows;
		}
		cJSON_Delete(rec);
	}
	es_buf_free(&dpath);
	es_buf_free(&rpath);
	return rc;
}

int es_merge_run(const char *job_dir, const char *output, int overwrite, double lock_timeout,
		 struct es_merge_result *res, int quiet)
{
	struct es_merge_result local;
	struct es_merge_result *r = res ? res : &local;
	memset(r, 0, sizeof(*r));
	struct es_manifest m;
	int rc = es_manifest_load(job_dir, &m);
	if (rc)
		return rc;
	struct es_buf out = ES_BUF_INIT, tmp = ES_BUF_INIT, parent = ES_BUF_INIT;
	struct es_status_counts c;
	struct hasher h;
	struct reader rd;
	int fd = -1, started = 0;
	memset(&h, 0, sizeof(h));
	memset(&rd, 0, sizeof(rd));
	if ((rc = es_status_count(&m, lock_timeout, &c)))
		goto out;
	if (c.done != c.total) {
		rc = es_error(ES_EINVAL, "Cannot merge an incomplete job: pending=%lld running=%lld stale=%lld failed=%lld done=%lld (%s)",
			      (long long)c.pending, (long long)c.running, (long long)c.stale,
			      (long long)c.failed, (long long)c.done, m.job_dir);
		goto out;
	}
	if ((rc = es_fs_resolve(output, &out)))
		goto out;
	if (!strcmp(out.data, "/")) {
		rc = es_error(ES_EINVAL, "Output must be a file: %s", out.data);
		goto out;
	}
	struct stat st;
	if (stat(out.data, &st) == 0) {
		if (!overwrite) {
			rc = es_error(ES_EEXIST, "Output already exists: %s; pass --overwrite to replace it", out.data);
			goto out;
		}
		if (S_ISDIR(st.st_mode)) {
			rc = es_error(ES_EINVAL, "Output is a folder, not a file: %s", out.data);
			goto out;
		}
	}
	const char *slash = strrchr(out.data, '/');
	es_buf_add(&parent, out.data, slash == out.data ? 1 : (size_t)(slash - out.data));
	if ((rc = es_fs_mkdirs(parent.data, 0755)))
		goto out;
	if ((rc = open_temp(out.data, &tmp, &fd)))
		goto out;

	rd.h = &h;
	rd.max_line = ES_MAX_LINE_BYTES;
	if (!(rd.jl = es_jsonl_new(NULL))) {
		rc = es_error(ES_ENOMEM, "out of memory starting the merge");
		goto out;
	}
	rd.out_fd = h.out_fd = fd;
	rd.tmp_path = h.tmp_path = tmp.data;
	if ((rc = es_sha_init(&h.out_sha)))
		goto out;
	pthread_mutex_init(&h.mu, NULL);
	pthread_cond_init(&h.cv, NULL);
	if (pthread_create(&h.th, NULL, hasher_main, &h) != 0) {
		es_sha_abort(&h.out_sha);
		rc = es_error(ES_EIO, "cannot start the merge hashing thread");
		goto out;
	}
	started = 1;
	rc = merge_all(&m, &rd, r);
	pthread_mutex_lock(&h.mu);
	h.stop = 1;
	pthread_cond_broadcast(&h.cv);
	pthread_mutex_unlock(&h.mu);
	pthread_join(h.th, NULL);
	if (h.file_open)
		es_sha_abort(&h.file_sha);
	if (rc) {
		es_sha_abort(&h.out_sha);
		goto out;
	}
	if ((rc = es_sha_final(&h.out_sha, r->sha256)))
		goto out;
	r->bytes = rd.written;
	r->num_shards = (int64_t)m.n_shards;
	if (fsync(fd) != 0) {
		rc = es_error_errno(ES_EIO, "cannot fsync '%s'", tmp.data);
		goto out;
	}
	int cfd = fd;
	fd = -1;
	if (close(cfd) != 0) {
		rc = es_error_errno(ES_EIO, "cannot close '%s'", tmp.data);
		goto out;
	}
	if ((rc = es_fs_rename(tmp.data, out.data)))
		goto out;
	es_buf_reset(&tmp); /* renamed: nothing left to remove */
	if (!(r->output = strdup(out.data))) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = write_merge_json(&m, r)))
		goto out;
	if (!quiet) {
		printf("Merged %lld shards and %lld rows into %s\n", (long long)r->num_shards,
		       (long long)r->rows, r->output);
		fflush(stdout);
	}
out:
	if (fd >= 0)
		close(fd);
	if (tmp.len)
		unlink(tmp.data);
	if (started) {
		pthread_mutex_destroy(&h.mu);
		pthread_cond_destroy(&h.cv);
	}
	for (size_t i = 0; i < NBUF; i++)
		free(rd.bufs[i].data);
	es_jsonl_free(rd.jl);
	es_buf_free(&out);
	es_buf_free(&tmp);
	es_buf_free(&parent);
	es_manifest_free(&m);
	if (rc || r == &local) {
		free(r->output);
		r->output = NULL;
	}
	return rc;
}
