/*
 * helper: where the helper scripts shipped with eshard-mpi are (dj_op_kinds.py, dj_runner.py).
 */
#ifndef ESHARD_HELPER_H
#define ESHARD_HELPER_H

/* The environment variable env_var when set; else <dir of the binary>/../share/eshard-mpi/<name>
 * (an installed eshard-mpi: `cmake --install`, the .deb); else, for a binary that runs from
 * the build tree it was compiled in, <source>/scripts/<name>. NULL when none exists: an
 * installed binary never looks into the source tree. The string stays valid for the life of
 * the process. */
const char *es_helper_path(const char *env_var, const char *name);

#endif
