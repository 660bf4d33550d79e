/*
 * jsonl: strict JSONL validation and Python-compatible canonical encoding.
 *
 * One pass does everything for a line: the parser walks the bytes with an explicit stack
 * (no recursion), checks UTF-8 inside strings as it copies them, and writes the canonical
 * form straight into the caller's buffer. Rare work is kept off that path:
 *  - an error of any kind re-checks the whole line for UTF-8 first, because Python decodes
 *    the line before it parses it, so a bad byte anywhere wins over a syntax error;
 *  - an object with a repeated key is rewritten when it closes (last value, first position);
 *  - a lone surrogate escape is written as "\udXXX" and only reported once the final text
 *    is known, since a later duplicate key may drop it, as Python's dict would.
 *
 * Keys are compared in their canonical encoding, which is a one-to-one image of the decoded
 * string, so "a" and "\u0061" meet as the same key without decoding anything.
 */
#include "eshard/jsonl.h"
#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/pyfloat.h"
#include "utf8.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__) && !defined(ES_JSONL_NO_SIMD)
#include <emmintrin.h>
#define ES_JSONL_SSE2 1
#endif

/* Bytes kept free after the write position, so that 16-byte stores and short fixed-size
 * writes need no bounds check. */
#define SLACK 64
/* Zero bytes after the copied line: a sentinel for the scanners and room for wide loads. */
#define PAD 64

enum perr {
	PE_OK = 0,
	PE_EXPECT_VALUE,
	PE_EXPECT_NAME,
	PE_EXPECT_COLON,
	PE_EXPECT_COMMA,
	PE_EXTRA,
	PE_UNTERMINATED,
	PE_CONTROL,
	PE_ESCAPE,
	PE_UESCAPE,
	PE_UTF8,
	PE_NOMEM,
};

static const char *const perr_text[] = {
	[PE_EXPECT_VALUE] = "Expecting value",
	[PE_EXPECT_NAME] = "Expecting property name enclosed in double quotes",
	[PE_EXPECT_COLON] = "Expecting ':' delimiter",
	[PE_EXPECT_COMMA] = "Expecting ',' delimiter",
	[PE_EXTRA] = "Extra data",
	[PE_UNTERMINATED] = "Unterminated string starting at",
	[PE_CONTROL] = "Invalid control character at",
	[PE_ESCAPE] = "Invalid \\escape",
	[PE_UESCAPE] = "Invalid \\uXXXX escape",
};

struct member {
	size_t key_off; /* offset in the output of the key's opening quote */
	size_t key_len; /* including both quotes */
	size_t val_off;
	size_t val_end;
};

struct frame {
	size_t start;    /* output offset of '{' or '[' */
	size_t mem_base; /* first member of this object in the member stack */
	int is_obj;
};

struct enc_key {
	char *s; /* canonical JSON encoding, quotes included */
	size_t len;
	char *raw; /* for messages */
};

struct es_jsonl {
	struct es_buf in; /* the line, followed by PAD zero bytes */
	struct frame *fr;
	size_t fr_cap;
	struct member *mem;
	size_t mem_cap;
	size_t *idx; /* dedup scratch: first/last occurrence */
	size_t idx_cap;
	uint32_t *tab; /* dedup scratch: open-addressing hash table */
	size_t tab_cap;
	struct es_buf tmp, num, path, res, item;

	int lone;      /* a lone surrogate escape was written during this line */
	size_t errpos; /* byte offset of a parse error */

	struct enc_key *media;
	size_t n_media;
	char *media_root;
	struct enc_key *index;
	size_t n_index;
};

/* ------------------------------------------------------------------------------------ */
/* Encoding helpers                                                                       */

static const char HEX[] = "0123456789abcdef";

/* Canonical JSON string (Python ensure_ascii=False) of raw bytes assumed valid UTF-8. */
static int encode_string(struct es_buf *b, const char *s, size_t n)
{
	int rc = es_buf_grow(b, n * 6 + 2);
	if (rc)
		return rc;
	char *o = b->data + b->len;
	*o++ = '"';
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = (char)c;
		} else if (c < 0x20) {
			*o++ = '\\';
			switch (c) {
			case '\b': *o++ = 'b'; break;
			case '\f': *o++ = 'f'; break;
			case '\n': *o++ = 'n'; break;
			case '\r': *o++ = 'r'; break;
			case '\t': *o++ = 't'; break;
			default:
				*o++ = 'u';
				*o++ = '0';
				*o++ = '0';
				*o++ = HEX[c >> 4];
				*o++ = HEX[c & 15];
			}
		} else {
			*o++ = (char)c;
		}
	}
	*o++ = '"';
	b->len = (size_t)(o - b->data);
	b->data[b->len] = '\0';
	return 0;
}

/* Decode the body of a canonical string (no lone surrogates). Returns 1 if it holds a NUL. */
static int decode_canonical(struct es_buf *b, const char *s, size_t n)
{
	int has_nul = 0;
	if (es_buf_grow(b, n))
		return -1;
	char *o = b->data + b->len;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c != '\\') {
			*o++ = c;
			continue;
		}
		c = s[++i];
		switch (c) {
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u': {
			/* Only \u00XX for control characters appears in canonical text. */
			unsigned v = 0;
			for (int k = 1; k <= 4; k++) {
				char h = s[i + (size_t)k];
				v = v * 16 + (unsigned)(h <= '9' ? h - '0' : h - 'a' + 10);
			}
			i += 4;
			if (v == 0)
				has_nul = 1;
			*o++ = (char)v;
			break;
		}
		default: *o++ = c; break;
		}
	}
	b->len = (size_t)(o - b->data);
	b->data[b->len] = '\0';
	return has_nul;
}

/* ------------------------------------------------------------------------------------ */
/* Context                                                                                */

static void free_keys(struct enc_key *k, size_t n)
{
	if (!k)
		return;
	for (size_t i = 0; i < n; i++) {
		free(k[i].s);
		free(k[i].raw);
	}
	free(k);
}

static int make_key(struct enc_key *k, const char *raw)
{
	struct es_buf b = ES_BUF_INIT;
	k->raw = strdup(raw);
	if (!k->raw || encode_string(&b, raw, strlen(raw))) {
		es_buf_free(&b);
		return -1;
	}
	k->s = es_buf_detach(&b, &k->len);
	return k->s ? 0 : -1;
}

/* The encoded keys of raw[0, n), each once: in the order of first sight, or sorted. */
static int make_keys(const char *const *raw, size_t n, int sorted, struct enc_key **keys, size_t *nkeys)
{
	struct es_strv v = ES_STRV_INIT;
	int rc = 0;
	for (size_t i = 0; !rc && i < n; i++)
		rc = es_strv_add_once(&v, raw[i]);
	if (sorted)
		es_strv_sort_unique(&v);
	if (!rc && v.n && !(*keys = calloc(v.n, sizeof(**keys))))
		rc = ES_ENOMEM;
	for (size_t i = 0; !rc && i < v.n; i++)
		rc = make_key(&(*keys)[(*nkeys)++], v.v[i]);
	es_strv_free(&v);
	return rc;
}

struct es_jsonl *es_jsonl_new(const struct es_jsonl_opts *opts)
{
	struct es_jsonl *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	es_buf_init(&j->in, 0);
	es_buf_init(&j->tmp, 0);
	es_buf_init(&j->num, 0);
	es_buf_init(&j->path, 0);
	es_buf_init(&j->res, 0);
	es_buf_init(&j->item, 0);
	if (!opts)
		return j;
	/* Recipe media keys are de-duplicated with their order kept (docs/job-folder.md#manifest);
	 * Python appends index keys in sorted order, so sort and de-duplicate them to be safe. */
	if (make_keys(opts->media_keys, opts->n_media, 0, &j->media, &j->n_media) ||
	    make_keys(opts->index_keys, opts->n_index, 1, &j->index, &j->n_index) ||
	    (opts->media_root && !(j->media_root = strdup(opts->media_root)))) {
		es_jsonl_free(j);
		return NULL;
	}
	return j;
}

void es_jsonl_free(struct es_jsonl *j)
{
	if (!j)
		return;
	es_buf_free(&j->in);
	es_buf_free(&j->tmp);
	es_buf_free(&j->num);
	es_buf_free(&j->path);
	es_buf_free(&j->res);
	es_buf_free(&j->item);
	free(j->fr);
	free(j->mem);
	free(j->idx);
	free(j->tab);
	free_keys(j->media, j->n_media);
	free_keys(j->index, j->n_index);
	free(j->media_root);
	free(j);
}

/* ------------------------------------------------------------------------------------ */
/* Duplicate keys                                                                         */

static inline uint64_t key_hash(const char *s, size_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, s, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
		s += 8;
		n -= 8;
	}
	uint64_t w = 0;
	memcpy(&w, s, n);
	h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
	return h ^ (h >> 29);
}

static inline int key_eq(const char *base, const struct member *a, const struct member *b)
{
	return a->key_len == b->key_len &&
	       memcmp(base + a->key_off, base + b->key_off, a->key_len) == 0;
}

/*
 * For each member, the index of the first member with the same key (first[i]), and for
 * each first occurrence the index of the last (last[i]). O(n) with a hash table, so a huge
 * object costs no more per key than a small one. Returns 1 if any key repeats, 0 if not,
 * negative when out of memory. With first == NULL it only answers the question.
 */
static int map_keys(struct es_jsonl *j, const char *base, const struct member *m, size_t n,
		    size_t *first, size_t *last)
{
	if (!first && n <= 16) {
		/* Small objects (nearly all of them): pairwise is cheaper than hashing. */
		for (size_t a = 1; a < n; a++)
			for (size_t b = 0; b < a; b++)
				if (key_eq(base, &m[a], &m[b]))
					return 1;
		return 0;
	}
	size_t tcap = 16;
	while (tcap < 2 * n)
		tcap *= 2;
	int rc = es_grow(&j->tab, &j->tab_cap, tcap, sizeof(*j->tab));
	if (rc)
		return rc;
	memset(j->tab, 0, tcap * sizeof(*j->tab));
	int dup = 0;
	for (size_t i = 0; i < n; i++) {
		size_t s = (size_t)key_hash(base + m[i].key_off, m[i].key_len) & (tcap - 1);
		for (;;) {
			uint32_t v = j->tab[s];
			if (!v) {
				j->tab[s] = (uint32_t)(i + 1);
				if (first) {
					first[i] = i;
					last[i] = i;
				}
				break;
			}
			if (key_eq(base, &m[v - 1], &m[i])) {
				if (!first)
					return 1;
				first[i] = v - 1;
				last[v - 1] = i;
				dup = 1;
				break;
			}
			s = (s + 1) & (tcap - 1);
		}
	}
	return dup;
}

/* Rewrite the object at [start, *end) of base like a Python dict: each key once, at its
 * first position, with its last value. The member list is rewritten to match. */
static int dedup_object(struct es_jsonl *j, char *base, size_t start, size_t *end,
			struct member *m, size_t *n)
{
	size_t cnt = *n;
	if (cnt > UINT32_MAX - 1)
		return es_error(ES_ENOMEM, "JSON object with too many keys");
	if (es_grow(&j->idx, &j->idx_cap, 2 * cnt, sizeof(*j->idx)))
		return ES_ENOMEM;
	size_t *first = j->idx, *last = j->idx + cnt;
	int rc = map_keys(j, base, m, cnt, first, last);
	if (rc < 0)
		return rc;
	struct es_buf *t = &j->tmp;
	es_buf_reset(t);
	if ((rc = es_buf_grow(t, *end - start)))
		return rc;
	t->data[t->len++] = '{';
	size_t out_n = 0;
	for (size_t i = 0; i < cnt; i++) {
		if (first[i] != i)
			continue;
		const struct member *k = &m[i], *v = &m[last[i]];
		struct member nm;
		if (out_n)
			t->data[t->len++] = ',';
		nm.key_off = start + t->len;
		nm.key_len = k->key_len;
		memcpy(t->data + t->len, base + k->key_off, k->key_len);
		t->len += k->key_len;
		t->data[t->len++] = ':';
		nm.val_off = start + t->len;
		memcpy(t->data + t->len, base + v->val_off, v->val_end - v->val_off);
		t->len += v->val_end - v->val_off;
		nm.val_end = start + t->len;
		/* Safe in place: later reads use indexes > i >= out_n. */
		m[out_n++] = nm;
	}
	t->data[t->len++] = '}';
	memcpy(base + start, t->data, t->len);
	*end = start + t->len;
	*n = out_n;
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* The parser                                                                             */

static const signed char HEXVAL[256] = {
	['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7, ['7'] = 8,
	['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15,
	['f'] = 16, ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

/* Four hex digits at p, or -1. HEXVAL holds value + 1 so that 0 means "not hex". */
static inline int32_t hex4(const unsigned char *p)
{
	int a = HEXVAL[p[0]], b = HEXVAL[p[1]], c = HEXVAL[p[2]], d = HEXVAL[p[3]];
	if (!a || !b || !c || !d)
		return -1;
	return ((a - 1) << 12) | ((b - 1) << 8) | ((c - 1) << 4) | (d - 1);
}

/* 1 for the escapes that the canonical form keeps as they are. */
static const unsigned char ESC_KIND[256] = {
	['"'] = 1, ['\\'] = 1, ['b'] = 1, ['f'] = 1, ['n'] = 1, ['r'] = 1, ['t'] = 1,
};

#define WS_MASK ((1ULL << ' ') | (1ULL << '\t') | (1ULL << '\n') | (1ULL << '\r'))
#define IS_WS(c) ((c) <= ' ' && ((WS_MASK >> (c)) & 1))
#define IS_DIGIT(c) ((unsigned)((c) - '0') < 10)

/* Write code point cp canonically (Python ensure_ascii=False); lone surrogates as \udXXX. */
static inline char *put_cp(char *o, uint32_t cp, int *lone)
{
	if (cp < 0x80) {
		if (cp >= 0x20) {
			if (cp == '"' || cp == '\\')
				*o++ = '\\';
			*o++ = (char)cp;
			return o;
		}
		*o++ = '\\';
		switch (cp) {
		case '\b': *o++ = 'b'; break;
		case '\f': *o++ = 'f'; break;
		case '\n': *o++ = 'n'; break;
		case '\r': *o++ = 'r'; break;
		case '\t': *o++ = 't'; break;
		default:
			*o++ = 'u';
			*o++ = '0';
			*o++ = '0';
			*o++ = HEX[cp >> 4];
			*o++ = HEX[cp & 15];
		}
		return o;
	}
	if (cp < 0xD800 || cp > 0xDFFF)
		return es_utf8_put(o, cp);
	*lone = 1;
	*o++ = '\\';
	*o++ = 'u';
	*o++ = HEX[cp >> 12];
	*o++ = HEX[(cp >> 8) & 15];
	*o++ = HEX[(cp >> 4) & 15];
	*o++ = HEX[cp & 15];
	return o;
}

#ifndef ES_JSONL_SSE2
/* Bit 7 of each byte of the result is set where w has '"', '\\', < 0x20 or >= 0x80. The
 * lowest flagged byte is always a true hit (borrows only run upwards). */
static inline uint64_t special8(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
	uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
	uint64_t m = (w - ones * 0x20) & ~w;
	m |= (q - ones) & ~q;
	m |= (b - ones) & ~b;
	return (m | w) & highs;
}
#endif

/*
 * Scan the string whose opening quote is at *pp; emit its canonical form at *oo when emit.
 * e is the end of the line (*e == 0, followed by PAD zeros).
 */
static inline __attribute__((always_inline)) int scan_string(const unsigned char **pp,
							      const unsigned char *e, char **oo,
							      int *lone, size_t *errpos,
							      const unsigned char *s0, const int emit)
{
	const unsigned char *p = *pp, *q0 = p;
	char *o = emit ? *oo : NULL;
	if (emit)
		*o++ = '"';
	p++;
	for (;;) {
#ifdef ES_JSONL_SSE2
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
		__m128i sp = _mm_or_si128(
			_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
				     _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
			_mm_cmplt_epi8(x, _mm_set1_epi8(0x20))); /* signed: also >= 0x80 */
		unsigned msk = (unsigned)_mm_movemask_epi8(sp);
		if (emit)
			_mm_storeu_si128((__m128i *)(void *)o, x);
		if (!msk) {
			p += 16;
			if (emit)
				o += 16;
			continue;
		}
		unsigned k = (unsigned)__builtin_ctz(msk);
#else
		uint64_t w;
		memcpy(&w, p, 8);
		if (emit)
			memcpy(o, p, 8);
		uint64_t msk = special8(w);
		if (!msk) {
			p += 8;
			if (emit)
				o += 8;
			continue;
		}
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
		unsigned k = (unsigned)__builtin_clzll(msk) / 8;
#else
		unsigned k = (unsigned)__builtin_ctzll(msk) / 8;
#endif
#endif
		p += k;
		if (emit)
			o += k;
		unsigned c = *p;
		if (c == '"') {
			if (emit)
				*o++ = '"';
			p++;
			break;
		}
		if (c == '\\') {
			unsigned c2 = p[1];
			/* Most escapes are copied as they are: test that first, without a switch. */
			if (ESC_KIND[c2] == 1) {
				if (emit) {
					memcpy(o, p, 2);
					o += 2;
				}
				p += 2;
				continue;
			}
			switch (c2) {
			case '/':
				if (emit)
					*o++ = '/';
				p += 2;
				continue;
			case 'u': {
				/* Python wants 4 digits and at least one more character. */
				if (e - p <= 6) {
					*errpos = (size_t)(p + 1 - s0);
					return PE_UESCAPE;
				}
				int32_t cp = hex4(p + 2);
				if (cp < 0) {
					*errpos = (size_t)(p + 1 - s0);
					return PE_UESCAPE;
				}
				const unsigned char *nx = p + 6;
				if (cp >= 0xD800 && cp <= 0xDBFF && e - nx > 6 && nx[0] == '\\' &&
				    nx[1] == 'u') {
					int32_t c2v = hex4(nx + 2);
					if (c2v < 0) {
						*errpos = (size_t)(nx + 1 - s0);
						return PE_UESCAPE;
					}
					if (c2v >= 0xDC00 && c2v <= 0xDFFF) {
						cp = 0x10000 + ((cp - 0xD800) << 10) + (c2v - 0xDC00);
						nx += 6;
					}
				}
				if (emit)
					o = put_cp(o, (uint32_t)cp, lone);
				else if (cp >= 0xD800 && cp <= 0xDFFF)
					*lone = 1;
				p = nx;
				continue;
			}
			default:
				if (p + 1 == e) {
					*errpos = (size_t)(q0 - s0);
					return PE_UNTERMINATED;
				}
				*errpos = (size_t)(p - s0);
				return PE_ESCAPE;
			}
		}
		if (c < 0x20) {
			if (p == e) {
				*errpos = (size_t)(q0 - s0);
				return PE_UNTERMINATED;
			}
			*errpos = (size_t)(p - s0);
			return PE_CONTROL;
		}
		/* Non-ASCII: check each sequence; CJK text comes in runs, so loop here. */
		do {
			int n = es_utf8_len(p);
			if (!n) {
				*errpos = (size_t)(p - s0);
				return PE_UTF8;
			}
			if (emit) {
				memcpy(o, p, 4);
				o += n;
			}
			p += n;
		} while (*p >= 0x80);
	}
	*pp = p;
	if (emit)
		*oo = o;
	return PE_OK;
}

/* The word (n bytes) at *pp, copied to *oo when emit: 1 and both moved past it, or 0. */
static inline __attribute__((always_inline)) int literal(const unsigned char **pp, char **oo,
							  const char *word, size_t n, const int emit)
{
	if (memcmp(*pp, word, n) != 0)
		return 0;
	if (emit) {
		memcpy(*oo, word, n);
		*oo += n;
	}
	*pp += n;
	return 1;
}

struct emit_state {
	struct es_buf *out;
	size_t orig_len;
	char *ob, *o, *olim;
};

/* Make room so that olim - o >= need, keeping offsets. */
static int emit_grow(struct emit_state *st, size_t need)
{
	size_t used = (size_t)(st->o - st->ob);
	st->out->len = used;
	int rc = es_buf_grow(st->out, need + need / 2);
	st->out->len = st->orig_len;
	if (rc)
		return rc;
	st->ob = st->out->data;
	st->o = st->ob + used;
	st->olim = st->ob + st->out->cap - 1;
	return 0;
}

static double parse_double(struct es_jsonl *j, const unsigned char *q, size_t n, int *nomem)
{
	char small[64];
	if (n < sizeof(small)) {
		memcpy(small, q, n);
		small[n] = '\0';
		return es_pyfloat_strtod(small, NULL);
	}
	es_buf_reset(&j->num);
	if (es_buf_add(&j->num, q, n)) {
		*nomem = 1;
		return 0;
	}
	return es_pyfloat_strtod(j->num.data, NULL);
}

/*
 * Parse the padded copy of the line in j->in (len bytes). With emit, append the canonical
 * form at st->o and record the members of objects for duplicate handling; the top-level
 * object's members stay in j->mem[0 .. *top_n). Returns PE_OK or a PE_* code with
 * j->errpos set (PE_NOMEM has been reported already).
 */
static inline __attribute__((always_inline)) int parse_line(struct es_jsonl *j, size_t len,
							     struct emit_state *st, int *top_obj,
							     size_t *top_n, const int emit)
{
	const unsigned char *s0 = (const unsigned char *)j->in.data;
	const unsigned char *p = s0, *e = s0 + len;
	char *o = emit ? st->o : NULL;
	size_t depth = 0, nmem = 0;
	int rc;
	*top_obj = 0;

#define OFF() ((size_t)(o - st->ob))
#define FAIL(kind, at)                                  \
	do {                                            \
		j->errpos = (size_t)((at) - s0);        \
		if (emit)                               \
			st->o = o;                      \
		return (kind);                          \
	} while (0)

	while (IS_WS(*p))
		p++;
	if (*p == '{')
		*top_obj = 1;

value:
	while (IS_WS(*p))
		p++;
	switch (*p) {
	case '"':
		rc = scan_string(&p, e, &o, &j->lone, &j->errpos, s0, emit);
		if (rc) {
			if (emit)
				st->o = o;
			return rc;
		}
		goto after_value;
	case '{':
	case '[': {
		int is_obj = *p == '{';
		if (depth == j->fr_cap &&
		    es_grow(&j->fr, &j->fr_cap, depth + 1, sizeof(*j->fr)))
			FAIL(PE_NOMEM, p);
		struct frame *f = &j->fr[depth++];
		f->is_obj = is_obj;
		if (emit) {
			f->start = OFF();
			f->mem_base = nmem;
			*o++ = (char)*p;
		}
		p++;
		while (IS_WS(*p))
			p++;
		if (*p == (is_obj ? '}' : ']')) {
			if (emit)
				*o++ = (char)*p;
			p++;
			depth--;
			goto after_value;
		}
		if (is_obj)
			goto key;
		goto value;
	}
	case 't':
		if (literal(&p, &o, "true", 4, emit))
			goto after_value;
		FAIL(PE_EXPECT_VALUE, p);
	case 'f':
		if (literal(&p, &o, "false", 5, emit))
			goto after_value;
		FAIL(PE_EXPECT_VALUE, p);
	case 'n':
		if (literal(&p, &o, "null", 4, emit))
			goto after_value;
		FAIL(PE_EXPECT_VALUE, p);
	case 'N':
		if (literal(&p, &o, "NaN", 3, emit))
			goto after_value;
		FAIL(PE_EXPECT_VALUE, p);
	case 'I':
		if (literal(&p, &o, "Infinity", 8, emit))
			goto after_value;
		FAIL(PE_EXPECT_VALUE, p);
	default: {
		const unsigned char *q = p;
		if (*p == '-') {
			if (literal(&p, &o, "-Infinity", 9, emit))
				goto after_value;
			p++;
		}
		if (*p == '0') {
			p++;
		} else if (*p >= '1' && *p <= '9') {
			p++;
			while (IS_DIGIT(*p))
				p++;
		} else {
			FAIL(PE_EXPECT_VALUE, q);
		}
		int is_float = 0;
		if (*p == '.' && IS_DIGIT(p[1])) {
			p += 2;
			while (IS_DIGIT(*p))
				p++;
			is_float = 1;
		}
		if ((*p | 0x20) == 'e') {
			const unsigned char *r = p + 1;
			if (*r == '+' || *r == '-')
				r++;
			if (IS_DIGIT(*r)) {
				while (IS_DIGIT(*r))
					r++;
				p = r;
				is_float = 1;
			}
		}
		if (!emit)
			goto after_value;
		if (!is_float) {
			/* Integers keep their digits, whatever their size; -0 is the int 0. */
			size_t n = (size_t)(p - q);
			if (n == 2 && q[0] == '-' && q[1] == '0') {
				*o++ = '0';
			} else {
				memcpy(o, q, n);
				o += n;
			}
			goto after_value;
		}
		int nomem = 0;
		double v = parse_double(j, q, (size_t)(p - q), &nomem);
		if (nomem)
			FAIL(PE_NOMEM, p);
		/* The one place where output can outgrow input ("1e5" -> "100000.0"). */
		if ((size_t)(st->olim - o) < (size_t)(e - p) + SLACK + 32) {
			st->o = o;
			if (emit_grow(st, (size_t)(e - p) + SLACK + 64))
				FAIL(PE_NOMEM, p);
			o = st->o;
		}
		o += es_pyfloat_dumps(v, o);
		goto after_value;
	}
	}

key:
	/* Inside an object, whitespace skipped, a member name is expected. */
	if (*p != '"')
		FAIL(PE_EXPECT_NAME, p);
	if (emit) {
		if (nmem == j->mem_cap &&
		    es_grow(&j->mem, &j->mem_cap, nmem + 1, sizeof(*j->mem)))
			FAIL(PE_NOMEM, p);
		j->mem[nmem].key_off = OFF();
	}
	rc = scan_string(&p, e, &o, &j->lone, &j->errpos, s0, emit);
	if (rc) {
		if (emit)
			st->o = o;
		return rc;
	}
	while (IS_WS(*p))
		p++;
	if (*p != ':')
		FAIL(PE_EXPECT_COLON, p);
	p++;
	if (emit) {
		j->mem[nmem].key_len = OFF() - j->mem[nmem].key_off;
		*o++ = ':';
		j->mem[nmem].val_off = OFF();
		nmem++;
	}
	goto value;

after_value:
	if (depth == 0)
		goto done;
	while (IS_WS(*p))
		p++;
	if (j->fr[depth - 1].is_obj) {
		if (*p == ',') {
			if (emit) {
				j->mem[nmem - 1].val_end = OFF();
				*o++ = ',';
			}
			p++;
			while (IS_WS(*p))
				p++;
			goto key;
		}
		if (*p != '}')
			FAIL(PE_EXPECT_COMMA, p);
		p++;
		if (emit) {
			struct frame *f = &j->fr[depth - 1];
			j->mem[nmem - 1].val_end = OFF();
			*o++ = '}';
			size_t n = nmem - f->mem_base;
			if (n > 1) {
				rc = map_keys(j, st->ob, j->mem + f->mem_base, n, NULL, NULL);
				if (rc > 0) {
					size_t end = OFF();
					rc = dedup_object(j, st->ob, f->start, &end, j->mem + f->mem_base, &n);
					o = st->ob + end;
					nmem = f->mem_base + n;
				}
				if (rc < 0)
					FAIL(PE_NOMEM, p);
			}
			/* Only the top level's members are needed afterwards. */
			if (depth > 1)
				nmem = f->mem_base;
		}
		depth--;
		goto after_value;
	}
	if (*p == ',') {
		if (emit)
			*o++ = ',';
		p++;
		goto value;
	}
	if (*p != ']')
		FAIL(PE_EXPECT_COMMA, p);
	if (emit)
		*o++ = ']';
	p++;
	depth--;
	goto after_value;

done:
	while (IS_WS(*p))
		p++;
	if (p != e)
		FAIL(PE_EXTRA, p);
	if (emit) {
		st->o = o;
		*top_n = nmem;
	}
	return PE_OK;
#undef OFF
#undef FAIL
}

/* ------------------------------------------------------------------------------------ */
/* Entry points                                                                           */

static int is_blank(const char *line, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		char c = line[i];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\v' && c != '\f')
			return 0;
	}
	return 1;
}

/* Blank, then the BOM (after a full UTF-8 check, since UTF-8 errors come first), and copy
 * the line into the padded scratch. */
static int prepare_line(struct es_jsonl *j, const char *line, size_t len, const char *path,
			uint64_t lineno)
{
	if (is_blank(line, len))
		return es_error(ES_EINVAL, "Blank JSONL record at %s:%" PRIu64, path, lineno);
	if (len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
		char msg[160];
		if (es_utf8_check((const unsigned char *)line, len, msg, sizeof(msg)))
			return es_error(ES_EINVAL, "Invalid UTF-8 at %s:%" PRIu64 ": %s", path, lineno,
					msg);
		return es_error(ES_EINVAL, "Invalid JSON at %s:%" PRIu64 ": Unexpected UTF-8 BOM", path,
				lineno);
	}
	es_buf_reset(&j->in);
	int rc = es_buf_grow(&j->in, len + PAD);
	if (rc)
		return rc;
	memcpy(j->in.data, line, len);
	memset(j->in.data + len, 0, PAD);
	j->lone = 0;
	return 0;
}

static int report_parse_error(struct es_jsonl *j, const char *line, size_t len, int kind,
			      const char *path, uint64_t lineno)
{
	if (kind == PE_NOMEM)
		return ES_ENOMEM;
	char msg[160];
	if (es_utf8_check((const unsigned char *)line, len, msg, sizeof(msg)))
		return es_error(ES_EINVAL, "Invalid UTF-8 at %s:%" PRIu64 ": %s", path, lineno, msg);
	if (kind == PE_UTF8) /* not reached: the check above finds it */
		return es_error(ES_EINVAL, "Invalid UTF-8 at %s:%" PRIu64, path, lineno);
	/* Python counts characters, not bytes: skip continuation bytes. */
	size_t col = 1;
	for (size_t i = 0; i < j->errpos && i < len; i++)
		col += !es_utf8_is_cont((unsigned char)line[i]);
	return es_error(ES_EINVAL, "Invalid JSON at %s:%" PRIu64 ": %s: column %zu", path, lineno,
			perr_text[kind], col);
}

int es_jsonl_validate(struct es_jsonl *j, const char *line, size_t len, const char *path,
		      uint64_t lineno)
{
	int rc = prepare_line(j, line, len, path, lineno);
	if (rc)
		return rc;
	int top_obj;
	size_t top_n;
	rc = parse_line(j, len, NULL, &top_obj, &top_n, 0);
	if (rc)
		return report_parse_error(j, line, len, rc, path, lineno);
	if (!top_obj)
		return es_error(ES_EINVAL, "JSONL record must be an object at %s:%" PRIu64, path,
				lineno);
	return 0;
}

static const struct member *find_member(const struct es_jsonl *j, const char *base, size_t n,
					const struct enc_key *k)
{
	for (size_t i = 0; i < n; i++) {
		const struct member *m = &j->mem[i];
		if (m->key_len == k->len && memcmp(base + m->key_off, k->s, k->len) == 0)
			return m;
	}
	return NULL;
}

static int keep_media_item(const char *s, size_t n)
{
	/* s is the encoded body; these prefixes are plain ASCII, encoded as themselves. */
	static const char *const prefixes[] = { "http://", "https://", "s3://", "gs://", "hdfs://" };
	if (n == 0 || s[0] == '/')
		return 1;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t pl = strlen(prefixes[i]);
		if (n >= pl && memcmp(s, prefixes[i], pl) == 0)
			return 1;
	}
	return 0;
}

/* End (index of the closing quote) of the canonical string whose quote is at v[i]. */
static size_t canonical_string_end(const char *v, size_t i)
{
	for (i++; v[i] != '"'; i++)
		if (v[i] == '\\')
			i++;
	return i;
}

/*
 * docs/job-folder.md#normalized-lines on the final top-level object in out[orig..len): check every
 * media field and make its relative items absolute under media_root. A changed list is spliced in
 * place, so the key keeps its position; later members' offsets move with it.
 */
static int apply_media(struct es_jsonl *j, struct es_buf *out, size_t top_n, const char *path,
		       uint64_t lineno)
{
	for (size_t k = 0; k < j->n_media; k++) {
		const struct enc_key *key = &j->media[k];
		const struct member *m = find_member(j, out->data, top_n, key);
		if (!m)
			continue;
		size_t vo = m->val_off, ve = m->val_end;
		const char *v = out->data;
		if (ve - vo == 4 && memcmp(v + vo, "null", 4) == 0)
			continue;
		if (v[vo] != '[')
			return es_error(ES_EINVAL, "Media field '%s' must be a list or null at %s:%" PRIu64,
					key->raw, path, lineno);
		int change = 0;
		for (size_t i = vo + 1; v[i] != ']';) {
			if (v[i] != '"')
				return es_error(ES_EINVAL,
						"Every item in media field '%s' must be a string at %s:%" PRIu64,
						key->raw, path, lineno);
			size_t end = canonical_string_end(v, i);
			if (!keep_media_item(v + i + 1, end - i - 1))
				change = 1;
			i = end + 1;
			if (v[i] == ',')
				i++;
		}
		/* A lone surrogate fails the line anyway (after these checks, as in Python); its
		 * path cannot be resolved, so stop here. */
		if (!change || j->lone)
			continue;

		struct es_buf *t = &j->tmp;
		es_buf_reset(t);
		int rc = es_buf_addc(t, '[');
		for (size_t i = vo + 1; !rc && v[i] != ']';) {
			size_t end = canonical_string_end(v, i);
			if (i > vo + 1)
				rc = es_buf_addc(t, ',');
			if (!rc && keep_media_item(v + i + 1, end - i - 1)) {
				rc = es_buf_add(t, v + i, end + 1 - i);
			} else if (!rc) {
				es_buf_reset(&j->item);
				int nul = decode_canonical(&j->item, v + i + 1, end - i - 1);
				if (nul < 0)
					return ES_ENOMEM;
				if (nul)
					return es_error(ES_EINVAL,
							"Media path in field '%s' contains a NUL character at %s:%" PRIu64,
							key->raw, path, lineno);
				if (j->media_root)
					rc = es_path_join(&j->path, j->media_root, j->item.data);
				else
					rc = es_buf_add(&j->path, j->item.data, j->item.len);
				if (!rc)
					rc = es_fs_resolve(j->path.data, &j->res);
				es_buf_reset(&j->path);
				if (rc)
					return rc;
				char msg[160];
				if (es_utf8_check((const unsigned char *)j->res.data, j->res.len, msg, sizeof(msg)))
					return es_error(ES_EINVAL,
							"Resolved media path '%s' is not valid UTF-8 (%s) at %s:%" PRIu64,
							j->res.data, msg, path, lineno);
				rc = encode_string(t, j->res.data, j->res.len);
			}
			i = end + 1;
			if (v[i] == ',')
				i++;
		}
		if (!rc)
			rc = es_buf_addc(t, ']');
		if (rc)
			return rc;
		/* Splice t over [vo, ve). */
		size_t old = ve - vo, tail = out->len - ve;
		if (t->len > old && (rc = es_buf_grow(out, t->len - old)))
			return rc;
		memmove(out->data + vo + t->len, out->data + ve, tail);
		memcpy(out->data + vo, t->data, t->len);
		out->len = out->len - old + t->len;
		out->data[out->len] = '\0';
		for (size_t i = 0; i < top_n; i++) {
			struct member *x = &j->mem[i];
			if (x->key_off > vo) {
				x->key_off = x->key_off + t->len - old;
				x->val_off = x->val_off + t->len - old;
			}
			if (x->val_end >= ve)
				x->val_end = x->val_end + t->len - old;
		}
	}
	return 0;
}

/* docs/job-folder.md#normalized-lines: each missing index key gets the global row index, at the
 * end. */
static int apply_index(struct es_jsonl *j, struct es_buf *out, size_t top_n, uint64_t global)
{
	int any = top_n > 0;
	for (size_t k = 0; k < j->n_index; k++) {
		const struct enc_key *key = &j->index[k];
		if (find_member(j, out->data, top_n, key))
			continue;
		char num[24];
		int n = es_format_u64(global, num);
		int rc = es_buf_grow(out, key->len + (size_t)n + 3);
		if (rc)
			return rc;
		out->len--; /* drop '}' */
		if (any)
			out->data[out->len++] = ',';
		memcpy(out->data + out->len, key->s, key->len);
		out->len += key->len;
		out->data[out->len++] = ':';
		memcpy(out->data + out->len, num, (size_t)n);
		out->len += (size_t)n;
		out->data[out->len++] = '}';
		out->data[out->len] = '\0';
		any = 1;
	}
	return 0;
}

/* The first "\udXXX" in canonical text, where "\\" escapes are told apart from "\u". */
static const char *find_lone(const char *s, size_t n)
{
	for (size_t i = 0; i + 1 < n; i++) {
		if (s[i] != '\\')
			continue;
		if (s[i + 1] == 'u' && i + 2 < n && s[i + 2] == 'd')
			return s + i;
		i++;
	}
	return NULL;
}

int es_jsonl_normalize(struct es_jsonl *j, const char *line, size_t len, uint64_t global_index,
		       const char *path, uint64_t lineno, struct es_buf *out)
{
	int rc = prepare_line(j, line, len, path, lineno);
	if (rc)
		return rc;
	struct emit_state st;
	st.out = out;
	st.orig_len = out->len;
	if ((rc = es_buf_grow(out, len + SLACK + 32)))
		return rc;
	st.ob = out->data;
	st.o = st.ob + out->len;
	st.olim = st.ob + out->cap - 1;

	int top_obj = 0;
	size_t top_n = 0;
	int kind = parse_line(j, len, &st, &top_obj, &top_n, 1);
	if (kind) {
		out->data[st.orig_len] = '\0';
		return report_parse_error(j, line, len, kind, path, lineno);
	}
	if (!top_obj) {
		out->data[st.orig_len] = '\0';
		return es_error(ES_EINVAL, "JSONL record must be an object at %s:%" PRIu64, path,
				lineno);
	}
	out->len = (size_t)(st.o - st.ob);
	out->data[out->len] = '\0';
	/* A lone surrogate may have been dropped with a duplicate key's old value: only one
	 * that survived counts (and stops media resolution). */
	if (j->lone)
		j->lone = find_lone(out->data + st.orig_len, out->len - st.orig_len) != NULL;
	if (j->n_media && (rc = apply_media(j, out, top_n, path, lineno)))
		goto fail;
	if (j->n_index && (rc = apply_index(j, out, top_n, global_index)))
		goto fail;
	if (j->lone) {
		const char *l = find_lone(out->data + st.orig_len, out->len - st.orig_len);
		if (l) {
			rc = es_error(ES_EINVAL,
				      "Lone surrogate escape %.6s cannot be encoded as UTF-8 at %s:%" PRIu64,
				      l, path, lineno);
			goto fail;
		}
	}
	if ((rc = es_buf_addc(out, '\n')))
		goto fail;
	return 0;
fail:
	out->len = st.orig_len;
	out->data[out->len] = '\0';
	return rc;
}
