/*
 * The version line of --version: the project version from CMake's project() and the git
 * revision the binary was built from (cmake/version.cmake writes eshard_version.h at every
 * build; "unknown" when built outside a git checkout).
 */
#include "args.h"

#include "eshard_version.h"

const char *es_version_line(void)
{
	return "eshard-mpi " ESHARD_VERSION " (git " ESHARD_GIT_REVISION ")";
}
