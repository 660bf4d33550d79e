/*
 * yaml: compose PyYAML's safe_load tree from libyaml's events.
 *
 * Scalars are typed as they arrive (resolve_scalar: the tag, else the implicit resolvers as
 * regular expressions, then SafeConstructor's conversions); collections are pushed on a stack
 * while open; an alias hangs its (closed) anchored node under the open collection again, and
 * attach() adds the node's expanded weight and height to its parent, which is where the
 * alias-bomb caps bite.
 */
#include "yamltree.h"
#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/pyfloat.h"
#include "eshard/recipe.h" /* the size caps of a recipe's YAML */

#include <yaml.h>

#include <math.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Integers with more significant characters keep their literal text as their value. */
#define INT_CONVERT_MAX 64
#define ANCHOR_BUCKETS 65536

#define YTAG "tag:yaml.org,2002:"

struct es_ydoc {
	const char *path;
	struct es_ynode **all;        /* every node made, for freeing; aliases add none */
	size_t n_all, cap_all;
	struct es_ynode **stack;      /* open collections */
	size_t depth, cap_stack;
	struct es_ynode **anchors;    /* ANCHOR_BUCKETS chains, allocated at the first anchor */
	struct es_ynode *root;
	int docs;
	int have_re;
	regex_t re_bool, re_float, re_int, re_time;
};

static int too_many_nodes(const struct es_ydoc *d)
{
	return es_error(ES_EINVAL, "YAML recipe %s expands to more than %zu nodes (alias bomb?)",
			d->path, ES_RECIPE_MAX_NODES);
}

static int too_deep(const struct es_ydoc *d)
{
	return es_error(ES_EINVAL, "YAML recipe %s nests deeper than %zu levels (alias bomb?)",
			d->path, ES_RECIPE_MAX_DEPTH);
}

static int yerr(const struct es_ydoc *d, size_t line, size_t col, const char *what, const char *arg)
{
	if (arg)
		return es_error(ES_EINVAL, "Invalid YAML in %s: %s '%.200s' at line %zu column %zu",
				d->path, what, arg, line, col);
	return es_error(ES_EINVAL, "Invalid YAML in %s: %s at line %zu column %zu", d->path, what, line, col);
}

static int ydoc_init(struct es_ydoc *d, const char *path)
{
	memset(d, 0, sizeof(*d));
	d->path = path;
	/* PyYAML's implicit resolvers (resolver.py), as POSIX extended regular expressions. */
	static const char *bool_re =
		"^(yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$";
	static const char *float_re =
		"^([-+]?[0-9][0-9_]*\\.[0-9_]*([eE][-+][0-9]+)?"
		"|\\.[0-9][0-9_]*([eE][-+][0-9]+)?"
		"|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\\.[0-9_]*"
		"|[-+]?\\.(inf|Inf|INF)"
		"|\\.(nan|NaN|NAN))$";
	static const char *int_re =
		"^([-+]?0b[0-1_]+"
		"|[-+]?0[0-7_]+"
		"|[-+]?(0|[1-9][0-9_]*)"
		"|[-+]?0x[0-9a-fA-F_]+"
		"|[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+)$";
	static const char *time_re =
		"^([0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"
		"|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?"
		"([Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](\\.[0-9]*)?"
		"([ \t]*(Z|[-+][0-9][0-9]?(:[0-9][0-9])?))?)$";
	if (regcomp(&d->re_bool, bool_re, REG_EXTENDED | REG_NOSUB))
		return es_error(ES_EINTERNAL, "cannot compile a YAML resolver pattern");
	if (regcomp(&d->re_float, float_re, REG_EXTENDED | REG_NOSUB)) {
		regfree(&d->re_bool);
		return es_error(ES_EINTERNAL, "cannot compile a YAML resolver pattern");
	}
	if (regcomp(&d->re_int, int_re, REG_EXTENDED | REG_NOSUB)) {
		regfree(&d->re_bool);
		regfree(&d->re_float);
		return es_error(ES_EINTERNAL, "cannot compile a YAML resolver pattern");
	}
	if (regcomp(&d->re_time, time_re, REG_EXTENDED | REG_NOSUB)) {
		regfree(&d->re_bool);
		regfree(&d->re_float);
		regfree(&d->re_int);
		return es_error(ES_EINTERNAL, "cannot compile a YAML resolver pattern");
	}
	d->have_re = 1;
	return 0;
}

static void ydoc_free(struct es_ydoc *d)
{
	for (size_t i = 0; i < d->n_all; i++) {
		free(d->all[i]->kid);
		free(d->all[i]->dec);
		free(d->all[i]->anchor);
		free(d->all[i]);
	}
	free(d->all);
	free(d->stack);
	free(d->anchors);
	if (d->have_re) {
		regfree(&d->re_bool);
		regfree(&d->re_float);
		regfree(&d->re_int);
		regfree(&d->re_time);
	}
	memset(d, 0, sizeof(*d));
}

static int ynew(struct es_ydoc *d, enum es_ykind kind, const char *text, size_t len, const yaml_mark_t *m,
		struct es_ynode **out)
{
	/* Every node made is part of the final tree, so the expanded count bounds them too. */
	if (d->n_all >= ES_RECIPE_MAX_NODES)
		return too_many_nodes(d);
	int rc = es_grow(&d->all, &d->cap_all, d->n_all + 1, sizeof(*d->all));
	if (rc)
		return rc;
	struct es_ynode *n = calloc(1, sizeof(*n) + len + 1);
	if (!n)
		return es_error(ES_ENOMEM, "out of memory while reading a YAML recipe");
	if (len)
		memcpy(n->text, text, len);
	n->len = len;
	n->kind = kind;
	n->weight = 1;
	n->height = 1;
	n->line = m->line + 1;
	n->col = m->column + 1;
	d->all[d->n_all++] = n;
	*out = n;
	return 0;
}

/* ---- scalar typing (PyYAML's SafeConstructor) ---- */

/* value = value * mul + add over base-1e9 limbs (least significant first). */
static int big_muladd(uint32_t *l, size_t *n, size_t max, uint32_t mul, uint32_t add)
{
	uint64_t carry = add;
	for (size_t i = 0; i < *n; i++) {
		uint64_t v = (uint64_t)l[i] * mul + carry;
		l[i] = (uint32_t)(v % 1000000000u);
		carry = v / 1000000000u;
	}
	while (carry) {
		if (*n >= max)
			return -1;
		l[(*n)++] = (uint32_t)(carry % 1000000000u);
		carry /= 1000000000u;
	}
	return 0;
}

static int digit_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return 99;
}

/* Skip a sign and a 0b/0x prefix: what is left are the digits of a long literal. */
static const char *int_digits(const char *t)
{
	if (*t == '-' || *t == '+')
		t++;
	if (t[0] == '0' && (t[1] == 'x' || t[1] == 'b'))
		t += 2;
	return t;
}

/* construct_yaml_int: underscores dropped, sign, then "0" / 0b / 0x / leading-0 octal /
 * sexagesimal (a:b:c) / decimal. Returns 0, -1 when the text is no integer, or ES_ENOMEM. */
static int parse_int(struct es_ynode *n)
{
	char buf[INT_CONVERT_MAX + 1];
	size_t k = 0;
	for (size_t i = 0; i < n->len; i++) {
		if (n->text[i] == '_')
			continue;
		if (k < INT_CONVERT_MAX)
			buf[k] = n->text[i];
		k++;
	}
	if (k == 0)
		return -1;
	if (k > INT_CONVERT_MAX) {
		/* Too long to convert cheaply: the literal stands for its value (str() and key
		 * equality use it). Only check that it is made of digits. */
		for (const char *t = int_digits(n->text); *t; t++)
			if (*t != '_' && *t != ':' && digit_value(*t) > 15)
				return -1;
		n->num = NAN;
		n->zero = !strpbrk(int_digits(n->text), "123456789abcdefABCDEF");
		return 0;
	}
	buf[k] = '\0';
	const char *v = buf;
	int neg = 0;
	if (*v == '-' || *v == '+') {
		neg = *v == '-';
		v++;
	}
	if (!*v)
		return -1;
	uint32_t limbs[32];
	size_t nl = 0;
	int base = 10;
	if (!strcmp(v, "0")) {
		v++;
	} else if (v[0] == '0' && (v[1] == 'b' || v[1] == 'x')) {
		base = v[1] == 'b' ? 2 : 16;
		v += 2;
		if (!*v)
			return -1;
	} else if (v[0] == '0') {
		base = 8;
	} else if (strchr(v, ':')) {
		base = 60;
	}
	if (base == 60) {
		/* The first part is decimal, every later part one base-60 digit (any size with
		 * an explicit !!int, as Python's int() would take it). */
		const char *p = v;
		int first = 1;
		for (;;) {
			const char *e = strchr(p, ':');
			size_t plen = e ? (size_t)(e - p) : strlen(p);
			if (plen == 0 || (!first && plen > 9))
				return -1;
			uint32_t part = 0;
			for (size_t i = 0; i < plen; i++) {
				if (p[i] < '0' || p[i] > '9')
					return -1;
				if (first && big_muladd(limbs, &nl, 32, 10, (uint32_t)(p[i] - '0')))
					return -1;
				part = part * 10 + (uint32_t)(p[i] - '0');
			}
			if (!first && big_muladd(limbs, &nl, 32, 60, part))
				return -1;
			first = 0;
			if (!e)
				break;
			p = e + 1;
		}
	} else {
		for (const char *p = v; *p; p++) {
			int dv = digit_value(*p);
			if (dv >= base)
				return -1;
			if (big_muladd(limbs, &nl, 32, (uint32_t)base, (uint32_t)dv))
				return -1;
		}
	}
	char out[32 * 9 + 3];
	size_t o = 0;
	if (nl == 0) {
		out[o++] = '0';
	} else {
		if (neg)
			out[o++] = '-';
		o += (size_t)snprintf(out + o, sizeof(out) - o, "%u", limbs[nl - 1]);
		for (size_t i = nl - 1; i-- > 0;)
			o += (size_t)snprintf(out + o, sizeof(out) - o, "%09u", limbs[i]);
	}
	out[o] = '\0';
	n->dec = strdup(out);
	if (!n->dec)
		return es_error(ES_ENOMEM, "out of memory while reading a YAML recipe");
	n->num = es_pyfloat_strtod(out, NULL);
	n->zero = !strcmp(out, "0");
	return 0;
}

/* construct_yaml_float: underscores dropped, lower-cased, sign, .inf/.nan, sexagesimal,
 * else Python's float(). Returns 0, or -1 when the text is no float. */
static int parse_float(struct es_ynode *n)
{
	struct es_buf b = ES_BUF_INIT;
	for (size_t i = 0; i < n->len; i++) {
		char c = n->text[i];
		if (c == '_')
			continue;
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (es_buf_addc(&b, c)) {
			es_buf_free(&b);
			return -1;
		}
	}
	const char *v = b.data;
	double sign = 1.0;
	int rc = 0;
	if (*v == '-' || *v == '+') {
		sign = *v == '-' ? -1.0 : 1.0;
		v++;
	}
	if (!strcmp(v, ".inf")) {
		n->num = sign * INFINITY;
	} else if (!strcmp(v, ".nan")) {
		n->num = NAN;
	} else if (strchr(v, ':')) {
		/* Python: each part through float(), summed from the last part times 60**i. */
		double value = 0.0, base = 1.0;
		const char *end = v + strlen(v);
		for (;;) {
			const char *start = end;
			while (start > v && start[-1] != ':')
				start--;
			char part[64], *pe;
			size_t plen = (size_t)(end - start);
			if (plen == 0 || plen >= sizeof(part)) {
				rc = -1;
				break;
			}
			memcpy(part, start, plen);
			part[plen] = '\0';
			double dv = es_pyfloat_strtod(part, &pe);
			if (*pe || strpbrk(part, "xX")) {
				rc = -1;
				break;
			}
			value += dv * base;
			base *= 60.0;
			if (start == v)
				break;
			end = start - 1;
		}
		n->num = sign * value;
	} else {
		char *pe;
		if (!*v || strpbrk(v, "xX")) {
			rc = -1;
		} else {
			double dv = es_pyfloat_strtod(v, &pe);
			if (*pe)
				rc = -1;
			n->num = sign * dv;
		}
	}
	es_buf_free(&b);
	return rc;
}

static int leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int read_num(const char **p, int maxd)
{
	int v = 0, d = 0;
	while (d < maxd && **p >= '0' && **p <= '9') {
		v = v * 10 + (**p - '0');
		(*p)++;
		d++;
	}
	return d ? v : -1;
}

/* construct_yaml_timestamp builds a date or datetime; out-of-range fields raise there. */
static int check_time(struct es_ynode *n)
{
	static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	const char *p = n->text;
	int y = read_num(&p, 4);
	p++;
	int m = read_num(&p, 2);
	p++;
	int d = read_num(&p, 2);
	if (y < 1 || m < 1 || m > 12 || d < 1 || d > mdays[m - 1] + (m == 2 && leap(y)))
		return -1;
	n->date[0] = y;
	n->date[1] = m;
	n->date[2] = d;
	if (!*p) {
		n->date_only = 1;
		return 0;
	}
	while (*p == 'T' || *p == 't' || *p == ' ' || *p == '\t')
		p++;
	int hh = read_num(&p, 2);
	p++;
	int mi = read_num(&p, 2);
	p++;
	int ss = read_num(&p, 2);
	if (hh > 23 || mi > 59 || ss > 59)
		return -1;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p == '+' || *p == '-') {
		p++;
		int th = read_num(&p, 2);
		if (th > 23)
			return -1;
	}
	return 0;
}

static int str_eq(const char *a, size_t alen, const char *b)
{
	size_t bl = strlen(b);
	return alen == bl && !memcmp(a, b, bl);
}

/* PyYAML's resolver for a plain scalar without a tag: first character, then pattern. */
static int resolve_implicit(struct es_ydoc *d, struct es_ynode *n)
{
	const char *t = n->text;
	size_t len = n->len;
	n->kind = ES_Y_STR;
	if (memchr(t, '\0', len))
		return 0; /* no pattern matches a NUL byte */
	if (len == 0 || str_eq(t, len, "~") || str_eq(t, len, "null") || str_eq(t, len, "Null") ||
	    str_eq(t, len, "NULL")) {
		n->kind = ES_Y_NULL;
		return 0;
	}
	char c = t[0];
	if (strchr("yYnNtTfFoO", c) && !regexec(&d->re_bool, t, 0, NULL, 0)) {
		n->kind = ES_Y_BOOL;
		n->boolean = c == 'y' || c == 'Y' || c == 't' || c == 'T' || (len == 2 && (c == 'o' || c == 'O'));
		n->num = n->boolean;
		return 0;
	}
	if (strchr("-+0123456789.", c) && !regexec(&d->re_float, t, 0, NULL, 0)) {
		n->kind = ES_Y_FLOAT;
		if (parse_float(n))
			return yerr(d, n->line, n->col, "cannot construct a float from", t);
		return 0;
	}
	if (strchr("-+0123456789", c) && !regexec(&d->re_int, t, 0, NULL, 0)) {
		n->kind = ES_Y_INT;
		int r = parse_int(n);
		if (r == -1)
			return yerr(d, n->line, n->col, "cannot construct an integer from", t);
		return r;
	}
	if (str_eq(t, len, "<<")) {
		n->merge = 1;
		return 0;
	}
	if (str_eq(t, len, "=")) {
		n->eqval = 1;
		return 0;
	}
	if (c >= '0' && c <= '9' && !regexec(&d->re_time, t, 0, NULL, 0)) {
		n->kind = ES_Y_TIME;
		if (check_time(n))
			return yerr(d, n->line, n->col, "invalid timestamp", t);
		return 0;
	}
	return 0;
}

static int resolve_scalar(struct es_ydoc *d, struct es_ynode *n, const char *tag, int plain_implicit)
{
	/* No tag or the non-specific "!": libyaml sets plain_implicit exactly when PyYAML's
	 * resolver would try the implicit patterns. */
	if (!tag || !strcmp(tag, "!")) {
		if (plain_implicit)
			return resolve_implicit(d, n);
		n->kind = ES_Y_STR;
		return 0;
	}
	if (strncmp(tag, YTAG, strlen(YTAG)))
		return yerr(d, n->line, n->col, "could not determine a constructor for the tag", tag);
	const char *t = tag + strlen(YTAG);
	if (!strcmp(t, "str")) {
		n->kind = ES_Y_STR;
	} else if (!strcmp(t, "value")) {
		n->kind = ES_Y_STR;
		n->eqval = 1;
	} else if (!strcmp(t, "null")) {
		n->kind = ES_Y_NULL;
	} else if (!strcmp(t, "bool")) {
		char low[8];
		size_t i;
		for (i = 0; i < n->len && i < sizeof(low) - 1; i++)
			low[i] = (char)(n->text[i] >= 'A' && n->text[i] <= 'Z' ? n->text[i] - 'A' + 'a' : n->text[i]);
		low[i] = '\0';
		n->kind = ES_Y_BOOL;
		if (n->len < sizeof(low) && (!strcmp(low, "yes") || !strcmp(low, "true") || !strcmp(low, "on")))
			n->boolean = 1;
		else if (!(n->len < sizeof(low) && (!strcmp(low, "no") || !strcmp(low, "false") || !strcmp(low, "off"))))
			return yerr(d, n->line, n->col, "cannot construct a boolean from", n->text);
		n->num = n->boolean;
	} else if (!strcmp(t, "int")) {
		n->kind = ES_Y_INT;
		int r = memchr(n->text, '\0', n->len) ? -1 : parse_int(n);
		if (r == -1)
			return yerr(d, n->line, n->col, "cannot construct an integer from", n->text);
		if (r)
			return r;
	} else if (!strcmp(t, "float")) {
		n->kind = ES_Y_FLOAT;
		if (memchr(n->text, '\0', n->len) || parse_float(n))
			return yerr(d, n->line, n->col, "cannot construct a float from", n->text);
	} else if (!strcmp(t, "timestamp")) {
		n->kind = ES_Y_TIME;
		if (memchr(n->text, '\0', n->len) || regexec(&d->re_time, n->text, 0, NULL, 0) || check_time(n))
			return yerr(d, n->line, n->col, "invalid timestamp", n->text);
	} else if (!strcmp(t, "binary")) {
		n->kind = ES_Y_BYTES;
	} else if (!strcmp(t, "merge")) {
		n->kind = ES_Y_STR;
		n->merge = 1;
	} else if (!strcmp(t, "seq") || !strcmp(t, "map") || !strcmp(t, "set") || !strcmp(t, "omap") ||
		   !strcmp(t, "pairs")) {
		return yerr(d, n->line, n->col, "a scalar cannot have the tag", tag);
	} else {
		return yerr(d, n->line, n->col, "could not determine a constructor for the tag", tag);
	}
	return 0;
}

/* ---- composing the tree from events ---- */

static size_t anchor_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return (size_t)(h % ANCHOR_BUCKETS);
}

static struct es_ynode *anchor_find(const struct es_ydoc *d, const char *name)
{
	if (!d->anchors)
		return NULL;
	for (struct es_ynode *n = d->anchors[anchor_hash(name)]; n; n = n->anext)
		if (!strcmp(n->anchor, name))
			return n;
	return NULL;
}

static int anchor_add(struct es_ydoc *d, struct es_ynode *n, const char *name)
{
	if (!name)
		return 0;
	if (anchor_find(d, name))
		return yerr(d, n->line, n->col, "found duplicate anchor", name);
	if (!d->anchors) {
		d->anchors = calloc(ANCHOR_BUCKETS, sizeof(*d->anchors));
		if (!d->anchors)
			return es_error(ES_ENOMEM, "out of memory while reading a YAML recipe");
	}
	n->anchor = strdup(name);
	if (!n->anchor)
		return es_error(ES_ENOMEM, "out of memory while reading a YAML recipe");
	size_t h = anchor_hash(name);
	n->anext = d->anchors[h];
	d->anchors[h] = n;
	return 0;
}

/* Hang a finished node (or an alias target, shared, not copied) under the open collection. */
static int attach(struct es_ydoc *d, struct es_ynode *n, size_t line, size_t col)
{
	struct es_ynode *p = d->depth ? d->stack[d->depth - 1] : NULL;
	int is_key = p && p->kind == ES_Y_MAP && p->n % 2 == 0;
	if (is_key && (n->kind == ES_Y_SEQ || n->kind == ES_Y_MAP))
		return yerr(d, line, col, "found unhashable key (a sequence or mapping)", NULL);
	/* PyYAML has constructors for the merge and value tags only where they are keys. */
	if (!is_key && (n->merge || n->eqval))
		return yerr(d, line, col, "could not determine a constructor for the tag",
			    n->merge ? YTAG "merge" : YTAG "value");
	if (!p) {
		d->root = n;
		return 0;
	}
	int rc = es_grow(&p->kid, &p->cap, p->n + 1, sizeof(*p->kid));
	if (rc)
		return rc;
	p->kid[p->n++] = n;
	/* Expanded size and depth: an alias counts as a full copy of its target, so a
	 * billion-laughs file fails as soon as one collection's count passes the cap. */
	p->weight += n->weight;
	if (p->weight > ES_RECIPE_MAX_NODES)
		return too_many_nodes(d);
	if (n->height + 1 > p->height) {
		p->height = n->height + 1;
		if (p->height > ES_RECIPE_MAX_DEPTH)
			return too_deep(d);
	}
	return 0;
}

static int on_scalar(struct es_ydoc *d, yaml_event_t *ev)
{
	struct es_ynode *n;
	int rc = ynew(d, ES_Y_STR, (const char *)ev->data.scalar.value, ev->data.scalar.length, &ev->start_mark, &n);
	if (!rc)
		rc = resolve_scalar(d, n, (const char *)ev->data.scalar.tag, ev->data.scalar.plain_implicit);
	if (!rc)
		rc = anchor_add(d, n, (const char *)ev->data.scalar.anchor);
	if (!rc)
		rc = attach(d, n, n->line, n->col);
	return rc;
}

static int on_start(struct es_ydoc *d, yaml_event_t *ev)
{
	int is_map = ev->type == YAML_MAPPING_START_EVENT;
	const char *tag = (const char *)(is_map ? ev->data.mapping_start.tag : ev->data.sequence_start.tag);
	const char *anchor = (const char *)(is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor);
	struct es_ynode *n;
	int rc = ynew(d, is_map ? ES_Y_MAP : ES_Y_SEQ, "", 0, &ev->start_mark, &n);
	if (rc)
		return rc;
	if (tag && strcmp(tag, "!") && strcmp(tag, is_map ? YTAG "map" : YTAG "seq")) {
		const char *t = !strncmp(tag, YTAG, strlen(YTAG)) ? tag + strlen(YTAG) : NULL;
		if (t && (!strcmp(t, "set") || !strcmp(t, "omap") || !strcmp(t, "pairs")))
			return yerr(d, n->line, n->col, "this YAML tag is not supported in recipes:", tag);
		if (t && (!strcmp(t, "map") || !strcmp(t, "seq") || !strcmp(t, "str") || !strcmp(t, "int") ||
			  !strcmp(t, "float") || !strcmp(t, "bool") || !strcmp(t, "null") ||
			  !strcmp(t, "binary") || !strcmp(t, "timestamp")))
			return yerr(d, n->line, n->col, is_map ? "a mapping cannot have the tag" :
				    "a sequence cannot have the tag", tag);
		return yerr(d, n->line, n->col, "could not determine a constructor for the tag", tag);
	}
	if ((rc = anchor_add(d, n, anchor)))
		return rc;
	if (d->depth >= ES_RECIPE_MAX_DEPTH)
		return too_deep(d);
	if ((rc = es_grow(&d->stack, &d->cap_stack, d->depth + 1, sizeof(*d->stack))))
		return rc;
	n->open = 1;
	d->stack[d->depth++] = n;
	return 0;
}

static int on_end(struct es_ydoc *d)
{
	struct es_ynode *n = d->stack[--d->depth];
	n->open = 0;
	if (n->kind == ES_Y_MAP) {
		/* SafeConstructor.flatten_mapping: a merge value is a mapping or a list of them. */
		for (size_t i = 0; i + 1 < n->n; i += 2) {
			if (!n->kid[i]->merge)
				continue;
			const struct es_ynode *v = n->kid[i + 1];
			if (v->kind == ES_Y_SEQ) {
				for (size_t j = 0; j < v->n; j++)
					if (v->kid[j]->kind != ES_Y_MAP)
						return yerr(d, v->kid[j]->line, v->kid[j]->col,
							    "expected a mapping for merging, but found scalar or sequence", NULL);
			} else if (v->kind != ES_Y_MAP) {
				return yerr(d, v->line, v->col,
					    "expected a mapping or list of mappings for merging, but found a scalar", NULL);
			}
		}
	}
	return attach(d, n, n->line, n->col);
}

static int on_alias(struct es_ydoc *d, yaml_event_t *ev)
{
	const char *name = (const char *)ev->data.alias.anchor;
	size_t line = ev->start_mark.line + 1, col = ev->start_mark.column + 1;
	struct es_ynode *target = anchor_find(d, name);
	if (!target)
		return yerr(d, line, col, "found undefined alias", name);
	if (target->open)
		return yerr(d, line, col, "found a recursive alias (inside its own anchor)", name);
	return attach(d, target, line, col);
}

static int parser_problem(const struct es_ydoc *d, const yaml_parser_t *p)
{
	const char *problem = p->problem ? p->problem : "unknown problem";
	if (p->error == YAML_MEMORY_ERROR)
		return es_error(ES_ENOMEM, "out of memory while parsing YAML in %s", d->path);
	if (p->error == YAML_READER_ERROR) {
		if (p->problem_value != -1)
			return es_error(ES_EINVAL, "Invalid YAML in %s: %s (#%X) at byte offset %zu", d->path,
					problem, (unsigned)p->problem_value, p->problem_offset);
		return es_error(ES_EINVAL, "Invalid YAML in %s: %s at byte offset %zu", d->path, problem,
				p->problem_offset);
	}
	if (p->context)
		return es_error(ES_EINVAL, "Invalid YAML in %s: %s at line %zu column %zu (%s at line %zu column %zu)",
				d->path, problem, p->problem_mark.line + 1, p->problem_mark.column + 1,
				p->context, p->context_mark.line + 1, p->context_mark.column + 1);
	return es_error(ES_EINVAL, "Invalid YAML in %s: %s at line %zu column %zu", d->path, problem,
			p->problem_mark.line + 1, p->problem_mark.column + 1);
}

static int ydoc_parse(struct es_ydoc *d, const char *data, size_t len)
{
	yaml_parser_t p;
	yaml_event_t ev;
	if (!yaml_parser_initialize(&p))
		return es_error(ES_ENOMEM, "cannot initialize the YAML parser");
	yaml_parser_set_input_string(&p, (const unsigned char *)data, len);
	int rc = 0, done = 0;
	while (!rc && !done) {
		if (!yaml_parser_parse(&p, &ev)) {
			rc = parser_problem(d, &p);
			break;
		}
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (d->docs++)
				rc = yerr(d, ev.start_mark.line + 1, ev.start_mark.column + 1,
					  "expected a single document in the stream, but found another document", NULL);
			break;
		case YAML_SCALAR_EVENT:
			rc = on_scalar(d, &ev);
			break;
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			rc = on_start(d, &ev);
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			rc = on_end(d);
			break;
		case YAML_ALIAS_EVENT:
			rc = on_alias(d, &ev);
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	return rc;
}

int es_yaml_parse(const char *path, const char *data, size_t len, struct es_ydoc **out)
{
	*out = NULL;
	struct es_ydoc *d = malloc(sizeof(*d));
	if (!d)
		return es_error(ES_ENOMEM, "out of memory while reading a YAML recipe");
	int rc = ydoc_init(d, path);
	if (!rc)
		rc = ydoc_parse(d, data, len);
	if (rc) {
		es_yaml_free(d);
		return rc;
	}
	*out = d;
	return 0;
}

const struct es_ynode *es_yaml_root(const struct es_ydoc *d) { return d->root; }

void es_yaml_free(struct es_ydoc *d)
{
	if (!d)
		return;
	ydoc_free(d);
	free(d);
}

int es_yaml_is_str(const struct es_ynode *n, const char *s)
{
	return n->kind == ES_Y_STR && str_eq(n->text, n->len, s);
}

const struct es_ynode *es_yaml_get(const struct es_ynode *m, const char *key)
{
	for (size_t i = m->n; i >= 2; i -= 2) {
		const struct es_ynode *k = m->kid[i - 2];
		if (!k->merge && es_yaml_is_str(k, key))
			return m->kid[i - 1];
	}
	for (size_t i = m->n; i >= 2; i -= 2) {
		if (!m->kid[i - 2]->merge)
			continue;
		const struct es_ynode *v = m->kid[i - 1], *r;
		if (v->kind == ES_Y_MAP) {
			if ((r = es_yaml_get(v, key)))
				return r;
		} else {
			for (size_t j = 0; j < v->n; j++)
				if ((r = es_yaml_get(v->kid[j], key)))
					return r;
		}
	}
	return NULL;
}

int es_yaml_walk(const struct es_ynode *m, es_yaml_pair_fn fn, void *ctx)
{
	int rc;
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		if (!m->kid[i]->merge)
			continue;
		const struct es_ynode *v = m->kid[i + 1];
		if (v->kind == ES_Y_MAP) {
			if ((rc = es_yaml_walk(v, fn, ctx)))
				return rc;
		} else {
			for (size_t j = v->n; j-- > 0;)
				if ((rc = es_yaml_walk(v->kid[j], fn, ctx)))
					return rc;
		}
	}
	for (size_t i = 0; i + 1 < m->n; i += 2)
		if (!m->kid[i]->merge && (rc = fn(ctx, m->kid[i], m->kid[i + 1])))
			return rc;
	return 0;
}
