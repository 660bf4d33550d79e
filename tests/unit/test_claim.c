/*
 * Unit tests of claim with real processes and real files (docs/design.md#reference-tests 6, 8
 * and 9, and the leases of docs/job-folder.md#locks-and-fences): 16 processes racing for one shard,
 * the reference's stale takeover rule (lock mtime older than lock_timeout_secs), the token checks
 * that keep a taken-over worker from releasing or publishing, the lease rule judged on the
 * observer's monotonic clock against a live heartbeating owner and a silent one, and the retry
 * limit.
 *
 * Every job is made by es_prepare_run() with a command processor, exactly as `eshard-mpi
 * prepare --process-cmd` makes it.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/prepare.h"
#include "json.h"
#include "record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static char ROOT[PATH_MAX];

static void sfmt(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sfmt(char *out, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, n, fmt, ap);
	va_end(ap);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		perror(path);
		exit(3);
	}
}

/* A prepared job ROOT/<name> with n shards of 2 rows each, processed by `cp`. */
static void make_job(const char *name, int n, struct es_manifest *m)
{
	char data[PATH_MAX], recipe[PATH_MAX], job[PATH_MAX];
	sfmt(recipe, sizeof(recipe), "%s/recipe-%s.yaml", ROOT, name);
	sfmt(data, sizeof(data), "%s/data-%s.jsonl", ROOT, name);
	sfmt(job, sizeof(job), "%s/%s", ROOT, name);
	write_file(recipe, "executor_type: ray\nprocess:\n  - whitespace_normalization_mapper: {}\n");
	FILE *f = fopen(data, "w");
	if (!f)
		exit(3);
	for (int i = 0; i < 2 * n; i++)
		fprintf(f, "{\"id\": %d, \"text\": \"row %d\"}\n", i, i);
	fclose(f);
	struct es_prepare_opts o;
	es_prepare_opts_init(&o);
	o.config = recipe;
	o.dataset_path = data;
	o.job_dir = job;
	o.num_shards = n;
	o.quiet = 1;
	o.helper = ""; /* the naming convention: no Python started */
	o.processor.kind = ES_PROC_COMMAND;
	o.processor.command = "cp {input} {output}";
	struct es_prepare_result res;
	memset(&res, 0, sizeof(res));
	int rc = es_prepare_run(&o, &res);
	free(res.job_dir);
	if (!CHECK_INT_EQ(rc, 0))
		exit(1);
	if (!CHECK_INT_EQ(es_manifest_load(job, m), 0) || !CHECK_INT_EQ(m->n_shards, (size_t)n))
		exit(1);
}

static struct es_policy policy(const struct es_manifest *m, int64_t lock_timeout, double lease, int64_t max_retries)
{
	struct es_policy p = m->policy;
	p.lock_timeout_secs = lock_timeout;
	p.lease_secs = lease;
	p.max_retries = max_retries;
	return p;
}

static void jpath(char *out, const struct es_manifest *m, const char *fmt, const char *id)
{
	int k = snprintf(out, PATH_MAX, "%s/", m->job_dir);
	snprintf(out + k, PATH_MAX - (size_t)k, fmt, id);
}

/* The lock's token ("" when there is no lock or no token). */
static void lock_token(const struct es_manifest *m, size_t i, char out[33])
{
	char p[PATH_MAX];
	cJSON *l = NULL;
	out[0] = '\0';
	jpath(p, m, "state/locks/%s.lock", m->shards[i].id);
	es_log_quiet_begin();
	if (es_json_load(p, &l) == 0) {
		const char *t = es_json_get_str(l, "token");
		if (t)
			snprintf(out, 33, "%s", t);
	}
	es_log_quiet_end();
	cJSON_Delete(l);
}

/* The lock's state: "none" without a lock, its "status" ("running" when it has none), or
 * "unreadable". The record a terminal fence points at goes to rec when given. */
static const char *lock_state(const struct es_manifest *m, size_t i, char *rec, size_t n)
{
	static char st[32];
	char p[PATH_MAX];
	cJSON *l = NULL;
	jpath(p, m, "state/locks/%s.lock", m->shards[i].id);
	snprintf(st, sizeof(st), "none");
	if (rec)
		rec[0] = '\0';
	es_log_quiet_begin();
	int rc = es_json_load(p, &l);
	es_log_quiet_end();
	if (rc == 0) {
		const char *s = es_json_get_str(l, "status"), *t = es_json_get_str(l, "terminal_path");
		snprintf(st, sizeof(st), "%s", !cJSON_IsObject(l) ? "unreadable" : s ? s : "running");
		if (rec && t)
			snprintf(rec, n, "%s", t);
	} else if (rc != ES_ENOENT) {
		snprintf(st, sizeof(st), "unreadable");
	}
	cJSON_Delete(l);
	return st;
}

static int exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

/* Entries of a folder (not . and ..), optionally only those ending in suffix; the last
 * matching name goes to last when given. */
static int count_entries(const char *dir, const char *suffix, char *last, size_t n)
{
	DIR *d = opendir(dir);
	int k = 0;
	if (!d)
		return -1;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		size_t l = strlen(e->d_name), s = suffix ? strlen(suffix) : 0;
		if (suffix && (l < s || strcmp(e->d_name + l - s, suffix)))
			continue;
		k++;
		if (last)
			snprintf(last, n, "%s", e->d_name);
	}
	closedir(d);
	return k;
}

/* attempt.json of an attempt (relative folder) as a cJSON object, or NULL. */
static cJSON *load_attempt(const struct es_manifest *m, const char *rel)
{
	char p[PATH_MAX];
	cJSON *a = NULL;
	sfmt(p, sizeof(p), "%s/%s/attempt.json", m->job_dir, rel);
	es_log_quiet_begin();
	es_json_load(p, &a);
	es_log_quiet_end();
	return a;
}

static void set_attempt_status(const struct es_manifest *m, const char *rel, const char *status)
{
	char p[PATH_MAX];
	cJSON *a = load_attempt(m, rel);
	if (!CHECK(a != NULL))
		return;
	es_json_set_str(a, "status", status);
	sfmt(p, sizeof(p), "%s/%s/attempt.json", m->job_dir, rel);
	CHECK_INT_EQ(es_json_write_atomic(p, a), 0);
	cJSON_Delete(a);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference test 6: 16 processes race for one shard; then the reference's stale takeover.    */
/* Reference test 8: the taken-over token can neither release nor publish.                    */
/* ------------------------------------------------------------------------------------------ */

#define RACERS 16

static void test_race_and_stale_takeover(void)
{
	struct es_manifest m;
	make_job("race", 3, &m);
	const char *id = m.shards[0].id;
	char p[PATH_MAX], q[PATH_MAX];

	/* Every racer says it is ready on one pipe, then waits on another; closing the second
	 * one's write end, once all are ready, starts all of them at once. */
	int go[2], ready[2];
	if (!CHECK(pipe(go) == 0) || !CHECK(pipe(ready) == 0))
		return;
	pid_t pids[RACERS];
	for (int k = 0; k < RACERS; k++) {
		pids[k] = fork();
		if (pids[k] == 0) {
			close(go[1]);
			close(ready[0]);
			char c = 'r';
			if (write(ready[1], &c, 1) != 1)
				_exit(12);
			while (read(go[0], &c, 1) < 0 && errno == EINTR)
				;
			struct es_claimer c1;
			if (es_claimer_init(&c1, &m, &m.policy))
				_exit(10);
			int rc = es_claim_try(&c1, 0);
			_exit(rc >= 0 && rc <= 2 ? rc : 11);
		}
		CHECK(pids[k] > 0);
	}
	close(go[0]);
	close(ready[1]);
	/* Wait until every racer is ready (a racer that died early closes its end too, so the
	 * read ends; its exit code then fails the count below). */
	int n_ready = 0;
	char r;
	ssize_t got;
	while (n_ready < RACERS && ((got = read(ready[0], &r, 1)) == 1 || (got < 0 && errno == EINTR)))
		n_ready += got == 1;
	close(ready[0]);
	CHECK_INT_EQ(n_ready, RACERS);
	close(go[1]);
	int ok = 0, none = 0, other = 0;
	for (int k = 0; k < RACERS; k++) {
		int st = 0;
		if (pids[k] <= 0 || waitpid(pids[k], &st, 0) != pids[k] || !WIFEXITED(st)) {
			other++;
			continue;
		}
		int code = WEXITSTATUS(st);
		ok += code == ES_CLAIM_OK;
		none += code == ES_CLAIM_NONE;
		other += code != ES_CLAIM_OK && code != ES_CLAIM_NONE;
	}
	CHECK_INT_EQ(ok, 1);
	CHECK_INT_EQ(none, RACERS - 1);
	CHECK_INT_EQ(other, 0);
	jpath(p, &m, "state/locks/%s.lock", id);
	CHECK(exists(p));
	jpath(q, &m, "attempts/%s", id);
	char adir[256] = "";
	CHECK_INT_EQ(count_entries(q, NULL, adir, sizeof(adir)), 1);
	char t1[33];
	lock_token(&m, 0, t1);
	CHECK_INT_EQ(strlen(t1), 32);
	/* The only attempt folder is the winner's: 0001-<its token>. */
	char want[64];
	sfmt(want, sizeof(want), "0001-%s", t1);
	CHECK_STR_EQ(adir, want);
	char rel1[PATH_MAX];
	sfmt(rel1, sizeof(rel1), "attempts/%s/%s", id, adir);
	cJSON *a = load_attempt(&m, rel1);
	CHECK_STR_EQ(es_json_get_str(a, "status"), "running");
	CHECK_STR_EQ(es_json_get_str(a, "token"), t1);
	cJSON_Delete(a);

	/* A claimer with a live lock and the default policy does not take it over. */
	struct es_claimer c;
	CHECK_INT_EQ(es_claimer_init(&c, &m, &m.policy), 0);
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_NONE);
	es_claimer_free(&c);

	/* The reference's rule: the lock's mtime (epoch 1) is older than lock_timeout_secs (1).
	 * The lease is huge, so only the mtime rule can fire. */
	struct timeval tv[2] = { { 1, 0 }, { 1, 0 } };
	CHECK(utimes(p, tv) == 0);
	struct es_policy pol = policy(&m, 1, 1e9, 3);
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_OK);
	CHECK(c.took_over);
	CHECK_STR_EQ(c.took_over_token, t1);
	CHECK_INT_EQ(c.took_over_attempt, 1);
	char t2[33];
	snprintf(t2, sizeof(t2), "%s", c.token);
	CHECK(strcmp(t1, t2) != 0);
	CHECK_INT_EQ(c.attempt_number, 2);
	/* Releasing with the old token fails; the lock keeps the new token. */
	CHECK_INT_EQ(es_claim_release(&c, 0, t1), 1);
	char now_tok[33];
	lock_token(&m, 0, now_tok);
	CHECK_STR_EQ(now_tok, t2);
	/* The old attempt is stale, with the time of the takeover. */
	a = load_attempt(&m, rel1);
	CHECK_STR_EQ(es_json_get_str(a, "status"), "stale");
	CHECK(es_json_get_str(a, "stale_at") != NULL);
	cJSON_Delete(a);
	/* Exactly one stale lock, named <id>.<unix seconds>.<32hex>.lock, holding the old token. */
	char sl[PATH_MAX], name[256] = "";
	sfmt(sl, sizeof(sl), "%s/state/stale_locks", m.job_dir);
	CHECK_INT_EQ(count_entries(sl, ".lock", name, sizeof(name)), 1);
	CHECK_INT_EQ(count_entries(sl, NULL, NULL, 0), 1);
	CHECK(!strncmp(name, id, strlen(id)) && name[strlen(id)] == '.');
	{
		char *dot1 = strchr(name + strlen(id) + 1, '.');
		CHECK(dot1 && strlen(dot1) == 1 + 32 + 5);
		char sp[PATH_MAX];
		cJSON *old = NULL;
		sfmt(sp, sizeof(sp), "%s/%s", sl, name);
		CHECK_INT_EQ(es_json_load(sp, &old), 0);
		CHECK_STR_EQ(es_json_get_str(old, "token"), t1);
		cJSON_Delete(old);
	}

	/* Reference test 8: the old token cannot publish; nothing changes. */
	const char *rec = "{\n  \"status\": \"done\"\n}\n";
	int published = -1;
	CHECK_INT_EQ(es_claim_publish(&c, 0, t1, "done", rec, strlen(rec), NULL, NULL, &published), 1);
	CHECK_INT_EQ(published, 0);
	jpath(q, &m, "state/done/%s.json", id);
	CHECK(!exists(q));
	lock_token(&m, 0, now_tok);
	CHECK_STR_EQ(now_tok, t2);
	/* Nor can it refresh the lease, and its failure cannot be published either. */
	struct es_claimer old_owner;
	CHECK_INT_EQ(es_claimer_init(&old_owner, &m, &m.policy), 0);
	snprintf(old_owner.token, sizeof(old_owner.token), "%s", t1);
	CHECK_INT_EQ(es_claim_heartbeat(&old_owner, 0), 1);
	CHECK_INT_EQ(es_claim_publish(&old_owner, 0, t1, "failed", rec, strlen(rec), NULL, NULL, &published), 1);
	jpath(q, &m, "state/failed/%s.json", id);
	CHECK(!exists(q));
	es_claimer_free(&old_owner);
	lock_token(&m, 0, now_tok);
	CHECK_STR_EQ(now_tok, t2);

	/* The replacement publishes: its record is the done marker, and the lock stays as the
	 * shard's terminal fence (same inode, state done, the record's path, its token). */
	char rec2[128], fence_rec[PATH_MAX], want_rec[PATH_MAX];
	sfmt(rec2, sizeof(rec2), "{\n  \"token\": \"%s\"\n}\n", t2);
	struct stat before, after;
	CHECK(stat(p, &before) == 0);
	CHECK_INT_EQ(es_claim_publish(&c, 0, t2, "done", rec2, strlen(rec2), NULL, NULL, &published), 0);
	CHECK_INT_EQ(published, 1);
	jpath(q, &m, "state/done/%s.json", id);
	cJSON *d = NULL;
	CHECK_INT_EQ(es_json_load(q, &d), 0);
	CHECK_STR_EQ(es_json_get_str(d, "token"), t2);
	cJSON_Delete(d);
	CHECK_STR_EQ(lock_state(&m, 0, fence_rec, sizeof(fence_rec)), "done");
	sfmt(want_rec, sizeof(want_rec), "state/done/%s.json", id);
	CHECK_STR_EQ(fence_rec, want_rec);
	lock_token(&m, 0, now_tok);
	CHECK_STR_EQ(now_tok, t2);
	CHECK(stat(p, &after) == 0 && after.st_ino == before.st_ino);
	/* A fence is no longer anybody's lock: it cannot be released, refreshed or published over. */
	CHECK_INT_EQ(es_claim_release(&c, 0, t2), 1);
	CHECK_INT_EQ(es_claim_heartbeat(&c, 0), 1);
	CHECK_INT_EQ(es_claim_publish(&c, 0, t2, "failed", rec, strlen(rec), NULL, NULL, &published), 1);
	CHECK_STR_EQ(lock_state(&m, 0, NULL, 0), "done");
	/* A done shard is never claimed again. */
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_NONE);
	CHECK_STR_EQ(lock_state(&m, 0, NULL, 0), "done");
	/* The fence decides, not the record: even with the done record out of sight (an NFS
	 * client that caches "no such file"; here it is moved away), no claimer runs the shard
	 * again, whether it saw the shard done before (c) or never (fresh, third). */
	struct es_claimer fresh;
	CHECK_INT_EQ(es_claimer_init(&fresh, &m, &m.policy), 0);
	CHECK_INT_EQ(es_claim_try(&fresh, 0), ES_CLAIM_NONE);
	char moved[PATH_MAX];
	sfmt(moved, sizeof(moved), "%s.moved", q);
	CHECK(rename(q, moved) == 0);
	/* Readers that cannot see the record file use the fence's copy of it. */
	cJSON *copy = NULL;
	CHECK_INT_EQ(es_record_load(&m, "done", id, &copy), 0);
	CHECK_STR_EQ(es_json_get_str(copy, "token"), t2);
	cJSON_Delete(copy);
	CHECK_INT_EQ(es_record_load(&m, "failed", id, &copy), ES_ENOENT);
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_NONE);
	CHECK_INT_EQ(es_claim_try(&fresh, 0), ES_CLAIM_NONE);
	struct es_claimer third;
	CHECK_INT_EQ(es_claimer_init(&third, &m, &m.policy), 0);
	CHECK_INT_EQ(es_claim_try(&third, 0), ES_CLAIM_NONE);
	CHECK_STR_EQ(lock_state(&m, 0, NULL, 0), "done");
	jpath(q, &m, "attempts/%s", id);
	int folders_before = count_entries(q, NULL, NULL, 0);
	CHECK_INT_EQ(es_claim_try(&third, 0), ES_CLAIM_NONE);
	CHECK_INT_EQ(count_entries(q, NULL, NULL, 0), folders_before);
	jpath(q, &m, "state/done/%s.json", id);
	CHECK(rename(moved, q) == 0);
	es_claimer_free(&third);
	es_claimer_free(&fresh);
	es_claimer_free(&c);
	es_manifest_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* Leases: a refreshed lock is never taken over; a silent one after one lease, not before.    */
/* ------------------------------------------------------------------------------------------ */

static int64_t heartbeat_of(const struct es_manifest *m, size_t i, ino_t *ino)
{
	char p[PATH_MAX];
	cJSON *l = NULL;
	int64_t hb = -1;
	struct stat st;
	jpath(p, m, "state/locks/%s.lock", m->shards[i].id);
	if (ino)
		*ino = stat(p, &st) == 0 ? st.st_ino : 0;
	es_log_quiet_begin();
	if (es_json_load(p, &l) == 0)
		es_json_get_i64(l, "heartbeat", &hb);
	es_log_quiet_end();
	cJSON_Delete(l);
	return hb;
}

static void test_lease(void)
{
	struct es_manifest m;
	make_job("lease", 2, &m);
	const size_t i = 1;
	const char *id = m.shards[i].id;
	/* The reference rule can never fire here: only the lease decides. */
	struct es_policy pol = policy(&m, 1000000000, 1.0, 3);
	int up[2], down[2];
	if (!CHECK(pipe(up) == 0 && pipe(down) == 0))
		return;
	pid_t owner = fork();
	if (owner == 0) {
		/* The owner: claim, say so, refresh every 0.3 s until told to stop, then go silent
		 * (and exit, leaving its lock behind like a crashed worker). */
		close(up[0]);
		close(down[1]);
		struct es_claimer c;
		if (es_claimer_init(&c, &m, &pol) || es_claim_try(&c, i) != ES_CLAIM_OK)
			_exit(10);
		if (write(up[1], c.token, 32) != 32)
			_exit(11);
		fcntl(down[0], F_SETFL, O_NONBLOCK);
		for (;;) {
			usleep(300 * 1000);
			char ch;
			if (read(down[0], &ch, 1) == 1)
				break;
			if (es_claim_heartbeat(&c, i) != 0)
				_exit(12);
		}
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	char tok[33] = "";
	CHECK(read(up[0], tok, 32) == 32);
	tok[32] = '\0';
	ino_t ino0, ino1;
	int64_t hb0 = heartbeat_of(&m, i, &ino0);
	CHECK_INT_EQ(hb0, 0);

	/* 3 s of observation by another claimer, every 50 ms: never taken over. */
	struct es_claimer obs;
	CHECK_INT_EQ(es_claimer_init(&obs, &m, &pol), 0);
	double t0 = es_time_mono();
	int tries = 0, claimed = 0;
	while (es_time_mono() - t0 < 3.0) {
		int rc = es_claim_try(&obs, i);
		tries++;
		if (rc != ES_CLAIM_NONE) {
			claimed++;
			break;
		}
		usleep(50 * 1000);
	}
	CHECK_INT_EQ(claimed, 0);
	CHECK(tries > 30);
	char now_tok[33];
	lock_token(&m, i, now_tok);
	CHECK_STR_EQ(now_tok, tok);
	/* The refreshes rewrote the same inode with a growing counter. */
	int64_t hb1 = heartbeat_of(&m, i, &ino1);
	CHECK(hb1 >= 6);
	CHECK(ino0 == ino1);
	char sl[PATH_MAX];
	sfmt(sl, sizeof(sl), "%s/state/stale_locks", m.job_dir);
	CHECK_INT_EQ(count_entries(sl, NULL, NULL, 0), 0);
	es_claimer_free(&obs);

	/* The owner goes silent and exits; its lock stays. */
	CHECK(write(down[1], "x", 1) == 1);
	int st;
	CHECK(waitpid(owner, &st, 0) == owner && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	lock_token(&m, i, now_tok);
	CHECK_STR_EQ(now_tok, tok);

	/* A fresh observer: the first look starts its clock; the takeover comes after at least
	 * one lease (1 s) of its own observation, and not much later (polls every 50 ms). */
	CHECK_INT_EQ(es_claimer_init(&obs, &m, &pol), 0);
	double first = -1, taken = -1;
	t0 = es_time_mono();
	while (es_time_mono() - t0 < 5.0) {
		double before = es_time_mono();
		int rc = es_claim_try(&obs, i);
		if (first < 0)
			first = before;
		if (rc == ES_CLAIM_OK) {
			taken = es_time_mono();
			break;
		}
		CHECK_INT_EQ(rc, ES_CLAIM_NONE);
		usleep(50 * 1000);
	}
	CHECK(taken > 0);
	fprintf(stderr, "lease: taken over %.3f s after the first observation (lease 1 s)\n", taken - first);
	CHECK(taken - first >= 1.0);
	CHECK(taken - first < 2.0); /* generous: the machine may be loaded */
	CHECK(obs.took_over);
	CHECK_STR_EQ(obs.took_over_token, tok);
	lock_token(&m, i, now_tok);
	CHECK_STR_EQ(now_tok, obs.token);
	CHECK_INT_EQ(count_entries(sl, ".lock", NULL, 0), 1);
	char rel[PATH_MAX];
	sfmt(rel, sizeof(rel), "attempts/%s/0001-%s", id, tok);
	cJSON *a = load_attempt(&m, rel);
	CHECK_STR_EQ(es_json_get_str(a, "status"), "stale");
	cJSON_Delete(a);
	CHECK_INT_EQ(es_claim_release(&obs, i, obs.token), 0);
	es_claimer_free(&obs);
	close(up[0]);
	close(down[1]);
	es_manifest_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* Reference test 9: max_retries are in addition to the first attempt.                        */
/* ------------------------------------------------------------------------------------------ */

static void test_retry_limit(void)
{
	struct es_manifest m;
	make_job("retry", 2, &m);
	struct es_policy pol = policy(&m, 126000, 120, 3);
	char p[PATH_MAX];

	/* Shard 0: four claims, each marked failed and released; the fifth claim hits the limit. */
	const char *id = m.shards[0].id;
	struct es_claimer c;
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	for (int k = 1; k <= 4; k++) {
		if (!CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_OK))
			break;
		CHECK_INT_EQ(c.attempt_number, k);
		set_attempt_status(&m, c.attempt_rel, "failed");
		int failures = -1, folders = -1;
		CHECK_INT_EQ(es_claim_count_failures(m.job_dir, id, &failures, &folders), 0);
		CHECK_INT_EQ(failures, k);
		CHECK_INT_EQ(folders, k);
		CHECK_INT_EQ(es_claim_release(&c, 0, c.token), 0);
	}
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_FAILED_LIMIT);
	cJSON *f = NULL;
	jpath(p, &m, "state/failed/%s.json", id);
	CHECK_INT_EQ(es_json_load(p, &f), 0);
	int64_t failures = -1;
	CHECK_INT_EQ(es_json_get_i64(f, "failures", &failures), 0);
	CHECK_INT_EQ(failures, 4);
	CHECK_STR_EQ(es_json_get_str(f, "reason"), "retry limit reached before claim");
	CHECK_STR_EQ(es_json_get_str(f, "status"), "failed");
	CHECK_STR_EQ(es_json_get_str(f, "shard_id"), id);
	CHECK(es_json_get_str(f, "failed_at") != NULL);
	CHECK(cJSON_GetObjectItemCaseSensitive(f, "last_error") == NULL);
	cJSON_Delete(f);
	/* The lock stays as a failed fence, no fifth attempt folder is left, and the shard is
	 * never claimed again. */
	CHECK_STR_EQ(lock_state(&m, 0, NULL, 0), "failed");
	jpath(p, &m, "attempts/%s", id);
	CHECK_INT_EQ(count_entries(p, NULL, NULL, 0), 4);
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_NONE);
	CHECK_INT_EQ(count_entries(p, NULL, NULL, 0), 4);

	/* Shard 1, the reference's own sequence: the first three released, the fourth failure
	 * published by its owner; the next claim finds the failed record. */
	id = m.shards[1].id;
	for (int k = 1; k <= 4; k++) {
		if (!CHECK_INT_EQ(es_claim_try(&c, 1), ES_CLAIM_OK))
			break;
		set_attempt_status(&m, c.attempt_rel, "failed");
		if (k < 4) {
			CHECK_INT_EQ(es_claim_release(&c, 1, c.token), 0);
			continue;
		}
		const char *rec = "{\n  \"failures\": 4,\n  \"status\": \"failed\"\n}\n";
		int published = 0;
		CHECK_INT_EQ(es_claim_publish(&c, 1, c.token, "failed", rec, strlen(rec), NULL, NULL, &published), 0);
		CHECK_INT_EQ(published, 1);
	}
	CHECK_INT_EQ(es_claim_try(&c, 1), ES_CLAIM_NONE);
	jpath(p, &m, "state/failed/%s.json", id);
	CHECK_INT_EQ(es_json_load(p, &f), 0);
	CHECK_INT_EQ(es_json_get_i64(f, "failures", &failures), 0);
	CHECK_INT_EQ(failures, 4);
	cJSON_Delete(f);
	CHECK_STR_EQ(lock_state(&m, 1, NULL, 0), "failed");
	/* A done marker cannot appear over a failed one. */
	CHECK_INT_EQ(es_claim_try(&c, 1), ES_CLAIM_NONE);

	/* Stale attempts count too: three failed plus one stale reach the limit of 3. */
	es_claimer_free(&c);
	es_manifest_free(&m);
	make_job("retry-stale", 1, &m);
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	for (int k = 1; k <= 4; k++) {
		if (!CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_OK))
			break;
		set_attempt_status(&m, c.attempt_rel, k == 2 ? "stale" : k == 3 ? "lost" : "failed");
		CHECK_INT_EQ(es_claim_release(&c, 0, c.token), 0);
	}
	/* failed, stale, lost, failed: 3 count, the limit (> 3) is not reached yet. */
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_OK);
	CHECK_INT_EQ(c.attempt_number, 5);
	set_attempt_status(&m, c.attempt_rel, "failed");
	CHECK_INT_EQ(es_claim_release(&c, 0, c.token), 0);
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_FAILED_LIMIT);
	es_claimer_free(&c);
	es_manifest_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* Terminal fences where the record came first: a job folder of the reference (no lock after    */
/* done), and a publisher that died between its record and its fence.                          */
/* ------------------------------------------------------------------------------------------ */

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!CHECK(f != NULL))
		return;
	fputs(text, f);
	fclose(f);
}

static void test_fences(void)
{
	struct es_manifest m;
	make_job("fences", 3, &m);
	struct es_policy pol = policy(&m, 1000000000, 1.0, 3);
	struct es_claimer c;
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	char p[PATH_MAX], rec[PATH_MAX], want[PATH_MAX], sl[PATH_MAX];
	sfmt(sl, sizeof(sl), "%s/state/stale_locks", m.job_dir);

	/* Shard 0: the reference's done shard (record, no lock). Not run: the fresh lock becomes
	 * the shard's done fence. Shard 1: the reference's failed shard, a failed fence. */
	jpath(p, &m, "state/done/%s.json", m.shards[0].id);
	write_text(p, "{\n  \"status\": \"done\"\n}\n");
	jpath(p, &m, "state/failed/%s.json", m.shards[1].id);
	write_text(p, "{\n  \"status\": \"failed\"\n}\n");
	for (size_t i = 0; i < 2; i++) {
		CHECK_INT_EQ(es_claim_try(&c, i), ES_CLAIM_NONE);
		CHECK_STR_EQ(lock_state(&m, i, rec, sizeof(rec)), i ? "failed" : "done");
		sfmt(want, sizeof(want), "state/%s/%s.json", i ? "failed" : "done", m.shards[i].id);
		CHECK_STR_EQ(rec, want);
		jpath(p, &m, "attempts/%s", m.shards[i].id);
		CHECK(!exists(p));
	}

	/* Shard 2: its owner published the done record and died before the fence (crash point
	 * claim-before-fence): a running lock that stops changing, with a visible record. After
	 * one lease the next claimer writes the fence instead of taking the shard over. */
	const size_t i = 2;
	const char *id = m.shards[i].id;
	struct es_claimer owner;
	CHECK_INT_EQ(es_claimer_init(&owner, &m, &pol), 0);
	CHECK_INT_EQ(es_claim_try(&owner, i), ES_CLAIM_OK);
	CHECK_STR_EQ(lock_state(&m, i, NULL, 0), "running");
	jpath(p, &m, "state/done/%s.json", id);
	char body[128];
	sfmt(body, sizeof(body), "{\n  \"token\": \"%s\"\n}\n", owner.token);
	write_text(p, body);
	es_claimer_free(&owner);
	double t0 = es_time_mono();
	int rc = ES_CLAIM_NONE;
	while (es_time_mono() - t0 < 3.0 && !strcmp(lock_state(&m, i, NULL, 0), "running")) {
		rc = es_claim_try(&c, i);
		if (rc != ES_CLAIM_NONE)
			break;
		usleep(50 * 1000);
	}
	CHECK_INT_EQ(rc, ES_CLAIM_NONE);
	CHECK(es_time_mono() - t0 >= 1.0);
	CHECK_STR_EQ(lock_state(&m, i, rec, sizeof(rec)), "done");
	sfmt(want, sizeof(want), "state/done/%s.json", id);
	CHECK_STR_EQ(rec, want);
	CHECK_INT_EQ(count_entries(sl, NULL, NULL, 0), 0);
	jpath(p, &m, "attempts/%s", id);
	CHECK_INT_EQ(count_entries(p, NULL, NULL, 0), 1);
	CHECK(!c.took_over);

	/* An unreadable lock (a torn write) is somebody's: not claimed before its lease. */
	struct es_manifest m2;
	make_job("fences-torn", 1, &m2);
	struct es_claimer c2;
	CHECK_INT_EQ(es_claimer_init(&c2, &m2, &pol), 0);
	jpath(p, &m2, "state/locks/%s.lock", m2.shards[0].id);
	write_text(p, "{\"attempt_dir\": \"attempts/x/0001-");
	CHECK_INT_EQ(es_claim_try(&c2, 0), ES_CLAIM_NONE);
	CHECK_STR_EQ(lock_state(&m2, 0, NULL, 0), "unreadable");
	es_claimer_free(&c2);
	es_manifest_free(&m2);
	es_claimer_free(&c);
	es_manifest_free(&m);
}

/* A publisher that died between the link of its done record and the unlink of its temporary
 * (crash point publish-after-link) left the record's second name ".<id>.json.<hex>.tmp" in
 * state/done. The repair that fences the record for it (a worker on another host at the job's
 * end, before any lease ran out) removes that name: it is the record itself, so its age and
 * maker do not matter. A temporary that is another file stays. */
static void test_repair_links(void)
{
	struct es_manifest m;
	make_job("repair-links", 1, &m);
	struct es_policy pol = policy(&m, 1000000000, 30.0, 3);
	struct es_claimer owner, c;
	CHECK_INT_EQ(es_claimer_init(&owner, &m, &pol), 0);
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	const char *id = m.shards[0].id;
	CHECK_INT_EQ(es_claim_try(&owner, 0), ES_CLAIM_OK);
	char rec[PATH_MAX], second[PATH_MAX], other[PATH_MAX], body[128];
	jpath(rec, &m, "state/done/%s.json", id);
	sfmt(body, sizeof(body), "{\n  \"token\": \"%s\"\n}\n", owner.token);
	write_text(rec, body);
	jpath(second, &m, "state/done/.%s.json.0123456789abcdef0123456789abcdef.tmp", id);
	CHECK(link(rec, second) == 0);
	jpath(other, &m, "state/done/.%s.json.fedcba9876543210fedcba9876543210.tmp", id);
	write_text(other, body);
	/* Any other temporary of the shard's records that the dead publisher made (its maker, in
	 * the lock, is this process) goes too: nothing can still write it. */
	char tok[33], stray[PATH_MAX], name[128];
	CHECK_INT_EQ(es_fs_temp_token(tok), 0);
	sfmt(name, sizeof(name), "state/failed/.%%s.json.%s.tmp", tok);
	jpath(stray, &m, name, id);
	write_text(stray, body);
	es_claimer_free(&owner);
	CHECK_INT_EQ(es_claim_repair(&c, 0), 1);
	CHECK_STR_EQ(lock_state(&m, 0, NULL, 0), "done");
	CHECK(exists(rec));
	CHECK(!exists(second));
	CHECK(exists(other));
	CHECK(!exists(stray));
	es_claimer_free(&c);
	es_manifest_free(&m);
}

/* The temporary "state/<kind>/.<id>.json.<token>.tmp" of shard 0's records, written fresh. */
static void record_temp(char *out, const struct es_manifest *m, const char *kind, const char *token)
{
	char fmt[128];
	sfmt(fmt, sizeof(fmt), "state/%s/.%%s.json.%s.tmp", kind, token);
	jpath(out, m, fmt, m->shards[0].id);
	write_text(out, "{}\n");
}

/* A holder on another host that died between the write of its done record's temporary and its
 * link (crash point publish-after-temp): the temporary, written after its last heartbeat, is
 * younger than a lease when the lock is taken over, and no sweep here can judge a maker on
 * another host, so it stayed for good. The takeover removes what the lock's maker made, at any
 * age, in state/done and state/failed; a fresh temporary of another maker there (a backup on
 * another host, or one here, publishing now) stays. */
static void test_takeover_temps(void)
{
	struct es_manifest m;
	make_job("takeover-temps", 1, &m);
	struct es_policy pol = policy(&m, 1000000000, 1e9, 3);
	struct es_claimer owner, c;
	CHECK_INT_EQ(es_claimer_init(&owner, &m, &pol), 0);
	CHECK_INT_EQ(es_claim_try(&owner, 0), ES_CLAIM_OK);
	/* The holder's maker on another host: pid 0x1234, our host hash with a digit changed. */
	char live[33], dead[33], dead2[33], far[33], maker[25];
	CHECK_INT_EQ(es_fs_temp_token(live), 0);
	char host[9];
	sfmt(host, sizeof(host), "%.8s", live + 8);
	host[0] = host[0] == '0' ? '1' : '0';
	sfmt(maker, sizeof(maker), "00001234%s00000001", host);
	sfmt(dead, sizeof(dead), "%s89abcdef", maker);
	sfmt(dead2, sizeof(dead2), "%s01234567", maker);
	sfmt(far, sizeof(far), "00001235%s0000000189abcdef", host);
	char lock[PATH_MAX], t_dead[PATH_MAX], t_dead2[PATH_MAX], t_far[PATH_MAX], t_live[PATH_MAX];
	jpath(lock, &m, "state/locks/%s.lock", m.shards[0].id);
	cJSON *l = NULL;
	struct es_buf line = ES_BUF_INIT;
	CHECK_INT_EQ(es_json_load(lock, &l), 0);
	es_json_set_str(l, "maker", maker);
	CHECK_INT_EQ(es_json_dump(l, 0, &line), 0);
	write_text(lock, line.data);
	es_buf_free(&line);
	cJSON_Delete(l);
	record_temp(t_dead, &m, "done", dead);
	record_temp(t_dead2, &m, "failed", dead2);
	record_temp(t_far, &m, "done", far);
	record_temp(t_live, &m, "done", live);
	es_claimer_free(&owner);
	/* Stale by the reference's rule (mtime epoch 1, timeout 1 s); the lease never runs out. */
	struct timeval tv[2] = { { 1, 0 }, { 1, 0 } };
	CHECK(utimes(lock, tv) == 0);
	pol = policy(&m, 1, 1e9, 3);
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_OK);
	es_log_quiet_end();
	CHECK(c.took_over);
	CHECK(!exists(t_dead));
	CHECK(!exists(t_dead2));
	CHECK(exists(t_far));
	CHECK(exists(t_live));
	es_claimer_free(&c);
	es_manifest_free(&m);
}

/* The "action" of the end marker state/lock_ends/<id>.<token> of shard i's lock, "" when none. */
static const char *end_action(const struct es_manifest *m, size_t i, const char *token)
{
	static char out[32];
	char fmt[128], p[PATH_MAX];
	cJSON *d = NULL;
	sfmt(fmt, sizeof(fmt), "state/lock_ends/%%s.%s", token);
	jpath(p, m, fmt, m->shards[i].id);
	es_log_quiet_begin();
	const char *a = es_json_load(p, &d) == 0 ? es_json_get_str(d, "action") : NULL;
	es_log_quiet_end();
	sfmt(out, sizeof(out), "%s", a ? a : "");
	cJSON_Delete(d);
	return out;
}

/* Shard i's lock, claimed by a claimer that then dies: stale by the reference's rule (mtime
 * epoch 1). Its token goes to token. */
static void dead_claim(const struct es_manifest *m, size_t i, char token[33])
{
	struct es_policy pol = policy(m, 1000000000, 1e9, 3);
	struct es_claimer o;
	char p[PATH_MAX];
	CHECK_INT_EQ(es_claimer_init(&o, m, &pol), 0);
	CHECK_INT_EQ(es_claim_try(&o, i), ES_CLAIM_OK);
	sfmt(token, 33, "%s", o.token);
	es_claimer_free(&o);
	jpath(p, m, "state/locks/%s.lock", m->shards[i].id);
	struct timeval tv[2] = { { 1, 0 }, { 1, 0 } };
	CHECK(utimes(p, tv) == 0);
}

/* The end markers of locks (docs/job-folder.md#lock-end-markers): a takeover and a release each
 * make state/lock_ends/<id>.<token> before they move or remove the lock, and one made before by
 * a process that died before its move (the lock still listed under its name) stops neither. */
static void test_lock_ends(void)
{
	struct es_manifest m;
	make_job("lock-ends", 2, &m);
	struct es_policy pol = policy(&m, 1, 1e9, 3);
	struct es_claimer c;
	char t0[33], t1[33], p[PATH_MAX], fmt[128];
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	dead_claim(&m, 0, t0);
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_OK);
	CHECK(c.took_over);
	CHECK_STR_EQ(end_action(&m, 0, t0), "takeover");
	CHECK_INT_EQ(es_claim_release(&c, 0, c.token), 0);
	CHECK_STR_EQ(end_action(&m, 0, c.token), "release");
	CHECK_STR_EQ(lock_state(&m, 0, NULL, 0), "none");
	/* A taker that died after its marker: the lock is taken over all the same. */
	dead_claim(&m, 1, t1);
	sfmt(fmt, sizeof(fmt), "state/lock_ends/%%s.%s", t1);
	jpath(p, &m, fmt, m.shards[1].id);
	write_text(p, "{\"action\": \"takeover\"}\n");
	CHECK_INT_EQ(es_claim_try(&c, 1), ES_CLAIM_OK);
	CHECK(c.took_over);
	CHECK_STR_EQ(c.took_over_token, t1);
	/* A releaser that died after its marker: the owner releases all the same. */
	sfmt(fmt, sizeof(fmt), "state/lock_ends/%%s.%s", c.token);
	jpath(p, &m, fmt, m.shards[1].id);
	write_text(p, "{\"action\": \"release\"}\n");
	CHECK_INT_EQ(es_claim_release(&c, 1, c.token), 0);
	CHECK_STR_EQ(lock_state(&m, 1, NULL, 0), "none");
	char sl[PATH_MAX];
	sfmt(sl, sizeof(sl), "%s/state/stale_locks", m.job_dir);
	CHECK_INT_EQ(count_entries(sl, NULL, NULL, 0), 2);
	es_claimer_free(&c);
	es_manifest_free(&m);
}

/* The status an attempt.json says, "" when unreadable. */
static const char *attempt_status(const struct es_manifest *m, const char *rel)
{
	static char st[32];
	char p[PATH_MAX];
	cJSON *a = NULL;
	sfmt(p, sizeof(p), "%s/%s/attempt.json", m->job_dir, rel);
	st[0] = '\0';
	if (es_json_load(p, &a) == 0 && es_json_get_str(a, "status"))
		snprintf(st, sizeof(st), "%s", es_json_get_str(a, "status"));
	cJSON_Delete(a);
	return st;
}

/* Backup attempts: the marker allows one backup per primary attempt; the backup's record is
 * linked without touching the primary's lock; the primary yields (its lock becomes the fence of
 * the backup's record, and the backup's attempt says done); a job-end repair waits for a live
 * primary (2) and has nothing to do once fenced; a backup cannot publish over a fence or a
 * failed record; a primary that published first wins. */
static void test_backups(void)
{
	struct es_manifest m;
	make_job("backups", 3, &m);
	struct es_policy pol = policy(&m, 1000000000, 30.0, 3);
	struct es_claimer p, b, b2;
	CHECK_INT_EQ(es_claimer_init(&p, &m, &pol), 0);
	CHECK_INT_EQ(es_claimer_init(&b, &m, &pol), 0);
	CHECK_INT_EQ(es_claimer_init(&b2, &m, &pol), 0);
	char path[PATH_MAX], rec[PATH_MAX], body[256], ptok[33];

	/* Shard 0: the backup wins. */
	CHECK_INT_EQ(es_claim_try(&p, 0), ES_CLAIM_OK);
	snprintf(ptok, sizeof(ptok), "%s", p.token);
	CHECK_INT_EQ(es_claim_try(&b, 0), ES_CLAIM_NONE);
	struct es_claim_seen seen;
	es_claim_seen(&b, 0, &seen);
	CHECK(seen.running && !seen.terminal);
	CHECK_STR_EQ(seen.token, ptok);
	CHECK_STR_EQ(seen.host, es_hostname());
	CHECK(seen.claimed_at_epoch > 0 && es_time_epoch() - seen.claimed_at_epoch < 5);
	CHECK(seen.running_seen_mono > 0 && es_time_mono() - seen.running_seen_mono < 5);
	CHECK_INT_EQ(es_claim_backup(&b, 0, ptok), ES_CLAIM_OK);
	CHECK(strcmp(b.token, ptok) != 0);
	CHECK_INT_EQ(b.attempt_number, 2);
	CHECK_STR_EQ(attempt_status(&m, b.attempt_rel), "running");
	sfmt(path, sizeof(path), "%s/%s/attempt.json", m.job_dir, b.attempt_rel);
	cJSON *a = NULL;
	if (CHECK_INT_EQ(es_json_load(path, &a), 0)) {
		CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "backup")));
		CHECK_STR_EQ(es_json_get_str(a, "backup_of"), ptok);
	}
	cJSON_Delete(a);
	sfmt(path, sizeof(path), "%s/state/backups/%s.%s.json", m.job_dir, m.shards[0].id, ptok);
	CHECK(exists(path));
	CHECK_INT_EQ(es_claim_backup(&b2, 0, ptok), ES_CLAIM_NONE); /* one backup per primary attempt */
	CHECK_INT_EQ(es_claim_yield(&p, 0, ptok), 0);                /* nothing published yet */
	sfmt(body, sizeof(body), "{\n  \"output_path\": \"%s/processed.jsonl\",\n  \"token\": \"%s\"\n}\n", b.attempt_rel, b.token);
	int published = 0;
	CHECK_INT_EQ(es_claim_publish_backup(&b, 0, body, strlen(body), &published), 0);
	CHECK(published);
	CHECK_STR_EQ(lock_state(&m, 0, NULL, 0), "running"); /* the primary's lock is the primary's */
	CHECK_INT_EQ(es_claim_repair(&b, 0), 2);             /* its owner is alive: wait */
	CHECK_INT_EQ(es_claim_yield(&p, 0, ptok), 1);
	CHECK_STR_EQ(lock_state(&m, 0, rec, sizeof(rec)), "done");
	CHECK_STR_EQ(attempt_status(&m, b.attempt_rel), "done"); /* said for it (recovered_at) */
	CHECK_INT_EQ(es_claim_repair(&b, 0), 0);
	int published2 = 0;
	CHECK_INT_EQ(es_claim_publish_backup(&b2, 0, body, strlen(body), &published2), 0);
	CHECK(!published2);

	/* Shard 1: the primary wins; the backup's record is refused (the lock is a fence). */
	CHECK_INT_EQ(es_claim_try(&p, 1), ES_CLAIM_OK);
	snprintf(ptok, sizeof(ptok), "%s", p.token);
	CHECK_INT_EQ(es_claim_backup(&b, 1, ptok), ES_CLAIM_OK);
	sfmt(body, sizeof(body), "{\n  \"token\": \"%s\"\n}\n", ptok);
	CHECK_INT_EQ(es_claim_publish(&p, 1, ptok, "done", body, strlen(body), NULL, NULL, &published), 0);
	CHECK(published);
	sfmt(body, sizeof(body), "{\n  \"token\": \"%s\"\n}\n", b.token);
	CHECK_INT_EQ(es_claim_publish_backup(&b, 1, body, strlen(body), &published), 0);
	CHECK(!published);
	jpath(path, &m, "state/done/%s.json", m.shards[1].id);
	struct es_buf t = ES_BUF_INIT;
	if (CHECK_INT_EQ(es_fs_read_file(path, &t, 1 << 20), 0))
		CHECK(strstr(t.data, ptok) != NULL);
	es_buf_free(&t);

	/* Shard 2: failed for good while the backup ran: the backup cannot publish. */
	CHECK_INT_EQ(es_claim_try(&p, 2), ES_CLAIM_OK);
	snprintf(ptok, sizeof(ptok), "%s", p.token);
	CHECK_INT_EQ(es_claim_backup(&b, 2, ptok), ES_CLAIM_OK);
	sfmt(body, sizeof(body), "{\n  \"status\": \"failed\",\n  \"token\": \"%s\"\n}\n", ptok);
	CHECK_INT_EQ(es_claim_publish(&p, 2, ptok, "failed", body, strlen(body), NULL, NULL, &published), 0);
	CHECK(published);
	CHECK_INT_EQ(es_claim_publish_backup(&b, 2, body, strlen(body), &published), 0);
	CHECK(!published);
	jpath(path, &m, "state/done/%s.json", m.shards[2].id);
	CHECK(!exists(path));
	/* The backups' attempts never count toward the retry limit. */
	int failures = -1, folders = 0;
	CHECK_INT_EQ(es_claim_count_failures(m.job_dir, m.shards[2].id, &failures, &folders), 0);
	CHECK_INT_EQ(folders, 2);
	es_claimer_free(&p);
	es_claimer_free(&b);
	es_claimer_free(&b2);
	es_manifest_free(&m);
}

/* A dead primary whose backup runs: its lock, stale by the lease, is not taken over while the
 * backup touches its marker within one lease; once the backup goes silent, the takeover
 * follows one lease after its last touch. */
static void test_backup_lease(void)
{
	struct es_manifest m;
	make_job("backup-lease", 1, &m);
	/* A 3 s lease against beats every 0.3 s: a loaded machine that stalls this process for
	 * over a second (seen at load 30-58: a 1 s lease was then taken over between two beats,
	 * correctly) does not make a late beat look like a silent backup. */
	struct es_policy pol = policy(&m, 1000000000, 3.0, 3);
	struct es_claimer p, b, obs;
	CHECK_INT_EQ(es_claimer_init(&p, &m, &pol), 0);
	CHECK_INT_EQ(es_claimer_init(&b, &m, &pol), 0);
	CHECK_INT_EQ(es_claimer_init(&obs, &m, &pol), 0);
	char ptok[33], now_tok[33], sl[PATH_MAX];
	CHECK_INT_EQ(es_claim_try(&p, 0), ES_CLAIM_OK);
	CHECK_INT_EQ(es_claim_heartbeat(&p, 0), 0); /* a lock with a heartbeat: the lease rule applies */
	snprintf(ptok, sizeof(ptok), "%s", p.token);
	CHECK_INT_EQ(es_claim_backup(&b, 0, ptok), ES_CLAIM_OK);
	/* The primary is silent from now on; the backup beats every 0.3 s for 4 s (over a lease). */
	double t0 = es_time_mono(), last = 0;
	int tries = 0;
	while (es_time_mono() - t0 < 4.0) {
		if (es_time_mono() - last >= 0.3) {
			CHECK_INT_EQ(es_claim_backup_beat(&b, 0), 0);
			last = es_time_mono();
		}
		CHECK_INT_EQ(es_claim_try(&obs, 0), ES_CLAIM_NONE);
		tries++;
		usleep(50 * 1000);
	}
	CHECK(tries > 30);
	lock_token(&m, 0, now_tok);
	CHECK_STR_EQ(now_tok, ptok);
	sfmt(sl, sizeof(sl), "%s/state/stale_locks", m.job_dir);
	CHECK_INT_EQ(count_entries(sl, NULL, NULL, 0), 0);
	/* The backup goes silent too. */
	double taken = -1;
	while (es_time_mono() - last < 8.0) {
		int rc = es_claim_try(&obs, 0);
		if (rc == ES_CLAIM_OK) {
			taken = es_time_mono();
			break;
		}
		CHECK_INT_EQ(rc, ES_CLAIM_NONE);
		usleep(50 * 1000);
	}
	CHECK(taken > 0);
	fprintf(stderr, "backup lease: taken over %.3f s after the backup's last beat (lease 3 s)\n", taken - last);
	CHECK(taken - last >= 2.9); /* the marker's mtime has the file system's time granularity */
	CHECK(obs.took_over);
	CHECK_STR_EQ(obs.took_over_token, ptok);
	CHECK_INT_EQ(count_entries(sl, ".lock", NULL, 0), 1);
	es_claimer_free(&p);
	es_claimer_free(&b);
	es_claimer_free(&obs);
	es_manifest_free(&m);
}

/* The claim hands the worker the attempt.json it wrote (no read back), once, and only while no
 * stale takeover can have marked the attempt since; a backup does the same. */
static void test_attempt_text(void)
{
	struct es_manifest m;
	make_job("attempt_text", 2, &m);
	struct es_policy pol = policy(&m, 1000000000, 30.0, 3);
	struct es_claimer c, b;
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	size_t len = 0;
	CHECK(es_claim_take_attempt(&c, &len) == NULL);
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_OK);
	char path[PATH_MAX];
	sfmt(path, sizeof(path), "%s/%s/attempt.json", m.job_dir, c.attempt_rel);
	struct es_buf file = ES_BUF_INIT;
	CHECK_INT_EQ(es_fs_read_file(path, &file, 0), 0);
	char *text = es_claim_take_attempt(&c, &len);
	CHECK(text != NULL);
	if (text)
		CHECK_MEM_EQ(text, len, file.data, file.len);
	free(text);
	CHECK(es_claim_take_attempt(&c, &len) == NULL);
	/* A backup's attempt.json, likewise. */
	CHECK_INT_EQ(es_claimer_init(&b, &m, &pol), 0);
	CHECK_INT_EQ(es_claim_backup(&b, 0, c.token), ES_CLAIM_OK);
	es_buf_reset(&file);
	sfmt(path, sizeof(path), "%s/%s/attempt.json", m.job_dir, b.attempt_rel);
	CHECK_INT_EQ(es_fs_read_file(path, &file, 0), 0);
	text = es_claim_take_attempt(&b, &len);
	CHECK(text != NULL);
	if (text)
		CHECK_MEM_EQ(text, len, file.data, file.len);
	free(text);
	es_claimer_free(&b);
	es_claimer_free(&c);
	/* Older than a quarter of the lease: not handed over (the file is read instead). */
	pol = policy(&m, 1000000000, 0.2, 3);
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	CHECK_INT_EQ(es_claim_try(&c, 1), ES_CLAIM_OK);
	es_sleep(0.1);
	CHECK(es_claim_take_attempt(&c, &len) == NULL);
	es_claimer_free(&c);
	es_buf_free(&file);
	es_manifest_free(&m);
}

/* The hint (docs/job-folder.md#the-hint): a release replaces it, a publish does not, a watcher
 * sees a replace once through the folder and the hint it keeps open, and a silent lock is due to be read one lease after
 * it was last seen changing. */
static void test_hint(void)
{
	struct es_manifest m;
	make_job("hint", 2, &m);
	struct es_policy pol = policy(&m, 1000000000, 30.0, 3);
	struct es_claimer c, w;
	struct es_claim_hint_seen seen = ES_CLAIM_HINT_SEEN_INIT;
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	CHECK_INT_EQ(es_claimer_init(&w, &m, &pol), 0);
	/* No hint yet: the first look says "changed" (scan), the next ones do not. */
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 1);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0);
	CHECK(es_claim_next_stale(&w) == INFINITY);
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_OK);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0); /* a claim is no news for idle workers */
	/* A watcher that saw the running lock: stale one lease after that, unless it changes. */
	double before = es_time_mono();
	CHECK_INT_EQ(es_claim_try(&w, 0), ES_CLAIM_NONE);
	double due = es_claim_next_stale(&w);
	CHECK(due >= before + 30.0 && due <= es_time_mono() + 30.0);
	CHECK_INT_EQ(es_claim_release(&c, 0, c.token), 0);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 1);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0);
	char path[PATH_MAX];
	sfmt(path, sizeof(path), "%s/state/hint.json", m.job_dir);
	struct es_buf text = ES_BUF_INIT;
	CHECK_INT_EQ(es_fs_read_file(path, &text, 0), 0);
	CHECK(text.data && strstr(text.data, "\"event\": \"released\"") && strstr(text.data, "part-00000-of-00002"));
	/* A publish leaves the hint to its worker (it replaces it once it finds nothing more to
	 * claim); two replaces between looks are seen as one change. */
	CHECK_INT_EQ(es_claim_try(&c, 1), ES_CLAIM_OK);
	int published = 0;
	CHECK_INT_EQ(es_claim_publish(&c, 1, c.token, "failed", "{}\n", 3, NULL, NULL, &published), 0);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0);
	CHECK_INT_EQ(es_claim_hint(&m, m.shards[1].id, "failed"), 0);
	CHECK_INT_EQ(es_claim_hint(&m, m.shards[0].id, "requeued"), 0);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 1);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0);
	/* The folder tells: a file renamed into state/ beside the hint changes it, as a replace
	 * does where the kept hint's own attributes are cached for ever (GlusterFS, for a file
	 * its client created or replaced itself); nothing in state/ is news. */
	char other[PATH_MAX];
	sfmt(other, sizeof(other), "%s/state/.probe", m.job_dir);
	CHECK_INT_EQ(es_fs_write_atomic(other, "x", 1), 0);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 1);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0);
	CHECK(unlink(other) == 0);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 1);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0);
	/* A hint that cannot be kept (a FIFO in its place here; on GlusterFS a name that still
	 * gives the file it replaced, whose fstat() fails with ESTALE) is news once, not at every
	 * look: the folder alone is watched until it changes again. */
	CHECK(unlink(path) == 0);
	CHECK(mkfifo(path, 0644) == 0);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 1);
	CHECK_INT_EQ(seen.fd, -1);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0);
	CHECK(unlink(path) == 0);
	CHECK_INT_EQ(es_claim_hint(&m, m.shards[0].id, "released"), 0);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 1);
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 0);
	/* A look that cannot be made is a change (read the locks); the hint kept open and the
	 * folder go back with forget. */
	CHECK(seen.fd >= 0 && seen.dir_fd >= 0);
	close(seen.dir_fd);
	seen.dir_fd = -1;
	CHECK_INT_EQ(es_claim_hint_changed(&m, &seen), 1);
	CHECK(seen.dir_fd >= 0);
	es_claim_hint_forget(&seen);
	CHECK_INT_EQ(seen.fd, -1);
	CHECK_INT_EQ(seen.dir_fd, -1);
	es_buf_free(&text);
	es_claimer_free(&w);
	es_claimer_free(&c);
	es_manifest_free(&m);
}

/* trust_running_secs: a claimer that saw a lock running does not read it again within the
 * trust, so a shard released meanwhile is not seen until the trust ends (or is cleared); the
 * trust never outlasts the lease, so a dead owner's lock is taken over as without it. */
static void test_trust_running(void)
{
	struct es_manifest m;
	make_job("trust", 2, &m);
	struct es_policy pol = policy(&m, 1000000000, 1.0, 3);
	struct es_claimer a, b, c;
	CHECK_INT_EQ(es_claimer_init(&a, &m, &pol), 0);
	CHECK_INT_EQ(es_claimer_init(&b, &m, &pol), 0);
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	CHECK_INT_EQ(es_claim_try(&a, 0), ES_CLAIM_OK);
	b.trust_running_secs = 100;
	CHECK_INT_EQ(es_claim_trusts_running(&b, 0), 0); /* never seen: read */
	CHECK_INT_EQ(es_claim_try(&b, 0), ES_CLAIM_NONE);
	CHECK_INT_EQ(es_claim_trusts_running(&b, 0), 1);
	CHECK_INT_EQ(es_claim_unknown(&b), 1); /* shard 1: a pass reads its lock, not shard 0's */
	/* Released: the trusting claimer does not look; without the trust it claims. */
	CHECK_INT_EQ(es_claim_release(&a, 0, a.token), 0);
	CHECK_INT_EQ(es_claim_try(&b, 0), ES_CLAIM_NONE);
	b.trust_running_secs = 0;
	CHECK_INT_EQ(es_claim_trusts_running(&b, 0), 0);
	CHECK_INT_EQ(es_claim_unknown(&b), 2);
	CHECK_INT_EQ(es_claim_try(&b, 0), ES_CLAIM_OK);
	/* b goes silent (no heartbeat): c trusts what it saw for at most a lease of its own
	 * observation, then reads and takes the lock over, as an observer without trust does. */
	c.trust_running_secs = 100;
	double first = es_time_mono(), taken = -1;
	while (es_time_mono() - first < 5.0) {
		int rc = es_claim_try(&c, 0);
		if (rc == ES_CLAIM_OK) {
			taken = es_time_mono();
			break;
		}
		CHECK_INT_EQ(rc, ES_CLAIM_NONE);
		usleep(50 * 1000);
	}
	fprintf(stderr, "trust: taken over %.3f s after the first observation (lease 1 s)\n", taken - first);
	CHECK(taken - first >= 1.0);
	CHECK(taken - first < 2.0);
	CHECK(c.took_over);
	CHECK_STR_EQ(c.took_over_token, b.token);
	CHECK_INT_EQ(es_claim_release(&c, 0, c.token), 0);
	es_claimer_free(&a);
	es_claimer_free(&b);
	es_claimer_free(&c);
	es_manifest_free(&m);
}

/* es_claim_learn_done: one listing of state/done; a listed shard is done for the claimer, which
 * neither reads nor fences its lock in es_claim_try (a reference's record without a lock stays
 * without one), while es_claim_repair still reads it; names that are no shard's are ignored. */
static void test_learn_done(void)
{
	struct es_manifest m;
	make_job("learn", 3, &m);
	struct es_policy pol = policy(&m, 1000000000, 1.0, 3);
	struct es_claimer c;
	CHECK_INT_EQ(es_claimer_init(&c, &m, &pol), 0);
	char p[PATH_MAX];
	CHECK_INT_EQ(es_claim_unknown(&c), 3);
	CHECK_INT_EQ(es_claim_learn_done(&c), 0); /* no state/done yet, or an empty one */
	jpath(p, &m, "state/done/%s.json", m.shards[1].id);
	write_text(p, "{\n  \"status\": \"done\"\n}\n");
	static const char *const noise[] = { "part-00009-of-00003.json", "x.json", ".part-00000-of-00003.json.1.tmp",
					     "part-00000-of-00003.jsonl" };
	for (size_t k = 0; k < sizeof(noise) / sizeof(noise[0]); k++) {
		sfmt(p, sizeof(p), "%s/state/done/%s", m.job_dir, noise[k]);
		write_text(p, "{}\n");
	}
	CHECK_INT_EQ(es_claim_learn_done(&c), 1);
	CHECK_INT_EQ(es_claim_learn_done(&c), 0); /* learned once */
	CHECK_INT_EQ(es_claim_unknown(&c), 2);
	CHECK(es_claim_seen_done(&c, 1));
	CHECK(es_claim_listed_only(&c, 1));
	CHECK(!es_claim_seen_done(&c, 0) && !es_claim_listed_only(&c, 0));
	struct es_claim_seen seen;
	es_claim_seen(&c, 1, &seen);
	CHECK(seen.terminal && !seen.running);
	CHECK_INT_EQ(es_claim_try(&c, 1), ES_CLAIM_NONE);
	jpath(p, &m, "state/locks/%s.lock", m.shards[1].id);
	CHECK(!exists(p)); /* not looked at: a plain try would have made the done fence */
	/* The repair reads it: a record without a lock is left as it is (nothing to repair). */
	CHECK_INT_EQ(es_claim_repair(&c, 1), 0);
	/* The other shards are claimed as before. */
	CHECK_INT_EQ(es_claim_try(&c, 0), ES_CLAIM_OK);
	CHECK_INT_EQ(es_claim_release(&c, 0, c.token), 0);
	/* A lock seen running, then its record listed: no longer watched for its lease (a watcher
	 * would otherwise wake for it at once, forever, once that lease is past). */
	struct es_claimer a;
	CHECK_INT_EQ(es_claimer_init(&a, &m, &pol), 0);
	CHECK_INT_EQ(es_claim_try(&a, 2), ES_CLAIM_OK);
	CHECK_INT_EQ(es_claim_try(&c, 2), ES_CLAIM_NONE);
	CHECK(isfinite(es_claim_next_stale(&c)));
	jpath(p, &m, "state/done/%s.json", m.shards[2].id);
	write_text(p, "{\n  \"status\": \"done\"\n}\n");
	CHECK_INT_EQ(es_claim_learn_done(&c), 1);
	CHECK(isinf(es_claim_next_stale(&c)));
	CHECK_INT_EQ(es_claim_release(&a, 2, a.token), 0);
	es_claimer_free(&a);
	es_claimer_free(&c);
	es_manifest_free(&m);
}

int main(void)
{
	char *t = test_tmpdir();
	if (!realpath(t, ROOT))
		return 1;
	test_race_and_stale_takeover();
	test_lease();
	test_retry_limit();
	test_fences();
	test_repair_links();
	test_takeover_temps();
	test_lock_ends();
	test_backups();
	test_backup_lease();
	test_attempt_text();
	test_hint();
	test_trust_running();
	test_learn_done();
	return test_done();
}
