/*
 * Unit tests of src/json.c: the metadata JSON of docs/job-folder.md#how-files-are-written through
 * cJSON. The expected texts are Python's own output (json.dumps(v, sort_keys=True,
 * ensure_ascii=False) with indent=2 for the pretty form), so the files stay readable by the
 * reference. Parsing follows Python's json.loads where the reference relies on it; atomic writes
 * and exclusive publishes run on real files.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "json.h"

#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *T;

/* ---- helpers ---- */

/* es_json_dump into a fresh buffer; the caller frees it. */
static char *dump(const cJSON *v, int pretty)
{
	struct es_buf b = ES_BUF_INIT;
	if (!CHECK_INT_EQ(es_json_dump(v, pretty, &b), 0)) {
		es_buf_free(&b);
		return NULL;
	}
	return es_buf_detach(&b, NULL);
}

/* The dump of v equals want; v is deleted. */
static void dump_is_at(cJSON *v, int pretty, const char *want, const char *file, int line)
{
	if (!test_check(v != NULL, file, line, "value built"))
		return;
	char *got = dump(v, pretty);
	test_check_str(got, want, pretty ? "pretty dump" : "one-line dump", "want", file, line);
	free(got);
	cJSON_Delete(v);
}
#define DUMP_IS(v, pretty, want) dump_is_at((v), (pretty), (want), __FILE__, __LINE__)

/* Parse text (the whole string) and dump it on one line: want plus "\n". */
static void roundtrip_at(const char *text, const char *want, const char *file, int line)
{
	cJSON *v = es_json_parse(text, strlen(text), "test");
	if (!test_check(v != NULL, file, line, text)) {
		fprintf(stderr, "  error: %s\n", es_last_error());
		return;
	}
	char *got = dump(v, 0);
	size_t n = got ? strlen(got) : 0;
	if (got && n && got[n - 1] == '\n')
		got[n - 1] = '\0';
	if (!test_check_str(got, want, "dump(parse(text))", "want", file, line))
		fprintf(stderr, "  text: %s\n", text);
	free(got);
	cJSON_Delete(v);
}
#define ROUNDTRIP(text, want) roundtrip_at((text), (want), __FILE__, __LINE__)

/* Parsing text (len bytes) fails with an "Invalid JSON in test: " message. */
static void parse_fails_at(const char *text, size_t len, const char *file, int line)
{
	es_clear_error();
	es_log_quiet_begin();
	cJSON *v = es_json_parse(text, len, "test");
	es_log_quiet_end();
	if (!test_check(v == NULL, file, line, "parse fails")) {
		fprintf(stderr, "  text: %.*s\n", (int)len, text);
		cJSON_Delete(v);
		return;
	}
	if (!test_check(strncmp(es_last_error(), "Invalid JSON in test: ", 22) == 0, file, line,
			"message \"Invalid JSON in test: ...\""))
		fprintf(stderr, "  text: %.*s\n  message: %s\n", (int)len, text, es_last_error());
}
#define PARSE_FAILS(text) parse_fails_at((text), strlen(text), __FILE__, __LINE__)
#define PARSE_FAILS_N(text, n) parse_fails_at((text), (n), __FILE__, __LINE__)

static cJSON *num(double v) { return cJSON_CreateNumber(v); }

/* Capture what fn writes on stderr into out. */
static void capture_stderr(void (*fn)(void *), void *arg, struct es_buf *out)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/stderr.txt", T);
	fflush(stderr);
	int saved = dup(2);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(saved >= 0 && fd >= 0);
	dup2(fd, 2);
	close(fd);
	fn(arg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	es_buf_reset(out);
	CHECK_INT_EQ(es_fs_read_file(p, out, 0), 0);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!CHECK(f != NULL))
		return;
	fputs(text, f);
	fclose(f);
}

static char *read_text(const char *path)
{
	struct es_buf b = ES_BUF_INIT;
	if (!CHECK_INT_EQ(es_fs_read_file(path, &b, 0), 0)) {
		es_buf_free(&b);
		return NULL;
	}
	return es_buf_detach(&b, NULL);
}

/* Names in dir that end with ".tmp". */
static int count_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	if (!CHECK(d != NULL))
		return -1;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		if (l > 4 && strcmp(e->d_name + l - 4, ".tmp") == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* The object {"b":1,"a":[1,2,{"d":null,"c":true}],"e":{},"f":[],"g":[[],[{}],[[1]]],"h":"é"},
 * built in that (unsorted) order. */
static cJSON *sample(void)
{
	cJSON *o = cJSON_CreateObject();
	es_json_set_int(o, "b", 1);
	cJSON *a = cJSON_CreateArray();
	cJSON_AddItemToArray(a, es_json_new_int(1));
	cJSON_AddItemToArray(a, es_json_new_int(2));
	cJSON *dc = cJSON_CreateObject();
	es_json_set_null(dc, "d");
	es_json_set_bool(dc, "c", 1);
	cJSON_AddItemToArray(a, dc);
	es_json_set(o, "a", a);
	es_json_set(o, "e", cJSON_CreateObject());
	es_json_set(o, "f", cJSON_CreateArray());
	cJSON *g = cJSON_CreateArray();
	cJSON_AddItemToArray(g, cJSON_CreateArray());
	cJSON *g1 = cJSON_CreateArray();
	cJSON_AddItemToArray(g1, cJSON_CreateObject());
	cJSON_AddItemToArray(g, g1);
	cJSON *g2 = cJSON_CreateArray(), *g21 = cJSON_CreateArray();
	cJSON_AddItemToArray(g21, es_json_new_int(1));
	cJSON_AddItemToArray(g2, g21);
	cJSON_AddItemToArray(g, g2);
	es_json_set(o, "g", g);
	es_json_set_str(o, "h", "\xc3\xa9");
	return o;
}

#define SAMPLE_ONE_LINE \
	"{\"a\": [1, 2, {\"c\": true, \"d\": null}], \"b\": 1, \"e\": {}, \"f\": [], " \
	"\"g\": [[], [{}], [[1]]], \"h\": \"\xc3\xa9\"}\n"
#define SAMPLE_PRETTY                                                                        \
	"{\n  \"a\": [\n    1,\n    2,\n    {\n      \"c\": true,\n      \"d\": null\n    }\n  ],\n" \
	"  \"b\": 1,\n  \"e\": {},\n  \"f\": [],\n  \"g\": [\n    [],\n    [\n      {}\n    ],\n"   \
	"    [\n      [\n        1\n      ]\n    ]\n  ],\n  \"h\": \"\xc3\xa9\"\n}\n"

/* ---- dumping ---- */

/* Scalars alone, in both forms: the value and one '\n'. */
static void test_dump_scalars(void)
{
	for (int pretty = 0; pretty <= 1; pretty++) {
		DUMP_IS(cJSON_CreateNull(), pretty, "null\n");
		DUMP_IS(cJSON_CreateTrue(), pretty, "true\n");
		DUMP_IS(cJSON_CreateFalse(), pretty, "false\n");
		DUMP_IS(cJSON_CreateString("x"), pretty, "\"x\"\n");
		DUMP_IS(cJSON_CreateString(""), pretty, "\"\"\n");
		DUMP_IS(es_json_new_int(7), pretty, "7\n");
		DUMP_IS(num(2.5), pretty, "2.5\n");
		DUMP_IS(cJSON_CreateObject(), pretty, "{}\n");
		DUMP_IS(cJSON_CreateArray(), pretty, "[]\n");
	}
}

/* One line: keys sorted at every level, ", " and ": ", empties as {} and []. */
static void test_dump_one_line(void)
{
	DUMP_IS(sample(), 0, SAMPLE_ONE_LINE);
}

/* Pretty: indent 2, "," at line ends, ": " after keys, empties inline, one trailing '\n'. */
static void test_dump_pretty(void)
{
	DUMP_IS(sample(), 1, SAMPLE_PRETTY);
	/* A top-level array with nested containers. */
	cJSON *a = cJSON_CreateArray();
	cJSON_AddItemToArray(a, es_json_new_int(1));
	cJSON *b = cJSON_CreateArray();
	cJSON_AddItemToArray(b, es_json_new_int(2));
	cJSON_AddItemToArray(b, cJSON_CreateArray());
	cJSON_AddItemToArray(a, b);
	cJSON *k = cJSON_CreateObject(), *j = cJSON_CreateObject(), *ja = cJSON_CreateArray();
	cJSON_AddItemToArray(ja, cJSON_CreateObject());
	es_json_set(j, "j", ja);
	es_json_set(k, "k", j);
	cJSON_AddItemToArray(a, k);
	DUMP_IS(a, 1,
		"[\n  1,\n  [\n    2,\n    []\n  ],\n  {\n    \"k\": {\n      \"j\": [\n        {}\n"
		"      ]\n    }\n  }\n]\n");
}

/* Dump appends: what the buffer held is kept. */
static void test_dump_appends(void)
{
	struct es_buf b = ES_BUF_INIT;
	es_buf_adds(&b, "prefix:");
	cJSON *v = cJSON_CreateArray();
	cJSON_AddItemToArray(v, es_json_new_int(1));
	CHECK_INT_EQ(es_json_dump(v, 0, &b), 0);
	CHECK_INT_EQ(es_json_dump(v, 1, &b), 0);
	CHECK_STR_EQ(b.data, "prefix:[1]\n[\n  1\n]\n");
	cJSON_Delete(v);
	es_buf_free(&b);
}

/* ensure_ascii=False: the JSON escapes and \u00XX for other controls, everything else raw. */
static void test_dump_strings(void)
{
	DUMP_IS(cJSON_CreateString("\"\\\n\r\t\b\f\x01\x1f\x7f/\xc3\xa9\xf0\x9f\x98\x80\xe2\x80\xa8"), 0,
		"\"\\\"\\\\\\n\\r\\t\\b\\f\\u0001\\u001f\x7f/\xc3\xa9\xf0\x9f\x98\x80\xe2\x80\xa8\"\n");
	/* Lower-case hex in \u escapes. */
	DUMP_IS(cJSON_CreateString("\x1b\x0b"), 0, "\"\\u001b\\u000b\"\n");
	/* Keys are escaped the same way. */
	cJSON *o = cJSON_CreateObject();
	es_json_set_str(o, "k\"\n\x01", "v");
	DUMP_IS(o, 0, "{\"k\\\"\\n\\u0001\": \"v\"}\n");
}

/* Keys sort by code point (byte order of UTF-8), upper case before lower, "" first. */
static void test_dump_key_order(void)
{
	static const char *const keys[] = {
		"\xc3\xa9", "b", "B", "", "_", "aa", "a b", "\xef\xbf\xbf", "\xf0\x9f\x98\x80", "a",
	};
	cJSON *o = cJSON_CreateObject();
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		es_json_set_int(o, keys[i], (int64_t)i + 1);
	DUMP_IS(o, 0,
		"{\"\": 4, \"B\": 3, \"_\": 5, \"a\": 10, \"a b\": 7, \"aa\": 6, \"b\": 2, "
		"\"\xc3\xa9\": 1, \"\xef\xbf\xbf\": 8, \"\xf0\x9f\x98\x80\": 9}\n");
}

/* Floats as Python's repr (docs/job-folder.md#how-files-are-written,
 * docs/job-folder.md#normalized-lines). */
static void test_dump_floats(void)
{
	static const struct {
		double v;
		const char *want;
	} cases[] = {
		{ 1e22, "1e+22" },
		{ 0.1, "0.1" },
		{ -0.0, "-0.0" },
		{ 0.0, "0.0" },
		{ 1.0, "1.0" },
		{ 3.0, "3.0" },
		{ 1e5, "100000.0" },
		{ 1e16, "1e+16" },
		{ 1.5e15, "1500000000000000.0" },
		{ 1e15, "1000000000000000.0" },
		{ 1e-7, "1e-07" },
		{ 2.5e-5, "2.5e-05" },
		{ 1e-5, "1e-05" },
		{ 0.0001, "0.0001" },
		{ 0.001, "0.001" },
		{ 12345678901234567.0, "1.2345678901234568e+16" },
		{ 1.7976931348623157e308, "1.7976931348623157e+308" },
		{ 5e-324, "5e-324" },
		{ 1796200661.4790373, "1796200661.4790373" },
		{ 0.30000000000000004, "0.30000000000000004" },
		{ 123.456, "123.456" },
		{ -1.5, "-1.5" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char want[64];
		snprintf(want, sizeof(want), "%s\n", cases[i].want);
		DUMP_IS(num(cases[i].v), 0, want);
	}
	/* json.dumps writes the non-finite values bare. */
	DUMP_IS(num(NAN), 0, "NaN\n");
	DUMP_IS(num(INFINITY), 0, "Infinity\n");
	DUMP_IS(num(-INFINITY), 0, "-Infinity\n");
	/* Through es_json_set_float, inside an object. */
	cJSON *o = cJSON_CreateObject();
	es_json_set_float(o, "t", 1796200661.4790373);
	es_json_set_float(o, "d", 2.0);
	DUMP_IS(o, 0, "{\"d\": 2.0, \"t\": 1796200661.4790373}\n");
}

/* Integers are exact: int64 limits through es_json_new_int, big ones through the parser. */
static void test_dump_ints(void)
{
	DUMP_IS(es_json_new_int(0), 0, "0\n");
	DUMP_IS(es_json_new_int(-1), 0, "-1\n");
	DUMP_IS(es_json_new_int(INT64_MAX), 0, "9223372036854775807\n");
	DUMP_IS(es_json_new_int(INT64_MIN), 0, "-9223372036854775808\n");
	/* A nanosecond time keeps every digit (a double would not). */
	cJSON *o = cJSON_CreateObject();
	es_json_set_int(o, "mtime_ns", 1796200661479037312LL);
	DUMP_IS(o, 0, "{\"mtime_ns\": 1796200661479037312}\n");
}

/* ---- parsing ---- */

/* Numbers keep their kind: 1 stays 1, 1.0 stays 1.0; floats go through a double. */
static void test_parse_numbers(void)
{
	ROUNDTRIP("1", "1");
	ROUNDTRIP("1.0", "1.0");
	ROUNDTRIP("0", "0");
	ROUNDTRIP("-0", "0"); /* Python: int -0 is 0 */
	ROUNDTRIP("-0.0", "-0.0");
	ROUNDTRIP("-0.0e0", "-0.0");
	ROUNDTRIP("0e0", "0.0");
	ROUNDTRIP("0.5", "0.5");
	ROUNDTRIP("1.10", "1.1");
	ROUNDTRIP("1e5", "100000.0");
	ROUNDTRIP("1E+5", "100000.0");
	ROUNDTRIP("1e-5", "1e-05");
	ROUNDTRIP("2.5E-5", "2.5e-05");
	ROUNDTRIP("1.5E-0", "1.5");
	ROUNDTRIP("1e22", "1e+22");
	ROUNDTRIP("1E400", "Infinity"); /* float('1E400') */
	ROUNDTRIP("-1E400", "-Infinity");
	ROUNDTRIP("1e-400", "0.0");
	ROUNDTRIP("5e-324", "5e-324");
	ROUNDTRIP("-9223372036854775808", "-9223372036854775808");
	ROUNDTRIP("123456789012345678901234567890", "123456789012345678901234567890");
	ROUNDTRIP("-123456789012345678901234567890", "-123456789012345678901234567890");
	/* Python's extensions. */
	ROUNDTRIP("NaN", "NaN");
	ROUNDTRIP("Infinity", "Infinity");
	ROUNDTRIP("-Infinity", "-Infinity");
	ROUNDTRIP("[NaN, -Infinity, 1]", "[NaN, -Infinity, 1]");

	const char *t = "[1, 1.0, 123456789012345678901234567890]";
	cJSON *v = es_json_parse(t, strlen(t), "t");
	if (CHECK(cJSON_IsArray(v))) {
		int64_t i = 0;
		CHECK(es_json_is_int(cJSON_GetArrayItem(v, 0)));
		CHECK(!es_json_is_int(cJSON_GetArrayItem(v, 1)));
		CHECK(cJSON_IsNumber(cJSON_GetArrayItem(v, 1)));
		CHECK(es_json_is_int(cJSON_GetArrayItem(v, 2)));
		CHECK(es_json_to_i64(cJSON_GetArrayItem(v, 0), &i) == 0 && i == 1);
		/* Too big for int64: kept as digits, but not an int64. */
		CHECK(es_json_to_i64(cJSON_GetArrayItem(v, 2), &i) != 0);
		CHECK(es_json_to_i64(cJSON_GetArrayItem(v, 1), &i) != 0);
	}
	cJSON_Delete(v);
}

/* JSON's number grammar, as json.loads reads it: -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)? */
static void test_parse_number_grammar(void)
{
	PARSE_FAILS("01");
	PARSE_FAILS("-01");
	PARSE_FAILS("00");
	PARSE_FAILS("[01]");
	PARSE_FAILS("{\"a\": 007}");
	PARSE_FAILS("1.");
	PARSE_FAILS("[1.]");
	PARSE_FAILS("1.e5");
	PARSE_FAILS("-.5");
	PARSE_FAILS(".5");
	PARSE_FAILS("1e");
	PARSE_FAILS("1e+");
	PARSE_FAILS("1.5e");
	PARSE_FAILS("1e5.0");
	PARSE_FAILS("1.2.3");
	PARSE_FAILS("--1");
	PARSE_FAILS("-");
	PARSE_FAILS("+1");
	PARSE_FAILS("1-");
	PARSE_FAILS("1-2");
	PARSE_FAILS("1+2");
	PARSE_FAILS("0x1");
	PARSE_FAILS("1e+-2");
	PARSE_FAILS("-NaN");
	PARSE_FAILS("nan");
	PARSE_FAILS("inf");
	PARSE_FAILS("-infinity");
	/* The valid neighbours of those. */
	ROUNDTRIP("[0, -0, 10, 0.5, -1.5e3, 1E+2, 0e-0]", "[0, 0, 10, 0.5, -1500.0, 100.0, 0.0]");
}

/* Numbers of any length, like json.loads (which has no 64-character limit). */
static void test_parse_long_numbers(void)
{
	char digits[201];
	for (int i = 0; i < 200; i++)
		digits[i] = (char)('1' + i % 9);
	digits[200] = '\0';
	ROUNDTRIP(digits, digits);
	char neg[202];
	snprintf(neg, sizeof(neg), "-%s", digits);
	ROUNDTRIP(neg, neg);
	/* 0.1 written with its exact binary value and trailing zeros: 72 characters. */
	ROUNDTRIP("0.1000000000000000055511151231257827021181583404541015625000000000000000", "0.1");
	ROUNDTRIP("[1.00000000000000000000000000000000000000000000000000000000000000000000e0]", "[1.0]");
}

/* Strings: escapes decoded, surrogate pairs joined, raw UTF-8 kept. */
static void test_parse_strings(void)
{
	cJSON *v = es_json_parse("\"a\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\\"\\\\\\u0041\\u20ac\xc3\xa9\"",
				 strlen("\"a\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\\"\\\\\\u0041\\u20ac\xc3\xa9\""), "t");
	if (CHECK(cJSON_IsString(v)))
		CHECK_STR_EQ(v->valuestring,
			     "a\xc3\xa9\xf0\x9f\x98\x80/\b\f\n\r\t\"\\A\xe2\x82\xac\xc3\xa9");
	cJSON_Delete(v);
	/* Upper-case hex too; a key with escapes. */
	ROUNDTRIP("{\"a\\u0062\": \"\\u00E9\\uD83D\\uDE00\"}", "{\"ab\": \"\xc3\xa9\xf0\x9f\x98\x80\"}");
	/* Escapes go back out as json.dumps writes them. */
	ROUNDTRIP("\"\\u0001\\u001F\\u007f\\/\"", "\"\\u0001\\u001f\x7f/\"");
	ROUNDTRIP("\"\"", "\"\"");
	ROUNDTRIP("{\"\": \"\"}", "{\"\": \"\"}");
}

/* Duplicate keys: the last value wins, in the position of the first (a Python dict). */
static void test_parse_duplicates(void)
{
	const char *t = "{\"a\": 1, \"b\": 2, \"a\": 3, \"c\": {\"x\": 1, \"x\": [2]}}";
	cJSON *v = es_json_parse(t, strlen(t), "t");
	if (CHECK(cJSON_IsObject(v))) {
		int64_t i = 0;
		CHECK(es_json_get_i64(v, "a", &i) == 0 && i == 3);
		CHECK_INT_EQ(cJSON_GetArraySize(v), 3);
		CHECK(v->child && v->child->string && strcmp(v->child->string, "a") == 0);
		CHECK(v->child && v->child->next && strcmp(v->child->next->string, "b") == 0);
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "c");
		CHECK_INT_EQ(cJSON_GetArraySize(c), 1);
		CHECK(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(c, "x")));
	}
	cJSON_Delete(v);
	ROUNDTRIP("{\"b\": 2, \"a\": 1, \"b\": \"two\"}", "{\"a\": 1, \"b\": \"two\"}");
	/* Keys are case-sensitive: not duplicates. */
	ROUNDTRIP("{\"A\": 1, \"a\": 2}", "{\"A\": 1, \"a\": 2}");
}

/* JSON white space (space, \t, \n, \r) around and between tokens; nothing else. */
static void test_parse_whitespace(void)
{
	ROUNDTRIP(" \t\r\n{ \"a\" :\t[ 1 ,\n2 ] , \"b\"\r:{ } }\n ", "{\"a\": [1, 2], \"b\": {}}");
	ROUNDTRIP("[ ]", "[]");
	ROUNDTRIP("\n\"x\"\n", "\"x\"");
	PARSE_FAILS("\v1");
	PARSE_FAILS("1\f");
	PARSE_FAILS("[1,\v2]");
	PARSE_FAILS("\xef\xbb\xbf{}"); /* a BOM is not white space */
	PARSE_FAILS("\xc2\xa0{}");     /* nor is a no-break space */
}

/* The length bounds the text: bytes after it are not read, a NUL inside it is data. */
static void test_parse_length(void)
{
	cJSON *v = es_json_parse("[1]garbage", 3, "t");
	CHECK(cJSON_IsArray(v));
	cJSON_Delete(v);
	PARSE_FAILS_N("{\"a\": 12345}", 10); /* cut inside the number */
	PARSE_FAILS_N("1\0", 2);
	PARSE_FAILS_N("\"a\0b\"", 5); /* a raw NUL is a control character */
	PARSE_FAILS_N("[1,", 3);
	PARSE_FAILS_N("\"abc", 4);
	PARSE_FAILS_N("tru", 3);
	PARSE_FAILS_N("\"\\u00e", 6);
}

static void test_parse_errors(void)
{
	static const char *const bad[] = {
		"", " ", "\n", "{", "}", "[", "]", "[1,]", "[,1]", "[1 2]", "{\"a\":1,}", "{,}",
		"{'a': 1}", "{a: 1}", "{\"a\" 1}", "{\"a\":}", "{\"a\"}", "{1: 2}", "\"abc",
		"\"a\x01b\"", "\"a\nb\"", "\"a\tb\"", "\"\\x\"", "\"\\u12\"", "\"\\u12g4\"", "\"\\\"",
		"\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\ud800x\"",
		"tru", "nul", "True", "None", "null null", "1 2", "{}x", "{} {}", "[]]", "\"a\"\"b\"",
		"undefined", "'x'",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		PARSE_FAILS(bad[i]);
	/* The message names what was parsed. */
	es_clear_error();
	es_log_quiet_begin();
	CHECK(es_json_parse("[1,]", 4, "state/done/part-00001-of-00002.json") == NULL);
	es_log_quiet_end();
	CHECK(strncmp(es_last_error(), "Invalid JSON in state/done/part-00001-of-00002.json: ", 53) == 0);
}

/* Deep nesting is refused without exhausting the stack; ordinary depths are fine. */
static void test_parse_depth(void)
{
	enum { OK_DEPTH = 100, DEEP = 100000 };
	struct es_buf b = ES_BUF_INIT;
	for (int i = 0; i < OK_DEPTH; i++)
		es_buf_addc(&b, '[');
	for (int i = 0; i < OK_DEPTH; i++)
		es_buf_addc(&b, ']');
	cJSON *v = es_json_parse(b.data, b.len, "t");
	CHECK(cJSON_IsArray(v));
	cJSON_Delete(v);
	es_buf_reset(&b);
	for (int i = 0; i < DEEP; i++)
		es_buf_adds(&b, "{\"a\":[");
	PARSE_FAILS_N(b.data, b.len);
	es_buf_free(&b);
}

/* ---- building and reading ---- */

static void test_set_and_get(void)
{
	cJSON *o = cJSON_CreateObject();
	CHECK_INT_EQ(es_json_set_int(o, "k", 1), 0);
	CHECK_INT_EQ(es_json_set_str(o, "k", "x"), 0); /* replaces */
	CHECK_INT_EQ(cJSON_GetArraySize(o), 1);
	CHECK_STR_EQ(es_json_get_str(o, "k"), "x");
	CHECK_INT_EQ(es_json_set_float(o, "f", 0.5), 0);
	CHECK_INT_EQ(es_json_set_bool(o, "t", 1), 0);
	CHECK_INT_EQ(es_json_set_bool(o, "no", 0), 0);
	CHECK_INT_EQ(es_json_set_null(o, "z"), 0);
	CHECK_INT_EQ(es_json_set_int(o, "i", -42), 0);
	CHECK_INT_EQ(es_json_set_str(o, "u", "\xe4\xb8\xad"), 0);
	/* A NULL item is how a failed allocation shows: ES_ENOMEM, object unchanged. */
	es_log_quiet_begin();
	CHECK_INT_EQ(es_json_set(o, "n", NULL), ES_ENOMEM);
	es_log_quiet_end();
	CHECK(cJSON_GetObjectItemCaseSensitive(o, "n") == NULL);
	DUMP_IS(cJSON_Duplicate(o, 1), 0,
		"{\"f\": 0.5, \"i\": -42, \"k\": \"x\", \"no\": false, \"t\": true, \"u\": \"\xe4\xb8\xad\", \"z\": null}\n");

	int64_t i = 99;
	double d = 99;
	CHECK(es_json_get_i64(o, "i", &i) == 0 && i == -42);
	CHECK(es_json_get_num(o, "i", &d) == 0 && d == -42.0);
	CHECK(es_json_get_num(o, "f", &d) == 0 && d == 0.5);
	/* Wrong type or missing: NULL / nonzero. */
	CHECK(es_json_get_str(o, "i") == NULL);
	CHECK(es_json_get_str(o, "z") == NULL);
	CHECK(es_json_get_str(o, "missing") == NULL);
	CHECK(es_json_get_str(o, "K") == NULL); /* case-sensitive */
	CHECK(es_json_get_i64(o, "f", &i) != 0); /* a float is not an integer */
	CHECK(es_json_get_i64(o, "k", &i) != 0);
	CHECK(es_json_get_i64(o, "t", &i) != 0);
	CHECK(es_json_get_i64(o, "missing", &i) != 0);
	CHECK(es_json_get_num(o, "k", &d) != 0);
	CHECK(es_json_get_num(o, "t", &d) != 0);
	CHECK(es_json_get_num(o, "z", &d) != 0);
	CHECK(es_json_get_num(o, "missing", &d) != 0);
	CHECK(!es_json_is_int(cJSON_GetObjectItemCaseSensitive(o, "k")));
	CHECK(!es_json_is_int(cJSON_GetObjectItemCaseSensitive(o, "f")));
	CHECK(!es_json_is_int(NULL));
	CHECK(es_json_is_int(cJSON_GetObjectItemCaseSensitive(o, "i")));
	/* A string that holds digits is a string. */
	es_json_set_str(o, "s", "12");
	CHECK(es_json_get_i64(o, "s", &i) != 0);
	cJSON_Delete(o);

	/* Round trip of int64 limits through the accessors. */
	cJSON *e = cJSON_CreateObject();
	es_json_set_int(e, "max", INT64_MAX);
	es_json_set_int(e, "min", INT64_MIN);
	CHECK(es_json_get_i64(e, "max", &i) == 0 && i == INT64_MAX);
	CHECK(es_json_get_i64(e, "min", &i) == 0 && i == INT64_MIN);
	cJSON_Delete(e);
}

struct load_args {
	const char *path;
	cJSON *out;
	int rc;
	int required;
};

static void do_load(void *a)
{
	struct load_args *l = a;
	l->rc = l->required ? es_json_load_required(l->path, "Done record", &l->out)
			    : es_json_load(l->path, &l->out);
}

static void test_load(void)
{
	char p[1024];
	struct es_buf err = ES_BUF_INIT;
	snprintf(p, sizeof(p), "%s/ok.json", T);
	write_text(p, "{\n  \"n\": 12345678901234567890123,\n  \"s\": \"v\"\n}\n");
	cJSON *v = (cJSON *)1;
	CHECK_INT_EQ(es_json_load(p, &v), 0);
	CHECK_STR_EQ(es_json_get_str(v, "s"), "v");
	char *back = v ? dump(v, 1) : NULL;
	CHECK_STR_EQ(back, "{\n  \"n\": 12345678901234567890123,\n  \"s\": \"v\"\n}\n");
	free(back);
	cJSON_Delete(v);

	/* Missing: ES_ENOENT, NULL, and nothing on stderr. */
	snprintf(p, sizeof(p), "%s/missing.json", T);
	struct load_args a = { p, (cJSON *)1, 99, 0 };
	capture_stderr(do_load, &a, &err);
	CHECK_INT_EQ(a.rc, ES_ENOENT);
	CHECK(a.out == NULL);
	CHECK_STR_EQ(err.data, "");
	/* Required: the same, reported. */
	struct load_args r = { p, (cJSON *)1, 99, 1 };
	capture_stderr(do_load, &r, &err);
	CHECK_INT_EQ(r.rc, ES_ENOENT);
	CHECK(r.out == NULL);
	char want[2048];
	snprintf(want, sizeof(want), "ERROR: Done record not found: %s\n", p);
	CHECK_STR_EQ(err.data, want);
	want[strlen(want) - 1] = '\0';
	CHECK_STR_EQ(es_last_error(), want + strlen("ERROR: "));

	/* Invalid content: ES_EINVAL, reported with the path, for both loaders. */
	snprintf(p, sizeof(p), "%s/bad.json", T);
	write_text(p, "{\"a\": 1,}\n");
	for (int req = 0; req <= 1; req++) {
		struct load_args b = { p, (cJSON *)1, 99, req };
		capture_stderr(do_load, &b, &err);
		CHECK_INT_EQ(b.rc, ES_EINVAL);
		CHECK(b.out == NULL);
		snprintf(want, sizeof(want), "ERROR: Invalid JSON in %s: ", p);
		CHECK(strncmp(err.data, want, strlen(want)) == 0);
	}
	/* An empty file is invalid JSON, not a missing one. */
	snprintf(p, sizeof(p), "%s/empty.json", T);
	write_text(p, "");
	es_log_quiet_begin();
	CHECK_INT_EQ(es_json_load(p, &v), ES_EINVAL);
	es_log_quiet_end();
	CHECK(v == NULL);
	/* A folder in the way is not a regular file, not "missing". */
	snprintf(p, sizeof(p), "%s/adir.json", T);
	CHECK_INT_EQ(mkdir(p, 0755), 0);
	es_log_quiet_begin();
	int rc = es_json_load(p, &v);
	es_log_quiet_end();
	CHECK_INT_EQ(rc, ES_EINVAL);
	CHECK(strstr(es_last_error(), "is a folder, not a regular file") != NULL);
	CHECK(v == NULL);
	es_buf_free(&err);
}

static void test_write_atomic(void)
{
	char dir[1024], p[2048];
	snprintf(dir, sizeof(dir), "%s/atomic", T);
	CHECK_INT_EQ(mkdir(dir, 0755), 0);
	snprintf(p, sizeof(p), "%s/manifest.json", dir);
	cJSON *v = sample();
	CHECK_INT_EQ(es_json_write_atomic(p, v), 0);
	char *got = read_text(p);
	CHECK_STR_EQ(got, SAMPLE_PRETTY); /* the pretty form */
	free(got);
	/* Replace: the new content, whole. */
	cJSON *w = cJSON_CreateObject();
	es_json_set_int(w, "schema_version", 2);
	CHECK_INT_EQ(es_json_write_atomic(p, w), 0);
	got = read_text(p);
	CHECK_STR_EQ(got, "{\n  \"schema_version\": 2\n}\n");
	free(got);
	CHECK_INT_EQ(count_tmp(dir), 0);
	/* And it reads back. */
	cJSON *back = NULL;
	CHECK_INT_EQ(es_json_load(p, &back), 0);
	int64_t i = 0;
	CHECK(es_json_get_i64(back, "schema_version", &i) == 0 && i == 2);
	cJSON_Delete(back);
	/* A missing folder is an error and creates nothing. */
	snprintf(p, sizeof(p), "%s/nope/manifest.json", dir);
	es_log_quiet_begin();
	CHECK(es_json_write_atomic(p, w) < 0);
	es_log_quiet_end();
	struct stat st;
	CHECK(stat(p, &st) != 0);
	cJSON_Delete(v);
	cJSON_Delete(w);
}

static void test_publish_exclusive(void)
{
	char dir[1024], p[2048];
	snprintf(dir, sizeof(dir), "%s/done", T);
	CHECK_INT_EQ(mkdir(dir, 0755), 0);
	snprintf(p, sizeof(p), "%s/part-00001-of-00002.json", dir);
	cJSON *first = cJSON_CreateObject(), *second = cJSON_CreateObject();
	es_json_set_str(first, "token", "first");
	es_json_set_str(second, "token", "second");
	CHECK_INT_EQ(es_json_publish_exclusive(p, first), 0);
	CHECK_INT_EQ(es_json_publish_exclusive(p, second), 1); /* somebody published first */
	char *got = read_text(p);
	CHECK_STR_EQ(got, "{\n  \"token\": \"first\"\n}\n");
	free(got);
	CHECK_INT_EQ(count_tmp(dir), 0);
	/* A missing folder is an error, not "lost the race". */
	snprintf(p, sizeof(p), "%s/nope/x.json", dir);
	es_log_quiet_begin();
	CHECK(es_json_publish_exclusive(p, first) < 0);
	es_log_quiet_end();
	cJSON_Delete(first);
	cJSON_Delete(second);
}

int main(void)
{
	T = test_tmpdir();
	test_dump_scalars();
	test_dump_one_line();
	test_dump_pretty();
	test_dump_appends();
	test_dump_strings();
	test_dump_key_order();
	test_dump_floats();
	test_dump_ints();
	test_parse_numbers();
	test_parse_number_grammar();
	test_parse_long_numbers();
	test_parse_strings();
	test_parse_duplicates();
	test_parse_whitespace();
	test_parse_length();
	test_parse_errors();
	test_parse_depth();
	test_set_and_get();
	test_load();
	test_write_atomic();
	test_publish_exclusive();
	return test_done();
}
