/*
 * prepare: two passes over the input.
 *
 * Pass 1 streams every input file once: each line is validated and normalized, the raw bytes
 * and the normalized bytes are hashed, and the normalized stream is written to one temporary
 * file inside the stage folder. Hashing the raw bytes and writing run on a second thread, so
 * that the two cores share the SHA-256 work with the parser. With --threads, pass 1 reads
 * byte ranges of the input in parallel instead (prepare_par.c), into one temporary per range.
 * Pass 2 knows the total size, applies the split rule to the temporaries (no second parse) and
 * copies each shard's byte range into its shard file, two shards at a time, punching the
 * copied range out of the temporaries so that the job needs little more than one copy of the
 * data on disk at any moment.
 */
#include "eshard/prepare.h"
#include "eshard/attempt.h"
#include "eshard/clock.h"
#include "eshard/cpus.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/jsonl.h"
#include "eshard/linereader.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/proc.h"
#include "eshard/ranges.h"
#include "eshard/recipe.h"
#include "eshard/scan.h"
#include "eshard/sha.h"
#include "eshard/stop.h"
#include "eshard/workq.h"
#include "json.h"
#include "prepare_par.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define QUEUE_LEN 16

void es_prepare_opts_init(struct es_prepare_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->policy.lock_timeout_secs = ES_DEFAULT_LOCK_TIMEOUT_SECS;
	o->policy.max_retries = ES_DEFAULT_MAX_RETRIES;
	o->policy.poll_interval_secs = ES_DEFAULT_POLL_INTERVAL_SECS;
	o->policy.heartbeat_secs = ES_DEFAULT_HEARTBEAT_SECS;
	o->policy.lease_secs = ES_DEFAULT_LEASE_SECS;
}

uint64_t es_prepare_auto_shards(uint64_t bytes, uint64_t rows, int64_t ranks, int64_t target)
{
	uint64_t t = target > 0 ? (uint64_t)target : (uint64_t)ES_TARGET_SHARD_BYTES;
	uint64_t n = bytes / t + (bytes % t != 0);
	/* 4 x ranks saturates: past UINT64_MAX it is more shards than any input has rows. */
	uint64_t per_ranks = (uint64_t)ranks > UINT64_MAX / 4 ? UINT64_MAX : 4 * (uint64_t)ranks;
	if (ranks > 0 && n < per_ranks)
		n = per_ranks;
	if (n > rows)
		n = rows;
	return n ? n : 1;
}

int es_prepare_split_after(uint64_t w, uint64_t r, uint64_t t, uint64_t rows, uint64_t n, uint64_t k)
{
	if (k + 1 >= n)
		return 0;
	/* 128-bit products: w*n and t*(k+1) overflow 64 bits for inputs past 2^64/n bytes. */
	if ((unsigned __int128)w * n >= (unsigned __int128)t * (k + 1))
		return 1;
	return rows - r == n - k - 1;
}

int es_prepare_shard_id(uint64_t index, uint64_t n, char *out, size_t outsz)
{
	int width = snprintf(NULL, 0, "%llu", (unsigned long long)n);
	if (width < 5)
		width = 5;
	int len = snprintf(out, outsz, "part-%0*llu-of-%0*llu", width, (unsigned long long)index,
			   width, (unsigned long long)n);
	return len < 0 || (size_t)len >= outsz ? ES_EINTERNAL : 0;
}

/* ---------------- the hashing and writing thread of pass 1 ---------------- */

enum { JOB_RAW, JOB_NORM, JOB_END_FILE };

struct hjob {
	int kind;
	size_t file;
	char *data;          /* malloc'd; the job frees it */
	size_t len;
};

/* What the helper thread (workq) owns: the raw hash of the current file and the temporary. */
struct hasher {
	struct es_workq *q;
	struct es_sha raw, norm;
	int raw_open;
	int fd;               /* the normalized temporary */
	const char *tmp_path;
	struct in_file *files;
};

static int hasher_job(void *ctx, void *job, int failed)
{
	struct hasher *h = ctx;
	struct hjob *j = job;
	int rc = 0;
	if (failed) {
		free(j->data);
		return 0;
	}
	if (j->kind == JOB_NORM) {
		rc = es_fs_write_all(h->fd, j->data, j->len, h->tmp_path);
	} else {
		if (!h->raw_open && !(rc = es_sha_init(&h->raw)))
			h->raw_open = 1;
		if (!rc && j->kind == JOB_RAW)
			es_sha_update(&h->raw, j->data, j->len);
		if (!rc && j->kind == JOB_END_FILE) {
			h->raw_open = 0;
			rc = es_sha_final(&h->raw, h->files[j->file].sha);
		}
	}
	free(j->data);
	return rc;
}

static int hasher_push(struct hasher *h, int kind, size_t file, char *data, size_t len)
{
	struct hjob j = { kind, file, data, len };
	es_workq_post(h->q, &j);
	return es_workq_error(h->q);
}

struct raw_cb_arg {
	struct hasher *h;
	size_t file;
	int err;
	uint64_t bytes;
};

static void raw_cb(void *arg, const void *p, size_t n)
{
	struct raw_cb_arg *a = arg;
	a->bytes += n;
	if (a->err || !n)
		return;
	char *copy = malloc(n);
	if (!copy) {
		a->err = es_error(ES_ENOMEM, "out of memory hashing input");
		return;
	}
	memcpy(copy, p, n);
	int rc = hasher_push(a->h, JOB_RAW, a->file, copy, n);
	if (rc)
		a->err = rc;
}

/* ---------------- pass 1 ---------------- */

int es_prepare_guard_line(struct size_guard *g, size_t len, int has_nl, const char *path, uint64_t lineno)
{
	uint64_t n = (uint64_t)len + (has_nl != 0);
	g->total += n;
	g->file += n;
	if (g->max_input > 0 && g->total > (uint64_t)g->max_input)
		return es_error(ES_EINVAL, "Input passes --max-input-bytes %lld decoded bytes at %s:%llu",
				(long long)g->max_input, path, (unsigned long long)lineno);
	if (!g->max_input && g->compressed && g->stored <= UINT64_MAX / ES_MAX_DECODE_RATIO &&
	    g->file > g->stored * ES_MAX_DECODE_RATIO)
		return es_error(ES_EINVAL, "Compressed input decodes to more than %d times its size, refused as a "
				"decompression bomb: %s (%llu bytes stored, %llu decoded by line %llu; --max-input-bytes N "
				"allows N decoded bytes)", ES_MAX_DECODE_RATIO, path, (unsigned long long)g->stored,
				(unsigned long long)g->file, (unsigned long long)lineno);
	return 0;
}

/* The message of a bad line without its " at <path>:<lineno>", which the manifest keeps apart. */
static void bad_reason(const char *msg, const char *path, uint64_t lineno, char *out, size_t n)
{
	char place[32];
	snprintf(place, sizeof(place), ":%llu", (unsigned long long)lineno);
	size_t plen = strlen(path);
	for (const char *p = strstr(msg, " at "); p; p = strstr(p + 1, " at ")) {
		if (strncmp(p + 4, path, plen) || strncmp(p + 4 + plen, place, strlen(place)))
			continue;
		snprintf(out, n, "%.*s%s", (int)(p - msg), msg, p + 4 + plen + strlen(place));
		return;
	}
	snprintf(out, n, "%s", msg);
}

/* Note a line left out: counted, and its place kept while fewer than ES_BAD_LINES_KEPT are. */
static int note_bad_line(struct pass1 *res, struct in_file *files, size_t file, const char *path, uint64_t lineno,
			 const char *msg)
{
	if (!files[file].bad++)
		res->files_bad++;
	if (res->bad++ >= ES_BAD_LINES_KEPT)
		return 0;
	/* Not es_grow (which starts at 16): every range of a parallel pass keeps its own list, and
	 * 20,000 ranges with a bad line each would hold 16 places apiece; this one starts at 4 and
	 * stops at the ES_BAD_LINES_KEPT that are kept at all. */
	if (res->n_first == res->cap_first) {
		size_t cap = res->cap_first ? 2 * res->cap_first : 4;
		if (cap > ES_BAD_LINES_KEPT)
			cap = ES_BAD_LINES_KEPT;
		struct bad_line *p = realloc(res->first, cap * sizeof(*p));
		if (!p)
			return es_error(ES_ENOMEM, "out of memory noting the bad lines of '%s'", path);
		res->first = p;
		res->cap_first = cap;
	}
	struct bad_line *b = &res->first[res->n_first++];
	b->file = file;
	b->lineno = lineno;
	bad_reason(msg, path, lineno, b->reason, sizeof(b->reason));
	return 0;
}

/*
 * One line through the normalizer, whose message is held back: a bad record (ES_EINVAL) is
 * left out with --bad-lines skip (1), or stops prepare with the message and what the option
 * does, since a stray blank line (most often the last) is the usual cause; other errors are
 * said as they were.
 */
int es_prepare_normalize_line(struct es_jsonl *jl, int skip, const char *line, size_t len, uint64_t global,
			  const char *path, uint64_t lineno, struct es_buf *out, struct pass1 *res,
			  struct in_file *files, size_t file)
{
	es_log_quiet_begin();
	int rc = es_jsonl_normalize(jl, line, len, global, path, lineno, out);
	es_log_quiet_end();
	if (!rc)
		return 0;
	if (rc == ES_EINVAL && skip) {
		rc = note_bad_line(res, files, file, path, lineno, es_last_error());
		es_clear_error();
		return rc ? rc : 1;
	}
	char *msg = strdup(es_last_error());
	if (!msg)
		return es_error(ES_ENOMEM, "out of memory");
	if (rc == ES_EINVAL)
		rc = es_error(rc, "%s (--bad-lines skip leaves out blank and bad lines, counted in the manifest)", msg);
	else
		rc = es_error(rc, "%s", msg);
	free(msg);
	return rc;
}

static int flush_norm(struct hasher *h, struct es_buf *out)
{
	if (!out->len)
		return 0;
	size_t len;
	char *data = es_buf_detach(out, &len);
	/* The parser's thread hashes the normalized bytes itself: the raw bytes keep the other
	 * thread busy enough, and this balances the two cores. */
	es_sha_update(&h->norm, data, len);
	return hasher_push(h, JOB_NORM, 0, data, len);
}

static int run_pass1(const struct es_scan *scan, struct es_jsonl *jl, size_t max_line, int64_t max_input,
		     int skip_bad, const char *tmp_path, struct in_file *files, atomic_int *abandon, struct pass1 *res)
{
	struct size_guard guard = { max_input, 0, 0, 0, 0 };
	struct hasher h;
	memset(&h, 0, sizeof(h));
	free(res->first);
	memset(res, 0, sizeof(*res));
	h.tmp_path = tmp_path;
	h.files = files;
	int rc = es_fs_open_new(tmp_path, 0600, 1, &h.fd);
	if (rc)
		return rc;
	rc = es_sha_init(&h.norm);
	if (rc) {
		close(h.fd);
		return rc;
	}
	if ((rc = es_workq_start(&h.q, sizeof(struct hjob), QUEUE_LEN, hasher_job, &h)) != 0) {
		es_sha_abort(&h.norm);
		close(h.fd);
		return rc;
	}

	struct es_buf out = ES_BUF_INIT;
	uint64_t global = 0;
	for (size_t i = 0; !rc && i < scan->n_files; i++) {
		const char *path = scan->files[i].path;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			rc = es_error_errno(ES_EIO, "cannot open input file '%s'", path);
			break;
		}
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
		struct stat st;
		guard.file = 0;
		guard.stored = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
		guard.compressed = es_codec_of_name(path) != ES_CODEC_PLAIN;
		struct es_line_reader *r = es_line_reader_new_codec(fd, max_line, path, es_codec_of_name(path));
		struct raw_cb_arg arg = { &h, i, 0, 0 };
		if (!r) {
			close(fd);
			rc = es_error(ES_ENOMEM, "out of memory reading '%s'", path);
			break;
		}
		es_line_reader_set_raw_cb(r, raw_cb, &arg);
		const char *line;
		size_t len;
		int has_nl, got;
		uint64_t rows = 0, seen = 0;
		while ((got = es_line_reader_next(r, &line, &len, &has_nl)) == 1) {
			if ((++seen & 4095) == 0 && (rc = es_check_stop("prepare")) != 0)
				break;
			if ((seen & 4095) == 0 && atomic_load(abandon)) {
				rc = es_error(ES_EINVAL, "prepare stopped: the recipe was refused");
				break;
			}
			uint64_t lineno = es_line_reader_lineno(r);
			rc = es_prepare_guard_line(&guard, len, has_nl, path, lineno);
			if (!rc)
				rc = es_prepare_normalize_line(jl, skip_bad, line, len, global, path, lineno, &out, res, files, i);
			if (rc == 1) {
				rc = 0;
				continue;
			}
			if (rc)
				break;
			rows++;
			global++;
			if (out.len >= CHUNK && (rc = flush_norm(&h, &out)) != 0)
				break;
		}
		if (!rc && got < 0)
			rc = got;
		if (!rc && arg.err)
			rc = arg.err;
		es_line_reader_free(r);
		if (!rc && fstat(fd, &st) != 0)
			rc = es_error_errno(ES_EIO, "cannot stat input file '%s'", path);
		close(fd);
		if (rc)
			break;
		if ((uint64_t)st.st_size != arg.bytes) {
			rc = es_error(ES_EINVAL, "Input changed while it was read: %s", path);
			break;
		}
		files[i].rows = rows;
		files[i].size = (uint64_t)st.st_size;
		files[i].mtime_ns = es_prepare_mtime_ns(&st);
		rc = hasher_push(&h, JOB_END_FILE, i, NULL, 0);
		res->rows += rows;
	}
	if (!rc)
		rc = flush_norm(&h, &out);
	es_buf_free(&out);
	int herr = es_workq_finish(h.q);
	if (!rc)
		rc = herr;
	if (h.raw_open)
		es_sha_abort(&h.raw);
	/* No fsync: the temporary is scratch that pass 2 reads back through the same page cache
	 * and then removes, and a crash leaves it in the stage folder, which is swept. Syncing it
	 * wrote the whole input to the disk once more than the job needs (the shards are synced).
	 * A write error still shows: at write() (a local file system reserves the blocks there),
	 * or at close() (NFS flushes a file when it is closed, and says if that failed). */
	struct stat st;
	if (!rc && fstat(h.fd, &st) != 0)
		rc = es_error_errno(ES_EIO, "cannot stat '%s'", tmp_path);
	if (!rc)
		res->bytes = (uint64_t)st.st_size;
	if (close(h.fd) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot write '%s'", tmp_path);
	if (!rc)
		rc = es_sha_final(&h.norm, res->norm_sha);
	else
		es_sha_abort(&h.norm);
	return rc;
}

/* ---------------- pass 2 ---------------- */

struct shard_out {
	uint64_t start, len, rows;
	char sha[65];
};

/* A reader of the normalized stream by offset; it keeps the piece it read last open. */
struct stream_rd {
	const struct piece *pieces;
	size_t n, cur;
	int fd;
};

static void stream_rd_close(struct stream_rd *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
}

/* The piece holding byte off of the stream (n when off is past the end). */
static size_t piece_at(const struct piece *p, size_t n, uint64_t off)
{
	size_t lo = 0, hi = n;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (p[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	while (lo < n && off >= p[lo].off + p[lo].len)
		lo++;
	return lo;
}

/* Read up to want bytes of the stream at off, within one piece; *fd_off gets where in that
 * piece's file they were, so that the caller can punch them out. > 0 bytes, or an error. */
static ssize_t stream_pread(struct stream_rd *r, char *buf, size_t want, uint64_t off, uint64_t *fd_off)
{
	size_t i = piece_at(r->pieces, r->n, off);
	if (i >= r->n)
		return es_error(ES_EINTERNAL, "normalized stream read past its end at byte %llu", (unsigned long long)off);
	const struct piece *p = &r->pieces[i];
	if (r->fd < 0 || r->cur != i) {
		stream_rd_close(r);
		if ((r->fd = open(p->path, O_RDWR | O_CLOEXEC)) < 0)
			return es_error_errno(ES_EIO, "cannot open '%s'", p->path);
		r->cur = i;
	}
	uint64_t in = off - p->off;
	if (want > p->len - in)
		want = (size_t)(p->len - in);
	ssize_t n;
	do
		n = pread(r->fd, buf, want, (off_t)in);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return es_error_errno(ES_EIO, "cannot read '%s'", p->path);
	*fd_off = in;
	return n;
}

struct pass2 {
	const struct piece *pieces;
	size_t n_pieces;
	const char *shard_dir;
	uint64_t n;
	struct shard_out *shards;
	atomic_ulong next;
	atomic_int err;
};

/* Copy one shard's bytes from the stream into its file, hashing them; each chunk copied is
 * punched out of its temporary (best effort), so that the job needs little more than one copy
 * of the data on disk at any moment. */
static int copy_shard(struct pass2 *p, struct stream_rd *rd, uint64_t k, char *buf)
{
	char id[64];
	struct es_buf path = ES_BUF_INIT;
	struct shard_out *s = &p->shards[k];
	int rc = es_prepare_shard_id(k, p->n, id, sizeof(id));
	if (!rc)
		rc = es_buf_printf(&path, "%s/%s.jsonl", p->shard_dir, id);
	if (rc)
		return rc;
	int fd;
	if ((rc = es_fs_open_new(path.data, 0644, 0, &fd)) != 0) {
		es_buf_free(&path);
		return rc;
	}
	struct es_sha sha;
	rc = es_sha_init(&sha);
	uint64_t off = s->start, left = s->len;
	while (!rc && left) {
		if ((rc = es_check_stop("prepare")) != 0)
			break;
		uint64_t at;
		ssize_t n = stream_pread(rd, buf, left < CHUNK ? (size_t)left : CHUNK, off, &at);
		if (n < 0) {
			rc = (int)n;
			break;
		}
		es_sha_update(&sha, buf, (size_t)n);
		rc = es_fs_write_all(fd, buf, (size_t)n, path.data);
		if (!rc)
			fallocate(rd->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)n);
		off += (uint64_t)n;
		left -= (uint64_t)n;
	}
	if (!rc && fsync(fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync shard file '%s'", path.data);
	if (close(fd) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot close shard file '%s'", path.data);
	if (!rc)
		rc = es_sha_final(&sha, s->sha);
	else
		es_sha_abort(&sha);
	es_buf_free(&path);
	return rc;
}

static void *pass2_main(void *arg)
{
	struct pass2 *p = arg;
	struct stream_rd rd = { p->pieces, p->n_pieces, 0, -1 };
	char *buf = malloc(CHUNK);
	if (!buf) {
		atomic_store(&p->err, es_error(ES_ENOMEM, "out of memory writing shards"));
		return NULL;
	}
	for (;;) {
		if (atomic_load(&p->err))
			break;
		uint64_t k = atomic_fetch_add(&p->next, 1);
		if (k >= p->n)
			break;
		int rc = copy_shard(p, &rd, k, buf);
		if (rc) {
			int zero = 0;
			atomic_compare_exchange_strong(&p->err, &zero, rc);
		}
	}
	stream_rd_close(&rd);
	free(buf);
	return NULL;
}

/* Find the shard ranges by the split rule, reading only newline positions. */
static int plan_shards(struct stream_rd *rd, uint64_t total, uint64_t rows, uint64_t n, struct shard_out *shards)
{
	char *buf = malloc(CHUNK);
	if (!buf)
		return es_error(ES_ENOMEM, "out of memory planning shards");
	uint64_t k = 0, w = 0, r = 0, off = 0, start = 0, shard_rows = 0;
	int rc = 0;
	while (off < total) {
		if ((rc = es_check_stop("prepare")) != 0)
			break;
		uint64_t at;
		ssize_t got = stream_pread(rd, buf, CHUNK, off, &at);
		if (got < 0) {
			rc = (int)got;
			break;
		}
		const char *p = buf, *end = buf + got;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			if (!nl)
				break;
			uint64_t row_end = off + (uint64_t)(nl - buf) + 1;
			w = row_end;
			r++;
			shard_rows++;
			if (es_prepare_split_after(w, r, total, rows, n, k)) {
				shards[k] = (struct shard_out){ start, row_end - start, shard_rows, "" };
				k++;
				start = row_end;
				shard_rows = 0;
			}
			p = nl + 1;
		}
		off += (uint64_t)got;
	}
	free(buf);
	if (rc)
		return rc;
	if (k < n)
		shards[k++] = (struct shard_out){ start, total - start, shard_rows, "" };
	if (r != rows || w != total)
		return es_error(ES_EINVAL, "Input changed between the scan and write passes: "
				"%llu rows and %llu bytes written, %llu and %llu scanned",
				(unsigned long long)r, (unsigned long long)w,
				(unsigned long long)rows, (unsigned long long)total);
	for (uint64_t i = 0; i < n; i++)
		if (i >= k || shards[i].rows == 0)
			return es_error(ES_EINTERNAL, "Internal partitioning error: shard %llu of %llu is empty",
					(unsigned long long)i, (unsigned long long)n);
	return 0;
}

/* Plan the shards, then copy them on threads threads (at least 2, as before --threads: a
 * shard's copy waits on its fsync, so a second writer overlaps them even on one core), each
 * shard whole by one. */
static int run_pass2(const struct piece *pieces, size_t n_pieces, const char *shard_dir, uint64_t total,
		     uint64_t rows, uint64_t n, struct shard_out *shards, int threads)
{
	struct pass2 p;
	memset(&p, 0, sizeof(p));
	p.pieces = pieces;
	p.n_pieces = n_pieces;
	p.shard_dir = shard_dir;
	p.n = n;
	p.shards = shards;
	struct stream_rd rd = { pieces, n_pieces, 0, -1 };
	int rc = plan_shards(&rd, total, rows, n, shards);
	stream_rd_close(&rd);
	if (rc)
		return rc;
	int extra = threads > 1 ? threads - 1 : 1;
	if ((uint64_t)extra > n - 1)
		extra = (int)(n - 1);
	pthread_t *th = calloc((size_t)extra + 1, sizeof(*th));
	if (!th)
		return es_error(ES_ENOMEM, "out of memory starting shard writers");
	int started = 0;
	while (started < extra && pthread_create(&th[started], NULL, pass2_main, &p) == 0)
		started++;
	pass2_main(&p);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	return atomic_load(&p.err);
}

/* ---------------- the manifest ---------------- */

static cJSON *number_node(double v)
{
	/* Whole seconds are written as integers, like the reference's int policy fields; the
	 * range test first, as casting a double past int64's range (--lease-secs 1e300) is
	 * undefined. */
	if (v > -0x1p63 && v < 0x1p63 && v == (double)(int64_t)v)
		return es_json_new_int((int64_t)v);
	return cJSON_CreateNumber(v);
}

static cJSON *processor_json(const struct es_processor *p)
{
	cJSON *o = cJSON_CreateObject();
	if (p->kind == ES_PROC_COMMAND) {
		es_json_set_str(o, "type", "command");
		es_json_set_str(o, "command", p->command);
	} else {
		es_json_set_str(o, "type", "data-juicer");
		es_json_set(o, "dj_process", p->dj_process ? cJSON_CreateString(p->dj_process) : cJSON_CreateNull());
		es_json_set(o, "dj_root", p->dj_root ? cJSON_CreateString(p->dj_root) : cJSON_CreateNull());
	}
	es_json_set(o, "keep_order", cJSON_CreateBool(p->keep_order));
	if (p->python)
		es_json_set_str(o, "python", p->python);
	return o;
}

struct job_facts {
	const char *job_dir, *job_id, *config, *recipe_sha, *ray_address;
	const struct es_recipe *recipe;
	const struct es_scan *scan;
	const struct in_file *files;
	const struct pass1 *p1;
	const struct shard_out *shards;
	uint64_t n;
	char **warnings;
	size_t n_warnings;
};

/* The extra field "bad_lines" of --bad-lines skip (the reference ignores it): input_files'
 * rows and total_rows count the kept lines only, so they agree with the shards. */
static cJSON *bad_lines_json(const struct job_facts *f)
{
	cJSON *b = cJSON_CreateObject(), *files = cJSON_CreateArray(), *first = cJSON_CreateArray();
	es_json_set_str(b, "policy", "skip");
	es_json_set_int(b, "count", (int64_t)f->p1->bad);
	for (size_t i = 0; files && i < f->scan->n_files; i++) {
		if (!f->files[i].bad)
			continue;
		cJSON *e = cJSON_CreateObject();
		es_json_set_str(e, "relative_path", f->scan->files[i].relative_path);
		es_json_set_int(e, "count", (int64_t)f->files[i].bad);
		cJSON_AddItemToArray(files, e);
	}
	es_json_set(b, "files", files);
	for (size_t i = 0; first && i < f->p1->n_first; i++) {
		const struct bad_line *x = &f->p1->first[i];
		cJSON *e = cJSON_CreateObject();
		es_json_set_str(e, "relative_path", f->scan->files[x->file].relative_path);
		es_json_set_int(e, "line", (int64_t)x->lineno);
		es_json_set_str(e, "reason", x->reason);
		cJSON_AddItemToArray(first, e);
	}
	es_json_set(b, "first", first);
	return b;
}

static cJSON *build_manifest(const struct es_prepare_opts *o, const struct job_facts *f)
{
	char now[40], id[64];
	es_time_now_iso(now);
	cJSON *m = cJSON_CreateObject();
	es_json_set_str(m, "created_at", now);
	cJSON *dj = cJSON_CreateObject();
	const char *commit = f->recipe->dj_commit ? f->recipe->dj_commit
			   : f->recipe->dj_version ? f->recipe->dj_version : "unknown";
	es_json_set_str(dj, "commit", commit);
	es_json_set_null(dj, "dirty");
	es_json_set(m, "data_juicer", dj);
	es_json_set_str(m, "dataset_path", f->scan->dataset_path);
	cJSON *ex = cJSON_CreateObject();
	es_json_set_str(ex, "executor_type", "ray");
	es_json_set_str(ex, "ray_address", f->ray_address);
	if (f->recipe->executor_type) /* no recipe, no such type */
		es_json_set_str(ex, "recipe_executor_type", f->recipe->executor_type);
	es_json_set(m, "execution", ex);
	es_json_set(m, "index_keys", es_json_str_array(f->recipe->index_keys, f->recipe->n_index));
	cJSON *files = cJSON_CreateArray();
	for (size_t i = 0; i < f->scan->n_files; i++) {
		cJSON *e = cJSON_CreateObject();
		es_json_set_int(e, "mtime_ns", f->files[i].mtime_ns);
		es_json_set_str(e, "path", f->scan->files[i].path);
		es_json_set_str(e, "relative_path", f->scan->files[i].relative_path);
		es_json_set_int(e, "rows", (int64_t)f->files[i].rows);
		es_json_set_str(e, "sha256", f->files[i].sha);
		es_json_set_int(e, "size_bytes", (int64_t)f->files[i].size);
		cJSON_AddItemToArray(files, e);
	}
	es_json_set(m, "input_files", files);
	es_json_set_str(m, "job_id", f->job_id);
	es_json_set(m, "media_keys", es_json_str_array(f->recipe->media_keys, f->recipe->n_media));
	es_json_set_str(m, "media_root", f->scan->media_root);
	es_json_set_str(m, "normalized_sha256", f->p1->norm_sha);
	es_json_set_int(m, "num_shards", (int64_t)f->n);
	if (!o->num_shards) {
		/* The automatic count's inputs (an extra field, as "processor"). */
		cJSON *a = cJSON_CreateObject();
		es_json_set_str(a, "rule", "max(4 x ranks, ceil(normalized_bytes / target_shard_bytes)), at most the rows");
		es_json_set_int(a, "ranks", o->auto_ranks);
		es_json_set_int(a, "target_shard_bytes", o->target_shard_bytes ? o->target_shard_bytes : ES_TARGET_SHARD_BYTES);
		es_json_set_int(a, "normalized_bytes", (int64_t)f->p1->bytes);
		es_json_set_int(a, "rows", (int64_t)f->p1->rows);
		es_json_set(m, "num_shards_auto", a);
	}
	cJSON *pol = cJSON_CreateObject();
	es_json_set_int(pol, "lock_timeout_secs", o->policy.lock_timeout_secs);
	es_json_set_int(pol, "max_retries", o->policy.max_retries);
	es_json_set_int(pol, "poll_interval_secs", o->policy.poll_interval_secs);
	es_json_set(pol, "heartbeat_secs", number_node(o->policy.heartbeat_secs));
	es_json_set(pol, "lease_secs", number_node(o->policy.lease_secs));
	es_json_set(m, "policy", pol);
	es_json_set(m, "processor", processor_json(&o->processor));
	cJSON *rec = cJSON_CreateObject();
	es_json_set_str(rec, "sha256", f->recipe_sha);
	es_json_set_str(rec, "snapshot_path", ES_JOB_RECIPE);
	if (f->config)
		es_json_set_str(rec, "source_path", f->config);
	else
		es_json_set_null(rec, "source_path"); /* no recipe: recipe.yaml is empty */
	es_json_set(m, "recipe", rec);
	es_json_set_int(m, "schema_version", 2);
	cJSON *shards = cJSON_CreateArray();
	for (uint64_t k = 0; k < f->n; k++) {
		es_prepare_shard_id(k, f->n, id, sizeof(id));
		char path[96];
		snprintf(path, sizeof(path), ES_JOB_SHARDS "/%s.jsonl", id);
		cJSON *s = cJSON_CreateObject();
		es_json_set_str(s, "id", id);
		es_json_set_int(s, "index", (int64_t)k);
		es_json_set_str(s, "path", path);
		es_json_set_int(s, "rows", (int64_t)f->shards[k].rows);
		es_json_set_str(s, "sha256", f->shards[k].sha);
		es_json_set_int(s, "size_bytes", (int64_t)f->shards[k].len);
		cJSON_AddItemToArray(shards, s);
	}
	es_json_set(m, "shards", shards);
	es_json_set_int(m, "total_rows", (int64_t)f->p1->rows);
	es_json_set_int(m, "total_size_bytes", (int64_t)f->p1->bytes);
	if (f->recipe->n_unsharded) {
		/* An extra field (as "processor"): the job is one shard, the whole dataset, run once
		 * by one rank; why the recipe could not be sharded. */
		cJSON *u = cJSON_CreateObject();
		es_json_set(u, "reasons", es_json_str_array(f->recipe->unsharded_reasons, f->recipe->n_unsharded));
		es_json_set_str(u, "runs_on", "rank 0 of 'eshard-mpi run' (any one worker of 'eshard-mpi worker')");
		es_json_set(m, "unsharded", u);
	}
	if (o->skip_bad_lines)
		es_json_set(m, "bad_lines", bad_lines_json(f));
	es_json_set(m, "warnings", es_json_str_array(f->warnings, f->n_warnings));
	return m;
}

/* ---------------- idempotency ----------------
 *
 * A resubmission must repeat what decides the job's results: the dataset and its files, the
 * recipe's bytes, the shard count, the processor command with its output order, and
 * --bad-lines skip when it left lines out. Where the
 * processor and Ray are on a node (--python, --dj-process, --dj-root, --ray-address) is not
 * part of that: run and worker take those per process (worker.h), so that a resubmission can
 * correct them, and the manifest keeps what prepare recorded (other nodes and the reference
 * read it). */

struct job_diff {
	struct es_buf results;       /* what differs that changes results: the job is refused */
	struct es_buf location;      /* node-local options given that the manifest does not keep */
};

static void diff_add(struct es_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void diff_add(struct es_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (b->len)
		es_buf_adds(b, "; ");
	es_buf_vprintf(b, fmt, ap);
	va_end(ap);
}

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static const char *or_unset(const char *s)
{
	return s ? s : "not set";
}

/* "Data-Juicer" or "--process-cmd '<template>'". */
static void describe_processor(const struct es_processor *p, char *out, size_t n)
{
	if (p->kind == ES_PROC_COMMAND)
		snprintf(out, n, "--process-cmd '%s'", or_unset(p->command));
	else
		snprintf(out, n, "Data-Juicer");
}

static void diff_processor(const struct es_processor *job, const struct es_processor *now, struct job_diff *d)
{
	if (job->kind != now->kind || (job->kind == ES_PROC_COMMAND && !same_str(job->command, now->command))) {
		char a[512], b[512];
		describe_processor(job, a, sizeof(a));
		describe_processor(now, b, sizeof(b));
		diff_add(&d->results, "processor %s (now %s)", a, b);
	}
	if (!job->keep_order != !now->keep_order)
		diff_add(&d->results, "%s (now %s)", job->keep_order ? "--keep-order" : "--no-keep-order",
			 now->keep_order ? "--keep-order" : "--no-keep-order");
}

/* The node-local options this request gave that differ from the manifest's. */
static void diff_location(const struct es_manifest *m, const struct es_prepare_opts *o, const char *ray_address,
			  struct job_diff *d)
{
	const struct es_processor *job = &m->processor, *now = &o->processor;
	if (now->python && !same_str(job->python, now->python))
		diff_add(&d->location, "--python %s (given: %s)", or_unset(job->python), now->python);
	if (now->dj_process && !same_str(job->dj_process, now->dj_process))
		diff_add(&d->location, "--dj-process %s (given: %s)", or_unset(job->dj_process), now->dj_process);
	if (now->dj_root && !same_str(job->dj_root, now->dj_root))
		diff_add(&d->location, "--dj-root %s (given: %s)", or_unset(job->dj_root), now->dj_root);
	if (o->ray_address && strcmp(m->ray_address, ray_address))
		diff_add(&d->location, "--ray-address %s (given: %s)", m->ray_address, ray_address);
}

/* The input files against the manifest's list, by path, size and mtime: the first that
 * differs. 1 when all agree. */
static int diff_inputs_stat(const struct es_manifest *m, const struct es_scan *scan, struct job_diff *d)
{
	if (!m->has_inputs) {
		diff_add(&d->results, "no input_files list in its manifest");
		return 0;
	}
	if (m->n_inputs != scan->n_files) {
		diff_add(&d->results, "%zu input file(s) (now %zu)", m->n_inputs, scan->n_files);
		return 0;
	}
	for (size_t i = 0; i < scan->n_files; i++) {
		const struct es_manifest_input *e = &m->inputs[i];
		const char *now = scan->files[i].path;
		struct stat st;
		if (!e->path || !e->sha256[0]) {
			diff_add(&d->results, "input file %zu without a path or sha256 in its manifest", i + 1);
			return 0;
		}
		if (strcmp(e->path, now)) {
			diff_add(&d->results, "input file %s (now %s)", e->path, now);
			return 0;
		}
		if (stat(e->path, &st) != 0) {
			diff_add(&d->results, "input file %s, which cannot be read now (%s)", e->path, strerror(errno));
			return 0;
		}
		if (e->size_bytes != (int64_t)st.st_size) {
			diff_add(&d->results, "input file %s of %lld bytes (now %lld)", e->path, (long long)e->size_bytes,
				 (long long)st.st_size);
			return 0;
		}
		if (e->mtime_ns != es_prepare_mtime_ns(&st)) {
			diff_add(&d->results, "input file %s modified at mtime_ns %lld (now %lld)", e->path,
				 (long long)e->mtime_ns, (long long)es_prepare_mtime_ns(&st));
			return 0;
		}
	}
	return 1;
}

/* Size and mtime alone are not trusted: an edit can keep both. Each file is hashed again. */
static int diff_inputs_content(const struct es_manifest *m, struct job_diff *d)
{
	for (size_t i = 0; i < m->n_inputs; i++) {
		const struct es_manifest_input *e = &m->inputs[i];
		char hex[65];
		int rc = es_sha_file(e->path, hex, NULL);
		if (rc)
			return rc;
		if (strcmp(hex, e->sha256)) {
			diff_add(&d->results, "input file %s of sha256 %s (now %s)", e->path, e->sha256, hex);
			return 0;
		}
	}
	return 0;
}

/* 1: the existing job is this very request; 0: it is not (d->results says why, unless it has
 * no manifest); negative: error. d->location lists the node-local options that differ. */
static int existing_job_matches(const char *job_dir, const struct es_prepare_opts *o,
				const char *dataset_path, const char *recipe_sha,
				const char *ray_address, const struct es_scan *scan, int64_t *num_shards,
				struct job_diff *d)
{
	struct es_buf mp = ES_BUF_INIT;
	es_path_join(&mp, job_dir, ES_JOB_MANIFEST);
	int exists = es_fs_exists(mp.data);
	es_buf_free(&mp);
	if (exists <= 0)
		return exists;
	struct es_manifest m;
	int rc = es_manifest_load(job_dir, &m);
	if (rc)
		return rc;
	if (!same_str(m.dataset_path, dataset_path))
		diff_add(&d->results, "dataset path %s (now %s)", or_unset(m.dataset_path), dataset_path);
	if (!same_str(m.recipe_sha256, recipe_sha))
		diff_add(&d->results, "recipe sha256 %s (now %s)", or_unset(m.recipe_sha256), recipe_sha);
	if (o->num_shards && m.num_shards != o->num_shards)
		diff_add(&d->results, "%lld shards (now %lld)", (long long)m.num_shards, (long long)o->num_shards);
	diff_processor(&m.processor, &o->processor, d);
	/* Only a job that left lines out differs under the strict rule; a strict job had none. */
	if (m.bad_lines > 0 && !o->skip_bad_lines)
		diff_add(&d->results, "--bad-lines skip, which left out %lld line(s) (now strict)", (long long)m.bad_lines);
	/* Every file is hashed again only when nothing cheaper tells the jobs apart. */
	if (diff_inputs_stat(&m, scan, d) && !d->results.len)
		rc = diff_inputs_content(&m, d);
	diff_location(&m, o, ray_address, d);
	*num_shards = m.num_shards;
	es_manifest_free(&m);
	return rc ? rc : !d->results.len;
}

/* ---------------- the whole step ---------------- */

static char *strip_dup(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\v' || *s == '\f')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r' ||
		     s[n - 1] == '\v' || s[n - 1] == '\f'))
		n--;
	return strndup(s, n);
}

static int report_existing(const char *job_dir, const struct es_prepare_opts *o,
			   struct es_prepare_result *res, int match, const struct job_diff *d)
{
	if (match < 0)
		return match;
	if (!match && d->results.len)
		return es_error(ES_EINVAL, "Job directory already exists and does not match this request: %s was prepared "
				"with %s. Choose a new --job-dir, or repeat what the job was prepared with.", job_dir,
				d->results.data);
	if (!match)
		return es_error(ES_EINVAL, "Job directory already exists and does not match this request: %s. "
				"Choose a new --job-dir.", job_dir);
	res->already_prepared = 1;
	if (!o->quiet) {
		printf("Job is already prepared and unchanged: %s\n", job_dir);
		if (d->location.len)
			printf("Node-local options are not saved into a prepared job: its manifest keeps %s; "
			       "'run' and 'worker' use such options for their own process only\n", d->location.data);
	}
	fflush(stdout);
	return 0;
}

/* The recipe loaded with Data-Juicer's registry on a thread of its own, while pass 1 runs
 * (prep_recipe): the helper is a Python start, a tenth of a second or more, that the input
 * need not wait for. Its error, if any, is kept to be said once it is joined. */
struct recipe_bg {
	pthread_t th;
	int started;
	const char *config;
	struct es_recipe_opts ro;
	struct es_recipe recipe;
	int rc;
	char msg[4096];
	atomic_int failed;           /* set once the load failed: pass 1 stops early */
};

/* Everything one prepare holds, so that its steps can be functions of their own. */
struct prep {
	const struct es_prepare_opts *o;
	struct es_prepare_result *res;
	struct es_buf config, tmp, dataset, job_dir, stage, path, parent;
	const char *job_name;        /* points into job_dir */
	struct es_recipe recipe;
	struct es_scan scan;
	struct es_jsonl *jl;
	struct in_file *files;
	struct shard_out *shards;
	struct pass1 p1;
	struct piece *pieces;        /* the normalized stream's temporaries, in order */
	size_t n_pieces;
	uint64_t n;
	char **warnings;
	size_t n_warnings;
	char *ray_address;
	char recipe_sha[65];
	int have_recipe, have_scan, have_stage;
	int with_recipe;             /* --config given; else a command job without a recipe */
	int take;                    /* the job folder exists, holds no job, and is taken */
	int inside;                  /* the stage is inside the job folder (publish_inside) */
	struct stat take_st;         /* the taken folder as examined: its mode, its identity */
	struct recipe_bg bg;         /* started: P->recipe is the quick load until joined */
};

/* Step 1: the options. */
static int prep_options(struct prep *P)
{
	const struct es_prepare_opts *o = P->o;
	if (!o->job_dir || !*o->job_dir)
		return es_error(ES_EUSAGE, "prepare needs --job-dir");
	/* A command processor may go without a recipe (README "Commands"); its input then
	 * comes from --dataset-path alone. */
	if ((!o->config || !*o->config) && o->processor.kind != ES_PROC_COMMAND)
		return es_error(ES_EUSAGE, "prepare needs --config (a recipe), unless the processor is a --process-cmd");
	if ((!o->config || !*o->config) && (!o->dataset_path || !*o->dataset_path))
		return es_error(ES_EUSAGE, "prepare needs --dataset-path with a --process-cmd and no --config");
	if (o->num_shards < 0)
		return es_error(ES_EUSAGE, "--num-shards must be a positive integer or 'auto', got %lld", (long long)o->num_shards);
	if (o->auto_ranks < 0 || o->target_shard_bytes < 0)
		return es_error(ES_EUSAGE, "the automatic shard count needs a positive node count and target shard size");
	if (o->policy.heartbeat_secs * 2 > o->policy.lease_secs)
		return es_error(ES_EUSAGE, "--heartbeat-secs (%g) must be at most half of --lease-secs (%g), or live shards would be taken over",
				o->policy.heartbeat_secs, o->policy.lease_secs);
	P->ray_address = strip_dup(o->ray_address ? o->ray_address : "local");
	if (!P->ray_address || !*P->ray_address)
		return es_error(ES_EUSAGE, "--ray-address must not be empty");
	if (!o->config || !*o->config)
		return 0;
	P->with_recipe = 1;
	int rc = es_fs_expand_user(o->config, &P->tmp);
	if (!rc)
		rc = es_fs_resolve(P->tmp.data, &P->config);
	if (rc)
		return rc;
	struct stat st;
	if (stat(P->config.data, &st) != 0 || !S_ISREG(st.st_mode))
		return es_error(ES_ENOENT, "Config file not found or not a regular file: %s", o->config);
	return 0;
}

/* Step 3: what the recipe makes of this job: unsharded or not, and its warnings. */
static int prep_recipe_facts(struct prep *P)
{
	const struct es_prepare_opts *o = P->o;
	int rc = 0;
	/* Not shard-safe, and allowed to run unsharded: one shard, the whole dataset. */
	P->res->unsharded = P->recipe.n_unsharded > 0;
	if (P->res->unsharded && o->num_shards > 1)
		return es_error(ES_EUSAGE, "--num-shards %lld: the recipe is not shard-safe (%s) and runs unsharded "
				"(--allow-unsharded), as one shard; use --num-shards 1 or auto", (long long)o->num_shards,
				P->recipe.unsharded_reasons[0]);
	if (!(P->warnings = calloc(P->recipe.n_warnings + 2, sizeof(*P->warnings))))
		return es_error(ES_ENOMEM, "out of memory");
	/* Every recipe warning is about how Data-Juicer runs the recipe (its executor, its
	 * registry, its export): a command processor runs none of it. */
	for (size_t i = 0; o->processor.kind == ES_PROC_DATA_JUICER && i < P->recipe.n_warnings; i++)
		if (!(P->warnings[P->n_warnings++] = strdup(P->recipe.warnings[i])))
			return es_error(ES_ENOMEM, "out of memory");
	if (P->res->unsharded) {
		struct es_buf w = ES_BUF_INIT;
		rc = es_buf_printf(&w, "recipe is not shard-safe and runs once, unsharded, on one rank (--allow-unsharded): %s%s",
				   P->recipe.unsharded_reasons[0], P->recipe.n_unsharded > 1 ? " (and more, see unsharded.reasons)" : "");
		P->warnings[P->n_warnings++] = es_buf_detach(&w, NULL);
		if (rc)
			return rc;
	}
	/* A command processor does not use Ray: what the recipe says of it does not matter. */
	if (o->processor.kind == ES_PROC_DATA_JUICER && P->recipe.has_ray_address &&
	    strcmp(P->recipe.ray_address_str, P->ray_address)) {
		struct es_buf w = ES_BUF_INIT;
		rc = es_buf_printf(&w, "recipe ray_address=%s will be overridden with '%s'", P->recipe.ray_address_repr,
				   P->ray_address);
		P->warnings[P->n_warnings++] = es_buf_detach(&w, NULL);
	}
	return rc;
}

static void *recipe_bg_main(void *arg)
{
	struct recipe_bg *bg = arg;
	es_log_quiet_begin();
	bg->rc = es_recipe_load(bg->config, &bg->ro, &bg->recipe);
	es_log_quiet_end();
	if (bg->rc) {
		snprintf(bg->msg, sizeof(bg->msg), "%s", es_last_error());
		atomic_store(&bg->failed, 1);
	}
	return NULL;
}

/* Steps 2-3: the recipe. Its checks need the registry's answer, but what the input steps use
 * of it (dataset_path, the media and index keys) does not: a load by the naming convention
 * alone gives them at once, and when it passes, the full load runs on a thread beside the
 * input steps and pass 1 (joined by prep_join_recipe, which says its error first, as if it
 * had run alone). When the quick load fails, the full one runs here and decides. */
static int prep_recipe(struct prep *P)
{
	const struct es_prepare_opts *o = P->o;
	if (!P->with_recipe)
		return prep_recipe_facts(P); /* no recipe: no warnings, sharded */
	struct es_recipe_opts ro = { .python = o->processor.python,
				     .helper = o->helper ? o->helper : es_recipe_default_helper(),
				     .allow_unsharded = o->allow_unsharded };
	if (ro.helper && *ro.helper) {
		struct es_recipe_opts quick = ro;
		quick.helper = NULL;
		es_log_quiet_begin();
		int qrc = es_recipe_load(P->config.data, &quick, &P->recipe);
		es_log_quiet_end();
		if (!qrc) {
			P->have_recipe = 1;
			P->bg.config = P->config.data;
			P->bg.ro = ro;
			if (pthread_create(&P->bg.th, NULL, recipe_bg_main, &P->bg) == 0) {
				P->bg.started = 1;
				es_log_quiet_begin(); /* until joined: its error comes first */
				es_clear_error();
				return 0;
			}
			es_recipe_free(&P->recipe);
			P->have_recipe = 0;
		}
	}
	int rc = es_recipe_load(P->config.data, &ro, &P->recipe);
	if (rc)
		return rc;
	P->have_recipe = 1;
	return prep_recipe_facts(P);
}

/* The thread of prep_recipe, joined: rc is the outcome of the steps run beside it, whose
 * error was kept quiet. The recipe's error is said first (it would have stopped prepare before
 * those steps), else that error is said now, else the full recipe replaces the quick one. */
static int prep_join_recipe(struct prep *P, int rc)
{
	if (!P->bg.started)
		return rc;
	pthread_join(P->bg.th, NULL);
	P->bg.started = 0;
	char msg[4096];
	snprintf(msg, sizeof(msg), "%s", es_last_error());
	es_log_quiet_end();
	es_recipe_free(&P->recipe);
	P->have_recipe = 0;
	if (P->bg.rc)
		return es_error(P->bg.rc, "%s", P->bg.msg);
	P->recipe = P->bg.recipe;
	P->have_recipe = 1;
	int frc = prep_recipe_facts(P);
	if (frc)
		return frc;
	if (rc && rc != 1 && msg[0])
		return es_error(rc, "%s", msg);
	return rc;
}

/* The sha256 of no bytes: the hash of the empty recipe snapshot of a job without a recipe. */
static int empty_sha(char hex[65])
{
	struct es_sha s;
	int rc = es_sha_init(&s);
	return rc ? rc : es_sha_final(&s, hex);
}

/* Steps 4-6: the dataset, its files, the job folder and the recipe hash. */
static int prep_inputs(struct prep *P)
{
	const char *ds = P->o->dataset_path ? P->o->dataset_path : P->recipe.dataset_path;
	if (!ds)
		return es_error(ES_EINVAL, "Recipe %s has no dataset_path; pass --dataset-path", P->config.data);
	int rc = es_fs_expand_user(ds, &P->tmp);
	if (!rc)
		rc = es_fs_resolve(P->tmp.data, &P->dataset);
	if (!rc && !(rc = es_scan_dataset(P->dataset.data, P->o->compressed ? ES_SCAN_COMPRESSED : 0, &P->scan)))
		P->have_scan = 1;
	if (!rc)
		rc = es_fs_expand_user(P->o->job_dir, &P->tmp);
	if (!rc)
		rc = es_fs_resolve(P->tmp.data, &P->job_dir);
	if (!rc)
		rc = P->with_recipe ? es_sha_file(P->config.data, P->recipe_sha, NULL) : empty_sha(P->recipe_sha);
	if (!rc && !(P->res->job_dir = strdup(P->job_dir.data)))
		rc = es_error(ES_ENOMEM, "out of memory");
	if (!rc) {
		const char *slash = strrchr(P->job_dir.data, '/');
		P->job_name = slash + 1;
		rc = es_buf_add(&P->parent, P->job_dir.data, slash == P->job_dir.data ? 1 : (size_t)(slash - P->job_dir.data));
	}
	return rc;
}

/* Step 7 and the lost race of step 11: compare the existing job folder with this request. */
static int check_existing(const struct prep *P)
{
	struct job_diff d = { ES_BUF_INIT, ES_BUF_INIT };
	int match = existing_job_matches(P->job_dir.data, P->o, P->dataset.data, P->recipe_sha, P->ray_address,
					 &P->scan, &P->res->num_shards, &d);
	int rc = report_existing(P->job_dir.data, P->o, P->res, match, &d);
	es_buf_free(&d.results);
	es_buf_free(&d.location);
	return rc;
}

/* ---------------- an existing folder that holds no job ---------------- */

/* The marker of a publish inside the job folder (prepare.h): made exclusively, it names the
 * stage whose entries become the job. It stays for good, as the fence that tells a later
 * prepare whose job the folder holds (one that removed it could let a prepare that sees the
 * manifest late fill the folder a second time). */
#define PUBLISH_MARKER ".eshard-publish"
/* The entries of a stage in the order a publish inside the job folder moves them: manifest.json
 * last, so that the folder is a job only once everything else is in it. */
static const char *const stage_entries[] = { ES_JOB_RECIPE, ES_JOB_SHARDS, ES_JOB_ATTEMPTS, ES_JOB_STATE, ES_JOB_MANIFEST };
#define N_STAGE_ENTRIES (sizeof(stage_entries) / sizeof(stage_entries[0]))

/* Is name "<prefix><32 lower-case hex><suffix>", the form of a stage folder or a temporary? */
static int is_token_name(const char *name, const char *prefix, const char *suffix)
{
	size_t lp = strlen(prefix), ls = strlen(suffix);
	if (strlen(name) != lp + 32 + ls || strncmp(name, prefix, lp) || strcmp(name + lp + 32, suffix))
		return 0;
	for (size_t i = lp; i < lp + 32; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return 0;
	return 1;
}

/* Move what is left of the stage named by the marker into the job folder, manifest.json last,
 * then remove the empty stage. Any prepare may do it, even beside the one that made the marker:
 * each entry is moved by one of them (the others find it gone), and the manifest by whoever
 * has seen every entry before it moved. Returns how many entries this call moved. */
static int finish_publish(const char *job_dir, const char *stage)
{
	struct es_buf from = ES_BUF_INIT, to = ES_BUF_INIT, dir = ES_BUF_INIT;
	int rc = es_path_join(&dir, job_dir, stage), moved = 0;
	for (size_t i = 0; !rc && i < N_STAGE_ENTRIES; i++) {
		if (i == N_STAGE_ENTRIES - 1)
			es_crash_point("prepare-publish-before-manifest");
		es_path_join(&from, dir.data, stage_entries[i]);
		es_path_join(&to, job_dir, stage_entries[i]);
		rc = es_fs_move_entry(from.data, to.data);
		moved += rc == 0;
		rc = rc < 0 ? rc : 0;
	}
	/* Empty now: rmdir, never a recursive remove, so that nothing unexpected is lost. */
	if (!rc && rmdir(dir.data) != 0 && errno != ENOENT)
		es_warning("cannot remove the stage folder %s: %s", dir.data, strerror(errno));
	es_buf_free(&from);
	es_buf_free(&to);
	es_buf_free(&dir);
	return rc ? rc : moved;
}

/* The job folder's marker: 0 when there is none; 1 when there is, once the publish it names is
 * finished (a prepare killed while publishing, or one publishing now): the folder then holds a
 * job, whatever this request is. */
static int finish_marked(struct prep *P)
{
	es_path_join(&P->path, P->job_dir.data, PUBLISH_MARKER);
	int rc = es_fs_exists_fresh(P->path.data);
	if (rc <= 0)
		return rc;
	struct es_buf stage = ES_BUF_INIT;
	if ((rc = es_fs_read_file(P->path.data, &stage, 4096)) != 0)
		return rc;
	if (stage.len && stage.data[stage.len - 1] == '\n')
		es_buf_setlen(&stage, stage.len - 1);
	size_t n = stage.len;
	/* Only a stage folder's name is followed, never a path out of the job folder. */
	if (stage.data[0] != '.' || strchr(stage.data, '/') || n < 44 ||
	    !is_token_name(stage.data + n - 43, ".preparing.", "")) {
		rc = es_error(ES_EINVAL, "Job folder marker %s does not name a stage folder: '%s'", P->path.data, stage.data);
	} else if ((rc = finish_publish(P->job_dir.data, stage.data)) > 0) {
		es_warning("finished the publish of job folder %s from the stage %s/%s that another prepare began",
			   P->job_dir.data, P->job_dir.data, stage.data);
	}
	if (rc >= 0) {
		es_path_join(&P->path, P->job_dir.data, ES_JOB_MANIFEST);
		rc = es_fs_exists_fresh(P->path.data);
		if (rc == 0)
			rc = es_error(ES_EINVAL, "Job directory %s is half-published: its marker %s names the stage %s, which "
					"is gone without its manifest.json. Empty the folder by hand, or choose a new --job-dir.",
					P->job_dir.data, PUBLISH_MARKER, stage.data);
	}
	es_buf_free(&stage);
	return rc < 0 ? rc : 1;
}

/* The entries of the job folder that no prepare left, sorted, into foreign; *ours counts those
 * a prepare leaves (stage folders ".<name>.preparing.<32hex>", the marker's temporaries), and
 * *job is set when the listing shows a manifest or a marker that the lookups before it did not
 * (published meanwhile, or a stale cached absence). The lost+found folder at a mount point is
 * the file system's own and counts as neither. */
static int list_foreign(struct prep *P, int mount, struct es_strv *foreign, size_t *ours, int *job)
{
	DIR *d = opendir(P->job_dir.data);
	if (!d)
		return es_error_errno(ES_EIO, "cannot read folder '%s'", P->job_dir.data);
	struct es_buf prefix = ES_BUF_INIT;
	int rc = es_buf_printf(&prefix, ".%s.preparing.", P->job_name);
	struct dirent *e;
	while (!rc && (e = readdir(d)) != NULL) {
		const char *n = e->d_name;
		struct stat st;
		if (!strcmp(n, ".") || !strcmp(n, ".."))
			continue;
		int kind = fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (int)(st.st_mode & S_IFMT) : 0;
		if (!strcmp(n, ES_JOB_MANIFEST) || !strcmp(n, PUBLISH_MARKER))
			*job = 1;
		else if ((kind == S_IFDIR && is_token_name(n, prefix.data, "")) ||
		    (kind == S_IFREG && is_token_name(n, "." PUBLISH_MARKER ".", ".tmp")))
			(*ours)++;
		else if (!(mount && kind == S_IFDIR && !strcmp(n, "lost+found")))
			rc = es_strv_push(foreign, strdup(n));
	}
	closedir(d);
	es_buf_free(&prefix);
	es_strv_sort_unique(foreign);
	return rc;
}

/* The refusal of a folder that holds something else than a job: what is there, in one line. */
static int refuse_foreign(struct prep *P, const struct es_strv *f)
{
	struct es_buf names = ES_BUF_INIT;
	for (size_t i = 0; i < f->n && i < 5; i++)
		es_buf_printf(&names, "%s'%s'", i ? ", " : "", f->v[i]);
	if (f->n > 5)
		es_buf_printf(&names, " and %zu more", f->n - 5);
	int rc = es_error(ES_EINVAL, "Job directory %s is not empty and holds no job (no manifest.json): %zu %s (%s). "
			  "Choose a new --job-dir, or an empty folder.", P->job_dir.data, f->n,
			  f->n == 1 ? "entry" : "entries", names.data);
	es_buf_free(&names);
	return rc;
}

/* An existing folder: 1 when it holds a job (a publish left half-done is finished first); 0
 * when it holds nothing but what a prepare leaves, and is taken: P->take, and P->inside when
 * the stage goes inside it; else the refusal naming what is there. */
static int examine_existing(struct prep *P)
{
	/* Opened, not looked up: a cached absence must not make a job folder look empty. */
	es_path_join(&P->path, P->job_dir.data, ES_JOB_MANIFEST);
	int rc = es_fs_exists_fresh(P->path.data);
	if (rc == 0)
		rc = finish_marked(P);
	if (rc != 0)
		return rc;
	int mount = es_fs_is_mount_point(P->job_dir.data);
	if (mount < 0)
		return mount;
	struct es_strv foreign = ES_STRV_INIT;
	size_t ours = 0;
	int job = 0;
	rc = list_foreign(P, mount, &foreign, &ours, &job);
	if (!rc && job) {
		es_strv_free(&foreign);
		rc = finish_marked(P);
		return rc < 0 ? rc : 1;
	}
	if (!rc && foreign.n)
		rc = refuse_foreign(P, &foreign);
	es_strv_free(&foreign);
	if (!rc && stat(P->job_dir.data, &P->take_st) != 0)
		rc = es_error_errno(ES_EIO, "cannot stat '%s'", P->job_dir.data);
	if (rc)
		return rc;
	P->take = 1;
	/* A rename cannot replace a mount point nor a folder that is not empty, and must not replace
	 * the working folder of this process: ranks started there would look in the removed one. */
	struct stat cwd;
	int here = stat(".", &cwd) == 0 && cwd.st_dev == P->take_st.st_dev && cwd.st_ino == P->take_st.st_ino;
	P->inside = mount || ours || here;
	return 0;
}

/* Step 11 inside the job folder: the exclusive marker decides which stage becomes the job, then
 * its entries move up. 0 published; 1 another prepare's job, compared. */
static int publish_inside(struct prep *P)
{
	const char *stage = strrchr(P->stage.data, '/') + 1;
	struct es_buf line = ES_BUF_INIT;
	es_path_join(&P->path, P->job_dir.data, PUBLISH_MARKER);
	int rc = es_buf_printf(&line, "%s\n", stage);
	if (!rc)
		rc = es_fs_publish_exclusive(P->path.data, line.data, line.len);
	es_buf_free(&line);
	if (rc == 1) {
		/* Another prepare took the folder: its job is finished if need be, then compared. */
		if ((rc = finish_marked(P)) < 0)
			return rc;
		rc = check_existing(P);
		return rc ? rc : 1;
	}
	if (rc)
		return rc;
	/* The stage is the job's now: never removed, and a prepare killed from here on leaves the
	 * rest of the publish to the next prepare of this folder. */
	P->have_stage = 0;
	es_crash_point("prepare-publish-after-marker");
	rc = finish_publish(P->job_dir.data, stage);
	return rc < 0 ? rc : 0;
}

/* The stage, complete beside the job folder, moves into it and is published from there. */
static int move_stage_inside(struct prep *P)
{
	es_path_join(&P->path, P->job_dir.data, strrchr(P->stage.data, '/') + 1);
	int rc = es_fs_rename(P->stage.data, P->path.data);
	if (!rc) {
		es_buf_reset(&P->stage);
		rc = es_buf_adds(&P->stage, P->path.data);
	}
	if (rc)
		return rc;
	P->inside = 1;
	return publish_inside(P);
}

/* Step 11 by one rename of the stage beside the job folder (over the folder when it was taken:
 * an empty folder is replaced atomically, and its group, when this user may give it, and its
 * permission bits are kept). 0 published; 1 another prepare's job, compared. */
static int publish_rename(struct prep *P)
{
	/* The group first: a chown clears the set-group-ID bit. One this user is not a member of
	 * cannot be given: the stage keeps its own. */
	if (P->take && chown(P->stage.data, (uid_t)-1, P->take_st.st_gid) != 0 && errno != EPERM)
		return es_error_errno(ES_EIO, "cannot set the group of '%s'", P->stage.data);
	if (P->take && chmod(P->stage.data, P->take_st.st_mode & 07777) != 0)
		return es_error_errno(ES_EIO, "cannot set the mode of '%s'", P->stage.data);
	int rc = es_fs_publish_dir(P->stage.data, P->job_dir.data);
	if (rc == 0)
		P->have_stage = 0;
	if (rc <= 0)
		return rc;
	/* A taken folder that no rename may replace (another user's under a sticky parent; a bind
	 * mount an old kernel did not name as a mount point): publish inside it instead. */
	if (rc == 2 && P->take)
		return move_stage_inside(P);
	if (rc == 2)
		return es_error(ES_EIO, "cannot rename '%s' to '%s': refused by the file system", P->stage.data, P->job_dir.data);
	/* Another prepare won: by a rename, or by a publish inside the folder. When only another
	 * prepare's stage is there yet, this one publishes inside too, and the marker decides. */
	if ((rc = examine_existing(P)) == 0)
		return move_stage_inside(P);
	es_fs_remove_tree(P->stage.data);
	P->have_stage = 0;
	if (rc < 0)
		return rc;
	rc = check_existing(P);
	return rc ? rc : 1;
}

/* Step 7: an existing job folder is this very job (1, a no-op), a folder to take (0) or an
 * error. */
static int prep_existing(struct prep *P)
{
	int rc = es_fs_exists(P->job_dir.data);
	if (rc <= 0)
		return rc;
	/* The recipe's verdict comes before anything is said about the existing folder. */
	if ((rc = prep_join_recipe(P, 0)) != 0)
		return rc;
	struct stat st;
	if (stat(P->job_dir.data, &st) == 0 && !S_ISDIR(st.st_mode))
		return es_error(ES_EINVAL, "Job directory %s exists and is not a folder. Choose a new --job-dir.", P->job_dir.data);
	if ((rc = examine_existing(P)) <= 0)
		return rc;
	rc = check_existing(P);
	return rc ? rc : 1;
}

/* The stage folder: beside the job folder, or inside a taken one (P->inside, or when its parent
 * cannot be written: a rename could not publish there either). Its file system is probed for
 * what the job needs before any input is read (es_fs_probe, in the stage, which a failure
 * removes): a mount without hard links would otherwise be found only by the first done record. */
static int prep_stage(struct prep *P)
{
	char tok[33];
	int rc = es_fs_temp_token(tok);
	if (!rc && !P->inside && !(rc = es_fs_mkdirs(P->parent.data, 0755)) &&
	    !(rc = es_buf_printf(&P->stage, "%s/.%s.preparing.%s", P->parent.data, P->job_name, tok))) {
		if (mkdir(P->stage.data, 0755) == 0) {
			P->have_stage = 1;
			return es_fs_probe(P->stage.data, P->parent.data);
		}
		if (!P->take || (errno != EACCES && errno != EPERM && errno != EROFS))
			return es_error_errno(ES_EIO, "cannot create stage folder '%s'", P->stage.data);
		P->inside = 1;
	}
	es_buf_reset(&P->stage);
	if (rc || (rc = es_buf_printf(&P->stage, "%s/.%s.preparing.%s", P->job_dir.data, P->job_name, tok)) != 0)
		return rc;
	if (mkdir(P->stage.data, 0755) != 0)
		return es_error_errno(ES_EIO, "cannot create stage folder '%s'", P->stage.data);
	P->have_stage = 1;
	/* The stage must be in the folder that was examined: unless that is a mount point, another
	 * prepare may have published its job over it by a rename in between, and the stage would
	 * be in that job. (Once the stage is in, the folder is not empty and no rename replaces it.) */
	struct stat st;
	if (stat(P->job_dir.data, &st) != 0)
		return es_error_errno(ES_EIO, "cannot stat '%s'", P->job_dir.data);
	if (st.st_dev != P->take_st.st_dev || st.st_ino != P->take_st.st_ino)
		return es_error(ES_EINVAL, "Job directory %s was replaced while this prepare began (by another prepare of it?); "
				"run this one again", P->job_dir.data);
	return es_fs_probe(P->stage.data, P->job_dir.data);
}

/* The threads of --threads (prepare.h). */
static int o_threads(const struct es_prepare_opts *o)
{
	return o->threads > 0 ? (o->threads > 1024 ? 1024 : (int)o->threads) : es_cpus_usable(1);
}

/* Whether pass 1 must read the input in order, on one thread: --max-input-bytes counts decoded
 * bytes across files, which a range after a compressed file cannot know before that file is
 * read; index keys number rows across the input, which a range knows beforehand only when
 * every line is a row (no --bad-lines skip) and can be counted without decoding. */
static int needs_order(const struct es_prepare_opts *o, const struct es_recipe *r, const struct es_scan *scan)
{
	int compressed = 0;
	for (size_t i = 0; i < scan->n_files; i++)
		compressed |= es_codec_of_name(scan->files[i].path) != ES_CODEC_PLAIN;
	return (o->max_input_bytes > 0 && compressed) || (r->n_index && (o->skip_bad_lines || compressed));
}

/* The stage folder, then step 8: pass 1, in order or over ranges in parallel. */
static int prep_scan(struct prep *P)
{
	const struct es_prepare_opts *o = P->o;
	int rc = prep_stage(P);
	if (rc)
		return rc;
	const struct es_recipe *r = &P->recipe;
	struct es_jsonl_opts jo = { (const char *const *)r->media_keys, r->n_media, P->scan.media_root,
				    (const char *const *)r->index_keys, r->n_index };
	P->files = calloc(P->scan.n_files, sizeof(*P->files));
	if (!P->files)
		return es_error(ES_ENOMEM, "out of memory");
	size_t max_line = o->max_line_bytes ? o->max_line_bytes : ES_MAX_LINE_BYTES;
	int threads = o_threads(o);
	if ((threads > 1 || o->ranks) && !needs_order(o, r, &P->scan)) {
		struct par_in in = { o, &P->scan, &jo, P->stage.data, max_line, threads, &P->bg.failed };
		return es_prepare_par_pass1(&in, P->files, &P->p1, &P->pieces, &P->n_pieces);
	}
	P->jl = es_jsonl_new(&jo);
	P->pieces = calloc(1, sizeof(*P->pieces));
	if (!P->jl || !P->pieces)
		return es_error(ES_ENOMEM, "out of memory");
	es_path_join(&P->tmp, P->stage.data, ".normalized.jsonl.tmp");
	if (!(P->pieces[0].path = strdup(P->tmp.data)))
		return es_error(ES_ENOMEM, "out of memory");
	P->n_pieces = 1;
	rc = run_pass1(&P->scan, P->jl, max_line, o->max_input_bytes, o->skip_bad_lines, P->tmp.data, P->files,
		       &P->bg.failed, &P->p1);
	P->pieces[0].len = P->p1.bytes;
	return rc;
}

/* After pass 1 and the recipe: the number of shards. */
static int prep_count(struct prep *P)
{
	const struct es_prepare_opts *o = P->o;
	if (P->p1.rows == 0)
		return es_error(ES_EINVAL, "Input dataset contains no records: %s", P->dataset.data);
	if (P->res->unsharded) {
		P->n = 1;
		return 0;
	}
	if (!o->num_shards) {
		P->n = es_prepare_auto_shards(P->p1.bytes, P->p1.rows, o->auto_ranks, o->target_shard_bytes);
		return 0;
	}
	if ((uint64_t)o->num_shards > P->p1.rows)
		return es_error(ES_EINVAL, "--num-shards (%lld) exceeds input records (%llu)", (long long)o->num_shards,
				(unsigned long long)P->p1.rows);
	P->n = (uint64_t)o->num_shards;
	return 0;
}

/* Steps 9-10: the recipe snapshot and the shards; the input must still be what pass 1 read
 * (the manifest records its size, time and hash). */
static int prep_write(struct prep *P)
{
	es_path_join(&P->path, P->stage.data, ES_JOB_RECIPE);
	/* Without a recipe the snapshot is empty, so that the reference's workers, which hash
	 * recipe.yaml against the manifest, accept the job (README "The job folder"). */
	int rc = P->with_recipe ? es_fs_copy_file(P->config.data, P->path.data)
				: es_fs_write_atomic(P->path.data, "", 0);
	if (rc)
		return rc;
	es_path_join(&P->path, P->stage.data, ES_JOB_SHARDS);
	if (mkdir(P->path.data, 0755) != 0)
		return es_error_errno(ES_EIO, "cannot create '%s'", P->path.data);
	if (!(P->shards = calloc(P->n, sizeof(*P->shards))))
		return es_error(ES_ENOMEM, "out of memory for %llu shards", (unsigned long long)P->n);
	int threads = o_threads(P->o);
	if ((rc = run_pass2(P->pieces, P->n_pieces, P->path.data, P->p1.bytes, P->p1.rows, P->n, P->shards, threads)))
		return rc;
	for (size_t i = 0; i < P->n_pieces; i++)
		if (unlink(P->pieces[i].path) != 0)
			return es_error_errno(ES_EIO, "cannot remove '%s'", P->pieces[i].path);
	for (size_t i = 0; i < P->scan.n_files; i++) {
		struct stat st;
		if (stat(P->scan.files[i].path, &st) != 0 || (uint64_t)st.st_size != P->files[i].size ||
		    es_prepare_mtime_ns(&st) != P->files[i].mtime_ns)
			return es_error(ES_EINVAL, "Input changed between the scan and write passes: %s", P->scan.files[i].path);
	}
	return 0;
}

/* Step 11: the state folders and the manifest in the stage, then its one rename. */
static int prep_publish(struct prep *P)
{
	for (size_t i = 0; es_jobpath_folders[i]; i++) {
		if (!strcmp(es_jobpath_folders[i], ES_JOB_SHARDS))
			continue; /* written already */
		es_path_join(&P->path, P->stage.data, es_jobpath_folders[i]);
		if (mkdir(P->path.data, 0755) != 0)
			return es_error_errno(ES_EIO, "cannot create '%s'", P->path.data);
	}
	/* The folders that got entries must reach the disk before the rename publishes them. */
	static const char *const synced[] = { ES_JOB_SHARDS, ES_JOB_STATE, ES_JOB_HISTORY };
	int rc = 0;
	for (size_t i = 0; !rc && i < sizeof(synced) / sizeof(synced[0]); i++) {
		es_path_join(&P->path, P->stage.data, synced[i]);
		rc = es_fs_fsync_dir(P->path.data);
	}
	if (rc)
		return rc;
	struct job_facts facts = { P->job_dir.data, P->job_name, P->with_recipe ? P->config.data : NULL, P->recipe_sha, P->ray_address,
				   &P->recipe, &P->scan, P->files, &P->p1, P->shards, P->n, P->warnings, P->n_warnings };
	cJSON *man = build_manifest(P->o, &facts);
	es_path_join(&P->path, P->stage.data, ES_JOB_MANIFEST);
	rc = man ? es_json_write_atomic(P->path.data, man) : es_error(ES_ENOMEM, "out of memory");
	cJSON_Delete(man);
	if (rc || (rc = es_fs_fsync_dir(P->stage.data)))
		return rc;
	es_crash_point("prepare-before-rename");
	es_proc_test_hook("ESHARD_TEST_HOOK_PREPARE_STAGED");
	/* 1: another prepare won the race; its job was compared (this request: success). */
	if ((rc = P->inside ? publish_inside(P) : publish_rename(P)) != 0)
		return rc;
	/* Step 12. */
	P->res->num_shards = (int64_t)P->n;
	P->res->rows = (int64_t)P->p1.rows;
	P->res->bytes = (int64_t)P->p1.bytes;
	if (!P->o->quiet) {
		printf("Prepared %llu shard%s from %llu records (%llu normalized bytes) in %s\n", (unsigned long long)P->n,
		       P->n == 1 ? "" : "s", (unsigned long long)P->p1.rows, (unsigned long long)P->p1.bytes, P->job_dir.data);
		fflush(stdout);
	}
	P->res->bad_lines = (int64_t)P->p1.bad;
	if (P->p1.bad) {
		const struct bad_line *b = &P->p1.first[0];
		es_warning("Skipped %llu bad line(s) in %zu file(s); first: %s:%llu (%s); the manifest lists them (bad_lines)",
			   (unsigned long long)P->p1.bad, P->p1.files_bad, P->scan.files[b->file].path,
			   (unsigned long long)b->lineno, b->reason);
	}
	for (size_t i = 0; i < P->n_warnings; i++)
		es_warning("%s", P->warnings[i]);
	/* Said, not recorded: the reference's manifest has no such warning. */
	if (P->scan.n_skipped)
		es_warning("left out %zu compressed file%s under %s (first: %s): a folder's .jsonl.gz and .jsonl.zst "
			   "files are read only with --compressed", P->scan.n_skipped, P->scan.n_skipped == 1 ? "" : "s",
			   P->scan.dataset_path, P->scan.first_skipped);
	return 0;
}

/* A successful prepare removes the stage folders ".<job>.preparing.<token>" beside the job
 * folder, or inside it, that a killed prepare left: those whose maker is gone (es_fs_temp_owner:
 * a process of this host, boot and pid namespace that no longer exists), never a live one's.
 * One made on another host cannot be checked from here: it is kept and named. Each is one
 * WARNING line. */
static void sweep_stages(struct prep *P, const char *dir)
{
	struct es_buf prefix = ES_BUF_INIT, path = ES_BUF_INIT;
	es_buf_printf(&prefix, ".%s.preparing.", P->job_name);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix.data, prefix.len) || (P->stage.len && strstr(P->stage.data, e->d_name)))
			continue;
		es_path_join(&path, dir, e->d_name);
		struct stat st;
		if (lstat(path.data, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		int owner = es_fs_temp_owner(e->d_name);
		if (owner == ES_TEMP_UNKNOWN)
			es_warning("kept %s: the stage folder of a prepare on another host (or before a reboot), which "
				   "cannot be checked from here; remove it by hand once that prepare is gone", path.data);
		else if (owner == ES_TEMP_GONE && es_fs_remove_tree(path.data) == 0)
			es_warning("removed %s, the stage folder of a prepare that is gone", path.data);
	}
	if (d)
		closedir(d);
	es_buf_free(&prefix);
	es_buf_free(&path);
}

static void sweep_debris(struct prep *P)
{
	sweep_stages(P, P->parent.data);
	/* Inside the folder: those of publishes inside it (prepare.h), and its marker's temporaries.
	 * A job published by a rename has neither. */
	sweep_stages(P, P->job_dir.data);
	es_fs_sweep_temps(P->job_dir.data, PUBLISH_MARKER, 1);
}

/* The newest mtime of dir and of its entries (one level), or -1 when dir cannot be read. */
static double newest_change(const char *dir)
{
	struct stat st;
	double newest = lstat(dir, &st) == 0 ? (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9 : -1;
	DIR *d = opendir(dir);
	struct dirent *e;
	struct es_buf p = ES_BUF_INIT;
	while (d && (e = readdir(d)) != NULL) {
		if (es_path_join(&p, dir, e->d_name) || lstat(p.data, &st) != 0)
			continue;
		double t = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
		if (t > newest)
			newest = t;
	}
	if (d)
		closedir(d);
	es_buf_free(&p);
	return newest;
}

/* The newest live stage folder of job name in dir (find_stage). */
static int newest_stage_in(const char *dir, const char *prefix, struct es_buf *stage, double *best, int *found)
{
	struct es_buf p = ES_BUF_INIT, shards = ES_BUF_INIT;
	DIR *d = opendir(dir);
	struct dirent *e;
	int rc = 0;
	while (!rc && d && (e = readdir(d)) != NULL) {
		/* A prepare of this host that is gone will never publish: not under way. */
		if (!is_token_name(e->d_name, prefix, "") || es_fs_temp_owner(e->d_name) == ES_TEMP_GONE ||
		    es_path_join(&p, dir, e->d_name) || es_path_join(&shards, p.data, ES_JOB_SHARDS))
			continue;
		double a = newest_change(p.data), b = newest_change(shards.data), t = a > b ? a : b;
		if (a < 0 || (*found && t <= *best))
			continue;
		*found = 1;
		*best = t;
		es_buf_reset(stage);
		rc = es_buf_adds(stage, p.data);
	}
	if (d)
		closedir(d);
	es_buf_free(&p);
	es_buf_free(&shards);
	return rc;
}

int es_prepare_find_stage(const char *job_dir, struct es_buf *stage, double *idle_secs)
{
	struct es_buf jd = ES_BUF_INIT, parent = ES_BUF_INIT, prefix = ES_BUF_INIT;
	int rc = es_fs_resolve(job_dir, &jd), found = 0;
	const char *slash = rc ? NULL : strrchr(jd.data, '/');
	if (slash && !(rc = es_buf_add(&parent, jd.data, slash == jd.data ? 1 : (size_t)(slash - jd.data))))
		rc = es_buf_printf(&prefix, ".%s.preparing.", slash + 1);
	double best = -1;
	/* Beside the job folder, or inside it (a publish inside an existing folder, prepare.h). */
	if (slash && !rc)
		rc = newest_stage_in(parent.data, prefix.data, stage, &best, &found);
	if (slash && !rc)
		rc = newest_stage_in(jd.data, prefix.data, stage, &best, &found);
	if (found) {
		double idle = es_time_epoch() - best;
		*idle_secs = idle > 0 ? idle : 0;
	}
	es_buf_free(&jd);
	es_buf_free(&parent);
	es_buf_free(&prefix);
	return rc ? rc : found;
}

static void prep_free(struct prep *P)
{
	prep_join_recipe(P, 0);
	if (P->have_stage) {
		es_log_quiet_begin();
		es_fs_remove_tree(P->stage.data);
		es_log_quiet_end();
	}
	es_jsonl_free(P->jl);
	if (P->have_scan)
		es_scan_free(&P->scan);
	if (P->have_recipe)
		es_recipe_free(&P->recipe);
	for (size_t i = 0; i < P->n_warnings; i++)
		free(P->warnings[i]);
	free(P->warnings);
	free(P->files);
	free(P->p1.first);
	free(P->shards);
	for (size_t i = 0; i < P->n_pieces; i++)
		free(P->pieces[i].path);
	free(P->pieces);
	free(P->ray_address);
	struct es_buf *bufs[] = { &P->config, &P->tmp, &P->dataset, &P->job_dir, &P->stage, &P->path, &P->parent };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		es_buf_free(bufs[i]);
}

int es_prepare_run(const struct es_prepare_opts *o, struct es_prepare_result *res)
{
	memset(res, 0, sizeof(*res));
	struct prep P;
	memset(&P, 0, sizeof(P));
	P.o = o;
	P.res = res;
	struct es_buf *bufs[] = { &P.config, &P.tmp, &P.dataset, &P.job_dir, &P.stage, &P.path, &P.parent };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		*bufs[i] = (struct es_buf)ES_BUF_INIT;
	int rc = prep_options(&P);
	/* A command that is not there would fail every attempt on every node: say so now. Where
	 * Data-Juicer is may differ between nodes (a launcher node may lack it): every worker
	 * checks that at its start. */
	if (!rc && o->processor.kind == ES_PROC_COMMAND)
		rc = es_attempt_check_processor(&o->processor);
	if (!rc)
		rc = prep_recipe(&P);
	if (!rc)
		rc = prep_inputs(&P);
	if (!rc)
		rc = prep_existing(&P);
	if (!rc)
		rc = prep_scan(&P);
	rc = prep_join_recipe(&P, rc);
	if (!rc)
		rc = prep_count(&P);
	if (!rc) {
		es_crash_point("prepare-after-scan");
		es_proc_test_hook("ESHARD_TEST_HOOK_AFTER_SCAN");
		rc = prep_write(&P);
	}
	if (!rc)
		rc = prep_publish(&P);
	if (rc >= 0 && P.job_name)
		sweep_debris(&P);
	prep_free(&P);
	return rc == 1 ? 0 : rc;
}
