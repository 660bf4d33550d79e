/*
 * recipe: read a recipe and check it, step by step in the reference's order and wording
 * (REFERENCE.md §4). The YAML tree comes from yaml.c (yamltree.h), what Python makes of its
 * values from pyval.c, the operator kinds from dj_registry.c.
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

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_nul(const struct es_ynode *n) { return memchr(n->text, '\0', n->len) != NULL; }

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

/* custom_operator_paths, else custom-operator-paths (the first truthy one; a str is a
 * one-item list), resolved against opts->base_dir or the CWD. */
static int custom_paths(const struct es_ynode *root, const struct es_recipe_opts *opts, struct es_strv *out)
{
	const char *key = "custom_operator_paths";
	const struct es_ynode *v = es_yaml_get(root, key);
	if (!es_pyval_truthy(v)) {
		key = "custom-operator-paths";
		v = es_yaml_get(root, key);
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
		rc = resolve_custom_path(opts->base_dir, items[i]->text, &path);
		if (!rc)
			rc = es_strv_push(out, strdup(path.data));
	}
	es_buf_free(&path);
	return rc;
}

static int op_error(int code, const char *fmt, const struct es_ynode *name)
{
	char *r = es_pyval_repr(name);
	int rc = es_error(code, fmt, r ? r : "?");
	free(r);
	return rc;
}

static char *op_warning(const char *fmt, const struct es_ynode *name)
{
	char *r = es_pyval_repr(name);
	if (!r)
		return NULL;
	struct es_buf b = ES_BUF_INIT;
	int rc = es_buf_printf(&b, fmt, r);
	free(r);
	if (rc) {
		es_buf_free(&b);
		return NULL;
	}
	return es_buf_detach(&b, NULL);
}

static int validate(const struct es_ynode *root, const char *path, const struct es_recipe_opts *opts,
		    struct es_recipe *out)
{
	struct es_strv warnings = ES_STRV_INIT, media = ES_STRV_INIT, index = ES_STRV_INIT, custom = ES_STRV_INIT;
	struct es_dj_registry reg;
	memset(&reg, 0, sizeof(reg));
	const char **names = NULL;
	size_t n_names = 0;
	int rc = 0;

	if (!root || root->kind != ES_Y_MAP)
		return es_error(ES_EINVAL, "Recipe must be a YAML mapping: %s", path);

	/* 1. executor_type: "default" (also when missing) or "ray"; anything else, null too. */
	const struct es_ynode *et = es_yaml_get(root, "executor_type");
	const char *executor = "default";
	if (et) {
		if (es_yaml_is_str(et, "default") || es_yaml_is_str(et, "ray")) {
			executor = et->text;
		} else {
			char *r = es_pyval_repr(et);
			rc = es_error(ES_EINVAL, "Elastic sharding supports recipes for executor_type=default or ray; "
					  "got executor_type=%s", r ? r : "?");
			free(r);
			goto out;
		}
	}

	/* 2. process must be a list. */
	const struct es_ynode *process = es_yaml_get(root, "process");
	if (!process || process->kind != ES_Y_SEQ) {
		rc = es_error(ES_EINVAL, "Recipe must define an explicit process list");
		goto out;
	}

	/* 3-4. Custom operator paths and the registry, asked once about every operator name. */
	if ((rc = custom_paths(root, opts, &custom)))
		goto out;
	names = calloc(process->n ? process->n : 1, sizeof(*names));
	if (!names) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < process->n; i++) {
		struct one_op o;
		op_of(process->kid[i], &o);
		if (o.keys == 1 && o.name->kind == ES_Y_STR && !has_nul(o.name))
			names[n_names++] = o.name->text;
	}
	if (n_names > 1) {
		qsort(names, n_names, sizeof(*names), cmp_str);
		size_t w = 1;
		for (size_t i = 1; i < n_names; i++)
			if (strcmp(names[i], names[w - 1]))
				names[w++] = names[i];
		n_names = w;
	}
	if ((rc = es_dj_registry_consult(opts->python, opts->helper, custom.v, custom.n, names, n_names, &reg)))
		goto out;
	if (!reg.consulted) {
		/* Without the registry the custom operators cannot be loaded; at least their paths
		 * must exist, as Data-Juicer's loader would require. */
		for (size_t i = 0; i < custom.n; i++) {
			int ex = es_fs_exists(custom.v[i]);
			if (ex < 0) {
				rc = ex;
				goto out;
			}
			if (!ex) {
				rc = es_error(ES_EINVAL, "Custom operator path does not exist: %s", custom.v[i]);
				goto out;
			}
		}
		if (n_names) {
			struct es_buf w = ES_BUF_INIT;
			if (es_buf_printf(&w, "Data-Juicer registry was not consulted (%s); operator kinds were "
					  "checked by their names only", reg.reason ? reg.reason : "unknown reason")) {
				es_buf_free(&w);
				rc = ES_ENOMEM;
				goto out;
			}
			if ((rc = es_strv_push(&warnings, es_buf_detach(&w, NULL))))
				goto out;
		}
	}

	/* 5. The executor is always Ray for shard workers. */
	if (!strcmp(executor, "default") &&
	    (rc = es_strv_push(&warnings, strdup("recipe executor_type=default will be overridden with "
					     "executor_type=ray for shard workers"))))
		goto out;

	/* 6. Every operator, in order. */
	for (size_t i = 0; i < process->n; i++) {
		struct one_op o;
		op_of(process->kid[i], &o);
		if (o.keys != 1) {
			rc = es_error(ES_EINVAL, "process[%zu] must contain exactly one operator", i);
			goto out;
		}
		const struct es_ynode *args = es_pyval_truthy(o.args) ? o.args : NULL; /* op_args or {} */
		if (args && args->kind != ES_Y_MAP) {
			rc = op_error(ES_EINVAL, "Arguments for operator %s must be a mapping", o.name);
			goto out;
		}
		enum es_dj_verdict v = ES_DJ_OP_UNKNOWN;
		if (o.name->kind == ES_Y_STR && !has_nul(o.name))
			v = es_dj_registry_kind(&reg, o.name->text);
		if (v == ES_DJ_OP_UNKNOWN) {
			rc = op_error(ES_EINVAL, "Unknown operator %s; cannot prove it is shard-safe", o.name);
			goto out;
		}
		if (v == ES_DJ_OP_WHOLE) {
			rc = op_error(ES_EINVAL, "Operator %s requires or may require whole-dataset semantics "
					  "and is not supported by this demo", o.name);
			goto out;
		}
		if (args && es_pyval_truthy(es_yaml_get(args, "stats_export_path"))) {
			rc = op_error(ES_EINVAL, "Operator %s sets stats_export_path, which would cause "
					  "cross-shard output collisions", o.name);
			goto out;
		}
		const struct es_ynode *ik = args ? es_yaml_get(args, "index_key") : NULL;
		if (ik && ik->kind != ES_Y_NULL) {
			if (ik->kind != ES_Y_STR || ik->len == 0 || has_nul(ik)) {
				rc = op_error(ES_EINVAL, "Operator %s has an invalid index_key", o.name);
				goto out;
			}
			if ((rc = es_strv_push(&index, strdup(ik->text))))
				goto out;
		}
		if (args && es_pyval_truthy(es_yaml_get(args, "save_dir")) &&
		    (rc = es_strv_push(&warnings, op_warning("operator %s uses an explicit save_dir; the caller must "
							 "ensure generated filenames do not collide across shards",
							 o.name))))
			goto out;
	}

	/* 7. Media keys: non-empty strings, de-duplicated in order. */
	static const char *const media_cfg[3][2] = {
		{ "image_key", "images" }, { "audio_key", "audios" }, { "video_key", "videos" },
	};
	for (size_t i = 0; i < 3; i++) {
		const struct es_ynode *v = es_yaml_get(root, media_cfg[i][0]);
		const char *value = media_cfg[i][1];
		if (v) {
			if (v->kind != ES_Y_STR || v->len == 0 || has_nul(v)) {
				rc = es_error(ES_EINVAL, "%s must be a non-empty string", media_cfg[i][0]);
				goto out;
			}
			value = v->text;
		}
		int dup = 0;
		for (size_t j = 0; j < media.n && !dup; j++)
			dup = !strcmp(media.v[j], value);
		if (!dup && (rc = es_strv_push(&media, strdup(value))))
			goto out;
	}
	es_strv_sort_unique(&index);

	/* Facts for prepare: dataset_path, ray_address, the registry's identity. */
	const struct es_ynode *ds = es_yaml_get(root, "dataset_path");
	if (ds && ds->kind == ES_Y_STR && !es_pyval_is_blank(ds->text, ds->len)) {
		if (has_nul(ds)) {
			rc = es_error(ES_EINVAL, "dataset_path in %s must not contain a NUL character", path);
			goto out;
		}
		if (!(out->dataset_path = strdup(ds->text))) {
			rc = es_error(ES_ENOMEM, "out of memory");
			goto out;
		}
	}
	const struct es_ynode *ra = es_yaml_get(root, "ray_address");
	if (ra && ra->kind != ES_Y_NULL) {
		if (ra->kind == ES_Y_STR && has_nul(ra)) {
			rc = es_error(ES_EINVAL, "ray_address in %s must not contain a NUL character", path);
			goto out;
		}
		out->has_ray_address = 1;
		out->ray_address_str = es_pyval_str(ra);
		out->ray_address_repr = es_pyval_repr(ra);
		if (!out->ray_address_str || !out->ray_address_repr) {
			rc = es_error(ES_ENOMEM, "out of memory");
			goto out;
		}
	}
	if (!(out->executor_type = strdup(executor))) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	out->registry_consulted = reg.consulted;
	out->dj_version = reg.version;
	out->dj_commit = reg.commit;
	reg.version = reg.commit = NULL;
	out->warnings = warnings.v;
	out->n_warnings = warnings.n;
	out->media_keys = media.v;
	out->n_media = media.n;
	out->index_keys = index.v;
	out->n_index = index.n;
	memset(&warnings, 0, sizeof(warnings));
	memset(&media, 0, sizeof(media));
	memset(&index, 0, sizeof(index));
out:
	es_strv_free(&warnings);
	es_strv_free(&media);
	es_strv_free(&index);
	es_strv_free(&custom);
	es_dj_registry_free(&reg);
	free(names);
	return rc;
}

int es_recipe_load(const char *path, const struct es_recipe_opts *opts, struct es_recipe *out)
{
	static const struct es_recipe_opts defaults = { NULL, NULL, NULL };
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
	free(r->dataset_path);
	free(r->ray_address_str);
	free(r->ray_address_repr);
	free(r->dj_version);
	free(r->dj_commit);
	memset(r, 0, sizeof(*r));
}
