/*
 * recipe: read a recipe and check it, step by step in the reference's order and wording
 * (docs/design.md#recipe-checks). The YAML tree comes from yaml.c (yamltree.h), what Python makes
 * of its values from pyval.c, the operator kinds from dj_registry.c.
 */
#include "eshard/recipe.h"
#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "dj_registry.h"
#include "pyval.h"
#include "yamltree.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* What the checks gather on their way; handed over to the es_recipe at the end. */
struct check {
	const struct es_ynode *root, *process;
	const char *path;
	const struct es_recipe_opts *opts;
	const char *executor;                /* "default" or "ray", in the tree */
	struct es_strv warnings, media, index, custom, names, unsharded;
	struct es_dj_registry reg;
};

static int has_nul(const struct es_ynode *n) { return memchr(n->text, '\0', n->len) != NULL; }

/* es_error(ES_EINVAL, fmt, repr(v)): fmt holds one %s. */
static int repr_error(const char *fmt, const struct es_ynode *v)
{
	char *r = es_pyval_repr(v);
	int rc = es_error(ES_EINVAL, fmt, r ? r : "?");
	free(r);
	return rc;
}

/* fmt with its one %s replaced by repr(v); NULL when out of memory. */
static char *repr_msg(const char *fmt, const struct es_ynode *v)
{
	char *r = es_pyval_repr(v);
	struct es_buf b = ES_BUF_INIT;
	char *out = r && !es_buf_printf(&b, fmt, r) ? es_buf_detach(&b, NULL) : NULL;
	es_buf_free(&b);
	free(r);
	return out;
}

/* A refusal because the recipe is not shard-safe (msg is malloc'd, or NULL when out of
 * memory): with allow_unsharded the job runs unsharded instead, so the message becomes one of
 * its reasons (not logged) and the check goes on. */
static int not_shard_safe(struct check *c, char *msg)
{
	if (!msg)
		return es_error(ES_ENOMEM, "out of memory");
	if (c->opts->allow_unsharded)
		return es_strv_push(&c->unsharded, msg);
	int rc = es_error(ES_EINVAL, "%s", msg);
	free(msg);
	return rc;
}

/* not_shard_safe, and a refusal says what to do instead (hint, appended to the error only: the
 * manifest's unsharded.reasons keep the plain words). */
static int not_shard_safe_hint(struct check *c, char *msg, const char *hint)
{
	if (!msg || c->opts->allow_unsharded || !hint)
		return not_shard_safe(c, msg);
	int rc = es_error(ES_EINVAL, "%s%s", msg, hint);
	free(msg);
	return rc;
}

/* The one operator of process[i]: all keys of the constructed dict must be equal. */
struct one_op {
	const struct es_ynode *name, *args;
	size_t keys;               /* 0, 1, or 2 meaning "more than one" */
};

static int one_op_pair(void *ctx, const struct es_ynode *k, const struct es_ynode *v)
{
	struct one_op *o = ctx;
	if (!o->name) {
		o->name = k;
		o->args = v;
		o->keys = 1;
		return 0;
	}
	if (!es_pyval_eq(o->name, k)) {
		o->keys = 2;
		return 1;
	}
	o->args = v; /* a repeated key: the last value wins, the first key stays */
	return 0;
}

static void op_of(const struct es_ynode *item, struct one_op *o)
{
	memset(o, 0, sizeof(*o));
	if (item->kind == ES_Y_MAP)
		es_yaml_walk(item, one_op_pair, o);
}

/* The operator's name as the registry knows it: a str without NUL, else NULL. */
static const char *op_name(const struct one_op *o)
{
	return o->keys == 1 && o->name->kind == ES_Y_STR && !has_nul(o->name) ? o->name->text : NULL;
}

/* Step 1: executor_type is "default" (also when missing) or "ray"; anything else, null too,
 * is refused. */
static int check_executor(struct check *c)
{
	const struct es_ynode *et = es_yaml_get(c->root, "executor_type");
	c->executor = "default";
	if (!et)
		return 0;
	if (!es_yaml_is_str(et, "default") && !es_yaml_is_str(et, "ray"))
		return repr_error("Elastic sharding supports recipes for executor_type=default or ray; "
				  "got executor_type=%s", et);
	c->executor = et->text;
	return 0;
}

/* Step 2: process must be a list. */
static int check_process_list(struct check *c)
{
	c->process = es_yaml_get(c->root, "process");
	if (!c->process || c->process->kind != ES_Y_SEQ)
		return es_error(ES_EINVAL, "Recipe must define an explicit process list");
	return 0;
}

static int resolve_custom_path(const char *base, const char *p, struct es_buf *out)
{
	struct es_buf x = ES_BUF_INIT, j = ES_BUF_INIT;
	int rc = es_fs_expand_user(p, &x);
	if (!rc && x.data[0] != '/' && base && *base) {
		rc = es_path_join(&j, base, x.data);
		if (!rc)
			rc = es_fs_resolve(j.data, out);
	} else if (!rc) {
		rc = es_fs_resolve(x.data, out);
	}
	es_buf_free(&x);
	es_buf_free(&j);
	return rc;
}

/* Step 3: custom_operator_paths, else custom-operator-paths (the first truthy one; a str is a
 * one-item list), resolved against opts->base_dir or the CWD. */
static int custom_paths(struct check *c)
{
	const char *key = "custom_operator_paths";
	const struct es_ynode *v = es_yaml_get(c->root, key);
	if (!es_pyval_truthy(v)) {
		key = "custom-operator-paths";
		v = es_yaml_get(c->root, key);
	}
	if (!es_pyval_truthy(v))
		return 0;
	const struct es_ynode *const *items = (const struct es_ynode *const *)&v;
	size_t n = 1;
	if (v->kind == ES_Y_SEQ) {
		items = (const struct es_ynode *const *)v->kid;
		n = v->n;
	}
	struct es_buf path = ES_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		if (items[i]->kind != ES_Y_STR || has_nul(items[i])) {
			char *r = es_pyval_repr(items[i]);
			rc = es_error(ES_EINVAL, "%s must be a path or a list of paths; got %s", key, r ? r : "?");
			free(r);
			break;
		}
		rc = resolve_custom_path(c->opts->base_dir, items[i]->text, &path);
		if (!rc)
			rc = es_strv_push(&c->custom, strdup(path.data));
	}
	es_buf_free(&path);
	return rc;
}

/* Without the registry the custom operators cannot be loaded; at least their paths must
 * exist, as Data-Juicer's loader would require, and a warning says how kinds were judged. */
static int registry_fallback(struct check *c)
{
	for (size_t i = 0; i < c->custom.n; i++) {
		int ex = es_fs_exists(c->custom.v[i]);
		if (ex < 0)
			return ex;
		if (!ex)
			return es_error(ES_EINVAL, "Custom operator path does not exist: %s", c->custom.v[i]);
	}
	if (!c->names.n)
		return 0;
	return es_strv_pushf(&c->warnings, "Data-Juicer registry was not consulted (%s); operator kinds were "
			     "checked by their names only", c->reg.reason ? c->reg.reason : "unknown reason");
}

/* Steps 3-4: the custom operator paths, then the registry, asked once about every operator
 * name of the process list. */
static int ask_registry(struct check *c)
{
	int rc = custom_paths(c);
	for (size_t i = 0; !rc && i < c->process->n; i++) {
		struct one_op o;
		op_of(c->process->kid[i], &o);
		if (op_name(&o))
			rc = es_strv_push(&c->names, strdup(op_name(&o)));
	}
	if (rc)
		return rc;
	es_strv_sort_unique(&c->names);
	rc = es_dj_registry_consult(c->opts->python, c->opts->helper, c->custom.v, c->custom.n,
				    (const char *const *)c->names.v, c->names.n, &c->reg);
	if (!rc && !c->reg.consulted)
		rc = registry_fallback(c);
	return rc;
}

/* The reference's message for an unknown operator, with the closest registered name when the
 * registry listed its names and one is close. */
static int unknown_operator(const struct check *c, const struct one_op *o)
{
	const char *near = op_name(o) ? es_dj_registry_suggest(&c->reg, op_name(o)) : NULL;
	if (!near)
		return repr_error("Unknown operator %s; cannot prove it is shard-safe", o->name);
	char *r = es_pyval_repr(o->name);
	int rc = es_error(ES_EINVAL, "Unknown operator %s; cannot prove it is shard-safe (did you mean '%s'?)",
			  r ? r : "?", near);
	free(r);
	return rc;
}

/* Step 6 for process[i]: one operator, mapping arguments, a shard-safe kind, no stats export;
 * its index_key is collected and an explicit save_dir warned about. */
/* What a user can do about a whole-dataset operator. A deduplicator is the usual one: Data-Juicer
 * 1.6's Ray deduplicators are the ones that deduplicate across a whole dataset on a Ray cluster. */
static const char *whole_op_hint(const struct one_op *o)
{
	const char *n = op_name(o);
	if (n && strstr(n, "deduplicator"))
		return ": pass --allow-unsharded to run the whole dataset as one shard on one rank, or deduplicate "
		       "across the dataset with Data-Juicer itself on a Ray cluster (ray_document_deduplicator, "
		       "ray_bts_minhash_deduplicator, ray_image_deduplicator, ray_video_deduplicator)";
	return ": pass --allow-unsharded to run the whole dataset as one shard on one rank";
}

static int check_operator(struct check *c, size_t i)
{
	struct one_op o;
	op_of(c->process->kid[i], &o);
	if (o.keys != 1)
		return es_error(ES_EINVAL, "process[%zu] must contain exactly one operator", i);
	const struct es_ynode *args = es_pyval_truthy(o.args) ? o.args : NULL; /* op_args or {} */
	if (args && args->kind != ES_Y_MAP)
		return repr_error("Arguments for operator %s must be a mapping", o.name);
	enum es_dj_verdict v = op_name(&o) ? es_dj_registry_kind(&c->reg, op_name(&o)) : ES_DJ_OP_UNKNOWN;
	if (v == ES_DJ_OP_UNKNOWN)
		return unknown_operator(c, &o);
	int rc = 0;
	if (v == ES_DJ_OP_WHOLE && (rc = not_shard_safe_hint(c, repr_msg("Operator %s requires or may require "
				    "whole-dataset semantics and cannot run shard by shard", o.name), whole_op_hint(&o))))
		return rc;
	if (!args)
		return 0;
	if (es_pyval_truthy(es_yaml_get(args, "stats_export_path")) &&
	    (rc = not_shard_safe(c, repr_msg("Operator %s sets stats_export_path, which would cause cross-shard "
					       "output collisions", o.name))))
		return rc;
	const struct es_ynode *ik = es_yaml_get(args, "index_key");
	if (ik && ik->kind != ES_Y_NULL) {
		if (ik->kind != ES_Y_STR || ik->len == 0 || has_nul(ik))
			return repr_error("Operator %s has an invalid index_key", o.name);
		if ((rc = es_strv_push(&c->index, strdup(ik->text))))
			return rc;
	}
	if (es_pyval_truthy(es_yaml_get(args, "save_dir"))) {
		char *r = es_pyval_repr(o.name);
		rc = r ? es_strv_pushf(&c->warnings, "operator %s uses an explicit save_dir; the caller must ensure "
				       "generated filenames do not collide across shards", r)
		       : es_error(ES_ENOMEM, "out of memory");
		free(r);
	}
	return rc;
}

/* A top-level setting that cannot work per shard: "Recipe option <key>=<repr> cannot work per
 * shard: <why>", malloc'd (NULL when out of memory). */
static char *per_shard_msg(const char *key, const struct es_ynode *v, const char *why)
{
	struct es_buf f = ES_BUF_INIT;
	char *out = es_buf_printf(&f, "Recipe option %s=%%s cannot work per shard: %s", key, why) ? NULL
		    : repr_msg(f.data, v);
	es_buf_free(&f);
	return out;
}

static int not_per_shard(const char *key, const struct es_ynode *v, const char *why)
{
	char *m = per_shard_msg(key, v, why);
	int rc = m ? es_error(ES_EINVAL, "%s", m) : es_error(ES_ENOMEM, "out of memory");
	free(m);
	return rc;
}

static int warn_option(struct check *c, const char *key, const char *why)
{
	return es_strv_pushf(&c->warnings, "recipe option %s %s", key, why);
}

/* Beyond the reference: the top-level settings of Data-Juicer 1.6.1 (config.py) that write
 * one global output or need the whole dataset, checked the way each behaves in a shard worker
 * (the Ray executor, export_path set per attempt; what each did in a real run is in
 * docs/dj-notes.md#recipe-settings-per-shard). */
static int check_export(struct check *c)
{
	const struct es_ynode *v = es_yaml_get(c->root, "export_type");
	if (v && v->kind != ES_Y_NULL && !es_yaml_is_str(v, "jsonl"))
		return not_per_shard("export_type", v, "every shard's output is verified and merged as JSONL; "
				     "only 'jsonl' (or no export_type) works");
	v = es_yaml_get(c->root, "encrypt_before_export");
	if (es_pyval_truthy(v))
		return not_per_shard("encrypt_before_export", v, "encrypted output files cannot be verified "
				     "and merged as JSONL");
	int rc = 0;
	v = es_yaml_get(c->root, "export_shard_size");
	if (es_pyval_truthy(v) &&
	    (rc = not_shard_safe(c, per_shard_msg("export_shard_size", v, "it sizes the files of one global export; "
						  "Ray counts every shard's rows and bytes for it and eshard-mpi merges "
						  "the files into one"))))
		return rc;
	v = es_yaml_get(c->root, "export_in_parallel");
	if (es_pyval_truthy(v) &&
	    (rc = not_shard_safe(c, per_shard_msg("export_in_parallel", v, "it asks for one global parallel export "
						  "by the default executor; shard workers export each shard through Ray"))))
		return rc;
	v = es_yaml_get(c->root, "generated_dataset_config");
	if (es_pyval_truthy(v) &&
	    (rc = not_shard_safe(c, per_shard_msg("generated_dataset_config", v, "Data-Juicer loads it instead of "
						  "dataset_path, so every shard would process the whole generated dataset"))))
		return rc;
	if (es_pyval_truthy(es_yaml_get(c->root, "export_extra_args")))
		rc = warn_option(c, "export_extra_args", "is passed to Ray's write_json for every shard; an "
				 "argument that changes the file format (pandas_json_args) breaks the merge");
	if (!rc && es_pyval_truthy(es_yaml_get(c->root, "dataset")))
		rc = warn_option(c, "dataset", "is ignored: shard workers read their shard through dataset_path");
	return rc;
}

/* Step 7: media keys are non-empty strings, de-duplicated in order. */
static int media_keys(struct check *c)
{
	static const char *const media_cfg[3][2] = {
		{ "image_key", "images" }, { "audio_key", "audios" }, { "video_key", "videos" },
	};
	int rc = 0;
	for (size_t i = 0; !rc && i < 3; i++) {
		const struct es_ynode *v = es_yaml_get(c->root, media_cfg[i][0]);
		if (v && (v->kind != ES_Y_STR || v->len == 0 || has_nul(v)))
			return es_error(ES_EINVAL, "%s must be a non-empty string", media_cfg[i][0]);
		rc = es_strv_add_once(&c->media, v ? v->text : media_cfg[i][1]);
	}
	return rc;
}

/* Facts for prepare: dataset_path when it is a non-blank str, ray_address when not null. */
static int prepare_facts(const struct check *c, struct es_recipe *out)
{
	const struct es_ynode *ds = es_yaml_get(c->root, "dataset_path");
	if (ds && ds->kind == ES_Y_STR && !es_pyval_is_blank(ds->text, ds->len)) {
		if (has_nul(ds))
			return es_error(ES_EINVAL, "dataset_path in %s must not contain a NUL character", c->path);
		if (!(out->dataset_path = strdup(ds->text)))
			return es_error(ES_ENOMEM, "out of memory");
	}
	const struct es_ynode *ra = es_yaml_get(c->root, "ray_address");
	if (ra && ra->kind != ES_Y_NULL) {
		if (ra->kind == ES_Y_STR && has_nul(ra))
			return es_error(ES_EINVAL, "ray_address in %s must not contain a NUL character", c->path);
		out->has_ray_address = 1;
		out->ray_address_str = es_pyval_str(ra);
		out->ray_address_repr = es_pyval_repr(ra);
		if (!out->ray_address_str || !out->ray_address_repr)
			return es_error(ES_ENOMEM, "out of memory");
	}
	if (!(out->executor_type = strdup(c->executor)))
		return es_error(ES_ENOMEM, "out of memory");
	return 0;
}

/* Move the gathered lists and the registry's identity into out. */
static void hand_over(struct check *c, struct es_recipe *out)
{
	out->registry_consulted = c->reg.consulted;
	out->dj_version = c->reg.version;
	out->dj_commit = c->reg.commit;
	c->reg.version = c->reg.commit = NULL;
	out->warnings = c->warnings.v;
	out->n_warnings = c->warnings.n;
	out->media_keys = c->media.v;
	out->n_media = c->media.n;
	out->index_keys = c->index.v;
	out->n_index = c->index.n;
	out->unsharded_reasons = c->unsharded.v;
	out->n_unsharded = c->unsharded.n;
	memset(&c->unsharded, 0, sizeof(c->unsharded));
	memset(&c->warnings, 0, sizeof(c->warnings));
	memset(&c->media, 0, sizeof(c->media));
	memset(&c->index, 0, sizeof(c->index));
}

/* The checks of docs/design.md#recipe-checks, in the reference's order, so that the first failure
 * is the reference's. */
static int validate(const struct es_ynode *root, const char *path, const struct es_recipe_opts *opts,
		    struct es_recipe *out)
{
	if (!root || root->kind != ES_Y_MAP)
		return es_error(ES_EINVAL, "Recipe must be a YAML mapping: %s", path);
	struct check c;
	memset(&c, 0, sizeof(c));
	c.root = root;
	c.path = path;
	c.opts = opts;
	int rc = check_executor(&c);
	if (!rc)
		rc = check_process_list(&c);
	if (!rc)
		rc = ask_registry(&c);
	/* Step 5: the executor is always Ray for shard workers. */
	if (!rc && !strcmp(c.executor, "default"))
		rc = es_strv_push(&c.warnings, strdup("recipe executor_type=default will be overridden with "
						      "executor_type=ray for shard workers"));
	for (size_t i = 0; !rc && i < c.process->n; i++)
		rc = check_operator(&c, i);
	if (!rc)
		rc = media_keys(&c);
	if (!rc)
		rc = check_export(&c);
	es_strv_sort_unique(&c.index);
	if (!rc)
		rc = prepare_facts(&c, out);
	if (!rc)
		hand_over(&c, out);
	es_strv_free(&c.warnings);
	es_strv_free(&c.media);
	es_strv_free(&c.index);
	es_strv_free(&c.custom);
	es_strv_free(&c.names);
	es_strv_free(&c.unsharded);
	es_dj_registry_free(&c.reg);
	return rc;
}

int es_recipe_load(const char *path, const struct es_recipe_opts *opts, struct es_recipe *out)
{
	static const struct es_recipe_opts defaults = { NULL, NULL, NULL, 0 };
	memset(out, 0, sizeof(*out));
	if (!opts)
		opts = &defaults;
	struct stat st;
	if (stat(path, &st) != 0)
		return es_error_errno(ES_EIO, "cannot read recipe '%s'", path);
	if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > ES_RECIPE_MAX_BYTES)
		return es_error(ES_EINVAL, "Recipe %s is larger than %zu MiB", path, ES_RECIPE_MAX_BYTES >> 20);
	struct es_buf data = ES_BUF_INIT;
	int rc = es_fs_read_file(path, &data, ES_RECIPE_MAX_BYTES);
	if (rc) {
		es_buf_free(&data);
		return rc == ES_ENOMEM ? ES_EINVAL : ES_EIO; /* fs has reported it */
	}
	struct es_ydoc *doc;
	rc = es_yaml_parse(path, data.data, data.len, &doc);
	if (!rc)
		rc = validate(es_yaml_root(doc), path, opts, out);
	es_yaml_free(doc);
	es_buf_free(&data);
	if (rc) {
		es_recipe_free(out);
		if (rc != ES_EIO && rc != ES_EINVAL)
			rc = rc == ES_ENOMEM ? ES_EIO : ES_EINVAL;
	}
	return rc;
}

static void free_strs(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void es_recipe_free(struct es_recipe *r)
{
	if (!r)
		return;
	free(r->executor_type);
	free_strs(r->media_keys, r->n_media);
	free_strs(r->index_keys, r->n_index);
	free_strs(r->warnings, r->n_warnings);
	free_strs(r->unsharded_reasons, r->n_unsharded);
	free(r->dataset_path);
	free(r->ray_address_str);
	free(r->ray_address_repr);
	free(r->dj_version);
	free(r->dj_commit);
	memset(r, 0, sizeof(*r));
}
