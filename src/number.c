#include "eshard/number.h"
#include "eshard/errcode.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* strtoll and strtod skip leading white space; a strict parse of the whole string does not. */
static int bad_start(const char *s) { return !s || !*s || isspace((unsigned char)*s); }

int es_parse_i64(const char *s, int64_t *out)
{
	if (bad_start(s))
		return ES_EUSAGE;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || end == s)
		return ES_EUSAGE;
	*out = v;
	return 0;
}

int es_parse_double(const char *s, double *out)
{
	/* Decimal only: strtod would also take hexadecimal floats ("0x10", "0x1p4"). */
	if (bad_start(s) || strpbrk(s, "xX"))
		return ES_EUSAGE;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || end == s || !isfinite(v))
		return ES_EUSAGE;
	*out = v;
	return 0;
}

int64_t es_i64_of_double(double d)
{
	if (d != d)
		return 0;
	if (d >= 0x1p63)
		return INT64_MAX;
	if (d < -0x1p63)
		return INT64_MIN;
	return (int64_t)d;
}

int es_format_u64(uint64_t v, char out[20])
{
	char tmp[20];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (int i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}
