/*
 * Unit tests of src/pyval.c on trees from yaml.c: key equality across bool, int and float,
 * truth of every kind, str.isspace() blankness, repr() and str() texts and their cut. The
 * expected values are PyYAML 6 and CPython's, except the two documented approximations.
 */
#include "testlib.h"

#include "eshard/log.h"
#include "pyval.h"
#include "yamltree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The items of the flow sequence text, parsed; the caller frees *d. */
static const struct es_ynode *items(struct es_ydoc **d, const char *text)
{
	*d = NULL;
	if (!CHECK_INT_EQ(es_yaml_parse("t.yaml", text, strlen(text), d), 0)) {
		fprintf(stderr, "  %s\n", es_last_error());
		return NULL;
	}
	const struct es_ynode *r = es_yaml_root(*d);
	return CHECK(r && r->kind == ES_Y_SEQ) ? r : NULL;
}

static void test_eq(void)
{
	struct es_ydoc *d;
	const struct es_ynode *s = items(&d, "[1, 1.0, true, 0x1, '1', 2, null, ~, a, a, 2024-01-01, '2024-01-01', "
					     "123456789012345678901234567890123456789012345678901234567890123456789, "
					     "123456789012345678901234567890123456789012345678901234567890123456789, .nan]");
	if (!s)
		goto out;
	const struct es_ynode *const *k = (const struct es_ynode *const *)s->kid;
	CHECK(es_pyval_eq(k[0], k[1]) && es_pyval_eq(k[1], k[2]) && es_pyval_eq(k[0], k[3]));
	CHECK(!es_pyval_eq(k[0], k[4]) && !es_pyval_eq(k[0], k[5]));
	CHECK(es_pyval_eq(k[6], k[7]) && !es_pyval_eq(k[6], k[4]));
	CHECK(es_pyval_eq(k[8], k[9]) && !es_pyval_eq(k[8], k[4]));
	CHECK(!es_pyval_eq(k[10], k[11])); /* a date is not its text */
	CHECK(es_pyval_eq(k[12], k[13]) && !es_pyval_eq(k[12], k[0]));
	CHECK(es_pyval_eq(k[14], k[14]) && !es_pyval_eq(k[14], k[1])); /* nan: only itself */
out:
	es_yaml_free(d);
}

static void test_truthy(void)
{
	struct es_ydoc *d;
	const struct es_ynode *s = items(&d, "[0, 0x0, -0.0, .nan, '', ' ', [], [0], {}, {a: 0}, {<<: {}}, {<<: {a: 1}}, "
					     "null, false, On, 2024-01-01, !!binary '', "
					     "0x00000000000000000000000000000000000000000000000000000000000000000000, "
					     "0b00000000000000000000000000000000000000000000000000000000000000000001]");
	static const int want[] = { 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1 };
	if (s && CHECK_INT_EQ(s->n, sizeof(want) / sizeof(*want)))
		for (size_t i = 0; i < s->n; i++)
			if (!CHECK_INT_EQ(es_pyval_truthy(s->kid[i]), want[i]))
				fprintf(stderr, "  item %zu\n", i);
	CHECK(!es_pyval_truthy(NULL));
	es_yaml_free(d);
}

static void test_blank(void)
{
	CHECK(es_pyval_is_blank("", 0));
	CHECK(es_pyval_is_blank(" \t\r\n\v\f", 6));
	CHECK(es_pyval_is_blank("\xe3\x80\x80\xc2\x85\xc2\xa0\xe2\x80\xa8", 10)); /* U+3000 U+0085 U+00A0 U+2028 */
	CHECK(es_pyval_is_blank("\x1c\x1f", 2));
	CHECK(!es_pyval_is_blank(" a ", 3));
	CHECK(!es_pyval_is_blank("\xe2\x80\x8b", 3)); /* U+200B is not a space */
	CHECK(!es_pyval_is_blank("\xc2", 1));         /* a stray byte is not */
	CHECK(!es_pyval_is_blank("\0", 1));
}

static void test_repr_and_str(void)
{
	struct es_ydoc *d;
	const struct es_ynode *s = items(&d, "[it's, 'a\"b', \"q'\\\"\", \"t\\tn\\n\\x7f\\u00e9\\U0001F600\\u200b\", 1e-7x, "
					     "0.0000001, 1.0e+16, 1:30.5, .inf, -.inf, .nan, 0b11, 2024-01-31, "
					     "2024-01-31 10:00:00, {b: 1, a: [x, ~, True], b: 2}, [], {}, !!binary aGk=]");
	static const char *const want[][2] = {
		{ "\"it's\"", "it's" },
		{ "'a\"b'", "a\"b" },
		{ "'q\\'\"'", "q'\"" },
		{ "'t\\tn\\n\\x7f\xc3\xa9\xf0\x9f\x98\x80\\u200b'", "t\tn\n\x7f\xc3\xa9\xf0\x9f\x98\x80\xe2\x80\x8b" },
		{ "'1e-7x'", "1e-7x" },
		{ "1e-07", "1e-07" },
		{ "1e+16", "1e+16" },
		{ "90.5", "90.5" },
		{ "inf", "inf" },
		{ "-inf", "-inf" },
		{ "nan", "nan" },
		{ "3", "3" },
		{ "datetime.date(2024, 1, 31)", "2024-01-31" },
		{ "2024-01-31 10:00:00", "2024-01-31 10:00:00" }, /* approximation: Python shows datetime.datetime(...) */
		{ "{'b': 2, 'a': ['x', None, True]}", "{'b': 2, 'a': ['x', None, True]}" },
		{ "[]", "[]" },
		{ "{}", "{}" },
		{ "aGk=", "aGk=" }, /* approximation: Python shows b'hi' */
	};
	if (s && CHECK_INT_EQ(s->n, sizeof(want) / sizeof(*want))) {
		for (size_t i = 0; i < s->n; i++) {
			char *r = es_pyval_repr(s->kid[i]), *t = es_pyval_str(s->kid[i]);
			CHECK_STR_EQ(r, want[i][0]);
			CHECK_STR_EQ(t, want[i][1]);
			free(r);
			free(t);
		}
	}
	es_yaml_free(d);

	/* A long value is cut after 1024 bytes, never inside a character, and "..." added. */
	char text[4096];
	size_t o = 0;
	text[o++] = '[';
	for (int i = 0; i < 700; i++) {
		memcpy(text + o, "\xc3\xa9", 2); /* e-acute: 2 bytes, repr 1 + 2k bytes long */
		o += 2;
	}
	memcpy(text + o, "]", 2);
	s = items(&d, text);
	if (s) {
		char *r = es_pyval_repr(s->kid[0]);
		CHECK(r != NULL);
		if (r) {
			size_t n = strlen(r);
			CHECK_INT_EQ(n, 1023 + 3); /* "'" and 511 characters, then "..." */
			CHECK(!strcmp(r + n - 3, "...") && r[0] == '\'');
		}
		free(r);
	}
	es_yaml_free(d);
}

int main(void)
{
	es_log_quiet_begin();
	test_eq();
	test_truthy();
	test_blank();
	test_repr_and_str();
	es_log_quiet_end();
	return test_done();
}
