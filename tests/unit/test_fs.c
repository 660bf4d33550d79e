/* fs: path resolution against Python's os.path.realpath, atomic and exclusive writes, moves of
 * a stage's entries, mount points. */
#include "testlib.h"

#include "eshard/fs.h"
#include "eshard/log.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void hung(int sig)
{
	(void)sig;
	static const char msg[] = "FAIL: a read of a FIFO blocked (10 s)\n";
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

/* A FIFO, a socket or a folder where a regular file is expected is refused at once, never read
 * and never waited on (a reader of a FIFO blocks until a writer comes): by es_fs_open_read, so
 * by every reader built on it; a missing file is 1, a regular one opens. An alarm turns a
 * blocked open or read into a failure. */
static void test_not_regular(const char *t)
{
	char fifo[4096], sock[4096], dir[4096], file[4096], link[4096], miss[4096];
	snprintf(fifo, sizeof(fifo), "%s/nr/fifo.json", t);
	snprintf(sock, sizeof(sock), "%s/nr/sock.json", t);
	snprintf(dir, sizeof(dir), "%s/nr/dir.json", t);
	snprintf(file, sizeof(file), "%s/nr/file.json", t);
	snprintf(link, sizeof(link), "%s/nr/link.json", t);
	snprintf(miss, sizeof(miss), "%s/nr/missing.json", t);
	CHECK_INT_EQ(es_fs_mkdirs(dir, 0755), 0);
	CHECK_INT_EQ(mkfifo(fifo, 0644), 0);
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	CHECK(strlen(sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock, strlen(sock) < sizeof(sa.sun_path) ? strlen(sock) : 0);
	CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHECK_INT_EQ(es_fs_write_atomic(file, "{}\n", 3), 0);
	CHECK_INT_EQ(symlink(file, link), 0);
	signal(SIGALRM, hung);
	alarm(10);
	struct es_buf b = ES_BUF_INIT;
	int fd = -1;
	es_log_quiet_begin();
	CHECK_INT_EQ(es_fs_read_file(fifo, &b, 0), ES_EINVAL);
	CHECK(strstr(es_last_error(), "fifo.json is a FIFO, not a regular file") != NULL);
	CHECK_INT_EQ(es_fs_open_read(fifo, O_RDWR, &fd), ES_EINVAL);
	CHECK_INT_EQ(fd, -1);
	CHECK_INT_EQ(es_fs_read_file(sock, &b, 0), ES_EINVAL);
	CHECK(strstr(es_last_error(), "sock.json is not a regular file") != NULL);
	CHECK_INT_EQ(es_fs_read_file(dir, &b, 0), ES_EINVAL);
	CHECK(strstr(es_last_error(), "dir.json is a folder, not a regular file") != NULL);
	CHECK_INT_EQ(es_fs_open_read(link, O_RDONLY | O_NOFOLLOW, &fd), ES_EINVAL);
	CHECK(strstr(es_last_error(), "link.json is a symbolic link") != NULL);
	CHECK_INT_EQ(es_fs_read_file(miss, &b, 0), ES_ENOENT);
	es_log_quiet_end();
	CHECK_INT_EQ(es_fs_open_read(miss, O_RDONLY, &fd), 1);
	/* Below the boundary too, where the folders are walked one at a time. */
	char root[4096];
	snprintf(root, sizeof(root), "%s/nr", t);
	es_fs_set_boundary(root);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_fs_read_file(fifo, &b, 0), ES_EINVAL);
	es_log_quiet_end();
	es_fs_set_boundary(NULL);
	/* A log tail and an existence check neither block. */
	CHECK_INT_EQ(es_fs_read_tail(fifo, 5, 2048, &b), -1);
	CHECK_INT_EQ(es_fs_exists_fresh(fifo), 1);
	CHECK_INT_EQ(es_fs_exists_fresh(sock), 1);
	alarm(0);
	/* A regular file opens, blocking again (no O_NONBLOCK left on it), through a link when asked. */
	CHECK_INT_EQ(es_fs_open_read(link, O_RDONLY, &fd), 0);
	CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
	if (fd >= 0)
		close(fd);
	CHECK_INT_EQ(es_fs_read_file(file, &b, 0), 0);
	CHECK_STR_EQ(b.data, "{}\n");
	if (s >= 0)
		close(s);
	es_buf_free(&b);
}

static int open_fds(void)
{
	int n = 0;
	char p[64];
	for (int fd = 0; fd < 1024; fd++) {
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		n += access(p, F_OK) == 0;
	}
	return n;
}

/* Descriptors of this process open on the folder dir: with O_PATH (a walk's) and without (an
 * fsync's), by /proc/self/fd and the flags of /proc/self/fdinfo. */
static void fds_on(const char *dir, int *walks, int *syncs)
{
	*walks = *syncs = 0;
	for (int fd = 0; fd < 1024; fd++) {
		char p[64], target[4096], line[256];
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(p, target, sizeof(target) - 1);
		if (n < 0)
			continue;
		target[n] = '\0';
		if (strcmp(target, dir))
			continue;
		snprintf(p, sizeof(p), "/proc/self/fdinfo/%d", fd);
		FILE *f = fopen(p, "r");
		unsigned long flags = 0;
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "flags: %lo", &flags) == 1)
				break;
		if (f)
			fclose(f);
		if (flags & O_PATH)
			(*walks)++;
		else
			(*syncs)++;
	}
}

/* A writer's walk cache: an attempt folder three levels down is walked once and its fsync
 * descriptor kept for the next atomic write there (on FUSE an OPENDIR and a RELEASEDIR less
 * each); every write lands as without the cache; nothing stays open after end. */
static void test_walk_cache_writes(const char *t)
{
	char root[4096], dir[4096 + 64], p[4096 + 128];
	snprintf(root, sizeof(root), "%s/wcw", t);
	snprintf(dir, sizeof(dir), "%s/attempts/s0/0001-x", root);
	CHECK_INT_EQ(es_fs_mkdirs(dir, 0755), 0);
	es_fs_set_boundary(root);
	int before = open_fds(), walks, syncs;
	struct es_buf b = ES_BUF_INIT;
	es_fs_walk_cache_begin();
	for (int k = 0; k < 3; k++) {
		char text[32];
		snprintf(text, sizeof(text), "v%d", k);
		snprintf(p, sizeof(p), "%s/attempt.json", dir);
		CHECK_INT_EQ(es_fs_write_atomic(p, text, strlen(text)), 0);
		CHECK_INT_EQ(es_fs_read_file(p, &b, 0), 0);
		CHECK_STR_EQ(b.data, text);
		fds_on(dir, &walks, &syncs);
		CHECK_INT_EQ(walks, 1);
		CHECK_INT_EQ(syncs, 1);
	}
	es_fs_walk_cache_end();
	fds_on(dir, &walks, &syncs);
	CHECK_INT_EQ(walks + syncs, 0);
	CHECK_INT_EQ(open_fds(), before);
	/* Without the cache, nothing is kept between writes. */
	snprintf(p, sizeof(p), "%s/attempt.json", dir);
	CHECK_INT_EQ(es_fs_write_atomic(p, "v3", 2), 0);
	CHECK_INT_EQ(open_fds(), before);
	es_fs_set_boundary(NULL);
	es_buf_free(&b);
}

/* The walk cache (fs.h): between begin and end, files below the boundary read and written as
 * without it, more folders than it holds, a link planted on the way still refused, nothing
 * left open after end. */
static void test_walk_cache(const char *t)
{
	char root[4096], p[4096 + 64];
	snprintf(root, sizeof(root), "%s/wc", t);
	for (int i = 0; i < 40; i++) {
		snprintf(p, sizeof(p), "%s/a/s%02d", root, i);
		CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
		snprintf(p, sizeof(p), "%s/a/s%02d/f.json", root, i);
		CHECK_INT_EQ(es_fs_write_atomic(p, p, strlen(p)), 0);
	}
	snprintf(p, sizeof(p), "%s/elsewhere", t);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	es_fs_set_boundary(root);
	int before = open_fds();
	struct es_buf b = ES_BUF_INIT;
	es_fs_walk_cache_begin();
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 40; i++) {
			snprintf(p, sizeof(p), "%s/a/s%02d/f.json", root, i);
			es_fs_walk_cache_begin(); /* nested: only the outer end empties it */
			CHECK_INT_EQ(es_fs_read_file(p, &b, 0), 0);
			es_fs_walk_cache_end();
			CHECK_STR_EQ(b.data, p);
		}
	snprintf(p, sizeof(p), "%s/a/s00/new.json", root);
	CHECK_INT_EQ(es_fs_write_atomic(p, "new", 3), 0);
	CHECK_INT_EQ(es_fs_read_file(p, &b, 0), 0);
	CHECK_STR_EQ(b.data, "new");
	/* A folder replaced by a link after the walks began is refused like any link. */
	char link[4096 + 64];
	snprintf(link, sizeof(link), "%s/c", root);
	snprintf(p, sizeof(p), "%s/elsewhere", t);
	CHECK_INT_EQ(symlink(p, link), 0);
	snprintf(p, sizeof(p), "%s/c/y.json", root);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_fs_read_file(p, &b, 0), ES_EINVAL);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "is a symbolic link") != NULL);
	CHECK(open_fds() > before);
	es_fs_walk_cache_end();
	CHECK_INT_EQ(open_fds(), before);
	es_fs_set_boundary(NULL);
	es_buf_free(&b);
}

/* Issue 29: es_fs_lstat_beneath, a job view's stat of a shard's attempt folder (jobview.c
 * read_published_only): a folder's identity and link count below the boundary, from the walk
 * cache's folder in one call once kept; a link at the end is the link's own identity, a link on
 * the way, a missing name, a path outside the boundary and ".." are -1. */
static void test_lstat_beneath(const char *t)
{
	char root[4096], p[4096 + 64], q[4096 + 64];
	snprintf(root, sizeof(root), "%s/lb", t);
	snprintf(p, sizeof(p), "%s/attempts/s1/0001-x", root);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/elsewhere/s1/0001-x", t);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/elsewhere", t);
	snprintf(q, sizeof(q), "%s/linked", root);
	CHECK_INT_EQ(symlink(p, q), 0);
	snprintf(q, sizeof(q), "%s/attempts/s2", root);
	CHECK_INT_EQ(symlink("s1", q), 0);
	struct stat st;
	snprintf(p, sizeof(p), "%s/attempts/s1", root);
	CHECK_INT_EQ(es_fs_lstat_beneath(p, &st), -1); /* no boundary */
	es_fs_set_boundary(root);
	es_fs_walk_cache_begin();
	CHECK_INT_EQ(es_fs_lstat_beneath(p, &st), 0);
	CHECK(S_ISDIR(st.st_mode));
	CHECK_INT_EQ((int)st.st_nlink, 3); /* ext4, tmpfs, xfs: 2 + its one sub-folder */
	test_watched = "/lb";
	test_watched_opens = 0;
	CHECK_INT_EQ(es_fs_lstat_beneath(p, &st), 0); /* attempts/ is kept: no open */
	CHECK_INT_EQ(test_watched_opens, 0);
	test_watched = NULL;
	snprintf(p, sizeof(p), "%s/attempts/s2", root);
	CHECK_INT_EQ(es_fs_lstat_beneath(p, &st), 0);
	CHECK(S_ISLNK(st.st_mode));
	snprintf(p, sizeof(p), "%s/linked/s1", root);
	CHECK_INT_EQ(es_fs_lstat_beneath(p, &st), -1);
	snprintf(p, sizeof(p), "%s/attempts/s3", root);
	CHECK_INT_EQ(es_fs_lstat_beneath(p, &st), -1);
	snprintf(p, sizeof(p), "%s/attempts/..", root);
	CHECK_INT_EQ(es_fs_lstat_beneath(p, &st), -1);
	snprintf(p, sizeof(p), "%s/elsewhere/s1", t);
	CHECK_INT_EQ(es_fs_lstat_beneath(p, &st), -1);
	es_fs_walk_cache_end();
	es_fs_set_boundary(NULL);
}

/* An output a command writes where the user says may not replace what the job needs: inside
 * the job folder, after ".." and links, only the command's own file at its root is allowed. */
static void test_check_output(const char *t)
{
	char job[4096], p[4200], alias[4096];
	struct es_buf r = ES_BUF_INIT;
	snprintf(job, sizeof(job), "%s/co/job", t);
	snprintf(p, sizeof(p), "%s/state/done", job);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	snprintf(alias, sizeof(alias), "%s/co/alias", t);
	CHECK_INT_EQ(symlink("job", alias), 0);
	snprintf(p, sizeof(p), "%s/co/job/report.html", t);
	CHECK_INT_EQ(symlink("manifest.json", p), 0); /* a link in the own file's place */
	static const char *const refused[] = {
		"job/manifest.json", "job/state/done/part-00000-of-00002.json", "job/state/../recipe.yaml",
		"alias/shards/new.jsonl", "job", "job/", "job/merge.json", "job/new/x.html", "alias/report.html",
		"job/report.html", "out/../job/state",
	};
	es_log_quiet_begin();
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		snprintf(p, sizeof(p), "%s/co/%s", t, refused[i]);
		if (!CHECK_INT_EQ(es_fs_check_output(p, alias, "merged.jsonl", &r), ES_EUSAGE))
			fprintf(stderr, "  output: %s\n", refused[i]);
		CHECK(strstr(es_last_error(), "is inside the job folder") != NULL);
		CHECK(strstr(es_last_error(), refused[i]) != NULL);
	}
	es_log_quiet_end();
	snprintf(p, sizeof(p), "%s/co/job/manifest.json", t);
	es_log_quiet_begin();
	es_fs_check_output(p, job, "report.html", NULL);
	es_log_quiet_end();
	char want[13000];
	snprintf(want, sizeof(want), "Output %s is inside the job folder %s, where this command writes only %s/report.html: "
		 "give a path outside the job folder", p, job, job);
	CHECK_STR_EQ(es_last_error(), want);
	static const char *const allowed[] = { "job/merged.jsonl", "alias/./merged.jsonl", "job/state/../merged.jsonl",
					       "merged.jsonl", "job2/manifest.json", "jobmerged.jsonl" };
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
		snprintf(p, sizeof(p), "%s/co/%s", t, allowed[i]);
		if (!CHECK_INT_EQ(es_fs_check_output(p, job, "merged.jsonl", &r), 0))
			fprintf(stderr, "  output: %s\n", allowed[i]);
	}
	snprintf(p, sizeof(p), "%s/co/alias/merged.jsonl", t);
	CHECK_INT_EQ(es_fs_check_output(p, alias, "merged.jsonl", &r), 0);
	snprintf(p, sizeof(p), "%s/merged.jsonl", job);
	CHECK_STR_EQ(r.data, p); /* resolved */
	es_buf_free(&r);
}

static void check_against_python(const char *root, const char *const *items, size_t n)
{
	/* One python3 call for every item: realpath(root/item) with strict=False. */
	char list[4096], cmd[8192];
	snprintf(list, sizeof(list), "%s/items.txt", root);
	FILE *f = fopen(list, "w");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s\n", items[i]);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "python3 -c 'import os,sys\nfor l in open(sys.argv[1]).read().splitlines(): print(os.path.realpath(os.path.join(sys.argv[2], l)))' %s %s", list, root);
	FILE *p = popen(cmd, "r");
	CHECK(p != NULL);
	char line[4096];
	for (size_t i = 0; i < n && fgets(line, sizeof(line), p); i++) {
		line[strcspn(line, "\n")] = '\0';
		struct es_buf in = ES_BUF_INIT, out = ES_BUF_INIT;
		es_buf_printf(&in, "%s/%s", root, items[i]);
		CHECK_INT_EQ(es_fs_resolve(in.data, &out), 0);
		if (!CHECK_STR_EQ(out.data, line))
			fprintf(stderr, "  item: %s\n", items[i]);
		es_buf_free(&in);
		es_buf_free(&out);
	}
	CHECK_INT_EQ(pclose(p), 0);
}

/* A stage's entries moved into the folder being published, by two publishers: each entry moves
 * once; the second finds it gone (1), also when the whole stage is gone; a folder in the way
 * that is not empty is an error. */
static void check_move_entry(const char *t)
{
	char stage[4096], from[4200], to[4200];
	snprintf(stage, sizeof(stage), "%s/pub/.pub.preparing.x", t);
	snprintf(from, sizeof(from), "%s/shards", stage);
	CHECK_INT_EQ(es_fs_mkdirs(from, 0755), 0);
	snprintf(from, sizeof(from), "%s/shards/part.jsonl", stage);
	CHECK_INT_EQ(es_fs_write_atomic(from, "{}\n", 3), 0);
	snprintf(from, sizeof(from), "%s/shards", stage);
	snprintf(to, sizeof(to), "%s/pub/shards", t);
	CHECK_INT_EQ(es_fs_move_entry(from, to), 0);
	CHECK_INT_EQ(es_fs_move_entry(from, to), 1);
	snprintf(to, sizeof(to), "%s/pub/shards/part.jsonl", t);
	struct stat st;
	CHECK(stat(to, &st) == 0 && st.st_size == 3);
	CHECK_INT_EQ(rmdir(stage), 0);
	snprintf(to, sizeof(to), "%s/pub/shards", t);
	CHECK_INT_EQ(es_fs_move_entry(from, to), 1);
	snprintf(from, sizeof(from), "%s/pub/other", t);
	CHECK_INT_EQ(es_fs_mkdirs(from, 0755), 0);
	es_log_quiet_begin();
	CHECK(es_fs_move_entry(from, to) < 0);
	CHECK(strstr(es_last_error(), "cannot rename") != NULL);
	es_log_quiet_end();
}

/* A mount point: /proc is one wherever these tests run; a folder of the test's own is not. */
static void check_mount_point(const char *t)
{
	CHECK_INT_EQ(es_fs_is_mount_point("/proc"), 1);
	CHECK_INT_EQ(es_fs_is_mount_point(t), 0);
	char p[4096];
	snprintf(p, sizeof(p), "%s/no-such-folder", t);
	es_log_quiet_begin();
	CHECK(es_fs_is_mount_point(p) < 0);
	es_log_quiet_end();
}

/* The file-system probe: a local folder has everything a job folder needs and is left as it
 * was; a folder that cannot be written is an I/O error naming it. (A file system that lacks one
 * of them, a FUSE mount without hard links, is tests/e2e/test_prepare_fs_probe.sh.) */
static void check_probe(const char *t)
{
	char dir[4096], cmd[4200];
	snprintf(dir, sizeof(dir), "%s/probe", t);
	CHECK_INT_EQ(es_fs_mkdirs(dir, 0755), 0);
	CHECK_INT_EQ(es_fs_probe(dir, NULL), 0);
	CHECK_INT_EQ(es_fs_probe(dir, "/shown/elsewhere"), 0);
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s)\"", dir);
	CHECK_INT_EQ(system(cmd), 0);
	snprintf(dir, sizeof(dir), "%s/probe/missing", t);
	CHECK_INT_EQ(es_fs_probe(dir, "/shown"), ES_EIO);
	CHECK(strstr(es_last_error(), dir) != NULL);
}

/* A reader below the boundary with the walk cache on (issue 29: status reads an attempt.json and
 * resolves a result per shard): a file opened in one call from a cached folder (openat2) with
 * its identity, the same as a walk gives; a link on the way still refused when read, and still
 * followed when resolved (inside the job); a path that resolves to itself in one call. */
static void test_read_in_one_call(const char *t)
{
	char root[4096], p[4096 + 128], q[4096 + 128];
	snprintf(root, sizeof(root), "%s/one", t);
	static const char *const dirs[] = { "attempts/s/0001-x", "attempts/t/0001-y" };
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/%s", root, dirs[i]);
		CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
		snprintf(p, sizeof(p), "%s/%s/attempt.json", root, dirs[i]);
		CHECK_INT_EQ(es_fs_write_atomic(p, dirs[i], strlen(dirs[i])), 0);
	}
	snprintf(p, sizeof(p), "%s/elsewhere/0001-z", t);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/elsewhere/0001-z/attempt.json", t);
	CHECK_INT_EQ(es_fs_write_atomic(p, "out", 3), 0);
	snprintf(p, sizeof(p), "%s/elsewhere", t);
	snprintf(q, sizeof(q), "%s/attempts/u", root);
	CHECK_INT_EQ(symlink(p, q), 0);
	snprintf(q, sizeof(q), "%s/attempts/v", root);
	CHECK_INT_EQ(symlink("t", q), 0);
	es_fs_set_boundary(root);
	int before = open_fds();
	struct es_buf b = ES_BUF_INIT;
	struct stat st, want;
	es_fs_walk_cache_begin();
	snprintf(p, sizeof(p), "%s/attempts/s/0001-x/attempt.json", root);
	CHECK_INT_EQ(es_fs_read_file(p, &b, 0), 0); /* the walk: the job folder and attempts/ kept */
	snprintf(p, sizeof(p), "%s/attempts/t/0001-y/attempt.json", root);
	test_watched = ""; /* every open */
	test_watched_opens = 0;
	CHECK_INT_EQ(es_fs_read_file_stat(p, &b, 0, &st), 0);
	int opens = test_watched_opens;
	test_watched = NULL;
	if (!CHECK_INT_EQ(opens, 1))
		fprintf(stderr, "  %d opens to read %s (the walk: 3)\n", opens, p);
	CHECK_STR_EQ(b.data, dirs[1]);
	CHECK_INT_EQ(stat(p, &want), 0);
	CHECK(st.st_ino == want.st_ino && st.st_size == want.st_size && st.st_mtim.tv_nsec == want.st_mtim.tv_nsec);
	/* A link on the way, out of the job folder: refused, by the walk's message. */
	snprintf(p, sizeof(p), "%s/attempts/u/0001-z/attempt.json", root);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_fs_read_file(p, &b, 0), ES_EINVAL);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "is a symbolic link") != NULL);
	/* Resolved: a link inside the job folder is followed as before; a plain path is itself. */
	/* With a stat: the file's, from the resolution's descriptor or after the walk; a missing
	 * one has st_mode 0. */
	CHECK_INT_EQ(es_fs_resolve_under(root, "attempts/v/0001-y/attempt.json", &b, &st), 0);
	snprintf(p, sizeof(p), "%s/attempts/t/0001-y/attempt.json", root);
	CHECK_STR_EQ(b.data, p);
	CHECK_INT_EQ(stat(p, &want), 0);
	CHECK(S_ISREG(st.st_mode) && st.st_ino == want.st_ino && st.st_size == want.st_size);
	test_watched = "";
	test_watched_opens = 0;
	CHECK_INT_EQ(es_fs_resolve_under(root, "attempts/s/0001-x/attempt.json", &b, &st), 0);
	opens = test_watched_opens;
	test_watched = NULL;
	snprintf(p, sizeof(p), "%s/attempts/s/0001-x/attempt.json", root);
	CHECK_STR_EQ(b.data, p);
	CHECK_INT_EQ(opens, 1);
	CHECK_INT_EQ(stat(p, &want), 0);
	CHECK(S_ISREG(st.st_mode) && st.st_ino == want.st_ino && st.st_size == want.st_size);
	CHECK_INT_EQ(es_fs_resolve_under(root, "attempts/s/../t/0001-y/attempt.json", &b, NULL), 0);
	snprintf(p, sizeof(p), "%s/attempts/t/0001-y/attempt.json", root);
	CHECK_STR_EQ(b.data, p);
	st.st_mode = S_IFREG;
	CHECK_INT_EQ(es_fs_resolve_under(root, "attempts/s/0001-x/none.jsonl", &b, &st), 0);
	CHECK_INT_EQ(st.st_mode, 0);
	es_fs_walk_cache_end();
	CHECK_INT_EQ(open_fds(), before);
	es_fs_set_boundary(NULL);
	es_buf_free(&b);
}

/* Names of a listing, joined with spaces, into out. */
static void joined(const struct es_strv *v, char *out, size_t n)
{
	out[0] = 0;
	for (size_t i = 0; i < v->n; i++)
		snprintf(out + strlen(out), n - strlen(out), "%s%s", i ? " " : "", v->v[i]);
}

/* es_fs_list_dir_if_changed: a folder is listed until a listing settle_secs after its stamp was
 * first seen confirms it, then not again until an entry is made, renamed or removed there. A
 * pause of 20 ms before each change puts it in a later tick of the folder's times. */
static void test_list_if_changed(const char *t)
{
	char d[4096], f[8300], g[8300], names[256];
	struct es_fs_dirstamp st = { 0 };
	struct es_strv v = ES_STRV_INIT;
	int listed = -1;
	struct timespec pause = { 0, 20 * 1000 * 1000 };
	snprintf(d, sizeof(d), "%s/lic", t);
	/* A missing folder: listed, empty, no stamp. */
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
	CHECK_INT_EQ(listed, 1);
	CHECK_INT_EQ(v.n, 0);
	CHECK_INT_EQ(st.valid, 0);
	CHECK_INT_EQ(es_fs_mkdirs(d, 0755), 0);
	snprintf(f, sizeof(f), "%s/a", d);
	CHECK_INT_EQ(es_fs_write_atomic(f, "a", 1), 0);
	nanosleep(&pause, NULL);
	/* First sight: listed, stamp taken, not confirmed. */
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
	CHECK_INT_EQ(listed, 1);
	joined(&v, names, sizeof(names));
	CHECK_STR_EQ(names, "a");
	CHECK(st.valid && !st.confirmed);
	/* A settle time not passed yet: listed again, still not confirmed. */
	es_strv_free(&v);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 3600, 0, &v, &listed), 0);
	CHECK_INT_EQ(listed, 1);
	CHECK_INT_EQ(v.n, 1);
	CHECK(st.valid && !st.confirmed);
	/* Passed (0 s): this listing confirms it; the next one is not made. */
	es_strv_free(&v);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
	CHECK_INT_EQ(listed, 1);
	CHECK(st.valid && st.confirmed);
	es_strv_free(&v);
	CHECK_INT_EQ(es_strv_push(&v, strdup("kept")), 0);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
	CHECK_INT_EQ(listed, 0);
	joined(&v, names, sizeof(names));
	CHECK_STR_EQ(names, "kept"); /* out untouched */
	/* A content change of an entry in place is no change of the folder. */
	CHECK_INT_EQ(truncate(f, 0), 0);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
	CHECK_INT_EQ(listed, 0);
	/* An entry made, renamed, removed: each one listed (and confirmed again after). */
	const char *want[3] = { "a b", "a c", "c" };
	for (int step = 0; step < 3; step++) {
		nanosleep(&pause, NULL);
		snprintf(g, sizeof(g), "%s/%s", d, step == 0 ? "b" : "c");
		if (step == 0)
			CHECK_INT_EQ(es_fs_write_atomic(g, "b", 1), 0);
		else if (step == 1) {
			snprintf(f, sizeof(f), "%s/b", d);
			CHECK_INT_EQ(rename(f, g), 0);
		} else {
			snprintf(f, sizeof(f), "%s/a", d);
			CHECK_INT_EQ(unlink(f), 0);
		}
		es_strv_free(&v);
		CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
		CHECK_INT_EQ(listed, 1);
		joined(&v, names, sizeof(names));
		CHECK_STR_EQ(names, want[step]);
		CHECK(st.valid && !st.confirmed);
		es_strv_free(&v);
		CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
		CHECK_INT_EQ(listed, 1);
		CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
		CHECK_INT_EQ(listed, 0);
	}
	/* May defer: a confirmed folder unchanged is unchanged; a change is not listed and leaves
	 * the stamp, so that the next call without deferring lists it. */
	es_strv_free(&v);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 1, &v, &listed), 0);
	CHECK_INT_EQ(listed, ES_FS_UNCHANGED);
	nanosleep(&pause, NULL);
	snprintf(g, sizeof(g), "%s/d", d);
	CHECK_INT_EQ(es_fs_write_atomic(g, "d", 1), 0);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 1, &v, &listed), 0);
	CHECK_INT_EQ(listed, ES_FS_UNLISTED);
	CHECK_INT_EQ(v.n, 0);
	CHECK(st.valid && st.confirmed);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
	CHECK_INT_EQ(listed, ES_FS_LISTED);
	joined(&v, names, sizeof(names));
	CHECK_STR_EQ(names, "c d");
	CHECK(st.valid && !st.confirmed);
	/* Not confirmed yet: deferred too. */
	es_strv_free(&v);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 1, &v, &listed), 0);
	CHECK_INT_EQ(listed, ES_FS_UNLISTED);
	/* A listing cut short by an error: said so, no stamp. */
	test_getdents_fail = 1;
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
	test_getdents_fail = 0;
	CHECK_INT_EQ(listed, ES_FS_LISTED_PART);
	CHECK_INT_EQ(v.n, 0);
	CHECK(!st.valid);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
	CHECK_INT_EQ(listed, ES_FS_LISTED);
	CHECK(st.valid);
	/* The folder replaced by another of the same name: listed. */
	snprintf(f, sizeof(f), "%s/lic2", t);
	CHECK_INT_EQ(es_fs_mkdirs(f, 0755), 0);
	snprintf(g, sizeof(g), "%s/lic2/n", t);
	CHECK_INT_EQ(es_fs_write_atomic(g, "n", 1), 0);
	snprintf(g, sizeof(g), "%s/lic-old", t);
	CHECK_INT_EQ(rename(d, g), 0);
	CHECK_INT_EQ(rename(f, d), 0);
	es_strv_free(&v);
	CHECK_INT_EQ(es_fs_list_dir_if_changed(d, &st, 0, 0, &v, &listed), 0);
	CHECK_INT_EQ(listed, 1);
	joined(&v, names, sizeof(names));
	CHECK_STR_EQ(names, "n");
	es_strv_free(&v);
}

int main(void)
{
	char *t = test_tmpdir();
	char p[4096], q[4096];
	test_list_if_changed(t);
	test_walk_cache(t);
	test_walk_cache_writes(t);
	test_lstat_beneath(t);
	test_read_in_one_call(t);
	snprintf(p, sizeof(p), "%s/real/sub", t);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/real", t);
	snprintf(q, sizeof(q), "%s/s_abs", t);
	CHECK_INT_EQ(symlink(p, q), 0);
	snprintf(q, sizeof(q), "%s/s_rel", t);
	CHECK_INT_EQ(symlink("real/sub", q), 0);
	snprintf(q, sizeof(q), "%s/loop", t);
	CHECK_INT_EQ(symlink("loop", q), 0);
	static const char *const items[] = {
		"a.jpg", "real/sub/x.jpg", "s_abs/sub/x.jpg", "s_rel/../y.jpg", "x.jpg/../s_abs",
		"missing/../s_rel/z", "./real//sub/./a", "../outside.jpg", "s_abs/../../up", "missing/deeper/../s_abs",
		"s_rel/../../s_abs/sub",
	};
	check_against_python(t, items, sizeof(items) / sizeof(items[0]));

	/* Atomic replace and exclusive publish. */
	snprintf(p, sizeof(p), "%s/meta.json", t);
	CHECK_INT_EQ(es_fs_write_atomic(p, "one\n", 4), 0);
	CHECK_INT_EQ(es_fs_write_atomic(p, "two\n", 4), 0);
	struct es_buf b = ES_BUF_INIT;
	CHECK_INT_EQ(es_fs_read_file(p, &b, 0), 0);
	CHECK_STR_EQ(b.data, "two\n");
	snprintf(p, sizeof(p), "%s/done.json", t);
	CHECK_INT_EQ(es_fs_publish_exclusive(p, "first\n", 6), 0);
	CHECK_INT_EQ(es_fs_publish_exclusive(p, "second\n", 7), 1);
	CHECK_INT_EQ(es_fs_read_file(p, &b, 0), 0);
	CHECK_STR_EQ(b.data, "first\n");
	snprintf(p, sizeof(p), "%s/x.lock", t);
	CHECK_INT_EQ(es_fs_create_exclusive(p, "l\n", 2), 0);
	CHECK_INT_EQ(es_fs_create_exclusive(p, "l\n", 2), 1);
	/* No temporaries are left. */
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s | grep '\\.tmp$')\"", t);
	CHECK_INT_EQ(system(cmd), 0);

	/* The boundary: below the job folder nothing goes through a link, outside it all is as before. */
	struct es_buf jd = ES_BUF_INIT;
	snprintf(p, sizeof(p), "%s/job/sub", t);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/job", t);
	CHECK_INT_EQ(es_fs_resolve(p, &jd), 0);
	snprintf(p, sizeof(p), "%s/real", t);
	snprintf(q, sizeof(q), "%s/link", jd.data);
	CHECK_INT_EQ(symlink(p, q), 0);
	snprintf(q, sizeof(q), "%s/sub/file", jd.data);
	CHECK_INT_EQ(es_fs_write_atomic(q, "in\n", 3), 0);
	snprintf(p, sizeof(p), "%s/flink", jd.data);
	CHECK_INT_EQ(symlink(q, p), 0); /* a link to a file inside */
	es_fs_set_boundary(jd.data);
	es_log_quiet_begin();
	snprintf(p, sizeof(p), "%s/link/a.json", jd.data);
	CHECK_INT_EQ(es_fs_write_atomic(p, "x", 1), ES_EINVAL);
	CHECK(strstr(es_last_error(), "link is a symbolic link") != NULL);
	CHECK_INT_EQ(es_fs_publish_exclusive(p, "x", 1), ES_EINVAL);
	CHECK_INT_EQ(es_fs_create_exclusive(p, "x", 1), ES_EINVAL);
	int fd = -1;
	CHECK_INT_EQ(es_fs_open_new(p, 0644, 0, &fd), ES_EINVAL);
	CHECK_INT_EQ(es_fs_read_file(p, &b, 0), ES_EINVAL);
	snprintf(p, sizeof(p), "%s/link/d", jd.data);
	CHECK_INT_EQ(es_fs_mkdir_nofollow(p, 0755), ES_EINVAL);
	CHECK_INT_EQ(es_fs_rename(q, p), ES_EINVAL);
	snprintf(p, sizeof(p), "%s/sub/../../x", jd.data);
	CHECK_INT_EQ(es_fs_write_atomic(p, "x", 1), ES_EINVAL);
	snprintf(p, sizeof(p), "%s/flink", jd.data);
	CHECK_INT_EQ(es_fs_read_file(p, &b, 0), ES_EINVAL);
	snprintf(p, sizeof(p), "%s/link", jd.data);
	CHECK_INT_EQ(es_fs_mkdir_nofollow(p, 0755), ES_EINVAL);
	es_log_quiet_end();
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/real | grep -v '^sub$')\"", t);
	CHECK_INT_EQ(system(cmd), 0); /* nothing reached the folder the link points at */
	CHECK_INT_EQ(es_fs_read_file(q, &b, 0), 0); /* real folders below the boundary work */
	CHECK_STR_EQ(b.data, "in\n");
	snprintf(p, sizeof(p), "%s/sub/moved", jd.data);
	CHECK_INT_EQ(es_fs_rename(q, p), 0);
	snprintf(p, sizeof(p), "%s/sub", jd.data);
	CHECK_INT_EQ(es_fs_remove_tree(p), 0);
	snprintf(p, sizeof(p), "%s/real/out.json", t); /* outside the boundary: as before */
	CHECK_INT_EQ(es_fs_write_atomic(p, "x", 1), 0);
	es_fs_set_boundary(NULL);
	snprintf(p, sizeof(p), "%s/link/b.json", jd.data);
	CHECK_INT_EQ(es_fs_write_atomic(p, "x", 1), 0);
	es_buf_free(&jd);

	/* Temporaries' makers: this process is live, a dead pid is gone, another host unknown. */
	char tok[33], name[64];
	CHECK_INT_EQ(es_fs_temp_token(tok), 0);
	snprintf(name, sizeof(name), ".x.%s.tmp", tok);
	CHECK_INT_EQ(es_fs_temp_owner(name), ES_TEMP_LIVE);
	char gone_tok[33];
	test_gone_token(gone_tok);
	memcpy(name + 3, gone_tok, 8);
	CHECK_INT_EQ(es_fs_temp_owner(name), ES_TEMP_GONE);
	name[3 + 8] = name[3 + 8] == '0' ? '1' : '0'; /* another host's identity */
	CHECK_INT_EQ(es_fs_temp_owner(name), ES_TEMP_UNKNOWN);
	CHECK_INT_EQ(es_fs_temp_owner(".x.notatoken.tmp"), ES_TEMP_UNKNOWN);

	/* A shared folder's record temporaries after a writer died (es_fs_sweep_writer_temps):
	 * of shard a's, the gone maker's goes at once, a live maker's and another host's stay while
	 * young, another host's goes once idle; shard ab's (a longer id) and records stay. */
	{
		char d[1024], gone[96], live[96], other[96], old_other[96], ab[96], dead[33], far[33];
		snprintf(d, sizeof(d), "%s/shared", t);
		CHECK_INT_EQ(es_fs_mkdirs(d, 0755), 0);
		snprintf(dead, sizeof(dead), "%s", gone_tok); /* this host, a dead pid */
		snprintf(far, sizeof(far), "%s", tok);
		far[8] = far[8] == '0' ? '1' : '0'; /* another host */
		snprintf(gone, sizeof(gone), ".a.json.%s.tmp", dead);
		snprintf(live, sizeof(live), ".a.json.%s.tmp", tok);
		snprintf(other, sizeof(other), ".a.json.%s.tmp", far);
		far[31] = far[31] == '0' ? '1' : '0';
		snprintf(old_other, sizeof(old_other), ".a.json.%s.tmp", far);
		snprintf(ab, sizeof(ab), ".ab.json.%s.tmp", dead);
		const char *all[] = { gone, live, other, old_other, ab, "a.json" };
		for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
			snprintf(p, sizeof(p), "%s/%s", d, all[k]);
			int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			CHECK(fd >= 0);
			close(fd);
		}
		CHECK_INT_EQ(es_fs_temp_owner(gone), ES_TEMP_GONE);
		CHECK_INT_EQ(es_fs_temp_owner(other), ES_TEMP_UNKNOWN);
		CHECK_INT_EQ(es_fs_temp_owner(ab), ES_TEMP_GONE);
		snprintf(p, sizeof(p), "%s/%s", d, old_other);
		struct timespec ts[2] = { { time(NULL) - 100, 0 }, { time(NULL) - 100, 0 } };
		CHECK_INT_EQ(utimensat(AT_FDCWD, p, ts, 0), 0);
		es_log_quiet_begin();
		CHECK_INT_EQ(es_fs_sweep_writer_temps(d, "a.json.", 60, NULL), 2);
		es_log_quiet_end();
		const int stays[] = { 0, 1, 1, 0, 1, 1 };
		for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
			snprintf(p, sizeof(p), "%s/%s", d, all[k]);
			CHECK_INT_EQ(access(p, F_OK) == 0, stays[k]);
		}
		/* Named as the dead writer (its maker, 24 hex): another host's young one goes too;
		 * a live maker's, another shard's and the record stay. */
		char maker[25];
		snprintf(maker, sizeof(maker), "%.24s", other + 8);
		es_log_quiet_begin();
		CHECK_INT_EQ(es_fs_sweep_writer_temps(d, "a.json.", 60, maker), 1);
		es_log_quiet_end();
		const int stays2[] = { 0, 1, 0, 0, 1, 1 };
		for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
			snprintf(p, sizeof(p), "%s/%s", d, all[k]);
			CHECK_INT_EQ(access(p, F_OK) == 0, stays2[k]);
		}
	}
	/* A listing's inode number of an entry is its stat's; a missing entry is 1. */
	{
		char d[1024];
		struct stat st;
		ino_t ino = 0;
		snprintf(d, sizeof(d), "%s/shared", t);
		snprintf(p, sizeof(p), "%s/a.json", d);
		CHECK_INT_EQ(lstat(p, &st), 0);
		CHECK_INT_EQ(es_fs_listed_ino(d, "a.json", &ino), 0);
		CHECK(ino == st.st_ino);
		CHECK_INT_EQ(es_fs_listed_ino(d, "no.json", &ino), 1);
	}
	es_buf_free(&b);
	/* The bounded tail of a log: the last lines, a line cut by the byte bound dropped. */
	{
		struct es_buf tail = ES_BUF_INIT;
		snprintf(p, sizeof(p), "%s/tail.log", t);
		CHECK_INT_EQ(es_fs_read_tail(p, 5, 2048, &tail), -1);
		CHECK_INT_EQ(es_fs_write_atomic(p, "a\nb\nc\n", 6), 0);
		CHECK_INT_EQ(es_fs_read_tail(p, 5, 2048, &tail), 0);
		CHECK_STR_EQ(tail.data, "a\nb\nc");
		CHECK_INT_EQ(es_fs_read_tail(p, 2, 2048, &tail), 1);
		CHECK_STR_EQ(tail.data, "b\nc");
		CHECK_INT_EQ(es_fs_write_atomic(p, "line one\nline two\nthree", 23), 0);
		CHECK_INT_EQ(es_fs_read_tail(p, 5, 12, &tail), 1); /* "e two\nthree": the piece goes */
		CHECK_STR_EQ(tail.data, "three");
		CHECK_INT_EQ(es_fs_write_atomic(p, "", 0), 0);
		CHECK_INT_EQ(es_fs_read_tail(p, 5, 2048, &tail), 0);
		CHECK_STR_EQ(tail.data, "");
		es_buf_free(&tail);
	}
	/* mkdir -p tries the leaf first and walks up only for missing parents. */
	snprintf(p, sizeof(p), "%s/deep/a/b/c", t);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	struct stat dst;
	CHECK(stat(p, &dst) == 0 && S_ISDIR(dst.st_mode));
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/deep/a/b/c/", t);
	CHECK_INT_EQ(es_fs_mkdirs(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/deep/a/file", t);
	CHECK_INT_EQ(es_fs_write_atomic(p, "f", 1), 0);
	es_log_quiet_begin();
	CHECK(es_fs_mkdirs(p, 0755) < 0); /* a file in the way */
	CHECK(strstr(es_last_error(), "a file is in the way") != NULL);
	snprintf(p, sizeof(p), "%s/deep/a/file/below/x", t);
	CHECK(es_fs_mkdirs(p, 0755) < 0);
	CHECK(strstr(es_last_error(), "cannot create folder") != NULL);
	es_log_quiet_end();

	/* A sized read: one read() when the size is right, the whole file whatever the size said. */
	snprintf(p, sizeof(p), "%s/deep/sized", t);
	CHECK_INT_EQ(es_fs_write_atomic(p, "hello world", 11), 0);
	static const off_t sizes[] = { 11, 3, 100, 0, -1 };
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		int sfd = open(p, O_RDONLY | O_CLOEXEC);
		CHECK(sfd >= 0);
		CHECK_INT_EQ(es_fs_read_fd_sized(sfd, &b, 1000, sizes[k], p), 0);
		CHECK_STR_EQ(b.data, "hello world");
		close(sfd);
	}
	char big[200000];
	for (size_t k = 0; k < sizeof(big); k++)
		big[k] = (char)('a' + k % 26);
	CHECK_INT_EQ(es_fs_write_atomic(p, big, sizeof(big)), 0);
	int bfd = open(p, O_RDONLY | O_CLOEXEC);
	CHECK_INT_EQ(es_fs_read_fd_sized(bfd, &b, sizeof(big), (off_t)sizeof(big), p), 0);
	CHECK_MEM_EQ(b.data, b.len, big, sizeof(big));
	CHECK(lseek(bfd, 0, SEEK_SET) == 0);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_fs_read_fd_sized(bfd, &b, 1000, 10, p), ES_ENOMEM); /* past max */
	es_log_quiet_end();
	close(bfd);

	check_move_entry(t);
	check_probe(t);
	check_mount_point(t);
	es_buf_free(&b);
	test_not_regular(t);
	test_check_output(t);
	return test_done();
}
