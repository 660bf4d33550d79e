/*
 * pyval: what Python makes of the values of a YAML tree.
 *
 * repr() and str() follow CPython's rules for the types safe_load builds (str quoting and
 * escapes with str.isprintable(), floats through pyfloat, dicts without repeated keys);
 * py_repr() stops adding once the text passes REPR_SOFT_MAX, so a huge value costs little.
 */
#include "pyval.h"
#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/pyfloat.h"
#include "utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* repr() text in a message is cut after this many bytes (and "..." appended). */
#define REPR_SOFT_MAX 1024
/* A dict repr removes duplicate keys only up to this many pairs (the check is quadratic). */
#define DICT_DEDUP_MAX 4096

static int stop_at_first(void *ctx, const struct es_ynode *k, const struct es_ynode *v)
{
	(void)ctx;
	(void)k;
	(void)v;
	return 1;
}

static int is_numeric(enum es_ykind k) { return k == ES_Y_BOOL || k == ES_Y_INT || k == ES_Y_FLOAT; }

/* Python == between two hashable values (dict keys). */
int es_pyval_eq(const struct es_ynode *a, const struct es_ynode *b)
{
	if (a == b)
		return 1;
	if (is_numeric(a->kind) && is_numeric(b->kind)) {
		if (a->kind == ES_Y_INT && b->kind == ES_Y_INT) {
			if (a->dec && b->dec)
				return !strcmp(a->dec, b->dec);
			if (!a->dec && !b->dec)
				return a->len == b->len && !memcmp(a->text, b->text, a->len);
			return 0;
		}
		return a->num == b->num;
	}
	if (a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case ES_Y_NULL:
		return 1;
	case ES_Y_STR:
	case ES_Y_TIME:
	case ES_Y_BYTES:
		return a->len == b->len && !memcmp(a->text, b->text, a->len);
	default:
		return 0;
	}
}

int es_pyval_truthy(const struct es_ynode *n)
{
	if (!n)
		return 0;
	switch (n->kind) {
	case ES_Y_NULL:
		return 0;
	case ES_Y_BOOL:
		return n->boolean;
	case ES_Y_INT:
		return !n->zero;
	case ES_Y_FLOAT:
		return n->num != 0.0; /* NaN is truthy, as in Python */
	case ES_Y_STR:
	case ES_Y_BYTES:
		return n->len > 0;
	case ES_Y_TIME:
		return 1;
	case ES_Y_SEQ:
		return n->n > 0;
	case ES_Y_MAP:
		return es_yaml_walk(n, stop_at_first, NULL) != 0;
	}
	return 0;
}

/* str.isspace() */
static int py_isspace(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/* str.isprintable() for the common cases: controls, separators other than the space, the
 * usual format characters, surrogates and private use are not printable. */
static int py_isprintable(uint32_t c)
{
	if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad)
		return 0;
	if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x180e ||
	    c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
	    (c >= 0x205f && c <= 0x206f) || c == 0x3000 || (c >= 0xd800 && c <= 0xf8ff) ||
	    c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb) || c == 0xfffe || c == 0xffff ||
	    c == 0xe0001 || (c >= 0xe0020 && c <= 0xe007f) || c >= 0xf0000)
		return 0;
	return 1;
}

int es_pyval_is_blank(const char *s, size_t len)
{
	size_t i = 0, adv;
	while (i < len) {
		if (!py_isspace(es_utf8_next((const unsigned char *)s + i, len - i, &adv)))
			return 0;
		i += adv;
	}
	return 1;
}

/* repr() of a str: single quotes unless the text has ' and no ". */
static int py_str_repr(struct es_buf *b, const char *s, size_t len)
{
	char q = memchr(s, '\'', len) && !memchr(s, '"', len) ? '"' : '\'';
	int rc = es_buf_addc(b, q);
	size_t i = 0, adv;
	while (!rc && i < len) {
		uint32_t c = es_utf8_next((const unsigned char *)s + i, len - i, &adv);
		if (c == (uint32_t)q || c == '\\')
			rc = es_buf_printf(b, "\\%c", (char)c);
		else if (c == '\t')
			rc = es_buf_adds(b, "\\t");
		else if (c == '\n')
			rc = es_buf_adds(b, "\\n");
		else if (c == '\r')
			rc = es_buf_adds(b, "\\r");
		else if (adv == 1 && c >= 0x80)
			rc = es_buf_printf(b, "\\x%02x", c);
		else if (!py_isprintable(c))
			rc = c <= 0xff ? es_buf_printf(b, "\\x%02x", c)
			   : c <= 0xffff ? es_buf_printf(b, "\\u%04x", c) : es_buf_printf(b, "\\U%08x", c);
		else
			rc = es_buf_add(b, s + i, adv);
		i += adv;
	}
	return rc ? rc : es_buf_addc(b, q);
}

struct pairs {
	const struct es_ynode **kv; /* key, value, key, value, ... */
	size_t n, cap;
	int failed;                 /* es_grow's error code, or 0 */
};

static int collect_pair(void *ctx, const struct es_ynode *k, const struct es_ynode *v)
{
	struct pairs *p = ctx;
	if ((p->failed = es_grow(&p->kv, &p->cap, p->n + 2, sizeof(*p->kv))))
		return 1;
	p->kv[p->n++] = k;
	p->kv[p->n++] = v;
	return 0;
}

/* str() (str_mode) or repr() of a value, cut after REPR_SOFT_MAX bytes with "...".
 * Approximations, documented: a datetime and !!binary show their YAML text; integers longer
 * than INT_CONVERT_MAX characters show their literal; dicts with more than DICT_DEDUP_MAX
 * pairs keep duplicate keys. */
static int py_repr(struct es_buf *b, const struct es_ynode *n, int str_mode)
{
	if (b->len > REPR_SOFT_MAX)
		return 0;
	int rc = 0;
	switch (n->kind) {
	case ES_Y_NULL:
		return es_buf_adds(b, "None");
	case ES_Y_BOOL:
		return es_buf_adds(b, n->boolean ? "True" : "False");
	case ES_Y_INT:
		if (n->dec)
			return es_buf_adds(b, n->dec);
		for (size_t i = 0; !rc && i < n->len; i++)
			if (n->text[i] != '_')
				rc = es_buf_addc(b, n->text[i]);
		return rc;
	case ES_Y_FLOAT: {
		char f[ES_PYFLOAT_MAX];
		es_pyfloat_repr(n->num, f);
		return es_buf_adds(b, f);
	}
	case ES_Y_STR:
		if (str_mode)
			return es_buf_add(b, n->text, n->len);
		return py_str_repr(b, n->text, n->len);
	case ES_Y_TIME:
		if (n->date_only && !str_mode)
			return es_buf_printf(b, "datetime.date(%d, %d, %d)", n->date[0], n->date[1], n->date[2]);
		return es_buf_add(b, n->text, n->len);
	case ES_Y_BYTES:
		return es_buf_add(b, n->text, n->len);
	case ES_Y_SEQ:
		rc = es_buf_addc(b, '[');
		for (size_t i = 0; !rc && i < n->n; i++) {
			if (i)
				rc = es_buf_adds(b, ", ");
			if (!rc && b->len > REPR_SOFT_MAX)
				break;
			if (!rc)
				rc = py_repr(b, n->kid[i], 0);
		}
		return rc ? rc : es_buf_addc(b, ']');
	case ES_Y_MAP: {
		struct pairs p = { NULL, 0, 0, 0 };
		es_yaml_walk(n, collect_pair, &p);
		if (p.failed) {
			free(p.kv);
			return p.failed; /* reported by es_grow */
		}
		int dedup = p.n / 2 <= DICT_DEDUP_MAX, first = 1;
		rc = es_buf_addc(b, '{');
		for (size_t i = 0; !rc && i < p.n && b->len <= REPR_SOFT_MAX; i += 2) {
			const struct es_ynode *k = p.kv[i], *v = p.kv[i + 1];
			int seen = 0;
			if (dedup) {
				for (size_t j = 0; j < i && !seen; j += 2)
					seen = es_pyval_eq(p.kv[j], k);
				for (size_t j = i + 2; j < p.n && !seen; j += 2)
					if (es_pyval_eq(p.kv[j], k))
						v = p.kv[j + 1];
			}
			if (seen)
				continue;
			if (!first)
				rc = es_buf_adds(b, ", ");
			first = 0;
			if (!rc)
				rc = py_repr(b, k, 0);
			if (!rc)
				rc = es_buf_adds(b, ": ");
			if (!rc)
				rc = py_repr(b, v, 0);
		}
		free(p.kv);
		return rc ? rc : es_buf_addc(b, '}');
	}
	}
	return 0;
}

/* repr()/str() into a fresh buffer, cut with "..." when long; NULL when out of memory. */
static char *repr_dup(const struct es_ynode *n, int str_mode)
{
	struct es_buf b = ES_BUF_INIT;
	if (py_repr(&b, n, str_mode)) {
		es_buf_free(&b);
		return NULL;
	}
	if (b.len > REPR_SOFT_MAX) {
		size_t cut = REPR_SOFT_MAX;
		while (cut && es_utf8_is_cont((unsigned char)b.data[cut]))
			cut--; /* never split a UTF-8 character */
		es_buf_setlen(&b, cut);
		if (es_buf_adds(&b, "...")) {
			es_buf_free(&b);
			return NULL;
		}
	}
	return es_buf_detach(&b, NULL);
}

char *es_pyval_repr(const struct es_ynode *n) { return repr_dup(n, 0); }

char *es_pyval_str(const struct es_ynode *n) { return repr_dup(n, 1); }
