/*
 * Unit tests of src/crash.c: the crash points of test builds.
 */
#include "testlib.h"

#include "eshard/crash.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* ESHARD_TEST_CRASH_AT=<name> ends the process with 99 at that point, and only there. */
static void test_crash_point(void)
{
#ifdef ESHARD_TEST_HOOKS
	unsetenv("ESHARD_TEST_CRASH_AT");
	es_crash_point("nowhere"); /* returns */
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int devnull_ok = freopen("/dev/null", "w", stderr) != NULL;
		(void)devnull_ok;
		setenv("ESHARD_TEST_CRASH_AT", "here", 1);
		es_crash_point("elsewhere");
		es_crash_point("her");
		es_crash_point("here");
		_exit(0);
	}
	int st = 0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st));
	CHECK_INT_EQ(WEXITSTATUS(st), 99);
#endif
}

int main(void)
{
	test_crash_point();
	return test_done();
}
