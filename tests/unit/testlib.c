#include "testlib.h"
#include "eshard/fs.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int n_checks, n_failed;
static char **tmpdirs;
static size_t n_tmpdirs;

int test_check(int ok, const char *file, int line, const char *expr)
{
	n_checks++;
	if (!ok) {
		n_failed++;
		fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, expr);
	}
	return ok;
}

int test_check_str(const char *a, const char *b, const char *ea, const char *eb, const char *file,
		   int line)
{
	int ok = (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
	n_checks++;
	if (!ok) {
		n_failed++;
		fprintf(stderr, "%s:%d: CHECK_STR_EQ(%s, %s) failed:\n  got:  %s%s%s\n  want: %s%s%s\n",
			file, line, ea, eb, a ? "\"" : "", a ? a : "NULL", a ? "\"" : "", b ? "\"" : "",
			b ? b : "NULL", b ? "\"" : "");
	}
	return ok;
}

int test_check_int(long long a, long long b, const char *ea, const char *eb, const char *file,
		   int line)
{
	n_checks++;
	if (a != b) {
		n_failed++;
		fprintf(stderr, "%s:%d: CHECK_INT_EQ(%s, %s) failed: %lld != %lld\n", file, line, ea, eb,
			a, b);
	}
	return a == b;
}

/* Printable form of bytes: C escapes for anything that is not plain ASCII. */
static void put_escaped(const unsigned char *p, size_t n)
{
	fputc('"', stderr);
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\\' || p[i] == '"')
			fprintf(stderr, "\\%c", p[i]);
		else if (p[i] >= 0x20 && p[i] < 0x7f)
			fputc(p[i], stderr);
		else
			fprintf(stderr, "\\x%02x", p[i]);
	}
	fputc('"', stderr);
}

int test_check_mem(const void *a, size_t alen, const void *b, size_t blen, const char *ea,
		   const char *eb, const char *file, int line)
{
	int ok = alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
	n_checks++;
	if (!ok) {
		n_failed++;
		fprintf(stderr, "%s:%d: CHECK_MEM_EQ(%s, %s) failed:\n  got:  ", file, line, ea, eb);
		put_escaped(a, alen);
		fprintf(stderr, " (%zu bytes)\n  want: ", alen);
		put_escaped(b, blen);
		fprintf(stderr, " (%zu bytes)\n", blen);
	}
	return ok;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

int test_done(void)
{
	for (size_t i = 0; i < n_tmpdirs; i++) {
		if (n_failed)
			fprintf(stderr, "kept %s\n", tmpdirs[i]);
		else
			nftw(tmpdirs[i], rm_one, 16, FTW_DEPTH | FTW_PHYS);
		free(tmpdirs[i]);
	}
	free(tmpdirs);
	tmpdirs = NULL;
	n_tmpdirs = 0;
	fprintf(stderr, "%d checks, %d failed\n", n_checks, n_failed);
	return n_failed ? 1 : 0;
}

char *test_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	if (!base || !*base)
		base = "/tmp";
	size_t n = strlen(base) + 32;
	char *p = malloc(n);
	char **list = realloc(tmpdirs, (n_tmpdirs + 1) * sizeof(*tmpdirs));
	if (!p || !list) {
		fprintf(stderr, "test_tmpdir: out of memory\n");
		exit(1);
	}
	tmpdirs = list;
	snprintf(p, n, "%s/eshard-test-XXXXXX", base);
	if (!mkdtemp(p)) {
		perror("test_tmpdir: mkdtemp");
		exit(1);
	}
	tmpdirs[n_tmpdirs++] = p;
	return p;
}

const char *test_data_dir(void)
{
	const char *d = getenv("ESHARD_TEST_DATA");
	if (!d || !*d) {
		test_check(0, __FILE__, __LINE__, "ESHARD_TEST_DATA is set");
		return NULL;
	}
	return d;
}

uint64_t test_rand(void)
{
	static uint64_t state = 0x9E3779B97F4A7C15ULL;
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return state;
}

const char *test_watched;
int test_watched_opens;

/* 1 when path matches w (testlib.h test_watched). */
static int watched(const char *path, const char *w)
{
	size_t n = strlen(path);
	if (!*w)
		return 1; /* "": every path */
	while (w && *w) {
		const char *bar = strchr(w, '|');
		size_t len = bar ? (size_t)(bar - w) : strlen(w);
		char alt[512];
		snprintf(alt, sizeof(alt), "%.*s", (int)len, w);
		size_t a = strlen(alt);
		if (a && alt[a - 1] == '$') {
			if (n >= a - 1 && !memcmp(path + n - (a - 1), alt, a - 1))
				return 1;
		} else if (strstr(path, alt)) {
			return 1;
		}
		w = bar ? bar + 1 : NULL;
	}
	return 0;
}

const char *test_vanished;
int test_vanished_opens;

/* Counts an open of path (test_watched); 1 when it is to fail with ENOENT (test_vanished). */
static int watch(const char *path)
{
	const char *w = __atomic_load_n(&test_watched, __ATOMIC_SEQ_CST);
	if (w && path && watched(path, w))
		__atomic_fetch_add(&test_watched_opens, 1, __ATOMIC_SEQ_CST);
	const char *v = __atomic_load_n(&test_vanished, __ATOMIC_SEQ_CST);
	if (v && *v && path && watched(path, v) && __atomic_fetch_sub(&test_vanished_opens, 1, __ATOMIC_SEQ_CST) > 0) {
		errno = ENOENT;
		return 1;
	}
	return 0;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
	static int (*real)(const char *, int, ...);
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	if (!real)
		real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
	if (watch(path))
		return -1;
	return real(path, flags, mode);
}

int openat(int dfd, const char *path, int flags, ...)
{
	static int (*real)(int, const char *, int, ...);
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	if (!real)
		real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
	if (watch(path))
		return -1;
	return real(dfd, path, flags, mode);
}

/* openat2 has no C library wrapper: fs.c calls it through syscall(), counted here too. */
long syscall(long number, ...)
{
	static long (*real)(long, ...);
	va_list ap;
	long a[6];
	va_start(ap, number);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
#ifdef SYS_openat2
	if (number == SYS_openat2 && watch((const char *)a[1]))
		return -1;
#endif
	return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

int test_watched_lists;
int test_getdents_fail;

/* Listings too: fs.c reads a folder with getdents64 on its descriptor. */
ssize_t getdents64(int fd, void *buf, size_t n)
{
	if (__atomic_load_n(&test_getdents_fail, __ATOMIC_SEQ_CST) > 0) {
		__atomic_fetch_sub(&test_getdents_fail, 1, __ATOMIC_SEQ_CST);
		errno = EIO;
		return -1;
	}
	const char *w = __atomic_load_n(&test_watched, __ATOMIC_SEQ_CST);
	if (w) {
		char link[64], path[4096];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		ssize_t len = readlink(link, path, sizeof(path) - 1);
		if (len > 0) {
			path[len] = 0;
			if (watched(path, w))
				__atomic_fetch_add(&test_watched_lists, 1, __ATOMIC_SEQ_CST);
		}
	}
	return syscall(SYS_getdents64, fd, buf, n);
}

void test_gone_token(char tok[33])
{
	es_fs_temp_token(tok);
	pid_t child = fork();
	if (child == 0)
		_exit(0);
	waitpid(child, NULL, 0);
	char hex[9];
	snprintf(hex, sizeof(hex), "%08x", (unsigned)child);
	memcpy(tok, hex, 8);
}
