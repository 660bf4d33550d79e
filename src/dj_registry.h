/*
 * dj_registry: is an operator shard-safe? Data-Juicer's registry says so through a helper
 * (scripts/dj_op_kinds.py) run once as a child process (posix_spawn, no shell, stdin from
 * /dev/null, killed after a generous timeout); without it the Data-Juicer naming convention
 * decides (docs/design.md#recipe-checks).
 *
 * The helper's public side, es_recipe_dj_identity() and es_recipe_default_helper(), is
 * declared in eshard/recipe.h, where prepare and the worker find it; it is defined here.
 *
 * Internal to libeshard. Contract: nothing here writes a file. es_dj_registry_consult()
 * returns 0 with the registry consulted, or 0 with reg->reason saying why it could not be
 * (no helper configured, the interpreter cannot be started, Data-Juicer not importable), or a
 * negative ES_E* code after exactly one es_error() line (ES_EINVAL when the custom operators do
 * not load, ES_EIO for a helper that fails otherwise, ES_ENOMEM); the child, when started, has
 * always been waited for. Whatever it returned, es_dj_registry_free() releases *reg.
 */
#ifndef ESHARD_DJ_REGISTRY_H
#define ESHARD_DJ_REGISTRY_H

#include "eshard/buf.h"

#include <stddef.h>

enum es_dj_verdict {
	ES_DJ_OP_OK,      /* a mapper or filter that works row by row */
	ES_DJ_OP_WHOLE,   /* needs, or may need, the whole dataset (deduplicators, selectors, ...) */
	ES_DJ_OP_UNKNOWN, /* not in the registry, or outside the naming convention */
};

struct es_dj_op {
	const char *name;          /* borrowed from the caller's names */
	int known, mapper, filter, global;
};

struct es_dj_registry {
	int consulted;             /* 1 when the registry answered */
	char *reason;              /* why it was not consulted, or NULL */
	struct es_dj_op *ops;      /* the answer, sorted by name */
	size_t n;
	char *version, *commit;    /* Data-Juicer's version and checkout revision, or NULL */
	struct es_strv registered; /* every registered name when the helper listed them (it does
				    * when some asked name is unknown), else empty */
};

/*
 * Ask `python helper` once about the operator names (sorted, distinct; they must outlive
 * reg), with each custom operator path. python NULL or "" means "python3" from PATH; helper
 * NULL or "" means no registry (reason "no registry helper is configured"); with no names
 * nothing is asked. reg must be zeroed.
 */
int es_dj_registry_consult(const char *python, const char *helper, char *const *custom, size_t n_custom,
			   const char *const *names, size_t n_names, struct es_dj_registry *reg);
/* The verdict on name: the registry's when it was consulted, else the naming convention's. */
enum es_dj_verdict es_dj_registry_kind(const struct es_dj_registry *reg, const char *name);
/* The registered name closest to an unknown name (es_closest_name), for "did you mean"; NULL
 * without a registry list (the registry was not consulted, or an older helper) or when no
 * name is close. */
const char *es_dj_registry_suggest(const struct es_dj_registry *reg, const char *name);
/* Free what consult filled in and zero *reg. */
void es_dj_registry_free(struct es_dj_registry *reg);

#endif
