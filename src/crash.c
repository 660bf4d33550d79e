#include "eshard/crash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ESHARD_TEST_HOOKS
void es_crash_point(const char *name)
{
	const char *at = getenv("ESHARD_TEST_CRASH_AT");
	if (at && strcmp(at, name) == 0) {
		fprintf(stderr, "eshard test crash point '%s' reached\n", name);
		_exit(99);
	}
}
#endif
