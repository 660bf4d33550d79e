/*
 * pyval: Python's view of the values in a YAML tree (yamltree.h), as the reference sees the
 * dict that safe_load returns: truth (bool(v)), equality of dict keys (==), and the str() and
 * repr() texts that its messages quote, plus not s.strip() for raw text.
 *
 * Documented approximations: a datetime and a !!binary value show their YAML text; an integer
 * of more than 64 significant characters shows its literal; a dict of more than 4096 pairs
 * keeps repeated keys in its repr; the text of repr()/str() is cut after 1024 bytes (never
 * inside a UTF-8 character) and "..." appended.
 *
 * Internal to libeshard. Contract: nothing here changes the tree; the predicates cannot fail;
 * the text functions return a malloc'd string the caller frees, or NULL when out of memory.
 */
#ifndef ESHARD_PYVAL_H
#define ESHARD_PYVAL_H

#include <stddef.h>

#include "yamltree.h"

/* a == b for two hashable values: numbers by value across bool, int and float (True == 1 ==
 * 1.0), everything else by type and text. */
int es_pyval_eq(const struct es_ynode *a, const struct es_ynode *b);
/* bool(n); an absent value (NULL) is false, like dict.get()'s None. */
int es_pyval_truthy(const struct es_ynode *n);
/* 1 when the UTF-8 text s[0, len) is empty or only str.isspace() characters. */
int es_pyval_is_blank(const char *s, size_t len);
/* repr(n) and str(n), malloc'd, cut as said above; NULL when out of memory. */
char *es_pyval_repr(const struct es_ynode *n);
char *es_pyval_str(const struct es_ynode *n);

#endif
