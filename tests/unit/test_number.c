/*
 * Unit tests of src/number.c: strict parsing of whole decimal numbers.
 */
#include "testlib.h"

#include "eshard/log.h"
#include "eshard/number.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void i64_ok_at(const char *s, int64_t want, const char *file, int line)
{
	int64_t v = -12345;
	if (!test_check_int(es_parse_i64(s, &v), 0, s, "0", file, line))
		return;
	test_check_int(v, want, s, "want", file, line);
}
#define I64_OK(s, want) i64_ok_at((s), (want), __FILE__, __LINE__)

static void i64_bad_at(const char *s, const char *file, int line)
{
	int64_t v = -12345;
	es_clear_error();
	test_check_int(es_parse_i64(s, &v), ES_EUSAGE, s ? s : "NULL", "ES_EUSAGE", file, line);
	/* No message: the caller reports with its own context. */
	test_check_str(es_last_error(), "", "es_last_error()", "\"\"", file, line);
}
#define I64_BAD(s) i64_bad_at((s), __FILE__, __LINE__)

static void test_parse_i64(void)
{
	I64_OK("0", 0);
	I64_OK("42", 42);
	I64_OK("-7", -7);
	I64_OK("1000000", 1000000);
	I64_OK("9223372036854775807", INT64_MAX);
	I64_OK("-9223372036854775808", INT64_MIN);

	I64_BAD(NULL);
	I64_BAD("");
	I64_BAD("12x");
	I64_BAD("x12");
	I64_BAD("1 ");
	I64_BAD(" 1");
	I64_BAD("\t1");
	I64_BAD("\n1");
	I64_BAD(" ");
	I64_BAD("1.0");
	I64_BAD("1e3");
	I64_BAD("0x10");
	I64_BAD("-");
	I64_BAD("+");
	I64_BAD("--1");
	I64_BAD("1-");
	I64_BAD("9223372036854775808");  /* INT64_MAX + 1 */
	I64_BAD("-9223372036854775809"); /* INT64_MIN - 1 */
	I64_BAD("99999999999999999999999999");
}

static void dbl_ok_at(const char *s, double want, const char *file, int line)
{
	double v = -12345;
	if (!test_check_int(es_parse_double(s, &v), 0, s, "0", file, line))
		return;
	if (!test_check(v == want, file, line, s))
		fprintf(stderr, "  got %.17g, want %.17g\n", v, want);
}
#define DBL_OK(s, want) dbl_ok_at((s), (want), __FILE__, __LINE__)

static void dbl_bad_at(const char *s, const char *file, int line)
{
	double v = -12345;
	es_clear_error();
	test_check_int(es_parse_double(s, &v), ES_EUSAGE, s ? s : "NULL", "ES_EUSAGE", file, line);
	test_check_str(es_last_error(), "", "es_last_error()", "\"\"", file, line);
}
#define DBL_BAD(s) dbl_bad_at((s), __FILE__, __LINE__)

static void test_parse_double(void)
{
	DBL_OK("0", 0.0);
	DBL_OK("1.5", 1.5);
	DBL_OK("-2.25", -2.25);
	DBL_OK("0.1", 0.1);
	DBL_OK(".5", 0.5);
	DBL_OK("10", 10.0);
	DBL_OK("1e3", 1000.0);
	DBL_OK("2.5E-3", 0.0025);
	DBL_OK("1.7976931348623157e308", 1.7976931348623157e308);

	DBL_BAD(NULL);
	DBL_BAD("");
	DBL_BAD("12x");
	DBL_BAD("1.5s");
	DBL_BAD("1 ");
	DBL_BAD(" 1");
	DBL_BAD("\t1.5");
	DBL_BAD(" ");
	DBL_BAD(".");
	DBL_BAD("-");
	DBL_BAD("e5");
	DBL_BAD("1,5");
	DBL_BAD("1e");
	DBL_BAD("nan");
	DBL_BAD("NaN");
	DBL_BAD("inf");
	DBL_BAD("-inf");
	DBL_BAD("Infinity");
	DBL_BAD("1e400");  /* overflows to infinity */
	DBL_BAD("-1e400");
	DBL_BAD("0x10");   /* not decimal */
	DBL_BAD("0x1p4");
}

int main(void)
{
	test_parse_i64();
	test_parse_double();
	return test_done();
}
