/*
 * prepare_par: pass 1 over ranges, in parallel (prepare_par.h), a private part of prepare.
 *
 * The input is cut into byte ranges at line ends (ranges.h). Worker threads take the ranges in
 * order, and each validates and re-encodes its range into a temporary of its own; the counts of
 * the ranges, summed in order, place every row and every byte in the normalized stream, which
 * is the temporaries one after another. Two more threads compute what is sequential by nature:
 * one hashes each input file in order, the other the normalized stream, range after range as
 * they are done. The outcome is the same as pass 1 in order, error messages included: a range
 * that fails keeps its message, the first failure in input order is the one said, and a range
 * that does not know how many lines its file has before it (that needs the earlier ranges)
 * says its error again, quietly, once they are counted.
 */
#include "prepare_par.h"
#include "eshard/clock.h"
#include "eshard/cpus.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/linereader.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/ranges.h"
#include "eshard/sha.h"
#include "eshard/stop.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct prange {
	struct es_range r;
	char *tmp;                /* its normalized temporary */
	uint64_t line0;           /* lines of its file before it, when known (line0_known) */
	uint64_t row0;            /* rows of the input before it (the index keys' row number) */
	uint64_t base;            /* stored bytes of the input before it (--max-input-bytes) */
	int line0_known;
	uint64_t lines, rows, out;
	struct in_file f;         /* its bad line count */
	struct pass1 p1;          /* its bad lines */
	int rc, skipped, done;
	char *msg;                /* rc's message */
};

struct par {
	const struct es_scan *scan;
	struct es_jsonl_opts jo;
	size_t max_line;
	int64_t max_input;
	int skip;
	atomic_int *abandon;
	struct in_file *files;
	size_t n_files;             /* the files planned (a file that cannot be planned ends them) */
	struct prange *rs;
	size_t n;
	size_t lo, hi;              /* the ranges this process reads (the others: other ranks) */
	atomic_size_t next;
	atomic_size_t failed;       /* the first range that failed so far (n: none) */
	atomic_ullong done_bytes;   /* stored bytes read, for the progress line */
	pthread_mutex_t mu;
	pthread_cond_t cv;          /* a range is done */
	size_t n_done;
	int raw_rc, norm_rc;        /* the hashing threads' errors and their messages */
	char *raw_msg, *norm_msg;
	size_t raw_file;
	char norm_sha[65];
	char *probe;                /* with ranks: the stage's probe file (share_plan) */
	int hashed;                 /* with ranks: the input's hashes came from rank 1 */
};

/* A failure kept to be said later: its message, or the failure to keep it. */
static char *keep_msg(void)
{
	return strdup(es_last_error());
}

static int par_stopped(struct par *P, size_t i)
{
	int rc = es_check_stop("prepare");
	if (!rc && atomic_load(P->abandon))
		rc = es_error(ES_EINVAL, "prepare stopped: the recipe was refused");
	if (!rc && atomic_load(&P->failed) < i)
		rc = 1; /* an earlier range failed: what this one finds will not be said */
	return rc;
}

static int write_out(int fd, struct es_buf *out, struct prange *g)
{
	int rc = fd >= 0 ? es_fs_write_all(fd, out->data, out->len, g->tmp) : 0;
	g->out += out->len;
	es_buf_reset(out);
	return rc;
}

/* A line reader over range g alone, its lines numbered from g->line0 + 1. */
static int open_range(struct par *P, const struct prange *g, int *fd, struct es_line_reader **rd)
{
	const char *path = P->scan->files[g->r.file].path;
	int codec = es_codec_of_name(path);
	*rd = NULL;
	if ((*fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return es_error_errno(ES_EIO, "cannot open input file '%s'", path);
	posix_fadvise(*fd, (off_t)g->r.start, (off_t)(g->r.end - g->r.start), POSIX_FADV_SEQUENTIAL);
	int rc = 0;
	if (lseek(*fd, (off_t)g->r.start, SEEK_SET) < 0)
		rc = es_error_errno(ES_EIO, "cannot read '%s'", path);
	else if (!(*rd = es_line_reader_new_codec(*fd, P->max_line, path, codec)))
		rc = es_error(ES_ENOMEM, "out of memory reading '%s'", path);
	if (rc) {
		close(*fd);
		return rc;
	}
	if (codec == ES_CODEC_PLAIN)
		es_line_reader_set_limit(*rd, g->r.end - g->r.start);
	es_line_reader_set_lineno(*rd, g->line0);
	return 0;
}

/* Range i through the line reader and the normalizer into out_fd (-1: nowhere, a rerun that
 * only says an error). 1 when it stopped because an earlier range failed. */
static int run_range(struct par *P, size_t i, struct prange *g, struct es_jsonl *jl, int out_fd)
{
	const char *path = P->scan->files[g->r.file].path;
	struct es_line_reader *rd;
	int fd, rc = open_range(P, g, &fd, &rd);
	if (rc)
		return rc;
	struct size_guard guard = { P->max_input, g->base, 0, g->r.end, es_codec_of_name(path) != ES_CODEC_PLAIN };
	struct es_buf out = ES_BUF_INIT;
	const char *line;
	size_t len;
	int has_nl, got;
	uint64_t seen = 0, told = 0;
	/* A stop (or an earlier range's failure) is looked for before the first line, then every
	 * 4096 lines or 1 MiB, whichever comes first: ranges of few long lines must stop at once too. */
	if ((rc = par_stopped(P, i)) != 0)
		got = 0;
	while (!rc && (got = es_line_reader_next(rd, &line, &len, &has_nl)) == 1) {
		uint64_t now = es_line_reader_bytes(rd);
		if ((++seen & 4095) == 0 || now - told >= ((uint64_t)1 << 20)) {
			if ((rc = par_stopped(P, i)) != 0)
				break;
			atomic_fetch_add(&P->done_bytes, now - told);
			told = now;
		}
		uint64_t lineno = es_line_reader_lineno(rd);
		rc = es_prepare_guard_line(&guard, len, has_nl, path, lineno);
		if (!rc)
			rc = es_prepare_normalize_line(jl, P->skip, line, len, g->row0 + g->rows, path, lineno, &out, &g->p1, &g->f, 0);
		if (rc == 1) {
			rc = 0;
			continue;
		}
		if (rc)
			break;
		g->rows++;
		if (out.len >= CHUNK && (rc = write_out(out_fd, &out, g)) != 0)
			break;
	}
	if (!rc && got < 0)
		rc = got;
	if (!rc)
		rc = write_out(out_fd, &out, g);
	g->lines = es_line_reader_lineno(rd) - g->line0;
	uint64_t read = es_line_reader_bytes(rd);
	atomic_fetch_add(&P->done_bytes, read - told);
	if (!rc && read != g->r.end - g->r.start)
		rc = es_error(ES_EINVAL, "Input changed while it was read: %s", path);
	es_buf_free(&out);
	es_line_reader_free(rd);
	close(fd);
	return rc;
}

static int range_to_tmp(struct par *P, size_t i, struct es_jsonl *jl)
{
	struct prange *g = &P->rs[i];
#ifdef ESHARD_TEST_HOOKS
	/* Tests make each range slow (milliseconds), for the progress line, or one of them
	 * (ESHARD_TEST_RANGE_DELAY_ONLY=<index>), so that a later range fails first. */
	int64_t ms, only;
	const char *env = getenv("ESHARD_TEST_RANGE_DELAY_MS"), *which = getenv("ESHARD_TEST_RANGE_DELAY_ONLY");
	if (env && !es_parse_i64(env, &ms) && ms > 0 && (!which || (!es_parse_i64(which, &only) && (size_t)only == i)))
		es_sleep((double)ms / 1e3);
#endif
	int fd, rc = es_fs_open_new(g->tmp, 0600, 1, &fd);
	if (rc)
		return rc;
	rc = run_range(P, i, g, jl, fd);
	/* No fsync, as for pass 1's temporary (run_pass1). */
	if (close(fd) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot write '%s'", g->tmp);
	if (!rc)
		es_crash_point("prepare-mid-ranges"); /* on a worker thread, other ranges under way */
	return rc;
}

static void range_done(struct par *P, size_t i, int rc)
{
	struct prange *g = &P->rs[i];
	if (rc == 1) {
		g->skipped = 1;
		rc = 0;
	}
	if (rc) {
		g->rc = rc;
		g->msg = keep_msg();
		size_t f = atomic_load(&P->failed);
		while (i < f && !atomic_compare_exchange_weak(&P->failed, &f, i))
			;
	}
	pthread_mutex_lock(&P->mu);
	g->done = 1;
	P->n_done++;
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
}

static void *par_worker(void *arg)
{
	struct par *P = arg;
	/* Messages are kept, not printed: only the first failure in input order is said. */
	es_log_quiet_begin();
	struct es_jsonl *jl = es_jsonl_new(&P->jo);
	for (;;) {
		size_t i = atomic_fetch_add(&P->next, 1);
		if (i >= P->hi)
			break;
		int rc = !jl ? es_error(ES_ENOMEM, "out of memory") : atomic_load(&P->failed) < i ? 1 : range_to_tmp(P, i, jl);
		range_done(P, i, rc);
	}
	es_jsonl_free(jl);
	es_log_quiet_end();
	return NULL;
}

/* The bytes of the file at path (an input file when input) into sha, in CHUNK reads through
 * buf; *total gets their count. A stop (or an earlier range's failure) is looked for every 64
 * reads. */
static int hash_file(struct par *P, struct es_sha *sha, const char *path, int input, char *buf, uint64_t *total)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return es_error_errno(ES_EIO, "cannot open %s'%s'", input ? "input file " : "", path);
	int rc = 0;
	uint64_t reads = 0;
	*total = 0;
	while (!rc) {
		if ((++reads & 63) == 0 && (rc = par_stopped(P, P->n)) != 0)
			break;
		ssize_t n = read(fd, buf, CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = es_error_errno(ES_EIO, "cannot read '%s'", path);
		if (n <= 0)
			break;
		es_sha_update(sha, buf, (size_t)n);
		*total += (uint64_t)n;
	}
	close(fd);
	return rc;
}

/* The raw hash of input file f, which must still have the size planned. */
static int hash_input(struct par *P, size_t f, char *buf)
{
	const char *path = P->scan->files[f].path;
	struct es_sha sha;
	uint64_t total;
	int rc = es_sha_init(&sha);
	if (!rc)
		rc = hash_file(P, &sha, path, 1, buf, &total);
	if (!rc && total != P->files[f].size)
		rc = es_error(ES_EINVAL, "Input changed while it was read: %s", path);
	if (!rc)
		return es_sha_final(&sha, P->files[f].sha);
	es_sha_abort(&sha);
	return rc;
}

static void *raw_hasher(void *arg)
{
	struct par *P = arg;
	es_log_quiet_begin();
	char *buf = malloc(CHUNK);
	int rc = buf ? 0 : es_error(ES_ENOMEM, "out of memory hashing input");
	for (size_t f = 0; !rc && f < P->n_files; f++) {
		rc = hash_input(P, f, buf);
		P->raw_file = f;
	}
	if (rc && rc != 1) {
		P->raw_rc = rc;
		P->raw_msg = keep_msg();
	}
	free(buf);
	es_log_quiet_end();
	return NULL;
}

/* Wait until range i is done; 0 when it succeeded whole. */
static int wait_range(struct par *P, size_t i)
{
	pthread_mutex_lock(&P->mu);
	while (!P->rs[i].done)
		pthread_cond_wait(&P->cv, &P->mu);
	pthread_mutex_unlock(&P->mu);
	return P->rs[i].rc || P->rs[i].skipped;
}

static void *norm_hasher(void *arg)
{
	struct par *P = arg;
	es_log_quiet_begin();
	struct es_sha sha;
	char *buf = malloc(CHUNK);
	int rc = buf ? es_sha_init(&sha) : es_error(ES_ENOMEM, "out of memory hashing");
	int open_sha = buf && !rc;
	for (size_t i = 0; !rc && i < P->n; i++)
		rc = wait_range(P, i) ? 1 : hash_file(P, &sha, P->rs[i].tmp, 0, buf, &(uint64_t){ 0 });
	if (open_sha && !rc)
		rc = es_sha_final(&sha, P->norm_sha);
	else if (open_sha)
		es_sha_abort(&sha);
	if (rc && rc != 1) {
		P->norm_rc = rc;
		P->norm_msg = keep_msg();
	}
	free(buf);
	es_log_quiet_end();
	return NULL;
}

/* The ranges of every input file; a file that cannot be opened ends the plan there, its error
 * kept in *plan_msg to be said after those of the files before it. */
static int plan_ranges(struct par *P, const char *stage, uint64_t target, struct es_ranges *rs, int *plan_rc,
		       char **plan_msg)
{
	int rc = 0;
	es_log_quiet_begin();
	for (size_t f = 0; !rc && f < P->scan->n_files; f++) {
		const char *path = P->scan->files[f].path;
		struct stat st;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) != 0) {
			*plan_rc = es_error_errno(ES_EIO, "cannot open input file '%s'", path);
			if (fd >= 0)
				close(fd);
			break;
		}
		P->files[f].size = (uint64_t)st.st_size;
		P->files[f].mtime_ns = es_prepare_mtime_ns(&st);
		if (es_codec_of_name(path) != ES_CODEC_PLAIN)
			rc = es_ranges_add_whole(rs, f, (uint64_t)st.st_size);
		else
			rc = es_ranges_add_file(rs, f, fd, (uint64_t)st.st_size, target, path);
		if (rc)
			*plan_rc = rc;
		close(fd);
		P->n_files = f + 1;
	}
	if (*plan_rc && !(*plan_msg = keep_msg()))
		rc = ES_ENOMEM;
	es_log_quiet_end();
	if (rc == ES_ENOMEM)
		return es_error(ES_ENOMEM, "out of memory planning input ranges");
	P->n = rs->n;
	if (!(P->rs = calloc(rs->n ? rs->n : 1, sizeof(*P->rs))))
		return es_error(ES_ENOMEM, "out of memory planning input ranges");
	uint64_t base = 0;
	for (size_t i = 0; i < rs->n; i++) {
		struct prange *g = &P->rs[i];
		g->r = rs->v[i];
		g->base = base;
		base += g->r.end - g->r.start;
		g->line0_known = i == 0 || rs->v[i - 1].file != g->r.file;
		struct es_buf name = ES_BUF_INIT;
		g->tmp = es_buf_printf(&name, "%s/.normalized.%zu.tmp", stage, i) ? NULL : es_buf_detach(&name, NULL);
		es_buf_free(&name);
		if (!g->tmp)
			return es_error(ES_ENOMEM, "out of memory planning input ranges");
	}
	return 0;
}

/* Index keys number the rows of the whole input: a range must know the rows before it before it
 * starts. Without --bad-lines skip every line is a row (a bad one stops prepare), so a quick
 * first pass that counts the '\n' of each range, in parallel, tells every range its first row
 * and line number. */
static int count_range(struct par *P, struct prange *g, char *buf)
{
	const char *path = P->scan->files[g->r.file].path;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return es_error_errno(ES_EIO, "cannot open input file '%s'", path);
	int rc = 0;
	char last = '\n';
	for (uint64_t off = g->r.start; !rc && off < g->r.end;) {
		if ((rc = es_check_stop("prepare")) != 0)
			break;
		uint64_t want = g->r.end - off < CHUNK ? g->r.end - off : CHUNK;
		ssize_t n = pread(fd, buf, (size_t)want, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? es_error_errno(ES_EIO, "cannot read '%s'", path)
				   : es_error(ES_EINVAL, "Input changed while it was read: %s", path);
			break;
		}
		for (const char *p = buf, *end = buf + n; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++)
			g->lines++;
		last = buf[n - 1];
		off += (uint64_t)n;
	}
	close(fd);
	g->lines += last != '\n'; /* a last line without '\n' */
	return rc;
}

static void *count_worker(void *arg)
{
	struct par *P = arg;
	es_log_quiet_begin();
	char *buf = malloc(CHUNK);
	for (;;) {
		size_t i = atomic_fetch_add(&P->next, 1);
		if (i >= P->n)
			break;
		int rc = buf ? count_range(P, &P->rs[i], buf) : es_error(ES_ENOMEM, "out of memory");
		if (rc)
			range_done(P, i, rc);
	}
	free(buf);
	es_log_quiet_end();
	return NULL;
}

/* Run fn on n threads (at least one, on this one when no other can start). */
static void on_threads(int n, void *(*fn)(void *), void *arg)
{
	pthread_t th[256];
	int started = 0;
	if (n > (int)(sizeof(th) / sizeof(th[0])))
		n = (int)(sizeof(th) / sizeof(th[0]));
	while (started < n && pthread_create(&th[started], NULL, fn, arg) == 0)
		started++;
	if (!started)
		fn(arg);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
}

/* The count pass: every range's first row and line; 0, or the first failure (said). */
static int count_rows(struct par *P, int threads)
{
	on_threads(threads, count_worker, P);
	atomic_store(&P->next, 0);
	uint64_t rows = 0, line0 = 0;
	for (size_t i = 0; i < P->n; i++) {
		struct prange *g = &P->rs[i];
		if (g->rc)
			return es_error(g->rc, "%s", g->msg ? g->msg : "out of memory");
		if (i && P->rs[i - 1].r.file != g->r.file)
			line0 = 0;
		g->row0 = rows;
		g->line0 = line0;
		g->line0_known = 1;
		rows += g->lines;
		line0 += g->lines;
		g->lines = 0;
	}
	return 0;
}

/* The main thread waits for the ranges, saying how far they are every every seconds (0:
 * never) on stderr. */
static void wait_ranges(struct par *P, double every, uint64_t total)
{
	double t0 = es_time_mono(), next = t0 + every;
	pthread_mutex_lock(&P->mu);
	while (P->n_done < P->hi - P->lo) {
		if (every <= 0) {
			pthread_cond_wait(&P->cv, &P->mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		double left = next - es_time_mono();
		if (left > 0) {
			ts.tv_sec += (time_t)left;
			ts.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&P->cv, &P->mu, &ts);
		}
		double now = es_time_mono();
		if (now < next || P->n_done >= P->hi - P->lo)
			continue;
		next = now + every;
		double done = (double)atomic_load(&P->done_bytes), rate = done / (now - t0);
		pthread_mutex_unlock(&P->mu);
		es_log_note("prepare: %.0f of %.0f MB read (%.0f%%), %.0f MB/s, ETA %.0f s", done / 1e6,
			    (double)total / 1e6, total ? 100.0 * done / (double)total : 100.0, rate / 1e6,
			    rate > 0 && (double)total > done ? ((double)total - done) / rate : 0.0);
		pthread_mutex_lock(&P->mu);
	}
	pthread_mutex_unlock(&P->mu);
}

/* Say range i's failure; when the range did not know its line numbers, run it again, quietly
 * and writing nothing, numbered from the lines of its file before it (all counted by now). */
static int say_range_error(struct par *P, size_t i, struct es_jsonl *jl)
{
	struct prange *g = &P->rs[i];
	char *again = NULL;
	int rc = g->rc;
	if (!g->line0_known && jl) {
		struct prange c;
		memset(&c, 0, sizeof(c));
		c.r = g->r;
		c.base = g->base;
		c.row0 = g->row0;
		for (size_t j = i; j > 0 && P->rs[j - 1].r.file == g->r.file; j--)
			c.line0 += P->rs[j - 1].lines;
		es_log_quiet_begin();
		int rc2 = run_range(P, i, &c, jl, -1);
		if (rc2 < 0 && (again = keep_msg()) != NULL)
			rc = rc2;
		es_log_quiet_end();
		free(c.p1.first);
	}
	rc = es_error(rc, "%s", again ? again : g->msg ? g->msg : "out of memory");
	free(again);
	return rc;
}

/* The first failure in input order: the ranges of each file, then its raw hash; then the file
 * that could not be planned; then the normalized hash. Said once, here; 0 when none. */
static int par_first_error(struct par *P, struct es_jsonl *jl, int plan_rc, const char *plan_msg)
{
	size_t i = 0;
	for (size_t f = 0; f < P->n_files; f++) {
		for (; i < P->n && P->rs[i].r.file == f; i++)
			if (P->rs[i].rc)
				return say_range_error(P, i, jl);
		if (P->raw_rc && P->raw_file == f)
			return es_error(P->raw_rc, "%s", P->raw_msg ? P->raw_msg : "out of memory");
	}
	if (plan_rc)
		return es_error(plan_rc, "%s", plan_msg ? plan_msg : "out of memory");
	if (P->norm_rc)
		return es_error(P->norm_rc, "%s", P->norm_msg ? P->norm_msg : "out of memory");
	return 0;
}

/* The ranges' counts summed in order into the files' and the input's, their bad lines (the
 * first ES_BAD_LINES_KEPT in input order), and their temporaries as the stream's pieces. */
static int par_merge(struct par *P, struct pass1 *res, struct piece *pieces)
{
	uint64_t line0 = 0;
	for (size_t i = 0; i < P->n; i++) {
		struct prange *g = &P->rs[i];
		size_t f = g->r.file;
		if (i && P->rs[i - 1].r.file != f)
			line0 = 0;
		P->files[f].rows += g->rows;
		P->files[f].bad += g->f.bad;
		res->rows += g->rows;
		res->bad += g->p1.bad;
		for (size_t k = 0; k < g->p1.n_first && res->n_first < ES_BAD_LINES_KEPT; k++) {
			if (!res->first && !(res->first = calloc(ES_BAD_LINES_KEPT, sizeof(*res->first))))
				return es_error(ES_ENOMEM, "out of memory noting the bad lines of the input");
			res->cap_first = ES_BAD_LINES_KEPT;
			struct bad_line *b = &res->first[res->n_first++];
			*b = g->p1.first[k];
			b->file = f;
			b->lineno += g->line0_known ? 0 : line0;
		}
		pieces[i] = (struct piece){ g->tmp, res->bytes, g->out };
		g->tmp = NULL;
		res->bytes += g->out;
		line0 += g->lines;
	}
	for (size_t f = 0; f < P->n_files; f++)
		res->files_bad += P->files[f].bad != 0;
	memcpy(res->norm_sha, P->norm_sha, sizeof(res->norm_sha));
	return 0;
}

static void par_free(struct par *P)
{
	for (size_t i = 0; P->rs && i < P->n; i++) {
		free(P->rs[i].tmp);
		free(P->rs[i].msg);
		free(P->rs[i].p1.first);
	}
	free(P->rs);
	free(P->raw_msg);
	free(P->norm_msg);
	free(P->probe);
	pthread_mutex_destroy(&P->mu);
	pthread_cond_destroy(&P->cv);
}

/* ---------------- the ranks of run ----------------
 *
 * The preparing rank's plan goes to every rank, each rank reads a slice of the ranges, and
 * their counts come back (prepare.h, struct es_prepare_ranks). Both travel as bytes: unsigned
 * integers of 8 bytes, least significant first, and strings as their length with the NUL
 * (0: none) and their bytes, so that the ranks need not share a layout of structs. A rank's
 * temporaries reach the preparing rank through the shared file system: they are closed
 * before the counts are sent, and a network file system shows a file's bytes to whoever opens
 * it after its writer closed it (close-to-open consistency).
 */

#define PLAN_MAGIC 0x65737031706c616eULL   /* "esp1plan" */
#define COUNTS_MAGIC 0x65737031636e7473ULL /* "esp1cnts" */
/* The file in the stage whose token every rank must read before the ranks share a plan. */
#define PROBE_NAME ".ranks-probe"

struct wr {
	struct es_buf *b;
	int rc;
};

static void put_u64(struct wr *w, uint64_t v)
{
	unsigned char x[8];
	for (int i = 0; i < 8; i++)
		x[i] = (unsigned char)(v >> (8 * i));
	if (!w->rc)
		w->rc = es_buf_add(w->b, x, sizeof(x));
}

static void put_str(struct wr *w, const char *s)
{
	size_t n = s ? strlen(s) + 1 : 0;
	put_u64(w, n);
	if (!w->rc && n)
		w->rc = es_buf_add(w->b, s, n);
}

struct rd {
	const unsigned char *p, *end;
	int bad;
};

static uint64_t get_u64(struct rd *r)
{
	if (r->bad || r->end - r->p < 8) {
		r->bad = 1;
		return 0;
	}
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += 8;
	return v;
}

/* A string of the bytes (pointing into them), or NULL: none, or a bad one (r->bad). */
static const char *get_str(struct rd *r)
{
	uint64_t n = get_u64(r);
	if (r->bad || !n)
		return NULL;
	if ((uint64_t)(r->end - r->p) < n || r->p[n - 1] != '\0') {
		r->bad = 1;
		return NULL;
	}
	const char *s = (const char *)r->p;
	r->p += n;
	return s;
}

void es_prepare_rank_slice(size_t n, int size, int rank, size_t *lo, size_t *hi)
{
	/* Weights: 1 for rank 0, 2 for every other rank. */
	unsigned __int128 w = 2 * (unsigned __int128)size - 1;
	unsigned __int128 a = rank ? 2 * (unsigned __int128)rank - 1 : 0, b = 2 * (unsigned __int128)rank + 1;
	*lo = (size_t)((unsigned __int128)n * a / w);
	*hi = (size_t)((unsigned __int128)n * b / w);
}

static void put_strs(struct wr *w, const char *const *v, size_t n)
{
	put_u64(w, n);
	for (size_t i = 0; i < n; i++)
		put_str(w, v[i]);
}

/* The plan: what a rank needs to read any of the ranges as the preparing rank would. */
static int encode_plan(const struct par *P, const char *stage, const char *token, struct es_buf *b)
{
	struct wr w = { b, 0 };
	put_u64(&w, PLAN_MAGIC);
	put_u64(&w, P->n);
	put_str(&w, stage);
	put_str(&w, token);
	put_u64(&w, P->max_line);
	put_u64(&w, (uint64_t)P->max_input);
	put_u64(&w, (uint64_t)P->skip);
	put_strs(&w, P->jo.media_keys, P->jo.n_media);
	put_str(&w, P->jo.media_root);
	put_strs(&w, P->jo.index_keys, P->jo.n_index);
	put_u64(&w, P->n_files);
	for (size_t f = 0; f < P->n_files; f++) {
		put_str(&w, P->scan->files[f].path);
		put_u64(&w, P->files[f].size);
	}
	for (size_t i = 0; i < P->n; i++) {
		const struct prange *g = &P->rs[i];
		put_u64(&w, g->r.file);
		put_u64(&w, g->r.start);
		put_u64(&w, g->r.end);
		put_u64(&w, g->row0);
		put_u64(&w, g->line0);
		put_u64(&w, g->base);
		put_u64(&w, (uint64_t)g->line0_known);
	}
	return w.rc ? es_error(ES_ENOMEM, "out of memory sharing the input ranges") : 0;
}

/* The head of a plan: its range count, stage folder and probe token. */
static int plan_head(struct rd *r, size_t *n, const char **stage, const char **token)
{
	uint64_t magic = get_u64(r);
	*n = (size_t)get_u64(r);
	*stage = get_str(r);
	*token = get_str(r);
	if (r->bad || magic != PLAN_MAGIC || !*stage || !*token)
		return es_error(ES_EINTERNAL, "the plan of the input ranges came malformed from the preparing rank");
	return 0;
}

int es_prepare_plan_check(const void *plan, size_t len, size_t *n)
{
	struct rd r = { plan, (const unsigned char *)plan + len, 0 };
	const char *stage, *token;
	struct es_buf path = ES_BUF_INIT, got = ES_BUF_INIT;
	es_log_quiet_begin();
	int rc = plan_head(&r, n, &stage, &token);
	if (!rc)
		rc = es_path_join(&path, stage, PROBE_NAME);
	if (!rc)
		rc = es_fs_read_file(path.data, &got, 4096);
	if (!rc && (got.len != strlen(token) || memcmp(got.data, token, got.len)))
		rc = es_error(ES_EINVAL, "the stage folder's probe '%s' holds another token", path.data);
	es_log_quiet_end();
	es_buf_free(&path);
	es_buf_free(&got);
	return rc;
}

/* A plan as this rank reads it: the strings point into the plan's bytes. */
struct plan {
	struct es_scan scan;
	struct in_file *files;      /* their sizes, and their hashes when this rank makes them */
	const char **keys;          /* the media keys, then the index keys */
	atomic_int abandon;         /* never set: only the preparing rank loads the recipe */
};

static const char **get_strs(struct rd *r, const char **keys, size_t *at, size_t *n, size_t cap)
{
	*n = (size_t)get_u64(r);
	if (r->bad || *n > cap - *at) {
		r->bad = 1;
		return keys;
	}
	const char **v = keys + *at;
	for (size_t i = 0; i < *n; i++)
		v[i] = get_str(r);
	*at += *n;
	return v;
}

static int decode_ranges(struct rd *r, struct par *P, const char *stage)
{
	if (!(P->rs = calloc(P->n ? P->n : 1, sizeof(*P->rs))))
		return es_error(ES_ENOMEM, "out of memory for the input ranges");
	for (size_t i = 0; i < P->n && !r->bad; i++) {
		struct prange *g = &P->rs[i];
		g->r.file = (size_t)get_u64(r);
		g->r.start = get_u64(r);
		g->r.end = get_u64(r);
		g->row0 = get_u64(r);
		g->line0 = get_u64(r);
		g->base = get_u64(r);
		g->line0_known = get_u64(r) != 0;
		if (g->r.file >= P->n_files || g->r.end < g->r.start)
			r->bad = 1;
		struct es_buf name = ES_BUF_INIT;
		g->tmp = es_buf_printf(&name, "%s/.normalized.%zu.tmp", stage, i) ? NULL : es_buf_detach(&name, NULL);
		es_buf_free(&name);
		if (!g->tmp)
			return es_error(ES_ENOMEM, "out of memory for the input ranges");
	}
	return 0;
}

/* The plan into P (and pl, which holds what P points to). */
static int decode_plan(const void *plan, size_t len, struct plan *pl, struct par *P)
{
	struct rd r = { plan, (const unsigned char *)plan + len, 0 };
	const char *stage, *token;
	int rc = plan_head(&r, &P->n, &stage, &token);
	if (rc)
		return rc;
	P->max_line = (size_t)get_u64(&r);
	P->max_input = (int64_t)get_u64(&r);
	P->skip = (int)get_u64(&r);
	size_t cap = len / 8, at = 0; /* every string takes at least 8 bytes of the plan */
	if (!(pl->keys = calloc(cap ? cap : 1, sizeof(*pl->keys))))
		return es_error(ES_ENOMEM, "out of memory for the input ranges");
	P->jo.media_keys = get_strs(&r, pl->keys, &at, &P->jo.n_media, cap);
	P->jo.media_root = get_str(&r);
	P->jo.index_keys = get_strs(&r, pl->keys, &at, &P->jo.n_index, cap);
	P->n_files = (size_t)get_u64(&r);
	if (r.bad || P->n_files > cap)
		return es_error(ES_EINTERNAL, "the plan of the input ranges came malformed from the preparing rank");
	pl->scan.files = calloc(P->n_files ? P->n_files : 1, sizeof(*pl->scan.files));
	pl->files = calloc(P->n_files ? P->n_files : 1, sizeof(*pl->files));
	if (!pl->scan.files || !pl->files)
		return es_error(ES_ENOMEM, "out of memory for the input ranges");
	for (size_t f = 0; f < P->n_files; f++) {
		if (!(pl->scan.files[f].path = (char *)get_str(&r)))
			r.bad = 1;
		pl->files[f].size = get_u64(&r);
	}
	pl->scan.n_files = P->n_files;
	P->scan = &pl->scan;
	P->files = pl->files;
	if (!(rc = decode_ranges(&r, P, stage)) && r.bad)
		rc = es_error(ES_EINTERNAL, "the plan of the input ranges came malformed from the preparing rank");
	return rc;
}

/* The hashes of the input files, when this rank made them (hashed), or their absence. */
static void put_hashes(struct wr *w, const struct par *P, int hashed)
{
	put_u64(w, (uint64_t)hashed);
	if (!hashed)
		return;
	put_u64(w, (uint64_t)(int64_t)P->raw_rc);
	put_u64(w, P->raw_file);
	put_str(w, P->raw_msg);
	put_u64(w, P->n_files);
	for (size_t f = 0; f < P->n_files; f++)
		put_str(w, P->files[f].sha);
}

/* The counts of ranges [lo, hi) and the hashes of the input files when hashed; fail (with
 * msg): every range failed so, and there are no hashes. */
static int encode_counts(const struct par *P, size_t lo, size_t hi, int hashed, int fail, const char *msg,
			 struct es_buf *b)
{
	struct wr w = { b, 0 };
	put_u64(&w, COUNTS_MAGIC);
	put_u64(&w, lo);
	put_u64(&w, hi);
	for (size_t i = lo; i < hi; i++) {
		const struct prange *g = fail ? NULL : &P->rs[i];
		put_u64(&w, (uint64_t)(int64_t)(g ? g->rc : fail));
		put_u64(&w, g ? (uint64_t)g->skipped : 0);
		put_u64(&w, g ? g->lines : 0);
		put_u64(&w, g ? g->rows : 0);
		put_u64(&w, g ? g->out : 0);
		put_u64(&w, g ? g->f.bad : 0);
		put_u64(&w, g ? g->p1.bad : 0);
		put_u64(&w, g ? g->p1.n_first : 0);
		for (size_t k = 0; g && k < g->p1.n_first; k++) {
			put_u64(&w, g->p1.first[k].lineno);
			put_str(&w, g->p1.first[k].reason);
		}
		put_str(&w, g ? g->msg : msg);
	}
	put_hashes(&w, P, hashed && !fail);
	return w.rc ? es_error(ES_ENOMEM, "out of memory sending the counts of the input ranges") : 0;
}

/* Rank 1 hashes the input files, beside its slice: rank 0 hashes the normalized stream and
 * writes the shards, and the two sequential hashes then run on two ranks at once. */
#define HASH_RANK 1

/* Slice [lo, hi) of P's ranges on threads threads, and the input's hashes on one more (hash). */
static void read_slice(struct par *P, size_t lo, size_t hi, int64_t threads, int hash)
{
	P->lo = lo;
	P->hi = hi;
	atomic_store(&P->next, lo);
	atomic_store(&P->failed, P->n);
	pthread_t th;
	int have_raw = hash && pthread_create(&th, NULL, raw_hasher, P) == 0;
	int t = threads > 0 ? (threads > 1024 ? 1024 : (int)threads) : es_cpus_usable(1);
	on_threads(hi - lo < (size_t)t ? (int)(hi - lo) : t, par_worker, P);
	if (have_raw)
		pthread_join(th, NULL);
	else if (hash)
		raw_hasher(P);
}

int es_prepare_ranges_run(const void *plan, size_t len, int rank, int size, int64_t threads, struct es_buf *counts)
{
	struct plan pl;
	struct par P;
	memset(&pl, 0, sizeof(pl));
	memset(&P, 0, sizeof(P));
	pthread_mutex_init(&P.mu, NULL);
	pthread_cond_init(&P.cv, NULL);
	size_t lo = 0, hi = 0;
	int rc = decode_plan(plan, len, &pl, &P);
	if (!rc && (rank <= 0 || rank >= size))
		rc = es_error(ES_EINTERNAL, "rank %d of %d asked to read a slice of the input ranges", rank, size);
	if (!rc) {
		P.abandon = &pl.abandon;
		es_prepare_rank_slice(P.n, size, rank, &lo, &hi);
		read_slice(&P, lo, hi, threads, rank == HASH_RANK);
		es_crash_point("prepare-rank-ranges"); /* a rank other than the preparing one, its ranges read */
	}
	es_buf_reset(counts);
	char *msg = rc ? keep_msg() : NULL;
	int erc = encode_counts(&P, lo, hi, rank == HASH_RANK, rc, msg ? msg : "out of memory", counts);
	free(msg);
	free(pl.keys);
	free(pl.scan.files);
	free(pl.files);
	par_free(&P);
	return erc;
}

/* One range's counts from another rank into g. */
static int apply_range(struct rd *r, struct prange *g)
{
	g->rc = (int)(int64_t)get_u64(r);
	g->skipped = (int)get_u64(r);
	g->lines = get_u64(r);
	g->rows = get_u64(r);
	g->out = get_u64(r);
	g->f.bad = get_u64(r);
	g->p1.bad = get_u64(r);
	size_t n = (size_t)get_u64(r);
	if (r->bad || n > ES_BAD_LINES_KEPT) {
		r->bad = 1;
		return 0;
	}
	if (n && !(g->p1.first = calloc(n, sizeof(*g->p1.first))))
		return es_error(ES_ENOMEM, "out of memory for the counts of the input ranges");
	g->p1.n_first = g->p1.cap_first = n;
	for (size_t k = 0; k < n; k++) {
		g->p1.first[k].lineno = get_u64(r);
		const char *reason = get_str(r);
		snprintf(g->p1.first[k].reason, sizeof(g->p1.first[k].reason), "%s", reason ? reason : "");
	}
	const char *msg = get_str(r);
	if (msg && !(g->msg = strdup(msg)))
		return es_error(ES_ENOMEM, "out of memory for the counts of the input ranges");
	return 0;
}

/* The hashes of the input files from the rank that made them, if this one did (P->hashed). */
static void apply_hashes(struct rd *r, struct par *P)
{
	if (!get_u64(r))
		return;
	P->raw_rc = (int)(int64_t)get_u64(r);
	P->raw_file = (size_t)get_u64(r);
	const char *msg = get_str(r);
	free(P->raw_msg);
	P->raw_msg = msg ? strdup(msg) : NULL;
	if (get_u64(r) != P->n_files)
		r->bad = 1;
	for (size_t f = 0; f < P->n_files && !r->bad; f++) {
		const char *sha = get_str(r);
		snprintf(P->files[f].sha, sizeof(P->files[f].sha), "%s", sha ? sha : "");
	}
	P->hashed = !r->bad;
}

/* Every rank's counts (all) into the ranges this process did not read (each once), and the
 * input's hashes. */
static int apply_counts(struct par *P, const struct es_buf *all)
{
	struct rd r = { (const unsigned char *)all->data, (const unsigned char *)all->data + all->len, 0 };
	char *seen = calloc(P->n ? P->n : 1, 1);
	size_t got = 0, want = P->n - (P->hi - P->lo);
	int rc = seen ? 0 : es_error(ES_ENOMEM, "out of memory for the counts of the input ranges");
	while (!rc && !r.bad && r.p < r.end) {
		uint64_t magic = get_u64(&r), lo = get_u64(&r), hi = get_u64(&r);
		if (magic != COUNTS_MAGIC || lo > hi || hi > P->n)
			r.bad = 1;
		for (size_t i = (size_t)lo; !rc && !r.bad && i < hi; i++) {
			struct prange mine, *g = i >= P->lo && i < P->hi ? &mine : &P->rs[i];
			memset(&mine, 0, sizeof(mine));
			if (g != &mine && seen[i]++)
				r.bad = 1; /* two ranks sent it */
			rc = r.bad ? 0 : apply_range(&r, g);
			got += g != &mine && !r.bad;
			free(mine.p1.first);
			free(mine.msg);
		}
		apply_hashes(&r, P);
	}
	free(seen);
	/* Without them (their rank failed before it could send them) the first file is said to
	 * be unhashed, after any error of its ranges. */
	if (!rc && !r.bad && !P->hashed && !P->raw_rc) {
		P->raw_rc = ES_EINTERNAL;
		P->raw_file = 0;
		P->raw_msg = strdup("the input files were not hashed: rank 1 sent no hashes");
	}
	if (!rc && (r.bad || got != want))
		rc = es_error(ES_EINTERNAL, "the counts of the input ranges came malformed or incomplete from the other ranks "
			      "(%zu of %zu)", got, want);
	return rc;
}

/* The ranks' counts gathered: the ranges of the other ranks are done (on an error, as skipped,
 * which stops the hashing). */
static int gather_counts(struct par *P, const struct es_prepare_ranks *rk)
{
	struct es_buf mine = ES_BUF_INIT, all = ES_BUF_INIT;
	int rc = encode_counts(P, P->lo, P->hi, 0, 0, NULL, &mine);
	/* The other ranks wait in the gather: it runs even when this rank has nothing to send. */
	int grc = rk->gather(rk->arg, mine.data, rc ? 0 : mine.len, &all);
	if (!rc)
		rc = grc;
	if (!rc)
		rc = apply_counts(P, &all);
	es_buf_free(&mine);
	es_buf_free(&all);
	pthread_mutex_lock(&P->mu);
	for (size_t i = 0; i < P->n; i++) {
		if (i >= P->lo && i < P->hi)
			continue;
		P->rs[i].skipped |= rc != 0;
		P->rs[i].done = 1;
	}
	pthread_cond_broadcast(&P->cv);
	pthread_mutex_unlock(&P->mu);
	if (rc)
		atomic_store(&P->failed, 0);
	return rc;
}

/* The plan to the other ranks through rk, with a probe file in the stage that each must read:
 * *shared 1 with this rank's slice in P->lo, P->hi; 0 when this rank reads every range. */
static int share_plan(struct par *P, const struct es_prepare_ranks *rk, const char *stage, int *shared)
{
	struct es_buf plan = ES_BUF_INIT, probe = ES_BUF_INIT;
	char tok[33];
	size_t lo = 0, hi = P->n;
	int rc = es_fs_temp_token(tok);
	if (!rc)
		rc = es_path_join(&probe, stage, PROBE_NAME);
	if (!rc && !(rc = es_fs_write_atomic(probe.data, tok, strlen(tok))))
		P->probe = es_buf_detach(&probe, NULL);
	if (!rc)
		rc = encode_plan(P, stage, tok, &plan);
	if (!rc)
		rc = rk->share(rk->arg, plan.data, plan.len, P->n, &lo, &hi);
	es_buf_free(&plan);
	es_buf_free(&probe);
	if (rc < 0)
		return rc;
	*shared = rc == 0;
	P->lo = lo;
	P->hi = hi;
	return 0;
}

/* The size of each range: about eight per thread (threads: of every rank), so that threads
 * that finish early find more, within [1 MiB, 256 MiB] (a test build may ask for another with
 * ESHARD_TEST_RANGE_BYTES, to cut small inputs into many ranges). */
static uint64_t range_target(const struct es_scan *scan, int64_t threads)
{
	uint64_t total = 0;
	for (size_t f = 0; f < scan->n_files; f++) {
		struct stat st;
		if (stat(scan->files[f].path, &st) == 0)
			total += (uint64_t)st.st_size;
	}
	uint64_t t = total / ((uint64_t)threads * 8);
	t = t < ((uint64_t)1 << 20) ? (uint64_t)1 << 20 : t > ((uint64_t)256 << 20) ? (uint64_t)256 << 20 : t;
#ifdef ESHARD_TEST_HOOKS
	int64_t v;
	const char *env = getenv("ESHARD_TEST_RANGE_BYTES");
	if (env && !es_parse_i64(env, &v) && v > 0)
		t = (uint64_t)v;
#endif
	return t;
}

/* The workers and both hashing threads, until every range is done and hashed. With ranks (rk),
 * the other ranks read their slices meanwhile, and their counts come in before the hashing of
 * the normalized stream reaches their ranges. */
static int par_run(struct par *P, const struct es_prepare_ranks *rk, const char *stage, int threads,
		   double progress_secs, uint64_t total)
{
	int shared = 0, rc = 0;
	P->lo = 0;
	P->hi = P->n;
	if (rk && (rc = share_plan(P, rk, stage, &shared)) != 0)
		return rc;
	atomic_store(&P->next, P->lo);
	size_t mine = P->hi - P->lo;
	int k = mine < (size_t)threads ? (int)mine : threads;
	pthread_t *th = calloc((size_t)k + 2, sizeof(*th));
	if (!th) {
		rc = es_error(ES_ENOMEM, "out of memory starting threads");
		if (shared) {
			/* The other ranks wait in the gather: join it, reading nothing here. */
			P->hi = P->lo;
			es_log_quiet_begin();
			gather_counts(P, rk);
			es_log_quiet_end();
		}
		return rc;
	}
	/* With ranks, rank 1 hashes the input files (HASH_RANK). */
	int have_raw = !shared && pthread_create(&th[0], NULL, raw_hasher, P) == 0;
	int have_norm = pthread_create(&th[1], NULL, norm_hasher, P) == 0;
	int started = 0;
	while (started < k && pthread_create(&th[2 + started], NULL, par_worker, P) == 0)
		started++;
	/* Without a thread of their own, they run here, one after the other. */
	if (!started)
		par_worker(P);
	/* With ranks, the progress line counts this rank's slice: the others' bytes are not seen. */
	for (size_t i = 0; shared && i < P->n; i++)
		if (i < P->lo || i >= P->hi)
			total -= P->rs[i].r.end - P->rs[i].r.start;
	wait_ranges(P, progress_secs, total);
	for (int i = 0; i < started; i++)
		pthread_join(th[2 + i], NULL);
	if (shared)
		rc = gather_counts(P, rk);
	if (have_raw)
		pthread_join(th[0], NULL);
	else if (!shared)
		raw_hasher(P);
	if (have_norm)
		pthread_join(th[1], NULL);
	else
		norm_hasher(P);
	free(th);
	return rc;
}

/* Pass 1 over ranges on in->threads threads: files' facts into files, the input's into res,
 * the normalized stream's pieces into *pieces (*n_pieces of them, the caller frees). */
int es_prepare_par_pass1(const struct par_in *in, struct in_file *files, struct pass1 *res, struct piece **pieces,
			 size_t *n_pieces)
{
	struct par P;
	memset(&P, 0, sizeof(P));
	P.scan = in->scan;
	P.jo = *in->jo;
	P.max_line = in->max_line;
	P.max_input = in->o->max_input_bytes;
	P.skip = in->o->skip_bad_lines;
	P.abandon = in->abandon;
	P.files = files;
	pthread_mutex_init(&P.mu, NULL);
	pthread_cond_init(&P.cv, NULL);
	free(res->first);
	memset(res, 0, sizeof(*res));
	struct es_ranges rs = ES_RANGES_INIT;
	int plan_rc = 0;
	char *plan_msg = NULL;
	int64_t ways = (int64_t)in->threads * (in->o->ranks ? in->o->ranks->size : 1);
	int rc = plan_ranges(&P, in->stage, range_target(in->scan, ways), &rs, &plan_rc, &plan_msg);
	es_ranges_free(&rs);
	atomic_store(&P.failed, P.n);
	uint64_t total = P.n ? P.rs[P.n - 1].base + (P.rs[P.n - 1].r.end - P.rs[P.n - 1].r.start) : 0;
	if (!rc && in->jo->n_index)
		rc = count_rows(&P, in->threads);
	struct es_jsonl *jl = rc ? NULL : es_jsonl_new(in->jo);
	if (!rc && !jl)
		rc = es_error(ES_ENOMEM, "out of memory");
	if (!rc)
		rc = par_run(&P, in->o->ranks, in->stage, in->threads, in->o->progress_secs, total);
	/* The probe served the share: it must not be published with the job. */
	if (P.probe && unlink(P.probe) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot remove '%s'", P.probe);
	if (!rc)
		rc = par_first_error(&P, jl, plan_rc, plan_msg);
	if (!rc && !(*pieces = calloc(P.n ? P.n : 1, sizeof(**pieces))))
		rc = es_error(ES_ENOMEM, "out of memory");
	if (!rc) {
		*n_pieces = P.n;
		rc = par_merge(&P, res, *pieces);
	}
	if (!rc)
		es_crash_point("prepare-after-ranges");
	es_jsonl_free(jl);
	free(plan_msg);
	par_free(&P);
	return rc;
}
