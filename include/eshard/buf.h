/*
 * buf: a growable byte buffer with a hard size cap.
 *
 * data is never NULL (it points at a shared empty string until the first append) and is
 * always NUL-terminated, so it can be printed or handed to a C string function. Growing past
 * max fails with ES_ENOMEM and a message naming the cap; the buffer is then unchanged.
 */
#ifndef ESHARD_BUF_H
#define ESHARD_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct es_buf {
	char *data;
	size_t len;
	size_t cap; /* 0 while data points at the shared empty string */
	size_t max; /* largest len allowed; 0 means SIZE_MAX / 2 */
};

extern char es_buf_empty[1];
#define ES_BUF_INIT { es_buf_empty, 0, 0, 0 }

void es_buf_init(struct es_buf *b, size_t max);
void es_buf_free(struct es_buf *b);
static inline void es_buf_reset(struct es_buf *b) { b->len = 0; if (b->cap) b->data[0] = '\0'; }
/* Make room for extra more bytes (plus the terminating NUL). */
int es_buf_grow(struct es_buf *b, size_t extra);
int es_buf_add(struct es_buf *b, const void *p, size_t n);
int es_buf_adds(struct es_buf *b, const char *s);
int es_buf_addc(struct es_buf *b, char c);
int es_buf_printf(struct es_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int es_buf_vprintf(struct es_buf *b, const char *fmt, va_list ap);
void es_buf_setlen(struct es_buf *b, size_t len);
/* Hand the bytes to the caller (malloc'd, NUL-terminated) and reset the buffer. */
char *es_buf_detach(struct es_buf *b, size_t *len);

/* Make room for need elements of elem bytes in a malloc'd array: arrp is the address of the
 * array's pointer (&v, v NULL or malloc'd), *cap its capacity in elements. Nothing happens when
 * need <= *cap; else the capacity doubles (from 16) until need fits, or becomes need itself when
 * doubling once more would pass SIZE_MAX bytes. ES_ENOMEM with one error line when need elements
 * would pass SIZE_MAX bytes or realloc fails; the array and *cap are then unchanged. The one way
 * the library grows an array. */
int es_grow(void *arrp, size_t *cap, size_t need, size_t elem);

/* A NULL-terminated vector of malloc'd strings (an argv or an environment being built). */
struct es_strv {
	char **v;     /* NULL until the first push; then always NULL-terminated */
	size_t n, cap;
};
#define ES_STRV_INIT { NULL, 0, 0 }
/* Append s, taking it over (freed on failure); s NULL means out of memory. */
int es_strv_push(struct es_strv *a, char *s);
int es_strv_pushf(struct es_strv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append a copy of s unless an equal string is there already (the order of first sight is kept). */
int es_strv_add_once(struct es_strv *a, const char *s);
/* Sort in strcmp() order and drop repeated strings (freed); the vector stays NULL-terminated. */
void es_strv_sort_unique(struct es_strv *a);
/* 1 when s is in a, which es_strv_sort_unique sorted (a binary search), else 0. */
int es_strv_has_sorted(const struct es_strv *a, const char *s);
void es_strv_free(struct es_strv *a);

#endif
