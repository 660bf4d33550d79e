#include "eshard/suggest.h"

#include <string.h>

size_t es_edit_distance(const char *a, const char *b)
{
	enum { MAXLEN = 255 };
	size_t la = strlen(a), lb = strlen(b);
	if (la > MAXLEN || lb > MAXLEN)
		return la > lb ? la : lb;
	/* Three rows of the dynamic programme: the one before last (for transpositions), the last
	 * and the current one. */
	size_t rows[3][MAXLEN + 1];
	size_t *pp = rows[0], *p = rows[1], *c = rows[2];
	for (size_t j = 0; j <= lb; j++)
		p[j] = j;
	for (size_t i = 1; i <= la; i++) {
		c[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t cost = a[i - 1] != b[j - 1];
			size_t best = p[j - 1] + cost;                 /* substitute (or keep) */
			if (p[j] + 1 < best)
				best = p[j] + 1;                       /* delete from a */
			if (c[j - 1] + 1 < best)
				best = c[j - 1] + 1;                   /* insert into a */
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < best)
				best = pp[j - 2] + 1;                  /* swap two neighbours */
			c[j] = best;
		}
		size_t *t = pp;
		pp = p;
		p = c;
		c = t;
	}
	return p[lb];
}

const char *es_closest_name(const char *word, const char *const *names, size_t n)
{
	size_t limit = strlen(word) / 3;
	if (limit > 3)
		limit = 3;
	const char *best = NULL;
	size_t best_d = limit + 1;
	for (size_t i = 0; i < n; i++) {
		if (!names[i])
			continue;
		size_t d = es_edit_distance(word, names[i]);
		if (d < best_d) {
			best = names[i];
			best_d = d;
		}
	}
	return best;
}
