#include "eshard/buf.h"
#include "eshard/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char es_buf_empty[1];

static size_t cap_of(const struct es_buf *b) { return b->max ? b->max : SIZE_MAX / 2; }

void es_buf_init(struct es_buf *b, size_t max)
{
	b->data = es_buf_empty;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

void es_buf_free(struct es_buf *b)
{
	if (b->cap)
		free(b->data);
	b->data = es_buf_empty;
	b->len = 0;
	b->cap = 0;
}

int es_buf_grow(struct es_buf *b, size_t extra)
{
	size_t limit = cap_of(b);
	if (extra > limit || b->len > limit - extra)
		return es_error(ES_ENOMEM, "buffer would exceed its cap of %zu bytes", limit);
	size_t need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	size_t ncap = b->cap ? b->cap : 64;
	while (ncap < need)
		ncap = ncap < SIZE_MAX / 2 ? ncap * 2 : need;
	char *p = realloc(b->cap ? b->data : NULL, ncap);
	if (!p)
		return es_error(ES_ENOMEM, "out of memory growing a buffer to %zu bytes", ncap);
	if (!b->cap)
		p[0] = '\0';
	b->data = p;
	b->cap = ncap;
	return 0;
}

int es_grow(void *arrp, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t max = elem ? SIZE_MAX / elem : 0;
	if (need > max)
		return es_error(ES_ENOMEM, "an array of %zu elements of %zu bytes would pass SIZE_MAX bytes",
				need, elem);
	size_t nc = *cap ? *cap : 16;
	while (nc < need)
		nc = nc <= max / 2 ? nc * 2 : need;
	/* The pointer is copied in and out with memcpy: arrp may point at any object pointer type. */
	void *old, *p;
	memcpy(&old, arrp, sizeof(old));
	if (!(p = realloc(old, nc * elem)))
		return es_error(ES_ENOMEM, "out of memory growing an array to %zu elements of %zu bytes", nc,
				elem);
	memcpy(arrp, &p, sizeof(p));
	*cap = nc;
	return 0;
}

int es_buf_add(struct es_buf *b, const void *p, size_t n)
{
	int rc = es_buf_grow(b, n);
	if (rc)
		return rc;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int es_buf_adds(struct es_buf *b, const char *s) { return es_buf_add(b, s, strlen(s)); }

int es_buf_addc(struct es_buf *b, char c) { return es_buf_add(b, &c, 1); }

int es_buf_vprintf(struct es_buf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return es_error(ES_EINTERNAL, "bad format string '%s'", fmt);
	int rc = es_buf_grow(b, (size_t)n);
	if (rc)
		return rc;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int es_buf_printf(struct es_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = es_buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

void es_buf_setlen(struct es_buf *b, size_t len)
{
	if (len > b->len)
		return;
	b->len = len;
	if (b->cap)
		b->data[len] = '\0';
}

char *es_buf_detach(struct es_buf *b, size_t *len)
{
	char *p = b->cap ? b->data : calloc(1, 1);
	if (len)
		*len = b->len;
	es_buf_init(b, b->max);
	return p;
}

int es_strv_push(struct es_strv *a, char *s)
{
	if (!s)
		return es_error(ES_ENOMEM, "out of memory");
	int rc = es_grow(&a->v, &a->cap, a->n + 2, sizeof(*a->v));
	if (rc) {
		free(s);
		return rc;
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
	return 0;
}

int es_strv_pushf(struct es_strv *a, const char *fmt, ...)
{
	struct es_buf b = ES_BUF_INIT;
	va_list ap;
	va_start(ap, fmt);
	int rc = es_buf_vprintf(&b, fmt, ap);
	va_end(ap);
	if (rc) {
		es_buf_free(&b);
		return rc;
	}
	return es_strv_push(a, es_buf_detach(&b, NULL));
}

int es_strv_add_once(struct es_strv *a, const char *s)
{
	for (size_t i = 0; i < a->n; i++)
		if (!strcmp(a->v[i], s))
			return 0;
	return es_strv_push(a, strdup(s));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void es_strv_sort_unique(struct es_strv *a)
{
	if (a->n < 2)
		return;
	qsort(a->v, a->n, sizeof(*a->v), cmp_str);
	size_t w = 1;
	for (size_t i = 1; i < a->n; i++) {
		if (!strcmp(a->v[i], a->v[w - 1]))
			free(a->v[i]);
		else
			a->v[w++] = a->v[i];
	}
	a->n = w;
	a->v[w] = NULL;
}

int es_strv_has_sorted(const struct es_strv *a, const char *s)
{
	return a->n && bsearch(&s, a->v, a->n, sizeof(*a->v), cmp_str) != NULL;
}

void es_strv_free(struct es_strv *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	a->v = NULL;
	a->n = a->cap = 0;
}
