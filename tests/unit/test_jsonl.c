/*
 * Unit tests of src/jsonl.c: every rule of docs/job-folder.md#normalized-lines with its exact
 * message, and the 3000-line canonical fixture (float text: test_pyfloat; lines: test_linereader).
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/jsonl.h"
#include "eshard/linereader.h"
#include "eshard/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define P "t.jsonl"
#define AT " at t.jsonl:7"

static char *T; /* this run's temp folder */

/* ---------------------------------------------------------------------------------- */
/* Helpers                                                                              */

/* Normalize line (NUL-terminated) and compare with want (without its '\n'). */
static void norm_ok_at(struct es_jsonl *j, const char *line, size_t len, uint64_t gi,
		       const char *want, const char *file, int lineno)
{
	struct es_buf out = ES_BUF_INIT;
	int rc = es_jsonl_normalize(j, line, len, gi, P, 7, &out);
	if (!test_check_int(rc, 0, "rc", "0", file, lineno)) {
		fprintf(stderr, "  input: %s\n  error: %s\n", line, es_last_error());
	} else {
		struct es_buf w = ES_BUF_INIT;
		es_buf_adds(&w, want);
		es_buf_addc(&w, '\n');
		test_check_mem(out.data, out.len, w.data, w.len, "normalized", "want", file, lineno);
		es_buf_free(&w);
	}
	es_buf_free(&out);
}
#define NORM_OK(j, in, want) norm_ok_at((j), (in), strlen(in), 0, (want), __FILE__, __LINE__)
#define NORM_OK_GI(j, in, gi, want) norm_ok_at((j), (in), strlen(in), (gi), (want), __FILE__, __LINE__)

/* Normalize must fail with exactly msg and leave out as it was; validate too when asked. */
static void norm_err_at(struct es_jsonl *j, const char *line, size_t len, const char *msg,
			int also_validate, const char *file, int lineno)
{
	struct es_buf out = ES_BUF_INIT;
	es_buf_adds(&out, "kept\n");
	es_clear_error();
	int rc = es_jsonl_normalize(j, line, len, 0, P, 7, &out);
	test_check_int(rc, ES_EINVAL, "normalize rc", "ES_EINVAL", file, lineno);
	test_check_str(es_last_error(), msg, "es_last_error()", "msg", file, lineno);
	test_check_mem(out.data, out.len, "kept\n", 5, "out after error", "\"kept\\n\"", file, lineno);
	test_check_int(out.data[out.len], 0, "NUL after out", "0", file, lineno);
	if (also_validate) {
		es_clear_error();
		rc = es_jsonl_validate(j, line, len, P, 7);
		test_check_int(rc, ES_EINVAL, "validate rc", "ES_EINVAL", file, lineno);
		test_check_str(es_last_error(), msg, "validate error", "msg", file, lineno);
	}
	es_buf_free(&out);
}
#define NORM_ERR(j, in, msg) norm_err_at((j), (in), strlen(in), (msg), 1, __FILE__, __LINE__)
#define NORM_ERR_N(j, in, n, msg) norm_err_at((j), (in), (n), (msg), 1, __FILE__, __LINE__)
/* Errors that only normalize reports (media, lone surrogates). */
#define NORM_ONLY_ERR(j, in, msg) norm_err_at((j), (in), strlen(in), (msg), 0, __FILE__, __LINE__)

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!CHECK(f != NULL))
		return;
	CHECK(fwrite(data, 1, len, f) == len);
	CHECK(fclose(f) == 0);
}

static int read_file(const char *path, struct es_buf *out)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	char tmp[65536];
	size_t n;
	es_buf_reset(out);
	while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
		es_buf_add(out, tmp, n);
	fclose(f);
	return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Numbers                                                                              */

static void test_numbers(void)
{
	struct es_jsonl *j = es_jsonl_new(NULL);
	static const char *const cases[][2] = {
		/* the reference's output, observed */
		{ "1.0", "1.0" },
		{ "1e5", "100000.0" },
		{ "1.10", "1.1" },
		{ "1e22", "1e+22" },
		{ "1e16", "1e+16" },
		{ "1.5e15", "1500000000000000.0" },
		{ "1e15", "1000000000000000.0" },
		{ "1e-7", "1e-07" },
		{ "2.5e-5", "2.5e-05" },
		{ "0.0001", "0.0001" },
		{ "-0.0", "-0.0" },
		{ "12345678901234567.0", "1.2345678901234568e+16" },
		{ "1.7976931348623157e308", "1.7976931348623157e+308" },
		{ "5e-324", "5e-324" },
		{ "1E400", "Infinity" },
		{ "-1e400", "-Infinity" },
		{ "NaN", "NaN" },
		{ "Infinity", "Infinity" },
		{ "-Infinity", "-Infinity" },
		{ "123456789012345678901234567890", "123456789012345678901234567890" },
		{ "-123456789012345678901234567890", "-123456789012345678901234567890" },
		{ "-0", "0" },
		{ "0", "0" },
		/* more: exponent forms, rounding, tiny and huge */
		{ "1E5", "100000.0" },
		{ "1.0000e+05", "100000.0" },
		{ "0e0", "0.0" },
		{ "-0e5", "-0.0" },
		{ "1e-400", "0.0" },
		{ "-1e-400", "-0.0" },
		{ "0.1", "0.1" },
		{ "0.30000000000000004", "0.30000000000000004" },
		{ "100", "100" },
		{ "1e2", "100.0" },
		{ "1E+2", "100.0" },
		{ "1e-5", "1e-05" },
		{ "0.00001", "1e-05" },
		{ "123.456e-2", "1.23456" },
		{ "9007199254740993", "9007199254740993" },
		{ "9007199254740993.0", "9007199254740992.0" },
		{ "1e23", "1e+23" },
		{ "2.2250738585072014e-308", "2.2250738585072014e-308" },
		{ "4.9406564584124654e-324", "5e-324" },
		{ "2.4703282292062328e-324", "5e-324" },
		{ "2.4703282292062327e-324", "0.0" },
		{ "1.7976931348623158e308", "1.7976931348623157e+308" },
		{ "1.7976931348623159e308", "Infinity" },
		{ "4.85000000000000014433E-02", "0.0485" },
		{ "9999999999999999.0", "1e+16" },
		{ "999999999999999.9", "999999999999999.9" },
		{ "0.000123", "0.000123" },
		{ "1234567890123456.7", "1234567890123456.8" },
	};
	char in[128], want[128];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(in, sizeof(in), "{\"v\":%s}", cases[i][0]);
		snprintf(want, sizeof(want), "{\"v\":%s}", cases[i][1]);
		NORM_OK(j, in, want);
		snprintf(in, sizeof(in), "{\"v\": [ %s , %s ] }", cases[i][0], cases[i][0]);
		snprintf(want, sizeof(want), "{\"v\":[%s,%s]}", cases[i][1], cases[i][1]);
		NORM_OK(j, in, want);
	}
	/* A long literal goes through the heap copy; a huge integer is copied as is. */
	struct es_buf b = ES_BUF_INIT, w = ES_BUF_INIT;
	es_buf_adds(&b, "{\"v\":0.");
	for (int i = 0; i < 300; i++)
		es_buf_addc(&b, '0');
	es_buf_adds(&b, "15}");
	NORM_OK(j, b.data, "{\"v\":1.5e-301}");
	es_buf_reset(&b);
	es_buf_adds(&b, "{\"v\":");
	es_buf_adds(&w, "{\"v\":");
	for (int i = 0; i < 5000; i++) {
		es_buf_addc(&b, (char)('1' + i % 9));
		es_buf_addc(&w, (char)('1' + i % 9));
	}
	es_buf_addc(&b, '}');
	es_buf_addc(&w, '}');
	NORM_OK(j, b.data, w.data);
	/* Many short floats that grow ("1e15" -> 18 bytes): the output must grow safely. */
	es_buf_reset(&b);
	es_buf_reset(&w);
	es_buf_adds(&b, "{\"v\":[");
	es_buf_adds(&w, "{\"v\":[");
	for (int i = 0; i < 20000; i++) {
		es_buf_adds(&b, i ? ",1e15" : "1e15");
		es_buf_adds(&w, i ? ",1000000000000000.0" : "1000000000000000.0");
	}
	es_buf_adds(&b, "]}");
	es_buf_adds(&w, "]}");
	NORM_OK(j, b.data, w.data);
	es_buf_free(&b);
	es_buf_free(&w);
	es_jsonl_free(j);
}

/* ---------------------------------------------------------------------------------- */
/* Strings, whitespace, structure                                                       */

static void test_strings(void)
{
	struct es_jsonl *j = es_jsonl_new(NULL);
	NORM_OK(j, "{\"a\":1,\"b\":[1,2]}", "{\"a\":1,\"b\":[1,2]}");
	NORM_OK(j, " \t{ \"a\" :\t1 , \"b\" : [ 1 , 2 ] , \"c\" : { } , \"d\" : [ ] } \r",
		"{\"a\":1,\"b\":[1,2],\"c\":{},\"d\":[]}");
	NORM_OK(j, "{\"t\":true,\"f\":false,\"n\":null}", "{\"t\":true,\"f\":false,\"n\":null}");
	NORM_OK(j, "{}", "{}");
	NORM_OK(j, "{\"a\":[[[]],{\"b\":{}}]}", "{\"a\":[[[]],{\"b\":{}}]}");
	/* Escapes the canonical form keeps, and the ones it drops. */
	NORM_OK(j, "{\"s\":\"q\\\" b\\\\ n\\n r\\r t\\t b\\b f\\f\"}",
		"{\"s\":\"q\\\" b\\\\ n\\n r\\r t\\t b\\b f\\f\"}");
	NORM_OK(j, "{\"s\":\"a\\/b/c\"}", "{\"s\":\"a/b/c\"}");
	NORM_OK(j, "{\"s\":\"\\u0041\\u00e9\\u00E9\\u6570\"}", "{\"s\":\"A\xc3\xa9\xc3\xa9\xe6\x95\xb0\"}");
	NORM_OK(j, "{\"s\":\"\\ud83d\\ude00\"}", "{\"s\":\"\xf0\x9f\x98\x80\"}");
	NORM_OK(j, "{\"s\":\"\\uD83D\\uDE00x\"}", "{\"s\":\"\xf0\x9f\x98\x80x\"}");
	NORM_OK(j, "{\"s\":\"\\u0000\\u0001\\u001F\\u001f\"}", "{\"s\":\"\\u0000\\u0001\\u001f\\u001f\"}");
	NORM_OK(j, "{\"s\":\"\\u0008\\u0009\\u000a\\u000C\\u000d\"}", "{\"s\":\"\\b\\t\\n\\f\\r\"}");
	NORM_OK(j, "{\"s\":\"\\u0022\\u005c\\u005C\\u002f\"}", "{\"s\":\"\\\"\\\\\\\\/\"}");
	/* DEL, U+2028/2029, a BOM inside a string and all non-ASCII stay raw. */
	NORM_OK(j, "{\"s\":\"\\u007f\x7f\\u2028\\u2029\xe2\x80\xa8\\ufeff\xef\xbb\xbf\"}",
		"{\"s\":\"\x7f\x7f\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xa8\xef\xbb\xbf\xef\xbb\xbf\"}");
	NORM_OK(j, "{\"\xe6\x95\xb0\xe6\x8d\xae caf\xc3\xa9 \xf0\x9f\x98\x80\":\"na\xc3\xafve\"}",
		"{\"\xe6\x95\xb0\xe6\x8d\xae caf\xc3\xa9 \xf0\x9f\x98\x80\":\"na\xc3\xafve\"}");
	/* Keys are encoded like values. */
	NORM_OK(j, "{\"\\u0061\\n\":1}", "{\"a\\n\":1}");
	/* A high surrogate before a non-low escape stays lone... and that fails later, but a
	 * low surrogate escape right after a pair is read as its own escape. */
	NORM_OK(j, "{\"s\":\"\\ud83d\\ude00\\u0041\"}", "{\"s\":\"\xf0\x9f\x98\x80" "A\"}");
	/* Long strings cross the 16-byte scanning blocks with escapes anywhere. */
	struct es_buf in = ES_BUF_INIT, want = ES_BUF_INIT;
	for (int k = 0; k < 40; k++) {
		es_buf_reset(&in);
		es_buf_reset(&want);
		es_buf_adds(&in, "{\"s\":\"");
		es_buf_adds(&want, "{\"s\":\"");
		for (int i = 0; i < 100 + k; i++) {
			if (i % (k + 3) == 0) {
				es_buf_adds(&in, "\\u00e9\\\"");
				es_buf_adds(&want, "\xc3\xa9\\\"");
			} else if (i % (k + 5) == 0) {
				es_buf_adds(&in, "\xe6\x95\xb0");
				es_buf_adds(&want, "\xe6\x95\xb0");
			} else {
				es_buf_addc(&in, (char)('a' + i % 26));
				es_buf_addc(&want, (char)('a' + i % 26));
			}
		}
		es_buf_adds(&in, "\"}");
		es_buf_adds(&want, "\"}");
		NORM_OK(j, in.data, want.data);
	}
	/* Deep nesting: no recursion, so no limit short of the line. */
	es_buf_reset(&in);
	es_buf_reset(&want);
	es_buf_adds(&in, "{\"d\":");
	for (int i = 0; i < 100000; i++)
		es_buf_adds(&in, "[ ");
	for (int i = 0; i < 100000; i++)
		es_buf_adds(&in, "] ");
	es_buf_addc(&in, '}');
	es_buf_adds(&want, "{\"d\":");
	for (int i = 0; i < 100000; i++)
		es_buf_addc(&want, '[');
	for (int i = 0; i < 100000; i++)
		es_buf_addc(&want, ']');
	es_buf_addc(&want, '}');
	NORM_OK(j, in.data, want.data);
	CHECK_INT_EQ(es_jsonl_validate(j, in.data, in.len, P, 7), 0);
	es_buf_free(&in);
	es_buf_free(&want);

	/* Output is appended: earlier content stays. */
	struct es_buf out = ES_BUF_INIT;
	CHECK_INT_EQ(es_jsonl_normalize(j, "{\"a\":1}", 7, 0, P, 1, &out), 0);
	CHECK_INT_EQ(es_jsonl_normalize(j, "{\"b\" : 2.50}", 12, 1, P, 2, &out), 0);
	CHECK_STR_EQ(out.data, "{\"a\":1}\n{\"b\":2.5}\n");
	es_buf_free(&out);
	es_jsonl_free(j);
}

/* ---------------------------------------------------------------------------------- */
/* Duplicate keys                                                                        */

static void test_duplicates(void)
{
	struct es_jsonl *j = es_jsonl_new(NULL);
	NORM_OK(j, "{\"a\":1,\"b\":2,\"a\":3}", "{\"a\":3,\"b\":2}");
	NORM_OK(j, "{\"a\":1,\"a\":2,\"a\":[3]}", "{\"a\":[3]}");
	NORM_OK(j, "{\"a\":1,\"\\u0061\":2}", "{\"a\":2}");
	NORM_OK(j, "{\"\\u00e9\":1,\"\xc3\xa9\":2,\"x\":0}", "{\"\xc3\xa9\":2,\"x\":0}");
	NORM_OK(j, "{\"a\\/\":1,\"a/\":2}", "{\"a/\":2}");
	NORM_OK(j, "{\"x\":{\"a\":1,\"a\":2},\"x\":{\"b\":1,\"b\":[1,{\"c\":1,\"c\":2}]},\"y\":{\"a\":1,\"a\":2}}",
		"{\"x\":{\"b\":[1,{\"c\":2}]},\"y\":{\"a\":2}}");
	NORM_ERR(j, "[{\"a\":1,\"a\":2}]", "JSONL record must be an object" AT);
	NORM_OK(j, "{\"l\":[{\"a\":1,\"a\":2},{\"b\":3,\"c\":4,\"b\":5}]}",
		"{\"l\":[{\"a\":2},{\"b\":5,\"c\":4}]}");
	/* A dropped value may hold a lone surrogate: Python never encodes it, so no error. */
	NORM_OK(j, "{\"z\":\"\\ud800\",\"z\":1}", "{\"z\":1}");

	/* Big objects go through the hash table: 200000 keys, every tenth one repeated. */
	struct es_buf in = ES_BUF_INIT, want = ES_BUF_INIT;
	es_buf_addc(&in, '{');
	es_buf_addc(&want, '{');
	for (int i = 0; i < 200000; i++)
		es_buf_printf(&in, "%s\"k%d\":%d", i ? "," : "", i, i);
	for (int i = 0; i < 200000; i += 10)
		es_buf_printf(&in, ",\"k%d\":\"v%d\"", i, i);
	es_buf_addc(&in, '}');
	for (int i = 0; i < 200000; i++) {
		if (i % 10 == 0)
			es_buf_printf(&want, "%s\"k%d\":\"v%d\"", i ? "," : "", i, i);
		else
			es_buf_printf(&want, ",\"k%d\":%d", i, i);
	}
	es_buf_addc(&want, '}');
	clock_t t0 = clock();
	NORM_OK(j, in.data, want.data);
	/* Quadratic key matching would take minutes here. */
	CHECK((double)(clock() - t0) / CLOCKS_PER_SEC < 5.0);
	/* 20 keys (past the pairwise limit) with one repeat at the end. */
	es_buf_reset(&in);
	es_buf_reset(&want);
	es_buf_adds(&in, "{\"a0\":0");
	es_buf_adds(&want, "{\"a0\":\"last\"");
	for (int i = 1; i < 20; i++) {
		es_buf_printf(&in, ",\"a%d\":%d", i, i);
		es_buf_printf(&want, ",\"a%d\":%d", i, i);
	}
	es_buf_adds(&in, ",\"a0\":\"last\"}");
	es_buf_addc(&want, '}');
	NORM_OK(j, in.data, want.data);
	es_buf_free(&in);
	es_buf_free(&want);
	es_jsonl_free(j);
}

/* ---------------------------------------------------------------------------------- */
/* Errors                                                                                */

static void test_errors(void)
{
	struct es_jsonl *j = es_jsonl_new(NULL);
	/* Blank: ASCII whitespace including \v and \f. */
	NORM_ERR_N(j, "", 0, "Blank JSONL record" AT);
	NORM_ERR(j, "   ", "Blank JSONL record" AT);
	NORM_ERR(j, " \t\v\f\r ", "Blank JSONL record" AT);
	/* \v and \f are not JSON whitespace. */
	NORM_ERR(j, "\v{}", "Invalid JSON" AT ": Expecting value: column 1");
	NORM_ERR(j, "{}\f", "Invalid JSON" AT ": Extra data: column 3");
	NORM_OK(j, "{}\r", "{}");
	NORM_OK(j, "\r\n {} \t", "{}");

	/* UTF-8, with Python's codec wording. */
	NORM_ERR(j, "{\"a\":\"\xff\"}",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode byte 0xff in position 6: invalid start byte");
	NORM_ERR(j, "{\"a\":\"\xc0\xaf\"}",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode byte 0xc0 in position 6: invalid start byte");
	NORM_ERR(j, "{\"a\":\"\xe0\x80\xaf\"}",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode byte 0xe0 in position 6: invalid continuation byte");
	NORM_ERR(j, "{\"a\":\"\xed\xa0\x80\"}",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode byte 0xed in position 6: invalid continuation byte");
	NORM_ERR(j, "{\"a\":\"\xf4\x90\x80\x80\"}",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode byte 0xf4 in position 6: invalid continuation byte");
	NORM_ERR(j, "{\"a\":\"\xe6\x95x\"}",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode bytes in position 6-7: invalid continuation byte");
	NORM_ERR(j, "{\"a\":\"\xe6\x95",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode bytes in position 6-7: unexpected end of data");
	NORM_ERR(j, "{\"a\":\"\xf0\x9f\x98",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode bytes in position 6-8: unexpected end of data");
	/* UTF-8 is checked before JSON: a bad byte after a syntax error still wins. */
	NORM_ERR(j, "{x \xff",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode byte 0xff in position 3: invalid start byte");
	NORM_ERR(j, "[1] \x80",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode byte 0x80 in position 4: invalid start byte");

	/* BOM, after the UTF-8 check; not when it follows whitespace. */
	NORM_ERR(j, "\xef\xbb\xbf{}", "Invalid JSON" AT ": Unexpected UTF-8 BOM");
	NORM_ERR(j, "\xef\xbb\xbf{\"a\":\"\xff\"}",
		 "Invalid UTF-8" AT ": 'utf-8' codec can't decode byte 0xff in position 9: invalid start byte");
	NORM_ERR(j, " \xef\xbb\xbf{}", "Invalid JSON" AT ": Expecting value: column 2");

	/* JSON syntax: Python's reason and 1-based column in characters. */
	static const char *const syn[][2] = {
		{ "{", "Expecting property name enclosed in double quotes: column 2" },
		{ "{\"a\"", "Expecting ':' delimiter: column 5" },
		{ "{\"a\" 1}", "Expecting ':' delimiter: column 6" },
		{ "{\"a\":", "Expecting value: column 6" },
		{ "{\"a\":1", "Expecting ',' delimiter: column 7" },
		{ "{\"a\":1,", "Expecting property name enclosed in double quotes: column 8" },
		{ "{\"a\":1,}", "Expecting property name enclosed in double quotes: column 8" },
		{ "{\"a\":1 \"b\":2}", "Expecting ',' delimiter: column 8" },
		{ "{1:2}", "Expecting property name enclosed in double quotes: column 2" },
		{ "{'a':1}", "Expecting property name enclosed in double quotes: column 2" },
		{ "{\"a\":[1,]}", "Expecting value: column 9" },
		{ "{\"a\":[1 2]}", "Expecting ',' delimiter: column 9" },
		{ "{\"a\":[", "Expecting value: column 7" },
		{ "{\"a\":tru}", "Expecting value: column 6" },
		{ "{\"a\":nul}", "Expecting value: column 6" },
		{ "{\"a\":-}", "Expecting value: column 6" },
		{ "{\"a\":-Inf}", "Expecting value: column 6" },
		{ "{\"a\":+1}", "Expecting value: column 6" },
		{ "{\"a\":.5}", "Expecting value: column 6" },
		{ "{\"a\":nan}", "Expecting value: column 6" },
		{ "{\"a\":01}", "Expecting ',' delimiter: column 7" },
		{ "{\"a\":1.}", "Expecting ',' delimiter: column 7" },
		{ "{\"a\":1e}", "Expecting ',' delimiter: column 7" },
		{ "{\"a\":1e+}", "Expecting ',' delimiter: column 7" },
		{ "{\"a\":1} x", "Extra data: column 9" },
		{ "{} {}", "Extra data: column 4" },
		{ "{\"a\":\"abc", "Unterminated string starting at: column 6" },
		{ "{\"a\":\"abc\\", "Unterminated string starting at: column 6" },
		{ "{\"abc", "Unterminated string starting at: column 2" },
		{ "{\"a\":\"\\x\"}", "Invalid \\escape: column 7" },
		{ "{\"a\":\"\\'\"}", "Invalid \\escape: column 7" },
		{ "{\"a\":\"\\u12\"}", "Invalid \\uXXXX escape: column 8" },
		{ "{\"a\":\"\\uzzzz\"}", "Invalid \\uXXXX escape: column 8" },
		{ "{\"a\":\"\\u1234", "Invalid \\uXXXX escape: column 8" },
		{ "{\"a\":\"\\ud800\\u12\"}", "Invalid \\uXXXX escape: column 14" },
		{ "{\"a\":\"\\ud800\\uzzzz\"}", "Invalid \\uXXXX escape: column 14" },
		{ "{\"a\":\"\\ud800\\udc00", "Invalid \\uXXXX escape: column 14" },
		{ "{\"a\":\"x\x01\"}", "Invalid control character at: column 8" },
		{ "{\"a\":\"x\ty\"}", "Invalid control character at: column 8" },
		{ "{\"a\":\"x\ry\"}", "Invalid control character at: column 8" },
		{ "{\"a\":\"x\x1f\"}", "Invalid control character at: column 8" },
		/* Columns count characters, not bytes. */
		{ "{\"\xc3\xa9\xe6\x95\xb0\xf0\x9f\x98\x80\":x}", "Expecting value: column 8" },
		{ "{\"\xc3\xa9\" \xc3\xa9}", "Expecting ':' delimiter: column 6" },
	};
	char msg[256];
	for (size_t i = 0; i < sizeof(syn) / sizeof(syn[0]); i++) {
		snprintf(msg, sizeof(msg), "Invalid JSON" AT ": %s", syn[i][1]);
		NORM_ERR(j, syn[i][0], msg);
	}
	/* A NUL byte: a control character inside a string, a bad value outside. */
	NORM_ERR_N(j, "{\"a\":\"x\0\"}", 10, "Invalid JSON" AT ": Invalid control character at: column 8");
	NORM_ERR_N(j, "{\"a\":\0}", 7, "Invalid JSON" AT ": Expecting value: column 6");
	NORM_ERR_N(j, "{\"a\":\"\\\0\"}", 10, "Invalid JSON" AT ": Invalid \\escape: column 7");
	NORM_ERR_N(j, "{}\0", 3, "Invalid JSON" AT ": Extra data: column 3");

	/* The top level must be an object (checked after the whole line parsed). */
	NORM_ERR(j, "[1,2]", "JSONL record must be an object" AT);
	NORM_ERR(j, "\"s\"", "JSONL record must be an object" AT);
	NORM_ERR(j, " 12 ", "JSONL record must be an object" AT);
	NORM_ERR(j, "null", "JSONL record must be an object" AT);
	NORM_ERR(j, "-Infinity", "JSONL record must be an object" AT);
	NORM_ERR(j, "[1,", "Invalid JSON" AT ": Expecting value: column 4");

	/* Lone surrogates: Python parses them, fails to encode; a clear error here, and only
	 * in normalize (validate accepts them like json.loads). */
	NORM_ONLY_ERR(j, "{\"a\":\"\\ud800\"}", "Lone surrogate escape \\ud800 cannot be encoded as UTF-8" AT);
	NORM_ONLY_ERR(j, "{\"a\":\"x\\uDC00y\"}", "Lone surrogate escape \\udc00 cannot be encoded as UTF-8" AT);
	NORM_ONLY_ERR(j, "{\"a\":\"\\ud800\\u0041\"}", "Lone surrogate escape \\ud800 cannot be encoded as UTF-8" AT);
	NORM_ONLY_ERR(j, "{\"\\udbff\":1}", "Lone surrogate escape \\udbff cannot be encoded as UTF-8" AT);
	NORM_ONLY_ERR(j, "{\"a\":[\"\\\\\",\"\\ud83d\"]}", "Lone surrogate escape \\ud83d cannot be encoded as UTF-8" AT);
	NORM_ONLY_ERR(j, "{\"\\udc00\":1,\"q\":2}", "Lone surrogate escape \\udc00 cannot be encoded as UTF-8" AT);
	CHECK_INT_EQ(es_jsonl_validate(j, "{\"a\":\"\\ud800\"}", 14, P, 7), 0);
	/* An escaped backslash followed by "ud800" is plain text. */
	NORM_OK(j, "{\"a\":\"\\\\ud800\"}", "{\"a\":\"\\\\ud800\"}");
	/* Syntax errors win over lone surrogates and the object check. */
	NORM_ERR(j, "{\"a\":\"\\ud800\",}", "Invalid JSON" AT ": Expecting property name enclosed in double quotes: column 15");
	es_jsonl_free(j);
}

static void test_validate(void)
{
	struct es_jsonl *j = es_jsonl_new(NULL);
	static const char *const good[] = {
		"{}", " {\"a\" : [1, 2.5e3, -0, NaN, Infinity, -Infinity, true, false, null]} ",
		"{\"a\":1,\"a\":2}", "{\"s\":\"\\u00e9\\ud83d\\ude00\\\"\\\\\\/\\b\\f\\n\\r\\t\"}",
		"{\"\xe6\x95\xb0\":\"\xf0\x9f\x98\x80\"}\r", "{\"n\":123456789012345678901234567890}",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK_INT_EQ(es_jsonl_validate(j, good[i], strlen(good[i]), P, 7), 0);
	/* Same messages as normalize (NORM_ERR checks validate as well). */
	NORM_ERR(j, "{\"a\":1,}", "Invalid JSON" AT ": Expecting property name enclosed in double quotes: column 8");
	NORM_ERR(j, "[]", "JSONL record must be an object" AT);
	/* Media rules are not part of validation. */
	const char *mk[] = { "images" };
	struct es_jsonl_opts o = { mk, 1, "/tmp", NULL, 0 };
	struct es_jsonl *jm = es_jsonl_new(&o);
	CHECK_INT_EQ(es_jsonl_validate(jm, "{\"images\":5}", 12, P, 7), 0);
	es_jsonl_free(jm);
	es_jsonl_free(j);
}

/* ---------------------------------------------------------------------------------- */
/* Media and index keys                                                                  */

/* Replace b's content with a formatted string; returns b->data. */
static const char *setf(struct es_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *setf(struct es_buf *b, const char *fmt, ...)
{
	va_list ap;
	es_buf_reset(b);
	va_start(ap, fmt);
	es_buf_vprintf(b, fmt, ap);
	va_end(ap);
	return b->data;
}

static void test_media(void)
{
	char *base = realpath(T, NULL);
	if (!CHECK(base != NULL))
		return;
	struct es_buf root = ES_BUF_INIT, path = ES_BUF_INIT, in = ES_BUF_INIT, want = ES_BUF_INIT,
		      w1 = ES_BUF_INIT;
	setf(&root, "%s/data", base);
	CHECK(mkdir(root.data, 0755) == 0);
	CHECK(mkdir(setf(&path, "%s/real", root.data), 0755) == 0);
	CHECK(mkdir(setf(&path, "%s/other", base), 0755) == 0);
	CHECK(mkdir(setf(&path, "%s/other/deep", base), 0755) == 0);
	write_file(setf(&path, "%s/real/x.jpg", root.data), "x", 1);
	CHECK(symlink("real", setf(&path, "%s/link", root.data)) == 0);
	setf(&w1, "%s/other/deep", base);
	CHECK(symlink(w1.data, setf(&path, "%s/deeplink", root.data)) == 0);

	const char *mk[] = { "images", "videos", "images" };
	struct es_jsonl_opts o = { mk, 3, root.data, NULL, 0 };
	struct es_jsonl *j = es_jsonl_new(&o);
	if (!CHECK(j != NULL))
		goto out;
#define MEDIA(item_in, item_out)                                                      \
	do {                                                                          \
		setf(&in, "{\"id\":1,\"images\":[%s],\"z\":2}", item_in);             \
		setf(&want, "{\"id\":1,\"images\":[%s],\"z\":2}", item_out);          \
		NORM_OK(j, in.data, want.data);                                       \
	} while (0)
	setf(&w1, "\"%s/a.jpg\"", root.data);
	MEDIA("\"a.jpg\"", w1.data);
	MEDIA("\"./sub/../a.jpg\"", w1.data);
	MEDIA("\"sub//..//a.jpg\"", w1.data);
	MEDIA("\"real/../a.jpg\"", w1.data);
	setf(&w1, "\"%s/real/x.jpg\"", root.data);
	MEDIA("\"link/x.jpg\"", w1.data);
	/* Symlinks are resolved first, then "..": deeplink/.. is other, not data. */
	setf(&w1, "\"%s/other/y.jpg\"", base);
	MEDIA("\"deeplink/../y.jpg\"", w1.data);
	/* Kept as they are. */
	MEDIA("\"/abs/p.jpg\"", "\"/abs/p.jpg\"");
	MEDIA("\"http://h/p.jpg\",\"https://h/p\",\"s3://b/k\",\"gs://b/k\",\"hdfs://n/p\",\"\"",
	      "\"http://h/p.jpg\",\"https://h/p\",\"s3://b/k\",\"gs://b/k\",\"hdfs://n/p\",\"\"");
	MEDIA("", "");
	MEDIA(" \"\\/abs\" ", "\"/abs\"");
	/* Prefixes are case-sensitive. */
	setf(&w1, "\"%s/HTTP:/h/p\"", root.data);
	MEDIA("\"HTTP://h/p\"", w1.data);
	/* Mixed, with escapes and non-ASCII re-encoded. */
	setf(&w1, "\"https://x\",\"%s/q\\\"\\\\\xc3\xa9\\t.jpg\",\"/a\"", root.data);
	MEDIA("\"https://x\", \"q\\\"\\\\\\u00e9\\t.jpg\" ,\"/a\"", w1.data);
	/* null and missing are left alone; nested fields are not media fields. */
	NORM_OK(j, "{\"images\":null,\"videos\":null}", "{\"images\":null,\"videos\":null}");
	NORM_OK(j, "{\"id\":1}", "{\"id\":1}");
	NORM_OK(j, "{\"meta\":{\"images\":[\"a\"]},\"l\":[{\"images\":5}]}",
		"{\"meta\":{\"images\":[\"a\"]},\"l\":[{\"images\":5}]}");
	/* The key is matched decoded, and the final value after duplicates is what counts. */
	NORM_OK(j, "{\"\\u0069mages\":[\"a\"]}", setf(&want, "{\"images\":[\"%s/a\"]}", root.data));
	NORM_OK(j, "{\"images\":5,\"b\":1,\"images\":[\"a\"]}",
		setf(&want, "{\"images\":[\"%s/a\"],\"b\":1}", root.data));
	NORM_OK(j, "{\"images\":[\"a\"],\"images\":null}", "{\"images\":null}");
	/* A lone surrogate dropped with an old duplicate value does not stop resolution. */
	NORM_OK(j, "{\"z\":\"\\ud800\",\"z\":1,\"images\":[\"a\"]}",
		setf(&want, "{\"z\":1,\"images\":[\"%s/a\"]}", root.data));
	/* Both fields, and members after a longer list keep their place. */
	NORM_OK(j, "{\"videos\":[\"v.mp4\"],\"n\":[1],\"images\":[\"i.jpg\"],\"t\":\"x\"}",
		setf(&want, "{\"videos\":[\"%s/v.mp4\"],\"n\":[1],\"images\":[\"%s/i.jpg\"],\"t\":\"x\"}",
		     root.data, root.data));

	/* Errors. */
	NORM_ONLY_ERR(j, "{\"images\":\"a.jpg\"}", "Media field 'images' must be a list or null" AT);
	NORM_ONLY_ERR(j, "{\"images\":{}}", "Media field 'images' must be a list or null" AT);
	NORM_ONLY_ERR(j, "{\"videos\":1}", "Media field 'videos' must be a list or null" AT);
	NORM_ONLY_ERR(j, "{\"images\":[1]}", "Every item in media field 'images' must be a string" AT);
	NORM_ONLY_ERR(j, "{\"images\":[\"a\",null]}", "Every item in media field 'images' must be a string" AT);
	NORM_ONLY_ERR(j, "{\"images\":[\"a\",[\"b\"]]}", "Every item in media field 'images' must be a string" AT);
	/* Media keys are checked in their order: images first even if videos comes first. */
	NORM_ONLY_ERR(j, "{\"videos\":1,\"images\":2}", "Media field 'images' must be a list or null" AT);
	NORM_ONLY_ERR(j, "{\"images\":[\"a\\u0000b\"]}",
		      "Media path in field 'images' contains a NUL character" AT);
	/* A lone surrogate anywhere fails after the media checks. */
	NORM_ONLY_ERR(j, "{\"images\":[\"\\ud800.jpg\"]}",
		      "Lone surrogate escape \\ud800 cannot be encoded as UTF-8" AT);
	NORM_ONLY_ERR(j, "{\"images\":[1],\"t\":\"\\ud800\"}", "Every item in media field 'images' must be a string" AT);
	/* Syntax errors come before media errors. */
	NORM_ERR(j, "{\"images\":5,}", "Invalid JSON" AT ": Expecting property name enclosed in double quotes: column 13");
	es_jsonl_free(j);
#undef MEDIA
out:
	es_buf_free(&root);
	es_buf_free(&path);
	es_buf_free(&in);
	es_buf_free(&want);
	es_buf_free(&w1);
	free(base);
}

static void test_index(void)
{
	/* Given unsorted on purpose: they are appended in sorted order. */
	const char *ik[] = { "global_index", "gi2" };
	struct es_jsonl_opts o = { NULL, 0, NULL, ik, 2 };
	struct es_jsonl *j = es_jsonl_new(&o);
	NORM_OK_GI(j, "{\"a\":1}", 42, "{\"a\":1,\"gi2\":42,\"global_index\":42}");
	NORM_OK_GI(j, "{}", 0, "{\"gi2\":0,\"global_index\":0}");
	NORM_OK_GI(j, "{\"global_index\":null}", 5, "{\"global_index\":null,\"gi2\":5}");
	NORM_OK_GI(j, "{\"gi2\":\"x\",\"glob\\u0061l_index\":7}", 5, "{\"gi2\":\"x\",\"global_index\":7}");
	NORM_OK_GI(j, "{\"global_index\":1,\"gi2\":2}", UINT64_MAX, "{\"global_index\":1,\"gi2\":2}");
	NORM_OK_GI(j, "{\"a\":{\"gi2\":1}}", UINT64_MAX,
		   "{\"a\":{\"gi2\":1},\"gi2\":18446744073709551615,\"global_index\":18446744073709551615}");
	/* After duplicate resolution. */
	NORM_OK_GI(j, "{\"gi2\":1,\"a\":2,\"gi2\":3}", 9, "{\"gi2\":3,\"a\":2,\"global_index\":9}");
	es_jsonl_free(j);

	/* The reference's worked example of the split rule, media and index together. */
	char *base = realpath(T, NULL);
	if (!CHECK(base != NULL))
		return;
	struct es_buf want = ES_BUF_INIT;
	const char *mk[] = { "images", "audios", "videos" };
	const char *gi[] = { "global_index" };
	struct es_jsonl_opts o2 = { mk, 3, base, gi, 1 };
	j = es_jsonl_new(&o2);
	NORM_OK_GI(j, "{\"id\": 0, \"text\": \"a\", \"images\": [\"media/a.jpg\"]}", 0,
		   setf(&want, "{\"id\":0,\"text\":\"a\",\"images\":[\"%s/media/a.jpg\"],\"global_index\":0}",
			base));
	NORM_OK_GI(j, "{\"id\": 4, \"text\": \"e\", \"images\": [\"https://example.test/e.jpg\"]}", 4,
		   "{\"id\":4,\"text\":\"e\",\"images\":[\"https://example.test/e.jpg\"],\"global_index\":4}");
	NORM_OK_GI(j, "{\"id\": 5, \"text\": \"f\"}", 5, "{\"id\":5,\"text\":\"f\",\"global_index\":5}");
	es_jsonl_free(j);
	es_buf_free(&want);
	free(base);
}

/* ---------------------------------------------------------------------------------- */
/* The 3000-line fixture                                                                 */

static void test_fixture(void)
{
	const char *data = test_data_dir();
	if (!data)
		return;
	char in[PATH_MAX], ex[PATH_MAX];
	snprintf(in, sizeof(in), "%s/canon/input.jsonl", data);
	snprintf(ex, sizeof(ex), "%s/canon/expected.jsonl", data);
	struct es_buf expect = ES_BUF_INIT, out = ES_BUF_INIT, again = ES_BUF_INIT;
	if (!CHECK(read_file(ex, &expect) == 0))
		return;
	int fd = open(in, O_RDONLY);
	if (!CHECK(fd >= 0))
		return;
	struct es_line_reader *r = es_line_reader_new(fd, (size_t)1 << 20, in);
	struct es_jsonl *j = es_jsonl_new(NULL);
	const char *line;
	size_t len, pos = 0, bad = 0, n = 0;
	int nl;
	while (es_line_reader_next(r, &line, &len, &nl) == 1) {
		n++;
		es_buf_reset(&out);
		int rc = es_jsonl_normalize(j, line, len, n - 1, in, es_line_reader_lineno(r), &out);
		const char *e = expect.data + pos;
		const char *eol = memchr(e, '\n', expect.len - pos);
		size_t elen = eol ? (size_t)(eol - e) + 1 : expect.len - pos;
		pos += elen;
		if (rc || out.len != elen || memcmp(out.data, e, elen) != 0) {
			if (bad++ < 5)
				fprintf(stderr, "fixture line %zu differs:\n  got:  %.*s  want: %.*s", n,
					(int)out.len, out.data, (int)elen, e);
			continue;
		}
		/* The canonical form is valid and a fixed point. */
		if (es_jsonl_validate(j, out.data, out.len - 1, ex, n) != 0)
			bad++;
		es_buf_reset(&again);
		if (es_jsonl_normalize(j, out.data, out.len - 1, 0, ex, n, &again) != 0 ||
		    again.len != out.len || memcmp(again.data, out.data, out.len) != 0)
			bad++;
	}
	CHECK_INT_EQ(n, 3000);
	CHECK_INT_EQ(pos, expect.len);
	CHECK_INT_EQ(bad, 0);
	es_line_reader_free(r);
	close(fd);
	es_jsonl_free(j);
	es_buf_free(&expect);
	es_buf_free(&out);
	es_buf_free(&again);
}

int main(void)
{
	T = test_tmpdir();
	/* Errors are checked through es_last_error(); keep stderr for test failures. */
	es_log_quiet_begin();
	test_numbers();
	test_strings();
	test_duplicates();
	test_errors();
	test_validate();
	test_media();
	test_index();
	test_fixture();
	es_log_quiet_end();
	return test_done();
}
