#include "json.h"

#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/pyfloat.h"
#include "utf8.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing: a small strict parser that builds cJSON nodes, integers as raw digits ---- */

struct parser {
	const char *p, *end;
	const char *what;
	int depth;
	int failed;
};

static void perr(struct parser *ps, const char *msg)
{
	if (!ps->failed)
		es_error(ES_EINVAL, "Invalid JSON in %s: %s", ps->what, msg);
	ps->failed = 1;
}

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static int hex4(const char *s, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v <<= 4;
		if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
		else return -1;
	}
	*out = v;
	return 0;
}

static void put_utf8(struct es_buf *b, unsigned cp)
{
	char t[4];
	es_buf_add(b, t, (size_t)(es_utf8_put(t, cp) - t));
}

static char *parse_string(struct parser *ps)
{
	struct es_buf b = ES_BUF_INIT;
	ps->p++; /* opening quote */
	while (ps->p < ps->end && *ps->p != '"') {
		unsigned char c = (unsigned char)*ps->p;
		if (c < 0x20) {
			perr(ps, "control character in a string");
			goto fail;
		}
		if (c != '\\') {
			const char *s = ps->p;
			while (ps->p < ps->end && *ps->p != '"' && *ps->p != '\\' && (unsigned char)*ps->p >= 0x20)
				ps->p++;
			es_buf_add(&b, s, (size_t)(ps->p - s));
			continue;
		}
		if (ps->end - ps->p < 2) {
			perr(ps, "unterminated string");
			goto fail;
		}
		char e = ps->p[1];
		ps->p += 2;
		switch (e) {
		case '"': es_buf_addc(&b, '"'); break;
		case '\\': es_buf_addc(&b, '\\'); break;
		case '/': es_buf_addc(&b, '/'); break;
		case 'b': es_buf_addc(&b, '\b'); break;
		case 'f': es_buf_addc(&b, '\f'); break;
		case 'n': es_buf_addc(&b, '\n'); break;
		case 'r': es_buf_addc(&b, '\r'); break;
		case 't': es_buf_addc(&b, '\t'); break;
		case 'u': {
			unsigned cp, lo;
			if (ps->end - ps->p < 4 || hex4(ps->p, &cp)) {
				perr(ps, "bad \\u escape");
				goto fail;
			}
			ps->p += 4;
			if (cp >= 0xd800 && cp < 0xdc00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
			    ps->p[1] == 'u' && !hex4(ps->p + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				ps->p += 6;
			} else if (cp >= 0xd800 && cp < 0xe000) {
				perr(ps, "lone surrogate escape");
				goto fail;
			}
			put_utf8(&b, cp);
			break;
		}
		default:
			perr(ps, "invalid escape");
			goto fail;
		}
	}
	if (ps->p >= ps->end) {
		perr(ps, "unterminated string");
		goto fail;
	}
	ps->p++;
	return es_buf_detach(&b, NULL);
fail:
	es_buf_free(&b);
	return NULL;
}

static cJSON *parse_value(struct parser *ps);

/* Skip one or more decimal digits; 0 when there is none. */
static int skip_digits(struct parser *ps)
{
	const char *s = ps->p;
	while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
		ps->p++;
	return ps->p > s;
}

static cJSON *parse_number(struct parser *ps)
{
	/* JSON's grammar, as Python's json.loads reads it: -?(0|[1-9][0-9]*)(\.[0-9]+)?
	 * ([eE][-+]?[0-9]+)?. "01", "1." or "-.5" are not numbers; an integer literal is kept
	 * as a raw node and written back verbatim, so a lax scan would write invalid JSON. */
	const char *s = ps->p;
	int is_float = 0;
	if (ps->p < ps->end && *ps->p == '-')
		ps->p++;
	if (ps->p < ps->end && *ps->p == '0')
		ps->p++;
	else if (!skip_digits(ps))
		goto bad;
	if (ps->p < ps->end && *ps->p == '.') {
		ps->p++;
		if (!skip_digits(ps))
			goto bad;
		is_float = 1;
	}
	if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
		ps->p++;
		if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
			ps->p++;
		if (!skip_digits(ps))
			goto bad;
		is_float = 1;
	}
	/* Any length, like json.loads: long integers keep every digit, and strtod reads a
	 * long float literal (0.1 with 60 trailing zeros) correctly rounded. */
	char *tmp = strndup(s, (size_t)(ps->p - s));
	if (!tmp) {
		if (!ps->failed)
			es_error(ES_ENOMEM, "out of memory parsing %s", ps->what);
		ps->failed = 1;
		return NULL;
	}
	cJSON *v = is_float ? cJSON_CreateNumber(es_pyfloat_strtod(tmp, NULL))
			    : cJSON_CreateRaw(strcmp(tmp, "-0") ? tmp : "0");
	free(tmp);
	return v;
bad:
	perr(ps, "bad number");
	return NULL;
}

static int match(struct parser *ps, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, word, n) == 0) {
		ps->p += n;
		return 1;
	}
	return 0;
}

static cJSON *parse_container(struct parser *ps, int is_obj)
{
	if (++ps->depth > 200) {
		perr(ps, "nested too deeply");
		return NULL;
	}
	cJSON *c = is_obj ? cJSON_CreateObject() : cJSON_CreateArray();
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
		ps->p++;
		ps->depth--;
		return c;
	}
	for (;;) {
		char *key = NULL;
		skip_ws(ps);
		if (is_obj) {
			if (ps->p >= ps->end || *ps->p != '"') {
				perr(ps, "expected a key");
				break;
			}
			if (!(key = parse_string(ps)))
				break;
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p != ':') {
				free(key);
				perr(ps, "expected ':'");
				break;
			}
			ps->p++;
		}
		cJSON *v = parse_value(ps);
		if (!v) {
			free(key);
			break;
		}
		if (is_obj) {
			/* Duplicate keys: the last value wins, like Python's dict. */
			if (cJSON_GetObjectItemCaseSensitive(c, key))
				cJSON_ReplaceItemInObjectCaseSensitive(c, key, v);
			else
				cJSON_AddItemToObject(c, key, v);
			free(key);
		} else {
			cJSON_AddItemToArray(c, v);
		}
		skip_ws(ps);
		if (ps->p < ps->end && *ps->p == ',') {
			ps->p++;
			continue;
		}
		if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
			ps->p++;
			ps->depth--;
			return c;
		}
		perr(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
		break;
	}
	cJSON_Delete(c);
	return NULL;
}

static cJSON *parse_value(struct parser *ps)
{
	skip_ws(ps);
	if (ps->p >= ps->end) {
		perr(ps, "unexpected end of data");
		return NULL;
	}
	char c = *ps->p;
	if (c == '{' || c == '[')
		return parse_container(ps, c == '{');
	if (c == '"') {
		char *s = parse_string(ps);
		if (!s)
			return NULL;
		cJSON *v = cJSON_CreateString(s);
		free(s);
		return v;
	}
	if (match(ps, "true")) return cJSON_CreateTrue();
	if (match(ps, "false")) return cJSON_CreateFalse();
	if (match(ps, "null")) return cJSON_CreateNull();
	if (match(ps, "NaN")) return cJSON_CreateNumber(NAN);
	if (match(ps, "Infinity")) return cJSON_CreateNumber(INFINITY);
	if (match(ps, "-Infinity")) return cJSON_CreateNumber(-INFINITY);
	if (c == '-' || (c >= '0' && c <= '9'))
		return parse_number(ps);
	perr(ps, "expected a value");
	return NULL;
}

cJSON *es_json_parse(const char *text, size_t len, const char *what)
{
	struct parser ps = { text, text + len, what, 0, 0 };
	cJSON *v = parse_value(&ps);
	if (v) {
		skip_ws(&ps);
		if (ps.p != ps.end) {
			perr(&ps, "extra data after the value");
			cJSON_Delete(v);
			v = NULL;
		}
	}
	return v;
}

int es_json_load(const char *path, cJSON **out)
{
	struct es_buf b = ES_BUF_INIT;
	*out = NULL;
	es_log_quiet_begin();
	int rc = es_fs_read_file(path, &b, 0);
	es_log_quiet_end();
	if (rc == ES_ENOENT) {
		es_buf_free(&b);
		return ES_ENOENT;
	}
	if (rc) {
		es_buf_free(&b);
		return es_error(rc, "%s", es_last_error());
	}
	*out = es_json_parse(b.data, b.len, path);
	es_buf_free(&b);
	return *out ? 0 : ES_EINVAL;
}

int es_json_load_required(const char *path, const char *what, cJSON **out)
{
	int rc = es_json_load(path, out);
	if (rc == ES_ENOENT)
		return es_error(ES_ENOENT, "%s not found: %s", what, path);
	return rc;
}

/* ---- writing, in Python's json.dumps formats ---- */

static int dump_string(const char *s, struct es_buf *out)
{
	int rc = es_buf_addc(out, '"');
	for (const unsigned char *p = (const unsigned char *)s; !rc && *p; p++) {
		unsigned char c = *p;
		switch (c) {
		case '"': rc = es_buf_add(out, "\\\"", 2); break;
		case '\\': rc = es_buf_add(out, "\\\\", 2); break;
		case '\n': rc = es_buf_add(out, "\\n", 2); break;
		case '\r': rc = es_buf_add(out, "\\r", 2); break;
		case '\t': rc = es_buf_add(out, "\\t", 2); break;
		case '\b': rc = es_buf_add(out, "\\b", 2); break;
		case '\f': rc = es_buf_add(out, "\\f", 2); break;
		default:
			if (c < 0x20)
				rc = es_buf_printf(out, "\\u%04x", c);
			else
				rc = es_buf_addc(out, (char)c);
		}
	}
	return rc ? rc : es_buf_addc(out, '"');
}

static int cmp_keys(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
	return strcmp(x->string, y->string);
}

static int indent(struct es_buf *out, int pretty, int level)
{
	if (!pretty)
		return 0;
	int rc = es_buf_addc(out, '\n');
	for (int i = 0; !rc && i < level; i++)
		rc = es_buf_add(out, "  ", 2);
	return rc;
}

static int dump_value(const cJSON *v, int pretty, int level, struct es_buf *out)
{
	if (cJSON_IsRaw(v))
		return es_buf_adds(out, v->valuestring);
	if (cJSON_IsString(v))
		return dump_string(v->valuestring, out);
	if (cJSON_IsNumber(v)) {
		char tmp[ES_PYFLOAT_MAX];
		es_pyfloat_dumps(v->valuedouble, tmp);
		return es_buf_adds(out, tmp);
	}
	if (cJSON_IsTrue(v))
		return es_buf_adds(out, "true");
	if (cJSON_IsFalse(v))
		return es_buf_adds(out, "false");
	if (cJSON_IsNull(v))
		return es_buf_adds(out, "null");
	int is_obj = cJSON_IsObject(v);
	size_t n = 0;
	for (const cJSON *c = v->child; c; c = c->next)
		n++;
	if (n == 0)
		return es_buf_adds(out, is_obj ? "{}" : "[]");
	const cJSON **items = malloc(n * sizeof(*items));
	if (!items)
		return es_error(ES_ENOMEM, "out of memory writing JSON");
	n = 0;
	for (const cJSON *c = v->child; c; c = c->next)
		items[n++] = c;
	if (is_obj)
		qsort(items, n, sizeof(*items), cmp_keys);
	int rc = es_buf_addc(out, is_obj ? '{' : '[');
	for (size_t i = 0; !rc && i < n; i++) {
		if (i)
			rc = es_buf_adds(out, pretty ? "," : ", ");
		if (!rc)
			rc = indent(out, pretty, level + 1);
		if (!rc && is_obj) {
			rc = dump_string(items[i]->string, out);
			if (!rc)
				rc = es_buf_add(out, ": ", 2);
		}
		if (!rc)
			rc = dump_value(items[i], pretty, level + 1, out);
	}
	if (!rc)
		rc = indent(out, pretty, level);
	if (!rc)
		rc = es_buf_addc(out, is_obj ? '}' : ']');
	free(items);
	return rc;
}

int es_json_dump(const cJSON *v, int pretty, struct es_buf *out)
{
	int rc = dump_value(v, pretty, 0, out);
	return rc ? rc : es_buf_addc(out, '\n');
}

/* The pretty form of v, handed to one of fs's ways to write a file. */
static int dump_to(const char *path, const cJSON *v, int (*write)(const char *, const void *, size_t))
{
	struct es_buf b = ES_BUF_INIT;
	int rc = es_json_dump(v, 1, &b);
	if (!rc)
		rc = write(path, b.data, b.len);
	es_buf_free(&b);
	return rc;
}

int es_json_write_atomic(const char *path, const cJSON *v) { return dump_to(path, v, es_fs_write_atomic); }

int es_json_publish_exclusive(const char *path, const cJSON *v)
{
	return dump_to(path, v, es_fs_publish_exclusive);
}

/* ---- building and reading ---- */

cJSON *es_json_new_int(int64_t v)
{
	char tmp[32];
	snprintf(tmp, sizeof(tmp), "%lld", (long long)v);
	return cJSON_CreateRaw(tmp);
}

int es_json_set(cJSON *obj, const char *key, cJSON *item)
{
	if (!item)
		return es_error(ES_ENOMEM, "out of memory building JSON");
	if (cJSON_GetObjectItemCaseSensitive(obj, key)) {
		cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item);
		return 0;
	}
	if (!cJSON_AddItemToObject(obj, key, item)) {
		cJSON_Delete(item);
		return es_error(ES_ENOMEM, "out of memory building JSON");
	}
	return 0;
}

int es_json_set_int(cJSON *obj, const char *key, int64_t v) { return es_json_set(obj, key, es_json_new_int(v)); }
int es_json_set_str(cJSON *obj, const char *key, const char *s) { return es_json_set(obj, key, cJSON_CreateString(s)); }

cJSON *es_json_str_array(char *const *v, size_t n)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; a && i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
	return a;
}
int es_json_set_float(cJSON *obj, const char *key, double v) { return es_json_set(obj, key, cJSON_CreateNumber(v)); }
int es_json_set_bool(cJSON *obj, const char *key, int v) { return es_json_set(obj, key, cJSON_CreateBool(v)); }
int es_json_set_null(cJSON *obj, const char *key) { return es_json_set(obj, key, cJSON_CreateNull()); }

const char *es_json_get_str(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int es_json_is_int(const cJSON *v)
{
	return cJSON_IsRaw(v) && v->valuestring && (v->valuestring[0] == '-' ||
		(v->valuestring[0] >= '0' && v->valuestring[0] <= '9'));
}

double es_json_get_epoch(const cJSON *obj, const char *epoch_key, const char *iso_key)
{
	double t;
	if (!es_json_get_num(obj, epoch_key, &t))
		return t;
	if (!es_time_parse_iso(es_json_get_str(obj, iso_key), &t))
		return t;
	return -1;
}

int es_json_to_i64(const cJSON *v, int64_t *out)
{
	if (es_json_is_int(v)) {
		char *end;
		errno = 0;
		long long x = strtoll(v->valuestring, &end, 10);
		if (errno || *end)
			return -1;
		*out = x;
		return 0;
	}
	return -1;
}

int es_json_get_i64(const cJSON *obj, const char *key, int64_t *out)
{
	return es_json_to_i64(cJSON_GetObjectItemCaseSensitive(obj, key), out);
}

int es_json_get_num(const cJSON *obj, const char *key, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	int64_t i;
	if (cJSON_IsNumber(v)) {
		*out = v->valuedouble;
		return 0;
	}
	if (!es_json_to_i64(v, &i)) {
		*out = (double)i;
		return 0;
	}
	return -1;
}
