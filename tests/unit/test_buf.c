/*
 * Unit tests of src/buf.c: the growable byte buffer with its hard cap (include/eshard/buf.h)
 * es_strv, the NULL-terminated string vector, and es_grow, the array growth with its overflow
 * checks.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/log.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The overflow cases of es_grow ask realloc for more than half the address space, which must
 * fail with NULL; AddressSanitizer would rather abort the test, unless told to return NULL. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

/* A fresh buffer is the shared empty string: readable, NUL-terminated, nothing allocated. */
static void test_init_is_empty(void)
{
	struct es_buf b = ES_BUF_INIT;
	CHECK(b.data == es_buf_empty);
	CHECK_INT_EQ(b.data[0], '\0');
	CHECK_INT_EQ(b.len, 0);
	CHECK_INT_EQ(b.cap, 0);
	CHECK_STR_EQ(b.data, "");
	/* reset, setlen(0) and free of a never-used buffer keep it the shared empty string. */
	es_buf_reset(&b);
	es_buf_setlen(&b, 0);
	es_buf_free(&b);
	CHECK(b.data == es_buf_empty);
	CHECK_INT_EQ(es_buf_empty[0], '\0');

	struct es_buf c;
	memset(&c, 0x5a, sizeof(c));
	es_buf_init(&c, 123);
	CHECK(c.data == es_buf_empty);
	CHECK_INT_EQ(c.len, 0);
	CHECK_INT_EQ(c.cap, 0);
	CHECK_INT_EQ(c.max, 123);
}

/* add, adds, addc and printf append; the data stays NUL-terminated and may hold NULs. */
static void test_appends(void)
{
	struct es_buf b = ES_BUF_INIT;
	CHECK_INT_EQ(es_buf_adds(&b, "hello"), 0);
	CHECK(b.data != es_buf_empty);
	CHECK(b.cap > b.len);
	CHECK_INT_EQ(es_buf_addc(&b, ' '), 0);
	CHECK_INT_EQ(es_buf_add(&b, "world!!!", 5), 0);
	CHECK_INT_EQ(es_buf_printf(&b, " %d-%s-%05.1f", 42, "x", 2.5), 0);
	CHECK_STR_EQ(b.data, "hello world 42-x-002.5");
	CHECK_INT_EQ(b.len, strlen("hello world 42-x-002.5"));
	CHECK_INT_EQ(b.data[b.len], '\0');

	/* Embedded NULs count in len; the terminator follows the last byte. */
	es_buf_reset(&b);
	CHECK_INT_EQ(es_buf_add(&b, "a\0b\0", 4), 0);
	CHECK_INT_EQ(es_buf_addc(&b, '\0'), 0);
	CHECK_INT_EQ(es_buf_printf(&b, "%c", 0), 0);
	CHECK_MEM_EQ(b.data, b.len, "a\0b\0\0\0", 6);
	CHECK_INT_EQ(b.data[6], '\0');

	/* Adding nothing keeps the content. */
	es_buf_reset(&b);
	CHECK_INT_EQ(es_buf_adds(&b, "x"), 0);
	CHECK_INT_EQ(es_buf_adds(&b, ""), 0);
	CHECK_INT_EQ(es_buf_printf(&b, "%s", ""), 0);
	CHECK_STR_EQ(b.data, "x");
	CHECK_INT_EQ(b.len, 1);
	es_buf_free(&b);
}

/* Many small appends and one big printf: the content survives every reallocation. */
static void test_growth(void)
{
	struct es_buf b = ES_BUF_INIT;
	int failed = 0;
	for (int i = 0; i < 100000; i++)
		if (es_buf_addc(&b, (char)('a' + i % 26)) != 0)
			failed++;
	CHECK_INT_EQ(failed, 0);
	CHECK_INT_EQ(b.len, 100000);
	CHECK(b.cap > b.len);
	CHECK_INT_EQ(b.data[b.len], '\0');
	size_t bad = 0;
	for (size_t i = 0; i < b.len; i++)
		if (b.data[i] != (char)('a' + i % 26))
			bad++;
	CHECK_INT_EQ(bad, 0);

	/* printf longer than the buffer's current room. */
	char big[5001];
	memset(big, 'q', 5000);
	big[5000] = '\0';
	struct es_buf c = ES_BUF_INIT;
	CHECK_INT_EQ(es_buf_adds(&c, "<"), 0);
	CHECK_INT_EQ(es_buf_printf(&c, "%s>%d", big, 7), 0);
	CHECK_INT_EQ(c.len, 5003);
	CHECK(c.len > 1 && c.data[0] == '<' && c.data[1] == 'q' && c.data[5000] == 'q');
	CHECK_STR_EQ(c.data + 5001, ">7");
	es_buf_free(&b);
	es_buf_free(&c);
}

static int call_vprintf(struct es_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = es_buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

static void test_vprintf(void)
{
	struct es_buf b = ES_BUF_INIT;
	CHECK_INT_EQ(call_vprintf(&b, "%s=%lld", "n", (long long)INT64_MIN), 0);
	CHECK_INT_EQ(call_vprintf(&b, ";%zu", (size_t)3), 0);
	CHECK_STR_EQ(b.data, "n=-9223372036854775808;3");
	es_buf_free(&b);
}

/* The hard cap: len may reach max, never pass it; a failed append changes nothing. */
static void test_cap(void)
{
	struct es_buf b;
	es_buf_init(&b, 10);
	CHECK_INT_EQ(es_buf_adds(&b, "0123456789"), 0); /* exactly max */
	CHECK_INT_EQ(b.len, 10);
	char *data = b.data;
	size_t cap = b.cap;

	es_clear_error();
	es_log_quiet_begin();
	int rc_c = es_buf_addc(&b, 'x');
	int rc_s = es_buf_adds(&b, "yz");
	int rc_p = es_buf_printf(&b, "%d", 1);
	int rc_g = es_buf_grow(&b, 1);
	int rc_huge = es_buf_grow(&b, SIZE_MAX); /* len + extra would wrap around */
	es_log_quiet_end();
	CHECK_INT_EQ(rc_c, ES_ENOMEM);
	CHECK_INT_EQ(rc_s, ES_ENOMEM);
	CHECK_INT_EQ(rc_p, ES_ENOMEM);
	CHECK_INT_EQ(rc_g, ES_ENOMEM);
	CHECK_INT_EQ(rc_huge, ES_ENOMEM);
	/* The message names the cap. */
	CHECK(strstr(es_last_error(), "10 bytes") != NULL);
	/* Unchanged: same bytes, length, storage. */
	CHECK(b.data == data);
	CHECK_INT_EQ(b.cap, cap);
	CHECK_INT_EQ(b.len, 10);
	CHECK_STR_EQ(b.data, "0123456789");
	CHECK_INT_EQ(b.max, 10);
	/* Adding nothing at the cap is fine. */
	CHECK_INT_EQ(es_buf_add(&b, "", 0), 0);
	CHECK_INT_EQ(es_buf_grow(&b, 0), 0);

	/* A partly filled buffer: an append that would cross the cap fails whole. */
	es_buf_setlen(&b, 4);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_buf_adds(&b, "abcdefg"), ES_ENOMEM); /* 4 + 7 > 10 */
	CHECK_INT_EQ(es_buf_printf(&b, "%s", "abcdefg"), ES_ENOMEM);
	es_log_quiet_end();
	CHECK_STR_EQ(b.data, "0123");
	CHECK_INT_EQ(b.len, 4);
	CHECK_INT_EQ(es_buf_adds(&b, "abcdef"), 0); /* 4 + 6 == 10 */
	CHECK_STR_EQ(b.data, "0123abcdef");

	/* The cap applies from the first append of an empty buffer too. */
	struct es_buf e;
	es_buf_init(&e, 3);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_buf_adds(&e, "abcd"), ES_ENOMEM);
	es_log_quiet_end();
	CHECK(e.data == es_buf_empty);
	CHECK_INT_EQ(e.len, 0);
	CHECK_INT_EQ(e.cap, 0);
	CHECK_INT_EQ(es_buf_adds(&e, "abc"), 0);
	CHECK_STR_EQ(e.data, "abc");

	/* max 0 means SIZE_MAX / 2: a request past it fails before any allocation. */
	struct es_buf d = ES_BUF_INIT;
	CHECK_INT_EQ(es_buf_adds(&d, "keep"), 0);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_buf_grow(&d, SIZE_MAX / 2 + 1), ES_ENOMEM);
	CHECK_INT_EQ(es_buf_grow(&d, SIZE_MAX / 2 - 1), ES_ENOMEM); /* 4 + that > SIZE_MAX / 2 */
	CHECK_INT_EQ(es_buf_grow(&d, SIZE_MAX), ES_ENOMEM);
	es_log_quiet_end();
	CHECK_STR_EQ(d.data, "keep");
	CHECK_INT_EQ(d.len, 4);

	es_buf_free(&b);
	es_buf_free(&e);
	es_buf_free(&d);
}

static void test_setlen_reset(void)
{
	struct es_buf b = ES_BUF_INIT;
	CHECK_INT_EQ(es_buf_adds(&b, "abcdef"), 0);
	es_buf_setlen(&b, 3);
	CHECK_INT_EQ(b.len, 3);
	CHECK_STR_EQ(b.data, "abc");
	/* Growing through setlen is refused: the length stays. */
	es_buf_setlen(&b, 5);
	CHECK_INT_EQ(b.len, 3);
	CHECK_STR_EQ(b.data, "abc");
	CHECK_INT_EQ(es_buf_adds(&b, "XY"), 0);
	CHECK_STR_EQ(b.data, "abcXY");

	/* reset empties but keeps the storage for reuse. */
	char *data = b.data;
	size_t cap = b.cap;
	es_buf_reset(&b);
	CHECK_INT_EQ(b.len, 0);
	CHECK_STR_EQ(b.data, "");
	CHECK(b.data == data);
	CHECK_INT_EQ(b.cap, cap);
	CHECK_INT_EQ(es_buf_adds(&b, "new"), 0);
	CHECK(b.data == data);
	CHECK_STR_EQ(b.data, "new");
	es_buf_free(&b);
}

static void test_detach_free(void)
{
	struct es_buf b;
	es_buf_init(&b, 100);
	CHECK_INT_EQ(es_buf_adds(&b, "payload"), 0);
	char *data = b.data;
	size_t len = 0;
	char *p = es_buf_detach(&b, &len);
	CHECK(p == data);
	CHECK_INT_EQ(len, 7);
	CHECK_STR_EQ(p, "payload");
	/* The buffer is reset to empty and keeps its cap. */
	CHECK(b.data == es_buf_empty);
	CHECK_INT_EQ(b.len, 0);
	CHECK_INT_EQ(b.cap, 0);
	CHECK_INT_EQ(b.max, 100);
	free(p);

	/* An empty buffer hands out a malloc'd "" of its own (never the shared one). */
	len = 99;
	p = es_buf_detach(&b, &len);
	CHECK(p != NULL && p != es_buf_empty);
	CHECK_STR_EQ(p, "");
	CHECK_INT_EQ(len, 0);
	free(p);
	/* len may be NULL. */
	CHECK_INT_EQ(es_buf_adds(&b, "z"), 0);
	p = es_buf_detach(&b, NULL);
	CHECK_STR_EQ(p, "z");
	free(p);

	/* free releases and leaves a reusable empty buffer. */
	CHECK_INT_EQ(es_buf_adds(&b, "again"), 0);
	es_buf_free(&b);
	CHECK(b.data == es_buf_empty);
	CHECK_INT_EQ(b.len, 0);
	CHECK_INT_EQ(b.cap, 0);
	CHECK_INT_EQ(es_buf_adds(&b, "reuse"), 0);
	CHECK_STR_EQ(b.data, "reuse");
	es_buf_free(&b);
	es_buf_free(&b); /* twice is harmless */
	CHECK(b.data == es_buf_empty);
}

static void test_strv_push(void)
{
	struct es_strv a = ES_STRV_INIT;
	CHECK(a.v == NULL);
	CHECK_INT_EQ(a.n, 0);
	CHECK_INT_EQ(es_strv_push(&a, strdup("first")), 0);
	if (CHECK(a.v != NULL)) {
		CHECK_STR_EQ(a.v[0], "first");
		CHECK(a.v[1] == NULL);
	}
	CHECK_INT_EQ(a.n, 1);

	/* Past the first allocation: every element kept, always NULL-terminated. */
	int term_ok = 1;
	for (int i = 1; i < 200; i++) {
		char tmp[16];
		snprintf(tmp, sizeof(tmp), "s%d", i);
		CHECK_INT_EQ(es_strv_push(&a, strdup(tmp)), 0);
		if (a.v[a.n] != NULL)
			term_ok = 0;
	}
	CHECK(term_ok);
	CHECK_INT_EQ(a.n, 200);
	CHECK(a.cap > a.n);
	CHECK_STR_EQ(a.v[0], "first");
	CHECK_STR_EQ(a.v[15], "s15");
	CHECK_STR_EQ(a.v[16], "s16");
	CHECK_STR_EQ(a.v[199], "s199");
	CHECK(a.v[200] == NULL);

	/* A NULL string means the caller ran out of memory: an error, nothing added. */
	es_clear_error();
	es_log_quiet_begin();
	CHECK_INT_EQ(es_strv_push(&a, NULL), ES_ENOMEM);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "out of memory") != NULL);
	CHECK_INT_EQ(a.n, 200);
	CHECK(a.v[200] == NULL);
	CHECK_STR_EQ(a.v[199], "s199");

	es_strv_free(&a);
	CHECK(a.v == NULL);
	CHECK_INT_EQ(a.n, 0);
	CHECK_INT_EQ(a.cap, 0);
	/* Reusable after free. */
	CHECK_INT_EQ(es_strv_push(&a, strdup("again")), 0);
	CHECK_STR_EQ(a.v[0], "again");
	CHECK(a.v[1] == NULL);
	es_strv_free(&a);
	es_strv_free(&a);
	CHECK(a.v == NULL);
}

static void test_strv_pushf(void)
{
	struct es_strv a = ES_STRV_INIT;
	CHECK_INT_EQ(es_strv_pushf(&a, "%s=%d", "OMP_NUM_THREADS", 4), 0);
	CHECK_INT_EQ(es_strv_pushf(&a, "%s", ""), 0);
	char big[301];
	memset(big, 'v', 300);
	big[300] = '\0';
	CHECK_INT_EQ(es_strv_pushf(&a, "K=%s.", big), 0);
	CHECK_INT_EQ(a.n, 3);
	CHECK_STR_EQ(a.v[0], "OMP_NUM_THREADS=4");
	CHECK_STR_EQ(a.v[1], "");
	if (CHECK(a.v[2] != NULL)) {
		CHECK_INT_EQ(strlen(a.v[2]), 303);
		CHECK(strncmp(a.v[2], "K=vvv", 5) == 0);
		CHECK_INT_EQ(a.v[2][302], '.');
	}
	CHECK(a.v[3] == NULL);
	es_strv_free(&a);
}

static void test_strv_sort_unique(void)
{
	struct es_strv a = ES_STRV_INIT;
	es_strv_sort_unique(&a); /* empty: nothing to do */
	CHECK(a.v == NULL && a.n == 0);
	const char *in[] = { "b", "a", "c", "a", "b", "B", "" };
	for (size_t i = 0; i < sizeof(in) / sizeof(*in); i++)
		CHECK_INT_EQ(es_strv_push(&a, strdup(in[i])), 0);
	es_strv_sort_unique(&a);
	const char *want[] = { "", "B", "a", "b", "c" };
	if (CHECK_INT_EQ(a.n, 5))
		for (size_t i = 0; i < 5; i++)
			CHECK_STR_EQ(a.v[i], want[i]);
	CHECK(a.v[a.n] == NULL);
	es_strv_free(&a);

	CHECK_INT_EQ(es_strv_pushf(&a, "x%d", 1), 0);
	es_strv_sort_unique(&a); /* one item */
	CHECK(a.n == 1 && !strcmp(a.v[0], "x1") && a.v[1] == NULL);
	es_strv_free(&a);
	CHECK(a.v == NULL && a.n == 0);
}

static void test_strv_add_once(void)
{
	struct es_strv a = ES_STRV_INIT;
	const char *in[] = { "images", "audios", "images", "videos", "audios" };
	for (size_t i = 0; i < sizeof(in) / sizeof(*in); i++)
		CHECK_INT_EQ(es_strv_add_once(&a, in[i]), 0);
	if (CHECK_INT_EQ(a.n, 3)) {
		CHECK_STR_EQ(a.v[0], "images");
		CHECK_STR_EQ(a.v[1], "audios");
		CHECK_STR_EQ(a.v[2], "videos");
		CHECK(a.v[3] == NULL);
		CHECK(a.v[0] != in[0]); /* a copy */
	}
	es_strv_free(&a);
}

struct triple {
	int64_t a, b, c;
};

/* From nothing: 16 elements, then doubling until need fits; the contents are kept, and a need
 * that fits changes nothing. Any pointer type works through arrp. */
static void test_grow(void)
{
	struct triple *v = NULL;
	size_t cap = 0;
	CHECK_INT_EQ(es_grow(&v, &cap, 0, sizeof(*v)), 0);
	CHECK(v == NULL);
	CHECK_INT_EQ(cap, 0);
	CHECK_INT_EQ(es_grow(&v, &cap, 1, sizeof(*v)), 0);
	CHECK(v != NULL);
	CHECK_INT_EQ(cap, 16);
	for (int i = 0; i < 16; i++)
		v[i] = (struct triple){ i, -i, 7 * i };
	struct triple *same = v;
	CHECK_INT_EQ(es_grow(&v, &cap, 16, sizeof(*v)), 0);
	CHECK(v == same);
	CHECK_INT_EQ(cap, 16);
	CHECK_INT_EQ(es_grow(&v, &cap, 17, sizeof(*v)), 0);
	CHECK_INT_EQ(cap, 32);
	CHECK_INT_EQ(es_grow(&v, &cap, 200, sizeof(*v)), 0);
	CHECK_INT_EQ(cap, 256);
	int kept = 1;
	for (int i = 0; i < 16; i++)
		kept &= v[i].a == i && v[i].b == -i && v[i].c == 7 * i;
	CHECK(kept);
	v[255].c = 1; /* the whole capacity is there (AddressSanitizer checks it) */
	free(v);

	/* A capacity that is not a power of two doubles from where it is. */
	char *s = malloc(5);
	cap = 5;
	CHECK_INT_EQ(es_grow(&s, &cap, 6, 1), 0);
	CHECK_INT_EQ(cap, 10);
	free(s);
}

/* need elements that pass SIZE_MAX bytes, and a doubling that would pass it: ES_ENOMEM with one
 * line, the array and its capacity unchanged (a multiplication that wrapped around would have
 * asked realloc for a few bytes, or none, and "succeeded"). */
static void test_grow_overflow(void)
{
	int64_t *v = malloc(4 * sizeof(*v));
	size_t cap = 4;
	v[3] = 42;
	es_clear_error();
	es_log_quiet_begin();
	CHECK_INT_EQ(es_grow(&v, &cap, SIZE_MAX / sizeof(*v) + 1, sizeof(*v)), ES_ENOMEM);
	es_log_quiet_end();
	CHECK(strstr(es_last_error(), "would pass SIZE_MAX bytes") != NULL);
	CHECK_INT_EQ(cap, 4);
	CHECK_INT_EQ(v[3], 42);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_grow(&v, &cap, SIZE_MAX, 2), ES_ENOMEM);
	es_log_quiet_end();
	CHECK_INT_EQ(cap, 4);

	/* The capacity's double would pass SIZE_MAX bytes: the growth takes need itself, which
	 * fits in size_t, and realloc refuses that much. */
	struct triple *t = malloc(sizeof(*t));
	t->a = 5;
	size_t big = SIZE_MAX / sizeof(*t) / 2 + 1; /* a lie: only one element is allocated */
	cap = big;
	es_clear_error();
	es_log_quiet_begin();
	CHECK_INT_EQ(es_grow(&t, &cap, big + 1, sizeof(*t)), ES_ENOMEM);
	es_log_quiet_end();
	char want[128];
	snprintf(want, sizeof(want), "out of memory growing an array to %zu elements of %zu bytes", big + 1,
		 sizeof(*t));
	CHECK_STR_EQ(es_last_error(), want);
	CHECK_INT_EQ(cap, big);
	CHECK_INT_EQ(t->a, 5);
	free(t);
	free(v);
}

int main(void)
{
	test_init_is_empty();
	test_appends();
	test_growth();
	test_vprintf();
	test_cap();
	test_setlen_reset();
	test_detach_free();
	test_strv_push();
	test_strv_pushf();
	test_grow();
	test_grow_overflow();
	es_log_quiet_begin();
	test_strv_sort_unique();
	test_strv_add_once();
	es_log_quiet_end();
	return test_done();
}
