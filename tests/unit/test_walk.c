/*
 * Unit tests of src/walk.c: the one folder walk (include/eshard/walk.h) over nested folders,
 * links to files, to folders and to an ancestor (a loop), dangling links, FIFOs, a name filter,
 * a stop from the callback and a folder that cannot be read.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *T;

static void mk(const char *kind, const char *rel, const char *target)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", T, rel);
	int rc = -1;
	if (!strcmp(kind, "dir")) {
		rc = mkdir(p, 0755);
	} else if (!strcmp(kind, "file")) {
		FILE *f = fopen(p, "w");
		rc = f && fputs("x\n", f) >= 0 && fclose(f) == 0 ? 0 : -1;
	} else if (!strcmp(kind, "link")) {
		rc = symlink(target, p);
	} else if (!strcmp(kind, "fifo")) {
		rc = mkfifo(p, 0644);
	}
	if (!CHECK_INT_EQ(rc, 0))
		fprintf(stderr, "  %s %s\n", kind, p);
}

/* What the walk took, sorted and joined with spaces; stop_at makes take fail there. */
struct seen {
	struct es_strv v;
	const char *stop_at;
	int wants;
};

static int take(const char *rel, void *arg)
{
	struct seen *s = arg;
	if (s->stop_at && !strcmp(rel, s->stop_at))
		return es_error(ES_EINVAL, "stopped at %s", rel);
	return es_strv_push(&s->v, strdup(rel));
}

static int want_no_b(const char *name, void *arg)
{
	struct seen *s = arg;
	s->wants++;
	return name[0] != 'b';
}

static char *walked(const char *root, int file_links, int (*want)(const char *, void *), int *rc,
		    int *wants)
{
	struct seen s = { ES_STRV_INIT, NULL, 0 };
	struct es_walk w = { want, take, &s, file_links };
	*rc = es_walk_files(root, &w);
	if (wants)
		*wants = s.wants;
	es_strv_sort_unique(&s.v);
	struct es_buf b = ES_BUF_INIT;
	for (size_t i = 0; i < s.v.n; i++)
		es_buf_printf(&b, "%s%s", i ? " " : "", s.v.v[i]);
	es_strv_free(&s.v);
	return es_buf_detach(&b, NULL);
}

static void check_walk(const char *root, int file_links, int (*want)(const char *, void *), const char *expect)
{
	int rc = 1;
	char *got = walked(root, file_links, want, &rc, NULL);
	CHECK_INT_EQ(rc, 0);
	if (!CHECK_STR_EQ(got, expect))
		fprintf(stderr, "  root %s, file_links %d\n", root, file_links);
	free(got);
}

/* A tree with every kind of entry, built once:
 *   a.txt  b.txt  .hidden  d1/c.txt  d1/d2/d3/e.txt  d1/d2/_mark  empty/
 *   lf -> a.txt (a link to a file)       ld -> d1 (a link to a folder)
 *   d1/d2/up -> ../.. (a loop)           dangling -> missing
 *   d1/abs -> <T>/b.txt (absolute)       fifo (a FIFO)  */
static void build_tree(void)
{
	char abs[4096];
	snprintf(abs, sizeof(abs), "%s/b.txt", T);
	mk("file", "a.txt", NULL);
	mk("file", "b.txt", NULL);
	mk("file", ".hidden", NULL);
	mk("dir", "d1", NULL);
	mk("file", "d1/c.txt", NULL);
	mk("dir", "d1/d2", NULL);
	mk("dir", "d1/d2/d3", NULL);
	mk("file", "d1/d2/d3/e.txt", NULL);
	mk("file", "d1/d2/_mark", NULL);
	mk("dir", "empty", NULL);
	mk("link", "lf", "a.txt");
	mk("link", "ld", "d1");
	mk("link", "d1/d2/up", "../..");
	mk("link", "dangling", "missing");
	mk("link", "d1/abs", abs);
	mk("fifo", "fifo", NULL);
}

/* Nested folders are entered; links to files are files when file_links says so; linked folders
 * (ld, and the loop up -> ../..) are not entered; dangling links and FIFOs are nothing. */
static void test_tree(void)
{
	check_walk(T, 1, NULL, ".hidden a.txt b.txt d1/abs d1/c.txt d1/d2/_mark d1/d2/d3/e.txt lf");
	check_walk(T, 0, NULL, ".hidden a.txt b.txt d1/c.txt d1/d2/_mark d1/d2/d3/e.txt");
	/* A root that is itself a link to a folder is walked. */
	char root[4096];
	snprintf(root, sizeof(root), "%s/ld", T);
	check_walk(root, 1, NULL, "abs c.txt d2/_mark d2/d3/e.txt");
	snprintf(root, sizeof(root), "%s/empty", T);
	check_walk(root, 1, NULL, "");
}

/* The filter sees the own name of every entry but folders, links included, and what it refuses
 * is not taken; folders are entered whatever their name. */
static void test_filter(void)
{
	int rc = 1, wants = 0;
	char *got = walked(T, 1, want_no_b, &rc, &wants);
	CHECK_INT_EQ(rc, 0);
	CHECK_STR_EQ(got, ".hidden a.txt d1/abs d1/c.txt d1/d2/_mark d1/d2/d3/e.txt lf");
	/* a.txt b.txt .hidden lf ld dangling fifo, d1/c.txt d1/abs, d1/d2/_mark d1/d2/up, e.txt */
	CHECK_INT_EQ(wants, 12);
	free(got);
}

/* A nonzero return of take stops the walk at once and is returned. */
static void test_take_stops(void)
{
	struct seen s = { ES_STRV_INIT, "d1/d2/d3/e.txt", 0 };
	struct es_walk w = { NULL, take, &s, 1 };
	es_log_quiet_begin();
	CHECK_INT_EQ(es_walk_files(T, &w), ES_EINVAL);
	es_log_quiet_end();
	CHECK_STR_EQ(es_last_error(), "stopped at d1/d2/d3/e.txt");
	es_strv_free(&s.v);
}

/* A missing root, and a folder of the tree that cannot be read: ES_EIO naming the folder. The
 * second runs in a child that is not root (root reads any folder). */
static void test_unreadable(void)
{
	char root[4096], want[4200];
	snprintf(root, sizeof(root), "%s/nope", T);
	int rc = 0;
	es_log_quiet_begin();
	char *got = walked(root, 1, NULL, &rc, NULL);
	es_log_quiet_end();
	free(got);
	CHECK_INT_EQ(rc, ES_EIO);
	snprintf(want, sizeof(want), "cannot read folder '%s': No such file or directory", root);
	CHECK_STR_EQ(es_last_error(), want);

	char *u = test_tmpdir();
	char p[4096];
	snprintf(p, sizeof(p), "%s/locked", u);
	CHECK_INT_EQ(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/locked/x.txt", u);
	FILE *f = fopen(p, "w");
	CHECK(f != NULL && fclose(f) == 0);
	snprintf(p, sizeof(p), "%s/locked", u);
	CHECK_INT_EQ(chmod(u, 0755), 0);
	CHECK_INT_EQ(chmod(p, 0), 0);
	snprintf(want, sizeof(want), "cannot read folder '%s': Permission denied", p);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
			_exit(3);
		struct seen s = { ES_STRV_INIT, NULL, 0 };
		struct es_walk w = { NULL, take, &s, 1 };
		es_log_quiet_begin();
		int r = es_walk_files(u, &w);
		_exit(r == ES_EIO && !strcmp(es_last_error(), want) && s.v.n == 0 ? 0 : 1);
	}
	int st = 0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st));
	CHECK_INT_EQ(WEXITSTATUS(st), 0);
	chmod(p, 0755);
}

int main(void)
{
	T = test_tmpdir();
	build_tree();
	test_tree();
	test_filter();
	test_take_stops();
	test_unreadable();
	return test_done();
}
