/*
 * fuzzlib: what the libFuzzer targets of tests/fuzz share (header only, test code).
 *
 * FUZZ_CHECK(cond) is the targets' oracle: a property that must hold for every input (a
 * canonical line re-normalizes to itself, a failed call leaves its output as it was); when it
 * does not, the target prints what broke and traps, so libFuzzer saves the input as a crash.
 * Readers that take a path get the fuzz input through a file in one scratch folder per
 * process, under /dev/shm when it is there (no disk write per execution); the folder is
 * removed at exit.
 */
#ifndef ESHARD_FUZZLIB_H
#define ESHARD_FUZZLIB_H

#include "eshard/fs.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_CHECK(cond)                                                                        \
	do {                                                                                    \
		if (!(cond)) {                                                                  \
			fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
			__builtin_trap();                                                       \
		}                                                                               \
	} while (0)

static char fuzz_dir[256];

static inline void fuzz_cleanup(void)
{
	if (fuzz_dir[0])
		es_fs_remove_tree(fuzz_dir);
}

/* The scratch folder of this process (made on the first call). */
static inline const char *fuzz_scratch(void)
{
	if (fuzz_dir[0])
		return fuzz_dir;
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/eshard-fuzz.XXXXXX", base);
	if (!mkdtemp(fuzz_dir)) {
		perror("fuzz: mkdtemp");
		exit(1);
	}
	atexit(fuzz_cleanup);
	return fuzz_dir;
}

/* Replace path's content by the size bytes at data; exits on a system error (not a finding). */
static inline void fuzz_write(const char *path, const uint8_t *data, size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size) || close(fd) != 0) {
		perror(path);
		exit(1);
	}
}

/* mkdir -p of one folder below the scratch folder; exits on a system error. */
static inline void fuzz_mkdirs(const char *path)
{
	if (es_fs_mkdirs(path, 0755) != 0) {
		fprintf(stderr, "fuzz: cannot make %s\n", path);
		exit(1);
	}
}

#endif
