/*
 * testlib: the few helpers every unit test shares.
 *
 * A failed check prints "file:line: ..." with both values and is counted; the test goes on,
 * so one run shows every failure. Each CHECK* is an expression that is 1 when it passed, so
 * a test can guard what follows: if (CHECK(p != NULL)) use(p);
 * main() ends with "return test_done();", which prints a summary, removes the folders made
 * by test_tmpdir() when everything passed (they are kept for a look when something failed)
 * and returns the exit code.
 */
#ifndef ESHARD_TESTLIB_H
#define ESHARD_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

int test_check(int ok, const char *file, int line, const char *expr);
int test_check_str(const char *a, const char *b, const char *ea, const char *eb, const char *file,
		   int line);
int test_check_int(long long a, long long b, const char *ea, const char *eb, const char *file,
		   int line);
int test_check_mem(const void *a, size_t alen, const void *b, size_t blen, const char *ea,
		   const char *eb, const char *file, int line);

#define CHECK(cond) test_check(!!(cond), __FILE__, __LINE__, #cond)
/* Either side may be NULL (equal only to NULL). */
#define CHECK_STR_EQ(a, b) test_check_str((a), (b), #a, #b, __FILE__, __LINE__)
#define CHECK_INT_EQ(a, b) test_check_int((long long)(a), (long long)(b), #a, #b, __FILE__, __LINE__)
/* Byte strings that may hold NULs; shown escaped when they differ. */
#define CHECK_MEM_EQ(a, alen, b, blen) \
	test_check_mem((a), (alen), (b), (blen), #a, #b, __FILE__, __LINE__)

/* Summary line on stderr; 0 when every check passed, else 1. */
int test_done(void);

/* A fresh, empty folder (mkdtemp under $TMPDIR or /tmp); exits the test if it cannot. */
char *test_tmpdir(void);

/* A deterministic pseudo-random sequence (xorshift64), the same in every run. */
uint64_t test_rand(void);

/* The open, openat and openat2 calls of the test program that name a path holding
 * test_watched (when not NULL; alternatives split by '|', one that ends in '$' matches the
 * path's end), counted into test_watched_opens (atomically: the library reads on threads). The test program's open, openat and syscall stand before the C library's for
 * the library linked into it, so a test can count what a call reads (issue 29). */
extern const char *test_watched;
extern int test_watched_opens;
/* The getdents64 calls (fs.c's listings) on a folder whose path holds test_watched. */
extern int test_watched_lists;
/* While > 0, each getdents64 call fails with EIO and takes one off. */
extern int test_getdents_fail;
/* An open, openat or openat2 of a path that matches test_vanished (as test_watched) fails with
 * ENOENT while test_vanished_opens > 0, taking one off: a file that exists but looks absent. */
extern const char *test_vanished;
extern int test_vanished_opens;

/* A temporary's token (fs.h es_fs_temp_token) whose maker is gone: this host's, with the pid of
 * a child that has exited (es_fs_temp_owner says ES_TEMP_GONE). */
void test_gone_token(char tok[33]);

/* $ESHARD_TEST_DATA (set by CTest to <repo>/tests/data), or NULL with a failed check. */
const char *test_data_dir(void);

#endif
