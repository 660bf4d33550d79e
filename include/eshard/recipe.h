/*
 * recipe: read a Data-Juicer YAML recipe and prove that it is safe to run shard by shard
 * (docs/design.md#recipe-checks).
 *
 * The recipe is parsed with libyaml into a private tree that types plain scalars the way
 * PyYAML's safe_load does (YAML 1.1: null/~, yes/no/on/off, 0x/0b/leading-0 octal ints,
 * underscores, sexagesimal, .inf/.nan, timestamps, merge keys "<<"). Aliases share the
 * anchored subtree instead of copying it, and the expanded size is counted, so an alias bomb
 * fails at once with bounded memory. The file size is capped (ES_RECIPE_MAX_BYTES).
 *
 * Operator kinds come from Data-Juicer's registry through a helper (scripts/dj_op_kinds.py)
 * run once as a child process (posix_spawn, no shell). When the helper reports that
 * Data-Juicer is not importable (exit 3), when the interpreter cannot be started, or when no
 * helper is configured, kinds are judged by the Data-Juicer naming convention and a warning
 * says so.
 *
 * Contract: es_recipe_load() never changes any file and leaves nothing behind: a crash at any
 * point is harmless. It either fills *out and returns 0, or returns a negative ES_E* code
 * (ES_EINVAL for a bad recipe, ES_EIO when the file or the helper could not be used) after
 * exactly one es_error() line, with *out zeroed. The helper child, when started, is always
 * waited for (and killed after a generous timeout).
 */
#ifndef ESHARD_RECIPE_H
#define ESHARD_RECIPE_H

#include <stddef.h>

#define ES_RECIPE_MAX_BYTES ((size_t)16 << 20)   /* larger recipe files are rejected */
#define ES_RECIPE_MAX_NODES ((size_t)1000000)     /* YAML nodes after alias expansion */
#define ES_RECIPE_MAX_DEPTH ((size_t)1000)        /* YAML nesting after alias expansion */

struct es_recipe_opts {
	const char *python;        /* interpreter for the registry helper; NULL -> "python3" (PATH) */
	const char *helper;        /* path of scripts/dj_op_kinds.py; NULL -> naming convention only */
	const char *base_dir;      /* relative custom_operator_paths resolve against this; NULL: CWD */
	/* --allow-unsharded: a recipe that is not shard-safe (a whole-dataset operator, an
	 * operator's stats_export_path, export_shard_size, export_in_parallel,
	 * generated_dataset_config) is accepted, its reasons listed in unsharded_reasons, so that
	 * it runs once over the whole dataset. export_type other than jsonl and
	 * encrypt_before_export stay refused: their output cannot be merged even unsharded. */
	int allow_unsharded;
};

struct es_recipe {
	char *executor_type;                 /* "default" or "ray" */
	char **media_keys; size_t n_media;   /* image_key, audio_key, video_key, de-duplicated */
	char **index_keys; size_t n_index;   /* sorted (byte order), distinct */
	char **warnings; size_t n_warnings;  /* in the reference's order and wording */
	char *dataset_path;                  /* the recipe's dataset_path if a non-blank string */
	int has_ray_address;                 /* the recipe sets ray_address to a non-null value */
	char *ray_address_str;               /* Python str(value), e.g. "local", "12", "True" */
	char *ray_address_repr;              /* Python repr(value), e.g. "'local'", "12" */
	int registry_consulted;              /* 1 when the Data-Juicer registry answered */
	char *dj_version;                    /* Data-Juicer version from the helper, or NULL */
	char *dj_commit;                     /* git revision of the Data-Juicer checkout, or NULL */
	/* allow_unsharded: why the recipe is not shard-safe (each the refusal it would have had);
	 * empty for a shard-safe recipe. */
	char **unsharded_reasons; size_t n_unsharded;
};

/* Read, parse and validate the recipe at path. opts may be NULL (all defaults). */
int es_recipe_load(const char *path, const struct es_recipe_opts *opts, struct es_recipe *out);
/* These two are defined with the registry helper (src/dj_registry.c). */
/* The identity of the Data-Juicer that `python` imports, as prepare records it in the manifest
 * (data_juicer.commit): the git revision of a checkout, else the package version; NULL when
 * it cannot be told (no helper, no Data-Juicer). The caller frees it. */
char *es_recipe_dj_identity(const char *python, const char *helper);
/* The registry helper beside the sources or named by ESHARD_DJ_HELPER, or NULL. */
const char *es_recipe_default_helper(void);
/* Free everything es_recipe_load() filled in and zero *r; safe on a zeroed struct. */
void es_recipe_free(struct es_recipe *r);

#endif
