/*
 * suggest: the edit distance behind the "did you mean" hints of options, subcommands and
 * operator names.
 */
#ifndef ESHARD_SUGGEST_H
#define ESHARD_SUGGEST_H

#include <stddef.h>

/* The optimal string alignment distance (Levenshtein plus transpositions of neighbours, each
 * edit counting 1) between a and b, byte by byte; a string longer than 255 bytes is as far
 * from every other string as its length. */
size_t es_edit_distance(const char *a, const char *b);
/* The name of names[0..n) closest to word by es_edit_distance, the first of equals, when it is
 * close enough to be what was meant (at most a third of word's length, and at most 3, edits);
 * else NULL. For "did you mean" hints. */
const char *es_closest_name(const char *word, const char *const *names, size_t n);

#endif
