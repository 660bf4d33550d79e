#include "eshard/merge.h"
#include "eshard/clock.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/jsonl.h"
#include "eshard/linereader.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/prepare.h"
#include "eshard/proc.h"
#include "eshard/sha.h"
#include "eshard/status.h"
#include "eshard/stop.h"
#include "eshard/workq.h"
#include "json.h"
#include "record.h"

#include <dirent.h>
#include <pthread.h>
#include <time.h>
#include <errno.h>
#include <fcntl.h>
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
	uint64_t last_job;   /* the last hasher job that reads it (0: none) */
};

enum job_kind { JOB_BEGIN_FILE, JOB_DATA, JOB_NEWLINE, JOB_END_FILE };

struct job {
	enum job_kind kind;
	const char *p;
	size_t n;
	int64_t off;         /* JOB_DATA: write the bytes at this output offset too; -1: not */
};

/* The second thread (a workq) hashes the result file and the output, and writes every other
 * block of the output; the reading thread validates the lines and writes the other blocks
 * (pwrite at known offsets, so the order does not matter). The two halves then take about the
 * same time, which is what makes two cores pay off: one SHA-256 pass costs about as much as
 * the validation. */
struct hasher {
	struct es_workq *q;
	int file_open;       /* file_sha is initialised */
	char file_hex[65];   /* the digest of the last finished file */
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

static int hasher_job(void *ctx, void *job, int failed)
{
	struct hasher *h = ctx;
	const struct job *j = job;
	int rc = 0;
	if (failed) {
		/* After an error the jobs are only drained; a started file digest is released. */
		if (j->kind == JOB_END_FILE && h->file_open) {
			es_sha_abort(&h->file_sha);
			h->file_open = 0;
		}
		return 0;
	}
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
	return rc;
}

static void hasher_post(struct hasher *h, enum job_kind kind, const char *p, size_t n, struct mbuf *b,
			int64_t off)
{
	struct job j = { kind, p, n, off };
	uint64_t seq = es_workq_post(h->q, &j);
	if (b)
		b->last_job = seq;
}

/* Wait until no hasher job reads b any more. */
static void hasher_wait_buf(struct hasher *h, struct mbuf *b)
{
	es_workq_wait(h->q, b->last_job);
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

/* How often a result that its done record names, and that the file system says is not there,
 * is looked for again (open_result), a second apart. */
#define ES_MERGE_RESULT_TRIES 5

/*
 * Open a result a done record names. The record is published after its result
 * (docs/job-folder.md), so a result that answers ENOENT is one this node's client does not
 * show: a FUSE client (GlusterFS, with tens of thousands of files in view) can keep a kernel
 * entry for a name whose inode the client itself has forgotten, and answer every open through
 * it with ENOENT until something renews the entry. A listing of the result's folder renews its
 * entries (READDIRPLUS; an NFS client revalidates the folder on open), so the open is tried
 * again after one, up to ES_MERGE_RESULT_TRIES times a second apart; a result that is truly
 * gone stays an error (docs/design.md, "Terminal fences: never trust an absent file").
 */
static int open_result(const char *path, int *fd)
{
	int rc = es_fs_open_read(path, O_RDONLY, fd);
	for (int k = 1; rc == 1 && k < ES_MERGE_RESULT_TRIES && !es_stop_signal(); k++) {
		struct es_buf dir = ES_BUF_INIT;
		struct es_strv names = ES_STRV_INIT;
		const char *slash = strrchr(path, '/');
		if (k > 1)
			es_sleep(1.0);
		if (slash && !es_buf_add(&dir, path, (size_t)(slash - path))) {
			es_log_quiet_begin();
			es_fs_list_dir(dir.data, &names);
			es_log_quiet_end();
		}
		es_strv_free(&names);
		es_buf_free(&dir);
		rc = es_fs_open_read(path, O_RDONLY, fd);
		if (rc == 0)
			es_log_note("result %s was not there to open on this node until its folder was listed again (%d "
				    "tries): a client that caches metadata (docs/design.md, \"Terminal fences\")", path, k + 1);
	}
	if (rc == 1)
		return es_error_errno(ES_EIO, "cannot open result '%s' (looked for %d times, its folder listed "
				      "again before each)", path, ES_MERGE_RESULT_TRIES);
	return rc;
}

/*
 * Copy one result file into the output through the hasher, validating every line here.
 * rows gets its line count; the file's sha256 is left in h->file_hex.
 */
static int merge_file(struct reader *rd, const char *path, int64_t *rows)
{
	struct hasher *h = rd->h;
	int fd, rc = open_result(path, &fd);
	if (rc)
		return rc;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	hasher_post(h, JOB_BEGIN_FILE, NULL, 0, NULL, -1);
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
		if ((rc = buf_reserve(b, carry + BLOCK)) || (rc = es_check_stop("merge")))
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
	int herr = es_workq_drain(h->q);
	close(fd);
	*rows = (int64_t)lineno;
	return rc ? rc : herr;
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
	rc = rc ? rc : es_jobpath_join(&p, m->job_dir, ES_JOB_MERGE_RECORD);
	if (!rc)
		rc = es_json_write_atomic(p.data, o);
	cJSON_Delete(o);
	es_buf_free(&p);
	return rc;
}

/* One merge: the output's temporary, the hashing thread and the reader, so that its steps
 * are functions of their own. */
struct merger {
	struct es_manifest m;
	int have_manifest;
	struct es_buf out, tmp;
	int fd;
	struct hasher h;
	int out_sha_live;
	struct reader rd;
	struct es_merge_result *r;
	size_t early;        /* shards the follower appended while the job ran */
	const struct es_status *checked; /* the finish's caller's status (es_merge_follow_finish), or NULL */
};

/* The job must be complete. */
static int merge_complete(struct merger *g, double lock_timeout)
{
	struct es_status_counts c;
	int rc = es_status_count(&g->m, lock_timeout, &c);
	if (rc)
		return rc;
	if (c.done == c.total)
		return 0;
	struct es_buf advice = ES_BUF_INIT;
	es_status_advice(&c, g->m.job_dir, &advice);
	rc = es_error(ES_EINVAL, "Cannot merge an incomplete job: pending=%lld running=%lld stale=%lld failed=%lld done=%lld (%s); %s",
		      (long long)c.pending, (long long)c.running, (long long)c.stale, (long long)c.failed,
		      (long long)c.done, g->m.job_dir, advice.len ? advice.data : "");
	es_buf_free(&advice);
	return rc;
}

/* The output, resolved, must not be a file the job needs: checked before anything else, as a
 * usage error. */
static int merge_resolve(struct merger *g, const char *output)
{
	return es_fs_check_output(output, g->m.job_dir, ES_MERGE_OUTPUT_NAME, &g->out);
}

/* The output must be a file we may write. Not a FIFO or device (/dev/null, a pipe): the
 * output is replaced by renaming a temporary made beside it, which would put a file in the
 * place of the device (in /dev, for root). */
static int merge_target(struct merger *g, int overwrite)
{
	if (!strcmp(g->out.data, "/"))
		return es_error(ES_EINVAL, "Output must be a file: %s", g->out.data);
	struct stat st;
	if (stat(g->out.data, &st) == 0) {
		if (!overwrite)
			return es_error(ES_EEXIST, "Output already exists: %s; pass --overwrite to replace it", g->out.data);
		if (S_ISDIR(st.st_mode))
			return es_error(ES_EINVAL, "Output is a folder, not a file: %s", g->out.data);
		if (!S_ISREG(st.st_mode))
			return es_error(ES_EUSAGE, "Output is not a regular file: %s; the merged output is written to a "
				       "temporary beside it and renamed into place, so give a file's path", g->out.data);
	}
	return 0;
}

/* The temporary "<dir>/.<name>.<32hex>.tmp" beside the output (so that the final rename is
 * atomic), the reader and the hashing thread. */
static int merge_open(struct merger *g)
{
	struct es_buf parent = ES_BUF_INIT;
	const char *slash = strrchr(g->out.data, '/');
	int rc = es_buf_add(&parent, g->out.data, slash == g->out.data ? 1 : (size_t)(slash - g->out.data));
	if (!rc)
		rc = es_fs_mkdirs(parent.data, 0755);
	es_buf_free(&parent);
	if (!rc)
		rc = es_fs_open_temp(g->out.data, &g->tmp, &g->fd);
	if (rc)
		return rc;
	g->rd.h = &g->h;
	g->rd.max_line = ES_MAX_LINE_BYTES;
	if (!(g->rd.jl = es_jsonl_new(NULL)))
		return es_error(ES_ENOMEM, "out of memory starting the merge");
	g->rd.out_fd = g->h.out_fd = g->fd;
	g->rd.tmp_path = g->h.tmp_path = g->tmp.data;
	if ((rc = es_sha_init(&g->h.out_sha)))
		return rc;
	g->out_sha_live = 1;
	return es_workq_start(&g->h.q, sizeof(struct job), QLEN, hasher_job, &g->h);
}

/* Append shard id's result at path, checked against the rows and SHA-256 its record gives. */
static int append_result(struct merger *g, const char *id, const char *path, int64_t want_rows, const char *want_sha)
{
	int64_t rows = 0;
	int rc = merge_file(&g->rd, path, &rows);
	if (!rc && (rows != want_rows || strcmp(g->h.file_hex, want_sha)))
		rc = es_error(ES_EINVAL, "Result checksum or row count mismatch for %s: %s", id, path);
	g->r->rows += rows;
	return rc;
}

/* Append shard i's result, checked against its done record: the one the caller's status read
 * (g->checked), else read now. */
static int merge_shard(struct merger *g, size_t i, struct es_buf *dpath, struct es_buf *rpath)
{
	const struct es_manifest *m = &g->m;
	const char *id = m->shards[i].id;
	cJSON *rec = NULL;
	es_proc_test_hook("ESHARD_TEST_HOOK_MERGE_SHARD");
	const struct es_shard_status *s = g->checked ? &g->checked->shards[i] : NULL;
	if (s && s->state == ES_SHARD_DONE && !s->record_error && s->result_path && s->result_sha256 &&
	    !strcmp(s->shard_id, id))
		return append_result(g, id, s->result_path, s->done_rows, s->result_sha256);
	int rc = es_jobpath_record(dpath, m->job_dir, "done", id);
	if (!rc)
		rc = es_record_load(m, "done", id, &rec);
	if (rc == ES_ENOENT)
		rc = es_error(ES_ENOENT, "Done record not found: %s", dpath->data);
	if (rc)
		return rc;
	struct es_done_fields f;
	if (!(rc = es_record_check_done(m, id, rec, rpath, &f, NULL)))
		rc = append_result(g, id, rpath->data, f.rows, f.sha256);
	cJSON_Delete(rec);
	return rc;
}

/* Once the job is complete and merged, the temporaries that killed processes left (a merge's
 * output temporary beside the output; records', attempt.json's and processed.jsonl's inside
 * the job folder) are removed when their maker is gone (es_fs_temp_owner), each named in a
 * WARNING; an output temporary whose maker cannot be checked (another host's) is kept and
 * named. The attempt folders of a shard that the finish's caller's view saw clean (status.h
 * attempts_clean) are not listed: at the end of run, a listing of two folders a shard fewer.
 * Best effort: the merge has succeeded whatever this finds. */
static void sweep_debris(struct merger *g)
{
	struct es_buf dir = ES_BUF_INIT, prefix = ES_BUF_INIT;
	const char *slash = strrchr(g->out.data, '/');
	es_buf_add(&dir, g->out.data, slash == g->out.data ? 1 : (size_t)(slash - g->out.data));
	es_buf_printf(&prefix, "%s.", slash + 1);
	es_log_quiet_begin();
	es_fs_sweep_temps(dir.data, prefix.data, 1);
	static const char *const inside[] = { "", ES_JOB_DONE, ES_JOB_FAILED };
	for (size_t i = 0; i < sizeof(inside) / sizeof(inside[0]); i++) {
		es_path_join(&dir, g->m.job_dir, inside[i]);
		es_fs_sweep_temps(dir.data, NULL, 0);
	}
	for (size_t i = 0; i < g->m.n_shards; i++) {
		if (g->checked && g->checked->shards[i].attempts_clean)
			continue; /* nothing a killed writer left can be there (status.h attempts_clean) */
		DIR *d = es_jobpath_attempts(&dir, g->m.job_dir, g->m.shards[i].id) ? NULL : opendir(dir.data);
		struct dirent *e;
		size_t base = dir.len;
		while (d && (e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			es_buf_setlen(&dir, base);
			es_buf_printf(&dir, "/%s", e->d_name);
			es_fs_sweep_temps(dir.data, NULL, 0);
		}
		if (d)
			closedir(d);
	}
	es_log_quiet_end();
	es_buf_free(&dir);
	es_buf_free(&prefix);
}

/* Stop the thread, then fsync and rename the output into place and record merge.json. */
static int merge_close(struct merger *g, int rc)
{
	int herr = es_workq_finish(g->h.q);
	g->h.q = NULL;
	if (g->h.file_open) {
		es_sha_abort(&g->h.file_sha);
		g->h.file_open = 0;
	}
	if (!rc)
		rc = herr;
	if (rc)
		return rc;
	g->out_sha_live = 0;
	struct es_merge_result *r = g->r;
	if ((rc = es_sha_final(&g->h.out_sha, r->sha256)))
		return rc;
	r->bytes = g->rd.written;
	r->num_shards = (int64_t)g->m.n_shards;
	if (fsync(g->fd) != 0)
		return es_error_errno(ES_EIO, "cannot fsync '%s'", g->tmp.data);
	int fd = g->fd;
	g->fd = -1;
	if (close(fd) != 0)
		return es_error_errno(ES_EIO, "cannot close '%s'", g->tmp.data);
	es_crash_point("merge-before-rename");
	if ((rc = es_fs_rename(g->tmp.data, g->out.data)))
		return rc;
	es_buf_reset(&g->tmp); /* renamed: nothing left to remove */
	if (!(r->output = strdup(g->out.data)))
		return es_error(ES_ENOMEM, "out of memory");
	if ((rc = write_merge_json(&g->m, r)))
		return rc;
	sweep_debris(g);
	return 0;
}

static void merge_free(struct merger *g)
{
	if (g->h.q)
		es_workq_finish(g->h.q);
	if (g->h.file_open)
		es_sha_abort(&g->h.file_sha);
	if (g->out_sha_live)
		es_sha_abort(&g->h.out_sha);
	if (g->fd >= 0)
		close(g->fd);
	if (g->tmp.len)
		unlink(g->tmp.data);
	for (size_t i = 0; i < NBUF; i++)
		free(g->rd.bufs[i].data);
	es_jsonl_free(g->rd.jl);
	es_buf_free(&g->out);
	es_buf_free(&g->tmp);
	if (g->have_manifest)
		es_manifest_free(&g->m);
}

int es_merge_reread(const char *path, uint64_t from, int64_t from_rows, int64_t *rows)
{
	int fd, rc = es_fs_open_read(path, O_RDONLY, &fd);
	if (rc == 1)
		return es_error_errno(ES_EIO, "cannot open merged output '%s'", path);
	if (rc)
		return rc;
	if (from && lseek(fd, (off_t)from, SEEK_SET) < 0) {
		close(fd);
		return es_error_errno(ES_EIO, "cannot seek in merged output '%s'", path);
	}
	posix_fadvise(fd, (off_t)from, 0, POSIX_FADV_SEQUENTIAL);
	struct es_jsonl *jl = es_jsonl_new(NULL);
	struct es_line_reader *r = es_line_reader_new(fd, ES_MAX_LINE_BYTES, path);
	int got;
	*rows = 0;
	if (!jl || !r) {
		rc = es_error(ES_ENOMEM, "out of memory reading '%s'", path);
	} else {
		const char *line;
		size_t len;
		int has_nl;
		while ((got = es_line_reader_next(r, &line, &len, &has_nl)) == 1) {
			if ((rc = es_jsonl_validate(jl, line, len, path, (uint64_t)from_rows + es_line_reader_lineno(r))))
				break;
			(*rows)++;
		}
		if (!rc && got < 0)
			rc = got;
	}
	es_line_reader_free(r);
	es_jsonl_free(jl);
	close(fd);
	return rc;
}

static int merger_init(struct merger *g, const char *job_dir, struct es_merge_result *r)
{
	memset(r, 0, sizeof(*r));
	memset(g, 0, sizeof(*g));
	g->out = (struct es_buf)ES_BUF_INIT;
	g->tmp = (struct es_buf)ES_BUF_INIT;
	g->fd = -1;
	g->r = r;
	int rc = es_manifest_load(job_dir, &g->m);
	g->have_manifest = !rc;
	return rc;
}

/* Append shards from..n-1, then close (fsync, rename, merge.json) and say so. */
static int merge_rest(struct merger *g, size_t from, int quiet)
{
	struct es_buf dpath = ES_BUF_INIT, rpath = ES_BUF_INIT;
	int rc = 0;
	for (size_t i = from; !rc && i < g->m.n_shards; i++)
		rc = merge_shard(g, i, &dpath, &rpath);
	es_buf_free(&dpath);
	es_buf_free(&rpath);
	rc = merge_close(g, rc);
	if (!rc && !quiet) {
		printf("Merged %lld shards and %lld rows into %s", (long long)g->r->num_shards, (long long)g->r->rows,
		       g->r->output);
		if (g->early)
			printf(" (%zu of them while the job ran)", g->early);
		printf("\n");
		fflush(stdout);
	}
	return rc;
}

/* The caller's result: *res gets r (its output), or r's output is freed. */
static void hand_result(struct es_merge_result *r, struct es_merge_result *res, int rc)
{
	if (rc || !res) {
		free(r->output);
		r->output = NULL;
	}
	if (res)
		*res = *r;
}

int es_merge_run(const char *job_dir, const char *output, int overwrite, double lock_timeout,
		 struct es_merge_result *res, int quiet)
{
	struct es_merge_result r;
	struct merger g;
	int rc = merger_init(&g, job_dir, &r);
	if (!rc)
		rc = merge_resolve(&g, output);
	if (!rc)
		rc = merge_complete(&g, lock_timeout);
	if (!rc)
		rc = merge_target(&g, overwrite);
	if (!rc)
		rc = merge_open(&g);
	if (!rc)
		rc = merge_rest(&g, 0, quiet);
	merge_free(&g);
	hand_result(&r, res, rc);
	return rc;
}

/* ---- merge while working ---- */

struct es_merge_follow {
	struct merger g;
	struct es_merge_result r;
	char *job_dir, *output;
	double poll_secs;
	size_t next;              /* the first shard not appended yet */
	uint64_t reread_from;     /* the output's prefix re-read, and its rows */
	int64_t reread_rows;
	int gave_up;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
};

/* Append every shard, from f->next on, whose done record is there; stop at the first that
 * has none yet. 0, or an error (the follower gives up). */
static int follow_step(struct es_merge_follow *f)
{
	struct es_buf dpath = ES_BUF_INIT, rpath = ES_BUF_INIT;
	int rc = 0;
	while (!rc && f->next < f->g.m.n_shards) {
		uint64_t before = f->g.rd.written;
		rc = merge_shard(&f->g, f->next, &dpath, &rpath);
		if (rc == ES_ENOENT && f->g.rd.written == before) {
			rc = 0; /* not done yet (nothing was written): look again later */
			break;
		}
		int64_t rows = 0;
		if (!rc && !(rc = es_merge_reread(f->g.tmp.data, before, f->reread_rows, &rows))) {
			f->reread_from = f->g.rd.written;
			f->reread_rows += rows;
			f->next++;
		}
	}
	es_buf_free(&dpath);
	es_buf_free(&rpath);
	return rc;
}

static void *follow_main(void *arg)
{
	struct es_merge_follow *f = arg;
	es_log_quiet_begin(); /* its troubles are reported by the finish's full merge */
	pthread_mutex_lock(&f->mu);
	while (!f->stop && !f->gave_up && f->next < f->g.m.n_shards) {
		pthread_mutex_unlock(&f->mu);
		if (follow_step(f))
			f->gave_up = 1;
		pthread_mutex_lock(&f->mu);
		if (f->stop || f->gave_up || f->next == f->g.m.n_shards)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		double t = (double)ts.tv_sec + ts.tv_nsec / 1e9 + f->poll_secs;
		ts.tv_sec = (time_t)t;
		ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
		pthread_cond_timedwait(&f->cv, &f->mu, &ts);
	}
	pthread_mutex_unlock(&f->mu);
	es_log_quiet_end();
	return NULL;
}

static void follow_free(struct es_merge_follow *f)
{
	merge_free(&f->g);
	free(f->r.output);
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
	free(f->job_dir);
	free(f->output);
	free(f);
}

int es_merge_follow_start(const char *job_dir, const char *output, double poll_secs, struct es_merge_follow **out)
{
	*out = NULL;
	struct es_merge_follow *f = calloc(1, sizeof(*f));
	if (!f)
		return es_error(ES_ENOMEM, "out of memory starting the merge");
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	f->poll_secs = poll_secs > 0 ? poll_secs : 1.0;
	int rc = merger_init(&f->g, job_dir, &f->r);
	if (!rc && (!(f->job_dir = strdup(job_dir)) || !(f->output = strdup(output))))
		rc = es_error(ES_ENOMEM, "out of memory starting the merge");
	if (!rc)
		rc = merge_resolve(&f->g, output);
	if (!rc)
		rc = merge_target(&f->g, 1);
	if (!rc)
		rc = merge_open(&f->g);
	if (!rc && (errno = pthread_create(&f->th, NULL, follow_main, f)) != 0)
		rc = es_error_errno(ES_ENOMEM, "cannot start the merge thread");
	if (rc) {
		follow_free(f);
		return rc;
	}
	*out = f;
	return 0;
}

static void follow_join(struct es_merge_follow *f)
{
	pthread_mutex_lock(&f->mu);
	f->stop = 1;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->th, NULL);
}

int es_merge_follow_finish(struct es_merge_follow *f, double lock_timeout, const struct es_status *checked,
			   struct es_merge_result *res, int quiet, uint64_t *reread_from, int64_t *reread_rows)
{
	follow_join(f);
	int rc;
	uint64_t from = 0;
	int64_t rows = 0;
	if (f->gave_up) {
		merge_free(&f->g); /* its temporary goes; merge the whole job again, which reports */
		memset(&f->g, 0, sizeof(f->g));
		f->g.fd = -1;
		rc = es_merge_run(f->job_dir, f->output, 1, lock_timeout, res, quiet);
	} else {
		rc = checked ? 0 : merge_complete(&f->g, lock_timeout);
		f->g.early = f->next;
		f->g.checked = checked && checked->n_shards == f->g.m.n_shards ? checked : NULL;
		if (!rc)
			rc = merge_rest(&f->g, f->next, quiet);
		if (!rc) {
			from = f->reread_from;
			rows = f->reread_rows;
		}
		hand_result(&f->r, res, rc);
		f->r.output = NULL;
	}
	if (reread_from)
		*reread_from = from;
	if (reread_rows)
		*reread_rows = rows;
	follow_free(f);
	return rc;
}

void es_merge_follow_abort(struct es_merge_follow *f)
{
	follow_join(f);
	follow_free(f);
}
