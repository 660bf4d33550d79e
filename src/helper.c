#include "eshard/helper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 when dir is the build tree the library was compiled for: only a binary there may fall back
 * to the source tree's scripts/, so that an installed binary never depends on the checkout it
 * was built from (and a missing installed helper is noticed, not papered over). */
static int is_build_dir(const char *dir)
{
#if defined(ESHARD_SOURCE_DIR) && defined(ESHARD_BUILD_DIR)
	char *a = realpath(dir, NULL), *b = realpath(ESHARD_BUILD_DIR, NULL);
	int same = a && b && !strcmp(a, b);
	free(a);
	free(b);
	return same;
#else
	(void)dir;
	return 0;
#endif
}

const char *es_helper_path(const char *env_var, const char *name)
{
	static struct { char name[64]; char path[4200]; } found[8];
	const char *env = env_var ? getenv(env_var) : NULL;
	if (env && *env)
		return env;
	size_t k;
	for (k = 0; k < sizeof(found) / sizeof(found[0]) && found[k].name[0]; k++)
		if (!strcmp(found[k].name, name))
			return found[k].path[0] ? found[k].path : NULL;
	if (k == sizeof(found) / sizeof(found[0]) || strlen(name) >= sizeof(found[k].name))
		return NULL;
	snprintf(found[k].name, sizeof(found[k].name), "%s", name);
	found[k].path[0] = '\0';
	char exe[2048];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = '\0';
	snprintf(found[k].path, sizeof(found[k].path), "%s/../share/eshard-mpi/%s", exe, name);
	if (access(found[k].path, R_OK) == 0)
		return found[k].path;
	found[k].path[0] = '\0';
#ifdef ESHARD_SOURCE_DIR
	if (is_build_dir(exe)) {
		snprintf(found[k].path, sizeof(found[k].path), "%s/scripts/%s", ESHARD_SOURCE_DIR, name);
		if (access(found[k].path, R_OK) == 0)
			return found[k].path;
		found[k].path[0] = '\0';
	}
#endif
	return NULL;
}
