/*
 * jobfix: hand-made job folders for the status, retry, merge and verify unit tests.
 *
 * A job is laid out as prepare lays it out (docs/job-folder.md#layout) with a small manifest
 * holding what the readers need; shard files hold rows {"id": k, "text": "..."}. Done records point
 * at byte copies of the shards in an attempt folder, as if each shard had been processed by `cp`.
 * Header-only (static inline functions), so every test executable gets its own copy.
 */
#ifndef ESHARD_TEST_JOBFIX_H
#define ESHARD_TEST_JOBFIX_H

#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/sha.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define JF_MAX 16

struct jf {
	char dir[1024];
	int n;
	char id[JF_MAX][64];
	int rows[JF_MAX];
	char attempt[JF_MAX][256]; /* attempts/<id>/<NNNN>-<token> of the last jf_done/jf_failed */
};

/* Written to a temporary and renamed, so that a reader running meanwhile (the merge follower)
 * sees the old file or the whole new one, as with the workers' own writes. */
static inline void jf_write(const char *path, const char *data, size_t len)
{
	char tmp[4200];
	if (snprintf(tmp, sizeof(tmp), "%s.jf-tmp", path) >= (int)sizeof(tmp)) {
		fprintf(stderr, "path too long: %s\n", path);
		exit(3);
	}
	FILE *f = fopen(tmp, "wb");
	if (!f) {
		perror(tmp);
		exit(3);
	}
	fwrite(data, 1, len, f);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		perror(path);
		exit(3);
	}
}

static inline void jf_writes(const char *path, const char *text)
{
	jf_write(path, text, strlen(text));
}

/* The whole file, NUL-terminated (malloc'd), or NULL. */
static inline char *jf_read(const char *path, size_t *len)
{
	struct es_buf b = ES_BUF_INIT;
	if (es_fs_read_file(path, &b, (size_t)1 << 30)) {
		es_buf_free(&b);
		return NULL;
	}
	return es_buf_detach(&b, len);
}

static inline void jf_path(const struct jf *j, char *out, size_t n, const char *fmt, const char *id)
{
	int k = snprintf(out, n, "%s/", j->dir);
	snprintf(out + k, n - (size_t)k, fmt, id);
}

static inline void jf_mkdirs(const char *p)
{
	if (es_fs_mkdirs(p, 0755))
		exit(3);
}

/* A job folder root/name with n shards of rows[i] rows each; policy_extra is inserted in the
 * policy object (e.g. "\"lease_secs\": 120, "). */
static inline void jf_make(struct jf *j, const char *root, const char *name, int n, const int *rows,
		    const char *policy_extra)
{
	memset(j, 0, sizeof(*j));
	snprintf(j->dir, sizeof(j->dir), "%s/%s", root, name);
	j->n = n;
	char p[2048];
	const char *sub[] = { "shards", "attempts", "state/locks", "state/done", "state/failed",
			      "state/stale_locks", "state/history/failed", "state/history/attempts" };
	for (size_t i = 0; i < sizeof(sub) / sizeof(sub[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", j->dir, sub[i]);
		jf_mkdirs(p);
	}
	struct es_buf man = ES_BUF_INIT, all = ES_BUF_INIT;
	long long total_rows = 0, total_bytes = 0, id = 0;
	es_buf_printf(&man, "{\n  \"execution\": {\"executor_type\": \"ray\", \"ray_address\": \"local\", "
		      "\"recipe_executor_type\": \"ray\"},\n  \"job_id\": \"%s\",\n  \"num_shards\": %d,\n"
		      "  \"policy\": {%s\"lock_timeout_secs\": 126000, \"max_retries\": 3, "
		      "\"poll_interval_secs\": 20},\n  \"schema_version\": 2,\n  \"shards\": [\n",
		      name, n, policy_extra ? policy_extra : "");
	for (int i = 0; i < n; i++) {
		struct es_buf data = ES_BUF_INIT;
		snprintf(j->id[i], sizeof(j->id[i]), "part-%05d-of-%05d", i, n);
		j->rows[i] = rows[i];
		for (int r = 0; r < rows[i]; r++, id++)
			es_buf_printf(&data, "{\"id\":%lld,\"text\":\"row %lld of shard %d\"}\n", id, id, i);
		snprintf(p, sizeof(p), "%s/shards/%s.jsonl", j->dir, j->id[i]);
		jf_write(p, data.data, data.len);
		char hex[65];
		es_sha_file(p, hex, NULL);
		es_buf_printf(&man, "    {\"id\": \"%s\", \"index\": %d, \"path\": \"shards/%s.jsonl\", \"rows\": %d, "
			      "\"sha256\": \"%s\", \"size_bytes\": %zu}%s\n", j->id[i], i, j->id[i], rows[i], hex,
			      data.len, i + 1 < n ? "," : "");
		total_rows += rows[i];
		total_bytes += (long long)data.len;
		es_buf_add(&all, data.data, data.len);
		es_buf_free(&data);
	}
	struct es_sha s;
	char hex[65];
	es_sha_init(&s);
	es_sha_update(&s, all.data, all.len);
	es_sha_final(&s, hex);
	es_buf_printf(&man, "  ],\n  \"normalized_sha256\": \"%s\",\n  \"total_rows\": %lld,\n"
		      "  \"total_size_bytes\": %lld\n}\n", hex, total_rows, total_bytes);
	snprintf(p, sizeof(p), "%s/manifest.json", j->dir);
	jf_write(p, man.data, man.len);
	es_buf_free(&man);
	es_buf_free(&all);
}

/* The concatenated shard bytes. */
static inline char *jf_concat(const struct jf *j, size_t *len)
{
	struct es_buf all = ES_BUF_INIT;
	for (int i = 0; i < j->n; i++) {
		char p[2048];
		size_t n;
		jf_path(j, p, sizeof(p), "shards/%s.jsonl", j->id[i]);
		char *d = jf_read(p, &n);
		es_buf_add(&all, d, n);
		free(d);
	}
	return es_buf_detach(&all, len);
}

/* Append to out the lines of text (each with its newline) that do not contain needle: a status
 * without the ages of its locks, which come from the clock as each lock is read. */
static inline void jf_lines_without(struct es_buf *out, const char *text, const char *needle)
{
	for (const char *l = text; l && *l;) {
		const char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) + 1 : strlen(l);
		if (!memmem(l, n, needle, strlen(needle)))
			es_buf_add(out, l, n);
		l += n;
	}
}

/* An attempt folder attempts/<id>/<NNNN>-<token> with an attempt.json of this host/status. */
static inline void jf_attempt(struct jf *j, int i, int number, const char *host, const char *status, double claimed)
{
	char tok[33], p[2048], text[2048];
	es_fs_token(tok);
	char id[64];
	memcpy(id, j->id[i], sizeof(id));
	snprintf(j->attempt[i], sizeof(j->attempt[i]), "attempts/%s/%04d-%s", id, number, tok);
	snprintf(p, sizeof(p), "%s/%s", j->dir, j->attempt[i]);
	jf_mkdirs(p);
	snprintf(text, sizeof(text), "{\n  \"attempt_dir\": \"%s\",\n  \"attempt_number\": %d,\n"
		 "  \"claimed_at_epoch\": %.6f,\n  \"hostname\": \"%s\",\n  \"shard_id\": \"%s\",\n"
		 "  \"status\": \"%s\",\n  \"token\": \"%s\"\n}\n", j->attempt[i], number, claimed, host,
		 j->id[i], status, tok);
	snprintf(p, sizeof(p), "%s/%s/attempt.json", j->dir, j->attempt[i]);
	jf_writes(p, text);
}

/* Done record for shard i by host, its result a copy of the shard (its last '\n' dropped when
 * chop_nl); rows/sha in the record are of the copy, then adjusted by drows and bad_sha. */
static inline void jf_done_ex(struct jf *j, int i, const char *host, int chop_nl, int drows, int bad_sha,
		       double claimed, double completed)
{
	char p[2048], q[2048], hex[65], when[40], text[4096];
	size_t n;
	jf_attempt(j, i, 1, host, "done", claimed);
	jf_path(j, p, sizeof(p), "shards/%s.jsonl", j->id[i]);
	char *d = jf_read(p, &n);
	if (chop_nl && n && d[n - 1] == '\n')
		n--;
	snprintf(q, sizeof(q), "%s/%s/processed.jsonl", j->dir, j->attempt[i]);
	jf_write(q, d, n);
	free(d);
	es_sha_file(q, hex, NULL);
	if (bad_sha)
		hex[0] = hex[0] == '0' ? '1' : '0';
	struct timespec ts = { (time_t)completed, (long)((completed - (double)(time_t)completed) * 1e9) };
	es_time_iso(&ts, when);
	snprintf(text, sizeof(text), "{\n  \"attempt_number\": 1,\n  \"completed_at\": \"%s\",\n"
		 "  \"executor_type\": \"ray\",\n  \"hostname\": \"%s\",\n  \"output_path\": \"%s/processed.jsonl\",\n"
		 "  \"pid\": 42,\n  \"ray_address\": \"local\",\n  \"ray_output_files\": [],\n  \"rows\": %d,\n"
		 "  \"sha256\": \"%s\",\n  \"shard_id\": \"%s\",\n  \"size_bytes\": %zu,\n  \"status\": \"done\",\n"
		 "  \"token\": \"x\"\n}\n", when, host, j->attempt[i], j->rows[i] + drows, hex, j->id[i], n);
	jf_path(j, p, sizeof(p), "state/done/%s.json", j->id[i]);
	jf_writes(p, text);
}

static inline void jf_done(struct jf *j, int i, const char *host)
{
	double now = es_time_epoch();
	jf_done_ex(j, i, host, 0, 0, 0, now - 10, now);
}

/* Failed record for shard i whose last attempt ran on host. */
static inline void jf_failed(struct jf *j, int i, const char *host, const char *error)
{
	char p[2048], text[2048];
	jf_attempt(j, i, 4, host, "failed", es_time_epoch() - 5);
	snprintf(text, sizeof(text), "{\n  \"failed_at\": \"2026-12-02T08:00:00+00:00\",\n  \"failures\": 4,\n"
		 "  \"last_attempt\": 4,\n  \"last_error\": \"%s\",\n  \"last_log\": \"%s/process.log\",\n"
		 "  \"shard_id\": \"%s\",\n  \"status\": \"failed\"\n}\n", error, j->attempt[i], j->id[i]);
	jf_path(j, p, sizeof(p), "state/failed/%s.json", j->id[i]);
	jf_writes(p, text);
}

/* A lock for shard i held by host, last changed age seconds ago; heartbeat < 0: none (a
 * reference worker's lock). */
static inline void jf_lock(struct jf *j, int i, const char *host, double age, long heartbeat)
{
	char p[2048], text[1024], hb[64] = "";
	if (heartbeat >= 0)
		snprintf(hb, sizeof(hb), ", \"heartbeat\": %ld, \"lease_secs\": 120.0", heartbeat);
	double claimed = es_time_epoch() - age;
	snprintf(text, sizeof(text), "{\"attempt_dir\": \"attempts/%s/0001-x\", \"attempt_number\": 1, "
		 "\"claimed_at\": \"2026-12-02T08:00:00+00:00\", \"claimed_at_epoch\": %.6f%s, \"hostname\": \"%s\", "
		 "\"pid\": 4242, \"shard_id\": \"%s\", \"token\": \"%032d\"}\n", j->id[i], claimed, hb, host, j->id[i], i);
	jf_path(j, p, sizeof(p), "state/locks/%s.lock", j->id[i]);
	jf_writes(p, text);
	struct timespec t[2];
	t[0].tv_sec = t[1].tv_sec = (time_t)claimed;
	t[0].tv_nsec = t[1].tv_nsec = 0;
	utimensat(AT_FDCWD, p, t, 0);
}

/* Turn shard i's lock into a terminal fence (state "done" or "failed"), as a worker leaves it. */
static inline void jf_fence(struct jf *j, int i, const char *state)
{
	char p[2048], text[1024];
	snprintf(text, sizeof(text), "{\"attempt_dir\": \"attempts/%s/0001-x\", \"attempt_number\": 1, "
		 "\"claimed_at\": \"2026-12-02T08:00:00+00:00\", \"heartbeat\": 3, \"hostname\": \"h\", "
		 "\"lease_secs\": 120.0, \"pid\": 4242, \"shard_id\": \"%s\", \"status\": \"%s\", "
		 "\"terminal_at\": \"2026-12-02T08:01:00+00:00\", \"terminal_path\": \"state/%s/%s.json\", "
		 "\"token\": \"%032d\"}\n", j->id[i], j->id[i], state, state, j->id[i], i);
	jf_path(j, p, sizeof(p), "state/locks/%s.lock", j->id[i]);
	jf_writes(p, text);
}

/* Give the manifest a created_at of time t, as prepare writes it. */
static inline void jf_created_at(struct jf *j, double t)
{
	char p[2048], when[40];
	size_t n;
	struct timespec ts = { (time_t)t, 0 };
	snprintf(p, sizeof(p), "%s/manifest.json", j->dir);
	char *man = jf_read(p, &n);
	if (!man || man[0] != '{') {
		fprintf(stderr, "cannot read %s\n", p);
		exit(3);
	}
	es_time_iso(&ts, when);
	struct es_buf b = ES_BUF_INIT;
	es_buf_printf(&b, "{\n  \"created_at\": \"%s\",%s", when, man + 1);
	jf_write(p, b.data, b.len);
	es_buf_free(&b);
	free(man);
}

/* The token of the attempt folder of the last jf_attempt of shard i. */
static inline const char *jf_token(const struct jf *j, int i)
{
	const char *dash = strrchr(j->attempt[i], '-');
	return dash ? dash + 1 : "";
}

/* state/events/<name>.jsonl with this text (one event a line). */
static inline void jf_events(struct jf *j, const char *name, const char *text)
{
	char p[2048];
	snprintf(p, sizeof(p), "%s/state/events", j->dir);
	jf_mkdirs(p);
	snprintf(p, sizeof(p), "%s/state/events/%s.jsonl", j->dir, name);
	jf_writes(p, text);
}

/* One event line of shard i's last attempt (jf_token) at time (a JSON number as text: the
 * reader takes NaN, Infinity and -Infinity too), with extra members (", \"rows\": 3") or "". */
static inline void jf_event(struct es_buf *b, const struct jf *j, int i, const char *name, const char *time,
			    const char *extra)
{
	es_buf_printf(b, "{\"event\": \"%s\", \"host\": \"node-a\", \"pid\": 7, \"shard\": \"%s\", \"attempt\": 1, "
		      "\"time\": %s, \"token\": \"%s\"%s}\n", name, j->id[i], time, jf_token(j, i), extra);
}

/* A job of two shards (60 and 40 rows) made 600 s before now, whose logs hold what bad clocks
 * write; the value is the number of times a reader must ignore (10):
 *   shard 0 done by node-a: attempt.json claimed at now - 100; events: six claims at 0, 1e300,
 *     -1e300, NaN, Infinity and -Infinity (ignored), start at now - 90, done at now - 40 with a
 *     duration of 1e300 (ignored); the done record completed at now - 40;
 *   shard 1 failed on node-b: attempt.json claimed at 0 (ignored); events: a claim an hour
 *     before the job was made (clock skew, kept), a start two days before (ignored), a failed
 *     event two hours after now (ignored).
 * So shard 0 ran from now - 100 to now - 40 and the job's times span made - 3600 to now - 40. */
static inline int jf_bad_clock(struct jf *j, const char *root, const char *name, double now)
{
	int rows[] = { 60, 40 };
	double made = now - 600;
	char t[64];
	jf_make(j, root, name, 2, rows, NULL);
	jf_created_at(j, made);
	jf_done_ex(j, 0, "node-a", 0, 0, 0, now - 100, now - 40);
	jf_attempt(j, 1, 1, "node-b", "failed", 0);
	struct es_buf ev = ES_BUF_INIT;
	const char *bad[] = { "0", "1e300", "-1e300", "NaN", "Infinity", "-Infinity" };
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
		jf_event(&ev, j, 0, "claim", bad[k], "");
	snprintf(t, sizeof(t), "%.6f", now - 90);
	jf_event(&ev, j, 0, "start", t, "");
	snprintf(t, sizeof(t), "%.6f", now - 40);
	jf_event(&ev, j, 0, "done", t, ", \"rows\": 60, \"duration\": 1e300");
	snprintf(t, sizeof(t), "%.6f", made - 3600);
	jf_event(&ev, j, 1, "claim", t, "");
	snprintf(t, sizeof(t), "%.6f", made - 2 * 86400);
	jf_event(&ev, j, 1, "start", t, "");
	snprintf(t, sizeof(t), "%.6f", now + 7200);
	jf_event(&ev, j, 1, "failed", t, ", \"detail\": \"exit code 3\"");
	jf_events(j, "node-a.7.abcdef01", ev.data);
	es_buf_free(&ev);
	char p[2048], text[1024];
	snprintf(text, sizeof(text), "{\"failed_at\": \"2026-12-02T08:00:00+00:00\", \"failures\": 1, \"last_attempt\": 1, "
		 "\"last_error\": \"exit code 3\", \"last_log\": \"%s/process.log\", \"shard_id\": \"%s\", "
		 "\"status\": \"failed\"}\n", j->attempt[1], j->id[1]);
	jf_path(j, p, sizeof(p), "state/failed/%s.json", j->id[1]);
	jf_writes(p, text);
	return 10;
}

static inline int jf_exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

#endif
