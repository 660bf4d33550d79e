/*
 * Unit tests of merge (docs/job-folder.md#merge-record, docs/design.md#reference-tests 11): an
 * incomplete job is refused; done records pointing at copies give the concatenated shards and a
 * matching merge.json; a missing final newline is added to the output only; tampered records and
 * results are caught; a result outside the job folder is refused; an existing output needs
 * overwrite; invalid lines; long lines and many blocks (the pipelined reader); a failure leaves the
 * old output and no temporary; merge while working (the follower); an output inside the job folder
 * other than merged.jsonl.
 */
#include "testlib.h"

#include <string.h>
#include "jobfix.h"

#include "eshard/clock.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/merge.h"
#include "eshard/status.h"
#include "json.h"

#include <dirent.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *T;

static int count_temps(const char *dir)
{
	int n = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		n += e->d_name[0] == '.' && strstr(e->d_name, ".tmp") != NULL;
	if (d)
		closedir(d);
	return n;
}

static void sha_of(const char *data, size_t n, char hex[65])
{
	struct es_sha s;
	es_sha_init(&s);
	es_sha_update(&s, data, n);
	es_sha_final(&s, hex);
}

static void test_incomplete_then_merge(void)
{
	int rows[] = { 3, 1, 4 };
	struct jf j;
	char out[2048], p[2048];
	jf_make(&j, T, "job", 3, rows, NULL);
	snprintf(out, sizeof(out), "%s/out/nested/merged.jsonl", T);
	struct es_merge_result r;
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), ES_EINVAL);
	CHECK(!strncmp(es_last_error(), "Cannot merge an incomplete job: pending=3 running=0 stale=0 failed=0 done=0", strlen("Cannot merge an incomplete job: pending=3 running=0 stale=0 failed=0 done=0")));
	CHECK(r.output == NULL);
	jf_done(&j, 0, "a");
	jf_failed(&j, 1, "a", "x");
	jf_lock(&j, 2, "a", 1, 0);
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), ES_EINVAL);
	CHECK(!strncmp(es_last_error(), "Cannot merge an incomplete job: pending=0 running=1 stale=0 failed=1 done=1", strlen("Cannot merge an incomplete job: pending=0 running=1 stale=0 failed=1 done=1")));
	CHECK(!jf_exists(out));

	jf_path(&j, p, sizeof(p), "state/failed/%s.json", j.id[1]);
	unlink(p);
	jf_path(&j, p, sizeof(p), "state/locks/%s.lock", j.id[2]);
	unlink(p);
	jf_done(&j, 1, "b");
	jf_done(&j, 2, "a");
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), 0);
	size_t lc, lo;
	char *cat = jf_concat(&j, &lc), *got = jf_read(out, &lo);
	CHECK_MEM_EQ(got, lo, cat, lc);
	char hex[65];
	sha_of(cat, lc, hex);
	CHECK_STR_EQ(r.sha256, hex);
	CHECK_INT_EQ(r.rows, 8);
	CHECK_INT_EQ(r.num_shards, 3);
	CHECK_INT_EQ(r.bytes, lc);
	CHECK_STR_EQ(r.output, out);
	snprintf(p, sizeof(p), "%s/merge.json", j.dir);
	cJSON *mj = NULL;
	CHECK_INT_EQ(es_json_load(p, &mj), 0);
	int64_t v = 0;
	CHECK(!es_json_get_i64(mj, "rows", &v) && v == 8);
	CHECK(!es_json_get_i64(mj, "num_shards", &v) && v == 3);
	CHECK_STR_EQ(es_json_get_str(mj, "sha256"), hex);
	CHECK_STR_EQ(es_json_get_str(mj, "output_path"), out);
	CHECK_STR_EQ(es_json_get_str(mj, "job_id"), "job");
	CHECK(es_json_get_str(mj, "merged_at") != NULL);
	CHECK_INT_EQ(cJSON_GetArraySize(mj), 6);
	cJSON_Delete(mj);
	/* The manifest's normalized_sha256 is the merged sha when results are unchanged copies. */
	snprintf(p, sizeof(p), "%s/manifest.json", j.dir);
	char *man = jf_read(p, NULL);
	CHECK(man && strstr(man, hex));
	free(man);
	free(r.output);

	/* Exists without overwrite; with overwrite it is replaced. */
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), ES_EEXIST);
	char want[4200];
	snprintf(want, sizeof(want), "Output already exists: %s; pass --overwrite to replace it", out);
	CHECK_STR_EQ(es_last_error(), want);
	jf_writes(out, "old\n");
	CHECK_INT_EQ(es_merge_run(j.dir, out, 1, 0, &r, 1), 0);
	free(got);
	got = jf_read(out, &lo);
	CHECK_MEM_EQ(got, lo, cat, lc);
	free(r.output);
	CHECK_INT_EQ(es_merge_run(j.dir, out, 1, 0, NULL, 1), 0);

	/* A relative output resolves against the current folder. */
	char cwd[4096];
	CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	CHECK(chdir(T) == 0);
	CHECK_INT_EQ(es_merge_run(j.dir, "rel.jsonl", 0, 0, &r, 1), 0);
	snprintf(p, sizeof(p), "%s/rel.jsonl", T);
	CHECK_STR_EQ(r.output, p);
	free(r.output);
	CHECK(chdir(cwd) == 0);
	snprintf(p, sizeof(p), "%s/out/nested", T);
	CHECK_INT_EQ(count_temps(p), 0);
	free(cat);
	free(got);
}

static void test_missing_newline(void)
{
	int rows[] = { 2, 3 };
	struct jf j;
	char out[2048];
	jf_make(&j, T, "nonl", 2, rows, NULL);
	double now = es_time_epoch();
	jf_done_ex(&j, 0, "a", 1, 0, 0, now - 5, now);
	jf_done_ex(&j, 1, "a", 1, 0, 0, now - 5, now);
	snprintf(out, sizeof(out), "%s/nonl.jsonl", T);
	struct es_merge_result r;
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), 0);
	size_t lc, lo;
	char *cat = jf_concat(&j, &lc), *got = jf_read(out, &lo);
	CHECK_MEM_EQ(got, lo, cat, lc);
	CHECK_INT_EQ(r.rows, 5);
	char hex[65];
	sha_of(cat, lc, hex);
	CHECK_STR_EQ(r.sha256, hex);
	free(r.output);
	free(cat);
	free(got);
}

/* Each tampering gives the mismatch error and leaves the previous output alone. */
static void test_tampering(void)
{
	int rows[] = { 2, 2 };
	struct jf j;
	char out[2048], p[4096];
	snprintf(out, sizeof(out), "%s/tamper.jsonl", T);
	struct es_merge_result r;
	double now = es_time_epoch();
	const char *mismatch = "Result checksum or row count mismatch for part-00001-of-00002";

	jf_make(&j, T, "tamper-rows", 2, rows, NULL);
	jf_done(&j, 0, "a");
	jf_done_ex(&j, 1, "a", 0, 1, 0, now - 5, now);
	jf_writes(out, "previous\n");
	CHECK_INT_EQ(es_merge_run(j.dir, out, 1, 0, &r, 1), ES_EINVAL);
	CHECK(!strncmp(es_last_error(), mismatch, strlen(mismatch)));

	jf_make(&j, T, "tamper-sha", 2, rows, NULL);
	jf_done(&j, 0, "a");
	jf_done_ex(&j, 1, "a", 0, 0, 1, now - 5, now);
	CHECK_INT_EQ(es_merge_run(j.dir, out, 1, 0, &r, 1), ES_EINVAL);
	CHECK(!strncmp(es_last_error(), mismatch, strlen(mismatch)));

	/* The result changed after its record was published (same row count). */
	jf_make(&j, T, "tamper-output", 2, rows, NULL);
	jf_done(&j, 0, "a");
	jf_done(&j, 1, "a");
	snprintf(p, sizeof(p), "%s/%s/processed.jsonl", j.dir, j.attempt[1]);
	jf_writes(p, "{\"id\":2,\"text\":\"changed\"}\n{\"id\":3}\n");
	CHECK_INT_EQ(es_merge_run(j.dir, out, 1, 0, &r, 1), ES_EINVAL);
	CHECK(!strncmp(es_last_error(), mismatch, strlen(mismatch)));

	size_t n;
	char *old = jf_read(out, &n);
	CHECK_STR_EQ(old, "previous\n");
	free(old);
	CHECK_INT_EQ(count_temps(T), 0);
	CHECK(r.output == NULL);

	/* An invalid line in a result: the validator's message with the result's path. */
	jf_writes(p, "{\"id\":2}\n   \n");
	CHECK_INT_EQ(es_merge_run(j.dir, out, 1, 0, &r, 1), ES_EINVAL);
	char want[4200];
	snprintf(want, sizeof(want), "Blank JSONL record at %s:2", p);
	CHECK_STR_EQ(es_last_error(), want);
	jf_writes(p, "{\"id\":2}\n[1]\n");
	CHECK_INT_EQ(es_merge_run(j.dir, out, 1, 0, &r, 1), ES_EINVAL);
	snprintf(want, sizeof(want), "JSONL record must be an object at %s:2", p);
	CHECK_STR_EQ(es_last_error(), want);
	CHECK_INT_EQ(count_temps(T), 0);
}

static void set_output_path(const struct jf *j, int i, const char *value)
{
	char p[2048];
	jf_path(j, p, sizeof(p), "state/done/%s.json", j->id[i]);
	cJSON *rec = NULL;
	CHECK_INT_EQ(es_json_load(p, &rec), 0);
	es_json_set_str(rec, "output_path", value);
	CHECK_INT_EQ(es_json_write_atomic(p, rec), 0);
	cJSON_Delete(rec);
}

static void test_outside_job_folder(void)
{
	int rows[] = { 1, 1 };
	struct jf j;
	char out[2048], p[2048], want[4200];
	jf_make(&j, T, "escape", 2, rows, NULL);
	jf_done(&j, 0, "a");
	jf_done(&j, 1, "a");
	snprintf(out, sizeof(out), "%s/escape.jsonl", T);
	struct es_merge_result r;
	/* A copy of the real result one level above the job folder. */
	snprintf(p, sizeof(p), "%s/outside.jsonl", T);
	char src[4096];
	snprintf(src, sizeof(src), "%s/%s/processed.jsonl", j.dir, j.attempt[1]);
	CHECK_INT_EQ(es_fs_copy_file(src, p), 0);
	set_output_path(&j, 1, "../outside.jsonl");
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), ES_EINVAL);
	CHECK_STR_EQ(es_last_error(), "Done record for part-00001-of-00002 points outside the job folder: ../outside.jsonl");
	set_output_path(&j, 1, p);
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), ES_EINVAL);
	snprintf(want, sizeof(want), "Done record for part-00001-of-00002 points outside the job folder: %s", p);
	CHECK_STR_EQ(es_last_error(), want);
	/* A symlink inside the job folder that leads out is refused too (resolved first). */
	snprintf(src, sizeof(src), "%s/link.jsonl", j.dir);
	CHECK(symlink(p, src) == 0);
	set_output_path(&j, 1, "link.jsonl");
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), ES_EINVAL);
	CHECK(strstr(es_last_error(), "points outside the job folder: link.jsonl") != NULL);
	CHECK(!jf_exists(out));
	CHECK_INT_EQ(count_temps(T), 0);
	/* A missing done record field. */
	set_output_path(&j, 1, "");
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), ES_EINVAL);
	CHECK(strstr(es_last_error(), "lacks output_path, rows or sha256") != NULL);
}

/* Results bigger than a block, with a line longer than a block, through the pipeline. */
static void test_big_results(void)
{
	int rows[] = { 1, 1, 1 };
	struct jf j;
	char out[2048], p[4096], hex[65];
	jf_make(&j, T, "big", 3, rows, NULL);
	struct es_buf all = ES_BUF_INIT;
	long long want_rows = 0;
	for (int i = 0; i < 3; i++) {
		struct es_buf d = ES_BUF_INIT;
		int lines = 0;
		if (i == 0) {
			/* About 13 MB of short lines. */
			for (int k = 0; d.len < (13u << 20); k++, lines++)
				es_buf_printf(&d, "{\"k\":%d,\"t\":\"%0200d\"}\n", k, k);
		} else if (i == 1) {
			/* One 9 MB line between two short ones, the last without '\n'. */
			es_buf_adds(&d, "{\"a\":1}\n{\"long\":\"");
			for (int k = 0; k < (9 << 20) / 64; k++)
				es_buf_adds(&d, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
			es_buf_adds(&d, "\"}\n{\"z\":[1,2,3]}");
			lines = 3;
		} else {
			es_buf_adds(&d, "{\"small\":true}\n");
			lines = 1;
		}
		jf_attempt(&j, i, 1, "h", "done", es_time_epoch());
		snprintf(p, sizeof(p), "%s/%s/processed.jsonl", j.dir, j.attempt[i]);
		jf_write(p, d.data, d.len);
		sha_of(d.data, d.len, hex);
		char rec[4096];
		snprintf(rec, sizeof(rec), "{\"hostname\": \"h\", \"output_path\": \"%s/processed.jsonl\", "
			 "\"rows\": %d, \"sha256\": \"%s\", \"status\": \"done\"}\n", j.attempt[i], lines, hex);
		jf_path(&j, p, sizeof(p), "state/done/%s.json", j.id[i]);
		jf_writes(p, rec);
		es_buf_add(&all, d.data, d.len);
		if (d.data[d.len - 1] != '\n')
			es_buf_addc(&all, '\n');
		want_rows += lines;
		es_buf_free(&d);
	}
	snprintf(out, sizeof(out), "%s/big.jsonl", T);
	struct es_merge_result r;
	CHECK_INT_EQ(es_merge_run(j.dir, out, 0, 0, &r, 1), 0);
	size_t lo;
	char *got = jf_read(out, &lo);
	CHECK(lo == all.len && got && !memcmp(got, all.data, lo));
	sha_of(all.data, all.len, hex);
	CHECK_STR_EQ(r.sha256, hex);
	CHECK_INT_EQ(r.rows, want_rows);
	free(r.output);
	free(got);
	es_buf_free(&all);
}

/* The size of the one merge temporary in dir (-1 when there is none or more than one). */
static long temp_size(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	long size = -1;
	int n = 0;
	while (d && (e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		if (e->d_name[0] == '.' && l > 4 && !strcmp(e->d_name + l - 4, ".tmp")) {
			char p[4200];
			struct stat st;
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			if (stat(p, &st) == 0)
				size = (long)st.st_size;
			n++;
		}
	}
	if (d)
		closedir(d);
	return n == 1 ? size : -1;
}

/* Wait (up to 5 s) until dir's merge temporary has size bytes. */
static int wait_temp_size(const char *dir, long size)
{
	for (int k = 0; k < 500; k++) {
		if (temp_size(dir) == size)
			return 1;
		usleep(10 * 1000);
	}
	fprintf(stderr, "merge temporary in %s: %ld bytes, expected %ld\n", dir, temp_size(dir), size);
	return 0;
}

/* Wait (up to 5 s) until path has been opened n times after this call. A follower that looks
 * for a done record it does not find reads the shard's lock instead (a fence's copy of the
 * record), so two opens of that lock mean that a whole look began after the call. */
static int wait_opens(const char *path, int n)
{
	int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (fd < 0 || inotify_add_watch(fd, path, IN_OPEN) < 0) {
		perror(path);
		if (fd >= 0)
			close(fd);
		return 0;
	}
	int seen = 0;
	double end = es_time_mono() + 5;
	while (seen < n && es_time_mono() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
		ssize_t len = poll(&p, 1, 100) > 0 ? read(fd, buf, sizeof(buf)) : 0;
		for (ssize_t o = 0; o < len;) {
			const struct inotify_event *e = (const struct inotify_event *)(buf + o);
			seen += (e->mask & IN_OPEN) != 0;
			o += (ssize_t)(sizeof(*e) + e->len);
		}
	}
	close(fd);
	if (seen < n)
		fprintf(stderr, "%s: opened %d times in 5 s, expected %d\n", path, seen, n);
	return seen >= n;
}

static long shard_size(const struct jf *j, int i)
{
	char p[2048];
	struct stat st;
	jf_path(j, p, sizeof(p), "shards/%s.jsonl", j->id[i]);
	return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* Merge while working: the follower appends shard 0 as soon as it is done, not shard 2 while
 * shard 1 is not, then 1 and 2 together; the finish renames a file byte-identical to
 * es_merge_run's, and tells what was re-read. A follower that meets a bad record gives up
 * silently, and the finish reports what es_merge_run reports. Abort leaves no temporary. */
static void test_follow(void)
{
	int rows[] = { 3, 1, 4, 2 };
	struct jf j;
	char out[4200], dir[2048], ref[2048];
	jf_make(&j, T, "follow", 4, rows, NULL);
	snprintf(dir, sizeof(dir), "%s/follow-out", T);
	snprintf(out, sizeof(out), "%s/merged.jsonl", dir);
	struct es_merge_follow *f = NULL;
	CHECK_INT_EQ(es_merge_follow_start(j.dir, out, 0.05, &f), 0);
	CHECK(wait_temp_size(dir, 0));
	jf_done(&j, 0, "a");
	CHECK(wait_temp_size(dir, shard_size(&j, 0)));
	/* Shard 1 runs: the follower's every look for its record ends in its lock. */
	jf_lock(&j, 1, "b", 0, 1);
	char lock1[2048];
	jf_path(&j, lock1, sizeof(lock1), "state/locks/%s.lock", j.id[1]);
	jf_done(&j, 2, "a");
	CHECK(wait_opens(lock1, 2)); /* the follower looked again since shard 2 is done */
	CHECK_INT_EQ(temp_size(dir), shard_size(&j, 0)); /* shard 1 is not done: 2 waits */
	jf_done(&j, 1, "b");
	CHECK(wait_temp_size(dir, shard_size(&j, 0) + shard_size(&j, 1) + shard_size(&j, 2)));
	/* Not complete yet: the finish says so, as es_merge_run does. */
	struct es_merge_result r;
	uint64_t from = 7;
	int64_t from_rows = 7;
	CHECK_INT_EQ(es_merge_follow_finish(f, 0, NULL, &r, 1, &from, &from_rows), ES_EINVAL);
	CHECK(!strncmp(es_last_error(), "Cannot merge an incomplete job: pending=1", strlen("Cannot merge an incomplete job: pending=1")));
	CHECK_INT_EQ(from, 0);
	CHECK(!jf_exists(out));
	CHECK_INT_EQ(count_temps(dir), 0);

	/* Again, to the end. */
	CHECK_INT_EQ(es_merge_follow_start(j.dir, out, 0.05, &f), 0);
	CHECK(wait_temp_size(dir, shard_size(&j, 0) + shard_size(&j, 1) + shard_size(&j, 2)));
	jf_done(&j, 3, "a");
	CHECK(wait_temp_size(dir, shard_size(&j, 0) + shard_size(&j, 1) + shard_size(&j, 2) + shard_size(&j, 3)));
	CHECK_INT_EQ(es_merge_follow_finish(f, 0, NULL, &r, 1, &from, &from_rows), 0);
	CHECK_INT_EQ(r.rows, 10);
	CHECK_INT_EQ(r.num_shards, 4);
	CHECK_INT_EQ(from_rows, 10);
	CHECK_INT_EQ(from, r.bytes);
	size_t lc, lo, lr;
	char *cat = jf_concat(&j, &lc), *got = jf_read(out, &lo);
	CHECK_MEM_EQ(got, lo, cat, lc);
	char hex[65];
	sha_of(cat, lc, hex);
	CHECK_STR_EQ(r.sha256, hex);
	free(r.output);
	snprintf(ref, sizeof(ref), "%s/follow-ref.jsonl", T);
	CHECK_INT_EQ(es_merge_run(j.dir, ref, 0, 0, &r, 1), 0);
	char *want = jf_read(ref, &lr);
	CHECK_MEM_EQ(got, lo, want, lr);
	CHECK_STR_EQ(r.sha256, hex);
	free(r.output);
	CHECK_INT_EQ(count_temps(dir), 0);

	/* Checked by the caller (verify, issue 29): the finish looks no record up again, and takes
	 * what it merges after the follower from the caller's status; the same output. */
	struct es_manifest mm;
	struct es_status st;
	CHECK_INT_EQ(es_manifest_load(j.dir, &mm), 0);
	CHECK_INT_EQ(es_status_collect(&mm, 0, &st), 0);
	CHECK(st.complete);
	CHECK_INT_EQ(es_merge_follow_start(j.dir, out, 0.05, &f), 0);
	CHECK(wait_temp_size(dir, shard_size(&j, 0) + shard_size(&j, 1) + shard_size(&j, 2) + shard_size(&j, 3)));
	test_watched = "-of-00004.json"; /* a record */
	test_watched_opens = 0;
	CHECK_INT_EQ(es_merge_follow_finish(f, 0, &st, &r, 1, &from, &from_rows), 0);
	if (!CHECK_INT_EQ(test_watched_opens, 0))
		fprintf(stderr, "  %d record opens in a checked finish\n", test_watched_opens);
	test_watched = NULL;
	free(got);
	got = jf_read(out, &lo);
	CHECK_MEM_EQ(got, lo, cat, lc);
	free(r.output);
	/* A follower that appended nothing yet: the whole job from the status, no record read. */
	char rec0[2048], away[2048 + 8];
	jf_path(&j, rec0, sizeof(rec0), "state/done/%s.json", j.id[0]);
	snprintf(away, sizeof(away), "%s.away", rec0);
	CHECK_INT_EQ(rename(rec0, away), 0); /* it waits on shard 0's record */
	CHECK_INT_EQ(es_merge_follow_start(j.dir, out, 3600, &f), 0); /* one look, then it waits */
	usleep(200 * 1000);
	CHECK_INT_EQ(rename(away, rec0), 0);
	CHECK_INT_EQ(temp_size(dir), 0);
	test_watched = "-of-00004.json";
	test_watched_opens = 0;
	CHECK_INT_EQ(es_merge_follow_finish(f, 0, &st, &r, 1, &from, &from_rows), 0);
	if (!CHECK_INT_EQ(test_watched_opens, 0))
		fprintf(stderr, "  %d record opens merging from a checked status\n", test_watched_opens);
	test_watched = NULL;
	CHECK_INT_EQ(from_rows, 0);
	CHECK_INT_EQ(r.rows, 10);
	free(got);
	got = jf_read(out, &lo);
	CHECK_MEM_EQ(got, lo, cat, lc);
	free(r.output);
	es_status_free(&st);
	es_manifest_free(&mm);

	/* A tampered record (rows off by one): the follower gives up, the finish reports it. */
	jf_done_ex(&j, 1, "b", 0, 1, 0, es_time_epoch() - 5, es_time_epoch());
	CHECK_INT_EQ(es_merge_run(j.dir, ref, 1, 0, NULL, 1), ES_EINVAL);
	char err[4096];
	snprintf(err, sizeof(err), "%s", es_last_error());
	CHECK(strstr(err, "mismatch") != NULL);
	CHECK_INT_EQ(es_merge_follow_start(j.dir, out, 0.05, &f), 0);
	usleep(300 * 1000);
	CHECK_INT_EQ(es_merge_follow_finish(f, 0, NULL, &r, 1, &from, &from_rows), ES_EINVAL);
	CHECK_STR_EQ(es_last_error(), err);
	CHECK_INT_EQ(from, 0);
	char *old = jf_read(out, &lo);
	CHECK_MEM_EQ(old, lo, cat, lc); /* the old output stays */
	free(old);
	CHECK_INT_EQ(count_temps(dir), 0);

	/* Abort: nothing left behind. */
	CHECK_INT_EQ(es_merge_follow_start(j.dir, out, 0.05, &f), 0);
	usleep(100 * 1000);
	es_merge_follow_abort(f);
	CHECK_INT_EQ(count_temps(dir), 0);
	free(cat);
	free(got);
	free(want);
}

/* An output inside the job folder is refused before anything is written (the job's files are
 * left as they were, even with --overwrite, whatever name leads there), except merged.jsonl. */
static void test_output_in_job_folder(void)
{
	int rows[] = { 2, 1 };
	struct jf j;
	jf_make(&j, T, "inside", 2, rows, NULL);
	jf_done(&j, 0, "a");
	jf_done(&j, 1, "b");
	char p[2300], man[2100], alias[2100];
	snprintf(man, sizeof(man), "%s/manifest.json", j.dir);
	char *before = jf_read(man, NULL);
	snprintf(alias, sizeof(alias), "%s/alias", T);
	CHECK_INT_EQ(symlink(j.dir, alias), 0);
	static const char *const refused[] = { "manifest.json", "state/done/part-00000-of-00002.json", "shards/../recipe.yaml",
					       "report.html", "merge.json", "attempts/x.jsonl", "state/../state" };
	struct es_merge_result r;
	struct es_merge_follow *f = NULL;
	es_log_quiet_begin();
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", i % 2 ? alias : j.dir, refused[i]);
		if (!CHECK_INT_EQ(es_merge_run(j.dir, p, 1, 0, &r, 1), ES_EUSAGE))
			fprintf(stderr, "  output: %s\n", p);
		CHECK(strstr(es_last_error(), "is inside the job folder") != NULL);
		CHECK_INT_EQ(es_merge_follow_start(j.dir, p, 0.05, &f), ES_EUSAGE);
		CHECK(f == NULL);
	}
	es_log_quiet_end();
	char *after = jf_read(man, NULL);
	CHECK_STR_EQ(after, before);
	snprintf(p, sizeof(p), "%s/merge.json", j.dir);
	CHECK(!jf_exists(p));
	CHECK_INT_EQ(count_temps(j.dir), 0);
	/* Nor does it replace a FIFO (or a device such as /dev/null) by renaming a file over it. */
	snprintf(p, sizeof(p), "%s/a-fifo", T);
	CHECK_INT_EQ(mkfifo(p, 0644), 0);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_merge_run(j.dir, p, 1, 0, &r, 1), ES_EUSAGE);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "Output is not a regular file") != NULL);
	struct stat st;
	CHECK(lstat(p, &st) == 0 && S_ISFIFO(st.st_mode));
	CHECK_INT_EQ(count_temps(T), 0);
	/* The default output, by any name, is the job's own. */
	snprintf(p, sizeof(p), "%s/merged.jsonl", alias);
	CHECK_INT_EQ(es_merge_run(j.dir, p, 0, 0, &r, 1), 0);
	snprintf(p, sizeof(p), "%s/merged.jsonl", j.dir);
	CHECK_STR_EQ(r.output, p);
	free(r.output);
	free(before);
	free(after);
}

/* A result that exists but that this node's client answers ENOENT for (a forgotten inode
 * behind a kept kernel entry on a FUSE client) is opened again after a listing of its folder:
 * twice is recovered from; one that stays absent is an error that says how often it was
 * looked for, and no output is left. */
static void test_result_looks_absent(void)
{
	int rows[] = { 2, 3 };
	struct jf j;
	char out[2048];
	jf_make(&j, T, "vanish", 2, rows, NULL);
	double now = es_time_epoch();
	jf_done_ex(&j, 0, "a", 0, 0, 0, now - 5, now);
	jf_done_ex(&j, 1, "a", 0, 0, 0, now - 5, now);
	snprintf(out, sizeof(out), "%s/vanish.jsonl", T);
	struct es_merge_result r;
	test_vanished = "/processed.jsonl";
	test_vanished_opens = 2;
	es_log_quiet_begin();
	int rc = es_merge_run(j.dir, out, 0, 0, &r, 1);
	es_log_quiet_end();
	if (CHECK_INT_EQ(rc, 0)) {
		CHECK_INT_EQ(r.rows, 5);
		free(r.output);
	}
	CHECK(test_vanished_opens <= 0);
	test_vanished_opens = 1000;
	es_log_quiet_begin();
	rc = es_merge_run(j.dir, out, 1, 0, &r, 1);
	es_log_quiet_end();
	test_vanished = NULL;
	CHECK(rc != 0);
	CHECK(strstr(es_last_error(), "cannot open result") && strstr(es_last_error(), "looked for 5 times"));
	CHECK_INT_EQ(count_temps(T), 0);
}

int main(void)
{
	T = test_tmpdir();
	test_incomplete_then_merge();
	test_missing_newline();
	test_tampering();
	test_outside_job_folder();
	test_big_results();
	test_follow();
	test_output_in_job_folder();
	test_result_looks_absent();
	return test_done();
}
