/*
 * yaml: a YAML document read with libyaml into the tree that PyYAML's safe_load would
 * construct, for the recipe checks (recipe.c) and Python's view of its values (pyval.h).
 * (The header is yamltree.h, not yaml.h: src/ is on the include path, where a yaml.h would
 * shadow libyaml's own <yaml.h>.)
 *
 * Plain scalars are typed as PyYAML's resolver and SafeConstructor do (YAML 1.1: null/~,
 * yes/no/on/off, 0x/0b/leading-0 octal and sexagesimal ints with underscores, .inf/.nan,
 * timestamps, "<<" merge keys, the "=" value key); the explicit tags of safe_load are
 * understood and any other tag is an error, as there. An alias shares its anchored subtree
 * instead of copying it, but counts as a full copy: a document whose expansion passes
 * ES_RECIPE_MAX_NODES nodes or ES_RECIPE_MAX_DEPTH levels (recipe.h) fails as soon as one
 * collection passes the cap, so an alias bomb costs bounded time and memory.
 *
 * Internal to libeshard.
 *
 * Contract: es_yaml_parse() either returns 0 with a document the caller frees with
 * es_yaml_free(), or a negative ES_E* code (ES_EINVAL for a bad document, ES_ENOMEM,
 * ES_EINTERNAL) after exactly one es_error() line naming path, with *out NULL and nothing
 * left allocated. A document is read-only after parsing: every node, and every string in it,
 * lives until es_yaml_free(), and an aliased node may be reached from several parents.
 */
#ifndef ESHARD_YAMLTREE_H
#define ESHARD_YAMLTREE_H

#include <stddef.h>

enum es_ykind {
	ES_Y_NULL, ES_Y_BOOL, ES_Y_INT, ES_Y_FLOAT, ES_Y_STR, ES_Y_TIME, ES_Y_BYTES, ES_Y_SEQ, ES_Y_MAP
};

struct es_ynode {
	struct es_ynode **kid;     /* SEQ: items; MAP: key, value, key, value, ... */
	char *dec;                 /* INT: canonical decimal with sign; NULL when too long */
	char *anchor;              /* the anchor name, or NULL */
	struct es_ynode *anext;    /* (parser) next anchored node in the same hash bucket */
	double num;                /* BOOL/INT/FLOAT: the value as a double (key equality) */
	size_t n, cap;             /* kid count (MAP: twice the pairs) */
	size_t weight;             /* (parser) nodes in this subtree with every alias expanded */
	size_t height;             /* (parser) depth of that expanded subtree; a scalar is 1 */
	size_t line, col;          /* 1-based position of the node's start */
	size_t len;                /* scalar text length; the text may hold NUL bytes */
	int date[3];               /* TIME: year, month, day */
	enum es_ykind kind;
	unsigned char open;        /* (parser) a collection whose end event has not come yet */
	unsigned char merge;       /* the merge key "<<" */
	unsigned char eqval;       /* the value key "=": a str as a key, an error elsewhere */
	unsigned char boolean;     /* BOOL: the value */
	unsigned char zero;        /* INT: the value is 0 */
	unsigned char date_only;   /* TIME: YYYY-MM-DD without a time */
	char text[];               /* scalar value, NUL-terminated */
};

struct es_ydoc;

/* Parse the len bytes at data (one document at most). path is only used in messages and must
 * outlive the document. */
int es_yaml_parse(const char *path, const char *data, size_t len, struct es_ydoc **out);
/* The document's top node; NULL for a stream without a document (an empty document is a
 * null scalar, as safe_load returns None). */
const struct es_ynode *es_yaml_root(const struct es_ydoc *d);
/* Safe on NULL. */
void es_yaml_free(struct es_ydoc *d);

/* 1 when n is a str whose text is exactly s. */
int es_yaml_is_str(const struct es_ynode *n, const char *s);

/* dict.get(key) of the constructed mapping m for a str key, with merge keys: explicit pairs
 * win (the last one), then the merged mappings from the last "<<" back to the first; in a
 * merged list the first wins. NULL when absent. */
const struct es_ynode *es_yaml_get(const struct es_ynode *m, const char *key);

typedef int (*es_yaml_pair_fn)(void *ctx, const struct es_ynode *k, const struct es_ynode *v);
/* The pairs of the constructed dict's source, in PyYAML's flattened order: every merged
 * mapping first (a merged list in reverse), then the explicit pairs. A later pair with an
 * equal key overrides the value but keeps the first one's position (the caller decides
 * equality, see es_pyval_eq()). fn returns non-zero to stop; that value is returned. */
int es_yaml_walk(const struct es_ynode *m, es_yaml_pair_fn fn, void *ctx);

#endif
