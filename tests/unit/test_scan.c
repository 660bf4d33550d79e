/*
 * Unit tests of src/scan.c: input discovery and ordering (docs/design.md#input-discovery) on real
 * folders with files, dot files, FIFOs and symlinks, the single-file case, compressed members
 * (left out by default, taken with ES_SCAN_COMPRESSED, twins refused) and the errors.
 */
#include "testlib.h"

#include "eshard/linereader.h"
#include "eshard/log.h"
#include "eshard/scan.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *T;

static void mk_dir(const char *root, const char *rel)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	if (!CHECK_INT_EQ(mkdir(p, 0755), 0))
		fprintf(stderr, "  mkdir %s\n", p);
}

static void mk_file(const char *root, const char *rel)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	FILE *f = fopen(p, "w");
	if (!CHECK(f != NULL)) {
		fprintf(stderr, "  create %s\n", p);
		return;
	}
	fprintf(f, "{\"f\": \"%s\"}\n", rel);
	fclose(f);
}

static void mk_link(const char *target, const char *root, const char *rel)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	if (!CHECK_INT_EQ(symlink(target, p), 0))
		fprintf(stderr, "  symlink %s\n", p);
}

/* The scan lists exactly want (relative paths, in order), each at root/<relative>. */
static void check_list_at(const struct es_scan *s, const char *root, const char *const *want,
			  size_t n, const char *file, int line)
{
	int ok = test_check_int((long long)s->n_files, (long long)n, "n_files", "want", file, line);
	for (size_t i = 0; i < s->n_files && i < n; i++) {
		char p[4096];
		snprintf(p, sizeof(p), "%s/%s", root, want[i]);
		ok &= test_check_str(s->files[i].relative_path, want[i], "relative_path", "want", file, line);
		ok &= test_check_str(s->files[i].path, p, "path", "root/relative", file, line);
	}
	if (!ok) {
		fprintf(stderr, "  got:");
		for (size_t i = 0; i < s->n_files; i++)
			fprintf(stderr, " %s", s->files[i].relative_path);
		fprintf(stderr, "\n");
	}
}
#define CHECK_LIST(s, root, want) \
	check_list_at((s), (root), (want), sizeof(want) / sizeof((want)[0]), __FILE__, __LINE__)

/* Python's PurePath.suffix, lower-cased, is ".jsonl", or the two last ".jsonl.gz"/".jsonl.zst". */
static void test_is_jsonl_name(void)
{
	static const char *const yes[] = {
		"a.jsonl", "a.JSONL", "a.JsonL", ".x.jsonl", "..jsonl", "a..jsonl", "a.b.jsonl",
		"x y.jsonl", "\xc3\xa9.jsonl", "part-00001-of-00002.jsonl",
		"a.jsonl.gz", "a.JSONL.GZ", "a.jsonl.zst", "a.jsonl.ZST", "..jsonl.gz", "a.b.jsonl.zst",
	};
	static const char *const no[] = {
		".jsonl", ".JSONL", "jsonl", ".jsonl.gz", ".jsonl.zst", "a.gz", "a.zst", "a.json.gz",
		"a.jsonl.gz.", "a.jsonl.bz2", "a.jsonl.zstd", "a.jsonl.tar.gz", "a.jsonl..gz", "a.jsonlgz",
		"a.jsonl.gz~", "a.txt.zst", ".gz", "a.json", "a.jsonl.", "a.jsonlx",
		"a_jsonl", "a.jsonl ", "a.jsonl~", "", ".", "..", "a.",
	};
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!CHECK_INT_EQ(es_scan_is_jsonl_name(yes[i]), 1))
			fprintf(stderr, "  name: '%s'\n", yes[i]);
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (!CHECK_INT_EQ(es_scan_is_jsonl_name(no[i]), 0))
			fprintf(stderr, "  name: '%s'\n", no[i]);
}

static size_t count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	size_t n = 0;
	if (!d)
		return 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Which entries of a folder are taken: suffix rule, dot files, FIFOs, symlinks. */
static void test_folder_rules(void)
{
	char root[1024], outside[1024];
	snprintf(root, sizeof(root), "%s/ds", T);
	snprintf(outside, sizeof(outside), "%s/outside", T);
	CHECK_INT_EQ(mkdir(root, 0755), 0);
	CHECK_INT_EQ(mkdir(outside, 0755), 0);
	mk_file(outside, "o.jsonl");
	mk_file(outside, "inner.jsonl");

	mk_file(root, "a.jsonl");
	mk_file(root, "b.JSONL");
	mk_file(root, "c.JsonL");
	mk_file(root, ".x.jsonl");     /* dot file: taken */
	mk_file(root, ".jsonl");       /* no suffix: skipped */
	mk_file(root, "e.jsonl.ZST");  /* compressed JSONL: left out, as the reference does */
	mk_file(root, "a.jsonl.gz");   /* (not gzip inside: never opened) */
	mk_file(root, ".jsonl.gz");    /* no stem: skipped, not counted as left out */
	mk_file(root, "f.json.gz");    /* not JSONL inside: skipped */
	mk_file(root, "d.jsonl.");     /* no suffix: skipped */
	mk_file(root, "notes.txt");
	mk_file(root, "jsonl");
	mk_dir(root, "sub");
	mk_file(root, "sub/z.jsonl");
	mk_file(root, "sub/skip.json");
	mk_dir(root, "sub/deeper");
	mk_file(root, "sub/deeper/y.jsonl");
	mk_dir(root, ".hidden");       /* dot folders are walked too */
	mk_file(root, ".hidden/h.jsonl");
	mk_dir(root, "folder.jsonl");  /* a folder with the suffix is walked, not taken */
	mk_file(root, "folder.jsonl/k.jsonl");
	mk_dir(root, "empty");
	char p[4096];
	snprintf(p, sizeof(p), "%s/fifo.jsonl", root);
	CHECK_INT_EQ(mkfifo(p, 0644), 0); /* not a regular file: skipped (and never opened) */

	/* Symlinks: to a file counts (wherever it points, whatever the target's name), to a
	 * folder is neither entered nor taken, dangling is skipped. */
	mk_link("a.jsonl", root, "link_to_file.jsonl");
	mk_link("notes.txt", root, "link_to_txt.jsonl");
	snprintf(p, sizeof(p), "%s/o.jsonl", outside);
	mk_link(p, root, "link_outside.jsonl");
	mk_link("a.jsonl", root, "link_without_suffix");
	mk_link("sub", root, "link_dir");
	mk_link(outside, root, "link_dir_outside");
	mk_link("sub", root, "link_dir.jsonl");
	mk_link("missing.jsonl", root, "dangling.jsonl");
	mk_link("loop.jsonl", root, "loop.jsonl");
	mk_link("../a.jsonl.gz", root, "sub/link.jsonl.gz"); /* compressed: left out too */

	size_t before = count_entries(root);
	struct es_scan s;
	memset(&s, 0x5a, sizeof(s));
	int rc = es_scan_dataset(root, 0, &s);
	if (!CHECK_INT_EQ(rc, 0))
		fprintf(stderr, "  error: %s\n", es_last_error());
	static const char *const want[] = {
		".hidden/h.jsonl", ".x.jsonl", "a.jsonl", "b.JSONL", "c.JsonL", "folder.jsonl/k.jsonl",
		"link_outside.jsonl", "link_to_file.jsonl", "link_to_txt.jsonl", "sub/deeper/y.jsonl",
		"sub/z.jsonl",
	};
	if (rc == 0) {
		CHECK_LIST(&s, root, want);
		CHECK_STR_EQ(s.dataset_path, root);
		CHECK_STR_EQ(s.media_root, root);
		CHECK_INT_EQ(s.n_skipped, 3);
		CHECK_STR_EQ(s.first_skipped, "a.jsonl.gz"); /* the first in path order, not in the folder's */
	}
	es_scan_free(&s);
	CHECK(s.files == NULL);
	CHECK_INT_EQ(s.n_files, 0);
	CHECK(s.dataset_path == NULL && s.media_root == NULL && s.first_skipped == NULL);
	es_scan_free(&s); /* a freed scan can be freed again */
	/* Read-only: nothing was added to the folder. */
	CHECK_INT_EQ(count_entries(root), before);
}

/* Sorted by the relative path as a byte string, not by path components. */
static void test_sort_order(void)
{
	char root[1024];
	snprintf(root, sizeof(root), "%s/order", T);
	CHECK_INT_EQ(mkdir(root, 0755), 0);
	/* Created in the reverse of the expected order, so a directory-order listing fails. */
	static const char *const want[] = {
		/* Python: sorted(["10.jsonl", "9.jsonl", "B.jsonl", ...]) */
		"10.jsonl", "9.jsonl", "B.jsonl", "Z.jsonl", "a-b.jsonl", "a.b.jsonl", "a.c.jsonl.gz",
		"a.jsonl", "a.jsonl.x.jsonl.zst", "a/b.jsonl", "a/c/d.jsonl", "a0.jsonl", "a_b.jsonl",
		"z.jsonl", "\xc3\xa9.jsonl", "\xe4\xb8\xad.jsonl",
	}; /* with ES_SCAN_COMPRESSED: compressed names sort among the plain, by the full name */
	size_t n = sizeof(want) / sizeof(want[0]);
	mk_dir(root, "a");
	mk_dir(root, "a/c");
	for (size_t i = n; i-- > 0;)
		mk_file(root, want[i]);
	struct es_scan s;
	int rc = es_scan_dataset(root, ES_SCAN_COMPRESSED, &s);
	if (CHECK_INT_EQ(rc, 0))
		CHECK_LIST(&s, root, want);
	es_scan_free(&s);
}

/* A single file: taken by its suffix alone; media_root is its folder. */
static void test_single_file(void)
{
	char dir[1024], p[2048];
	snprintf(dir, sizeof(dir), "%s/single", T);
	CHECK_INT_EQ(mkdir(dir, 0755), 0);
	mk_file(dir, "Data.JSONL");
	mk_file(dir, "other.jsonl"); /* a sibling is not part of a single-file dataset */
	snprintf(p, sizeof(p), "%s/Data.JSONL", dir);
	struct es_scan s;
	int rc = es_scan_dataset(p, 0, &s);
	if (CHECK_INT_EQ(rc, 0) && CHECK_INT_EQ(s.n_files, 1)) {
		CHECK_STR_EQ(s.files[0].path, p);
		CHECK_STR_EQ(s.files[0].relative_path, "Data.JSONL");
		CHECK_STR_EQ(s.dataset_path, p);
		CHECK_STR_EQ(s.media_root, dir);
	}
	es_scan_free(&s);

	/* A compressed file given directly is taken by its name too, without ES_SCAN_COMPRESSED
	 * (the user named it), and its plain twin beside it does not matter. */
	mk_file(dir, "Part.jsonl.zst");
	mk_file(dir, "Part.jsonl");
	snprintf(p, sizeof(p), "%s/Part.jsonl.zst", dir);
	for (unsigned flags = 0; flags <= ES_SCAN_COMPRESSED; flags++) {
		rc = es_scan_dataset(p, flags, &s);
		if (CHECK_INT_EQ(rc, 0) && CHECK_INT_EQ(s.n_files, 1))
			CHECK_STR_EQ(s.files[0].relative_path, "Part.jsonl.zst");
		CHECK_INT_EQ(s.n_skipped, 0);
		es_scan_free(&s);
	}

	/* A dot file given directly is fine too. */
	mk_file(dir, ".x.jsonl");
	snprintf(p, sizeof(p), "%s/.x.jsonl", dir);
	rc = es_scan_dataset(p, 0, &s);
	if (CHECK_INT_EQ(rc, 0) && CHECK_INT_EQ(s.n_files, 1))
		CHECK_STR_EQ(s.files[0].relative_path, ".x.jsonl");
	es_scan_free(&s);
}

static void scan_fails_at(const char *path, unsigned flags, int want_rc, const char *want_msg,
			  const char *file, int line)
{
	struct es_scan s;
	memset(&s, 0x5a, sizeof(s));
	es_clear_error();
	es_log_quiet_begin();
	int rc = es_scan_dataset(path, flags, &s);
	es_log_quiet_end();
	test_check_int(rc, want_rc, path, "want_rc", file, line);
	test_check_str(es_last_error(), want_msg, "es_last_error()", "want_msg", file, line);
	/* Nothing to free and nothing left dangling. */
	test_check(s.files == NULL && s.n_files == 0 && s.dataset_path == NULL && s.media_root == NULL &&
		   s.first_skipped == NULL, file, line, "scan result zeroed after a failure");
	if (rc == 0)
		es_scan_free(&s);
}
#define SCAN_FAILS(path, rc, msg) scan_fails_at((path), 0, (rc), (msg), __FILE__, __LINE__)
#define SCAN_FAILS_FLAGS(path, flags, rc, msg) scan_fails_at((path), (flags), (rc), (msg), __FILE__, __LINE__)

/* ES_SCAN_COMPRESSED: a folder's compressed members are taken, in path order among the plain. */
static void test_compressed_members(void)
{
	char root[1024];
	snprintf(root, sizeof(root), "%s/comp", T);
	CHECK_INT_EQ(mkdir(root, 0755), 0);
	mk_dir(root, "sub");
	static const char *const all[] = { "a.jsonl", "b.jsonl.gz", "c.JSONL.ZST", "sub/d.jsonl.zst", "sub/e.jsonl" };
	static const char *const plain[] = { "a.jsonl", "sub/e.jsonl" };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		mk_file(root, all[i]);
	mk_link("../b.jsonl.gz", root, "sub/f.jsonl.gz"); /* a symlink to a file counts, as for .jsonl */
	static const char *const with_link[] = { "a.jsonl", "b.jsonl.gz", "c.JSONL.ZST", "sub/d.jsonl.zst",
						 "sub/e.jsonl", "sub/f.jsonl.gz" };
	struct es_scan s;
	int rc = es_scan_dataset(root, ES_SCAN_COMPRESSED, &s);
	if (CHECK_INT_EQ(rc, 0)) {
		CHECK_LIST(&s, root, with_link);
		CHECK_INT_EQ(s.n_skipped, 0);
		CHECK(s.first_skipped == NULL);
	}
	es_scan_free(&s);
	/* The reference's discovery of the same folder. */
	rc = es_scan_dataset(root, 0, &s);
	if (CHECK_INT_EQ(rc, 0)) {
		CHECK_LIST(&s, root, plain);
		CHECK_INT_EQ(s.n_skipped, 4);
		CHECK_STR_EQ(s.first_skipped, "b.jsonl.gz");
	}
	es_scan_free(&s);
}

/* twin_case: a folder holding exactly these files (some plain). Without ES_SCAN_COMPRESSED
 * the plain ones are taken; with it, the scan fails naming first and second (full paths) when
 * they are twins, else takes them all. */
static void twin_case_at(const char *name, const char *const *files, size_t n, const char *first,
			 const char *second, const char *file, int line)
{
	char root[1024], p[2048], msg[4096];
	snprintf(root, sizeof(root), "%s/twins-%s", T, name);
	CHECK_INT_EQ(mkdir(root, 0755), 0);
	for (size_t i = 0; i < n; i++) {
		/* The file's folders first; several files may share them. */
		snprintf(p, sizeof(p), "%s/%s", root, files[i]);
		for (char *q = p + strlen(root) + 1; (q = strchr(q, '/')) != NULL; *q++ = '/') {
			*q = 0;
			mkdir(p, 0755);
		}
		mk_file(root, files[i]);
	}
	struct es_scan s;
	int rc = es_scan_dataset(root, 0, &s);
	test_check_int(rc, 0, name, "scan without ES_SCAN_COMPRESSED", file, line);
	es_scan_free(&s);
	if (!first) {
		rc = es_scan_dataset(root, ES_SCAN_COMPRESSED, &s);
		if (test_check_int(rc, 0, name, "scan of no twins", file, line))
			test_check_int((long long)s.n_files, (long long)n, name, "every file", file, line);
		es_scan_free(&s);
		return;
	}
	if (es_codec_of_name(first) != ES_CODEC_PLAIN)
		snprintf(msg, sizeof(msg), "Input file present twice, compressed twice: %s/%s and %s/%s; remove one",
			 root, first, root, second);
	else
		snprintf(msg, sizeof(msg), "Input file present twice, plain and compressed: %s/%s and %s/%s; remove one, "
			 "or leave out --compressed to read only the plain one", root, first, root, second);
	scan_fails_at(root, ES_SCAN_COMPRESSED, ES_EINVAL, msg, file, line);
}
#define TWINS(name, first, second, ...)                                                          \
	do {                                                                                     \
		static const char *const f_[] = { __VA_ARGS__ };                                 \
		twin_case_at((name), f_, sizeof(f_) / sizeof(f_[0]), (first), (second), __FILE__, __LINE__); \
	} while (0)

/* Two members that are one file less the compression suffix: refused with ES_SCAN_COMPRESSED,
 * named in path order, the suffix compared in any case, the rest of the path exactly. */
static void test_twins(void)
{
	TWINS("gz", "floats.jsonl", "floats.jsonl.gz", "floats.jsonl", "floats.jsonl.gz");
	TWINS("zst", "x.jsonl", "x.jsonl.zst", "a.jsonl", "x.jsonl.zst", "x.jsonl", "z.jsonl");
	TWINS("upper", "x.JSONL", "x.JSONL.GZ", "x.JSONL.GZ", "x.JSONL");
	TWINS("mixedcase", "x.jsonl", "x.jsonl.Gz", "x.jsonl.Gz", "x.jsonl");
	TWINS("both", "x.jsonl.gz", "x.jsonl.zst", "x.jsonl.zst", "x.jsonl.gz", "y.jsonl");
	TWINS("gzGZ", "x.jsonl.GZ", "x.jsonl.gz", "x.jsonl.gz", "x.jsonl.GZ", "y.jsonl");
	/* Not next to each other in path order: "a.jsonl-b.jsonl" and "a.jsonl.d/" sort between. */
	TWINS("apart", "a.jsonl", "a.jsonl.gz", "a.jsonl", "a.jsonl-b.jsonl", "a.jsonl.d/c.jsonl", "a.jsonl.gz");
	TWINS("nested", "s/t/x.jsonl", "s/t/x.jsonl.zst", "s/t/x.jsonl.zst", "s/x.jsonl", "s/t/x.jsonl", "x.jsonl.gz");
	/* Not twins: another folder, another case of the stem, another stem. */
	TWINS("none", NULL, NULL, "x.jsonl", "s/x.jsonl.gz", "X.jsonl.gz", "x.JSONL.zst", "x.jsonl.jsonl.gz", "xx.jsonl.gz");
}

static void test_errors(void)
{
	char dir[1024], p[2048], msg[4096];
	snprintf(dir, sizeof(dir), "%s/bad", T);
	CHECK_INT_EQ(mkdir(dir, 0755), 0);

	/* A single file with another suffix. */
	static const char *const names[] = { "data.json", ".jsonl", "a.jsonl.bz2", "a.jsonl." };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		mk_file(dir, names[i]);
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		snprintf(msg, sizeof(msg), "No .jsonl files found under %s", p);
		SCAN_FAILS(p, ES_EINVAL, msg);
	}
	/* A folder whose only candidates are skipped ones, or only reachable through a symlink. */
	mk_dir(dir, "sub");
	mk_dir(dir, "hidden");
	mk_file(dir, "hidden/h.jsonl");
	mk_link("hidden", dir, "sub/link");
	mk_link("../data.json", dir, "sub/j.json");
	mk_link("missing.jsonl", dir, "sub/dangling.jsonl");
	snprintf(p, sizeof(p), "%s/sub", dir);
	snprintf(msg, sizeof(msg), "No .jsonl files found under %s", p);
	SCAN_FAILS(p, ES_EINVAL, msg);
	/* An empty folder. */
	mk_dir(dir, "empty");
	snprintf(p, sizeof(p), "%s/empty", dir);
	snprintf(msg, sizeof(msg), "No .jsonl files found under %s", p);
	SCAN_FAILS(p, ES_EINVAL, msg);
	/* A folder of compressed files alone: the reference's error, and what --compressed would
	 * read. */
	mk_dir(dir, "gz");
	mk_file(dir, "gz/b.jsonl.zst");
	mk_file(dir, "gz/a.jsonl.GZ");
	mk_file(dir, "gz/notes.gz");
	snprintf(p, sizeof(p), "%s/gz", dir);
	snprintf(msg, sizeof(msg), "No .jsonl files found under %s (it holds 2 compressed files, first: a.jsonl.GZ; "
		 "--compressed reads them)", p);
	SCAN_FAILS(p, ES_EINVAL, msg);
	mk_dir(dir, "gz1");
	mk_file(dir, "gz1/a.jsonl.gz");
	snprintf(p, sizeof(p), "%s/gz1", dir);
	snprintf(msg, sizeof(msg), "No .jsonl files found under %s (it holds 1 compressed file, first: a.jsonl.gz; "
		 "--compressed reads them)", p);
	SCAN_FAILS(p, ES_EINVAL, msg);
	/* With the option, a folder without any JSONL file gives the reference's error alone. */
	snprintf(p, sizeof(p), "%s/sub", dir);
	snprintf(msg, sizeof(msg), "No .jsonl files found under %s", p);
	SCAN_FAILS_FLAGS(p, ES_SCAN_COMPRESSED, ES_EINVAL, msg);
	/* A FIFO given directly is not a file. */
	snprintf(p, sizeof(p), "%s/pipe.jsonl", dir);
	CHECK_INT_EQ(mkfifo(p, 0644), 0);
	snprintf(msg, sizeof(msg), "No .jsonl files found under %s", p);
	SCAN_FAILS(p, ES_EINVAL, msg);
	/* A missing path. */
	snprintf(p, sizeof(p), "%s/nope", dir);
	snprintf(msg, sizeof(msg), "Dataset path does not exist: %s: No such file or directory", p);
	SCAN_FAILS(p, ES_ENOENT, msg);
}

/* Many files in many folders: every one found, in order. */
static void test_many(void)
{
	char root[1024];
	snprintf(root, sizeof(root), "%s/many", T);
	CHECK_INT_EQ(mkdir(root, 0755), 0);
	enum { DIRS = 20, FILES = 30 };
	for (int d = DIRS - 1; d >= 0; d--) {
		char rel[64];
		snprintf(rel, sizeof(rel), "d%02d", d);
		mk_dir(root, rel);
		for (int f = FILES - 1; f >= 0; f--) {
			snprintf(rel, sizeof(rel), "d%02d/f%03d.jsonl", d, f);
			mk_file(root, rel);
		}
	}
	struct es_scan s;
	int rc = es_scan_dataset(root, 0, &s);
	if (CHECK_INT_EQ(rc, 0) && CHECK_INT_EQ(s.n_files, DIRS * FILES)) {
		int bad = 0;
		for (int i = 0; i < DIRS * FILES; i++) {
			char rel[64];
			snprintf(rel, sizeof(rel), "d%02d/f%03d.jsonl", i / FILES, i % FILES);
			if (strcmp(s.files[i].relative_path, rel) != 0)
				bad++;
		}
		CHECK_INT_EQ(bad, 0);
	}
	es_scan_free(&s);
}

int main(void)
{
	T = test_tmpdir();
	test_is_jsonl_name();
	test_folder_rules();
	test_sort_order();
	test_single_file();
	test_compressed_members();
	test_twins();
	test_errors();
	test_many();
	return test_done();
}
