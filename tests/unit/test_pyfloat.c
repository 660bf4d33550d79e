/*
 * Unit tests of src/pyfloat.c: repr(float) and json.dumps(float), checked against python3
 * itself on every power of two and a few thousand other doubles, and the C-locale strtod.
 */
#include "testlib.h"

#include "eshard/log.h"
#include "eshard/pyfloat.h"

#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *T; /* this run's temp folder */

/* json.dumps(v) is want; so is repr(v) for a finite v. */
static void check_fmt(double v, const char *want, const char *file, int line)
{
	char out[ES_PYFLOAT_MAX];
	size_t n = es_pyfloat_dumps(v, out);
	test_check_str(out, want, "es_pyfloat_dumps", "want", file, line);
	test_check_int((long long)n, (long long)strlen(want), "length", "strlen(want)", file, line);
	if (isfinite(v)) {
		n = es_pyfloat_repr(v, out);
		test_check_str(out, want, "es_pyfloat_repr", "want", file, line);
		test_check_int((long long)n, (long long)strlen(want), "length", "strlen(want)", file, line);
	}
}
#define FMT(v, want) check_fmt((v), (want), __FILE__, __LINE__)

static double from_bits(uint64_t b)
{
	double v;
	memcpy(&v, &b, sizeof(v));
	return v;
}

static void test_format_double(void)
{
	FMT(0.0, "0.0");
	FMT(-0.0, "-0.0");
	FMT(NAN, "NaN");
	FMT(INFINITY, "Infinity");
	FMT(-INFINITY, "-Infinity");
	FMT(0.1, "0.1");
	FMT(1.0 / 3, "0.3333333333333333");
	FMT(2.0 / 3, "0.6666666666666666");
	FMT(100.0, "100.0");
	FMT(1e16, "1e+16");
	FMT(1e15, "1000000000000000.0");
	FMT(123456789012345680.0, "1.2345678901234568e+17");
	FMT(1e-4, "0.0001");
	FMT(1e-5, "1e-05");
	FMT(-1.5e-10, "-1.5e-10");
	FMT(1796200661.4790373, "1796200661.4790373");
	FMT(from_bits(1), "5e-324");
	FMT(from_bits(0x7fefffffffffffffULL), "1.7976931348623157e+308");
	FMT(from_bits(0x0010000000000000ULL), "2.2250738585072014e-308");
	FMT(from_bits(0x000fffffffffffffULL), "2.225073858507201e-308");
	FMT(9007199254740992.0, "9007199254740992.0");
	FMT(ldexp(1, 60), "1.152921504606847e+18");
	FMT(ldexp(1, -20), "9.5367431640625e-07");

	/* Python is the reference: a few thousand doubles, one python3 call for all. */
	if (!CHECK(system("python3 -c pass >/dev/null 2>&1") == 0)) {
		fprintf(stderr, "python3 not found; float repr not compared with Python\n");
		return;
	}
	enum { N = 6000 };
	uint64_t *bits = malloc(N * sizeof(*bits));
	if (!CHECK(bits != NULL))
		return;
	size_t n = 0;
	/* Every power of two, normal and subnormal, and its neighbours: the lopsided cases. */
	for (int e = -1074; e <= 1023 && n + 3 <= N; e += 1) {
		double p = ldexp(1, e);
		uint64_t b;
		memcpy(&b, &p, sizeof(b));
		bits[n++] = b;
		if (e % 3 == 0) {
			bits[n++] = b + 1;
			bits[n++] = b - 1;
		}
	}
	while (n < N) {
		uint64_t r = test_rand();
		switch (n % 5) {
		case 0: bits[n++] = r; break;                                /* any bit pattern */
		case 1: bits[n++] = r & 0x800FFFFFFFFFFFFFULL; break;        /* subnormal */
		case 2: {                                                    /* like the corpus */
			double v = (double)(r >> 11) / 9007199254740992.0 * pow(10, (int)(test_rand() % 13) - 6);
			memcpy(&bits[n++], &v, 8);
			break;
		}
		case 3: {                                                    /* short decimals */
			double v = (double)(r % 100000) / pow(10, (int)(test_rand() % 12));
			memcpy(&bits[n++], &v, 8);
			break;
		}
		default: /* near 1, both signs */
			bits[n++] = (r & 0x800FFFFFFFFFFFFFULL) | ((uint64_t)(1023 - 70 + test_rand() % 140) << 52);
		}
	}
	char in[512], outp[512], cmd[1400];
	snprintf(in, sizeof(in), "%s/doubles.txt", T);
	snprintf(outp, sizeof(outp), "%s/repr.txt", T);
	FILE *f = fopen(in, "w");
	if (!CHECK(f != NULL)) {
		free(bits);
		return;
	}
	size_t nfinite = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(from_bits(bits[i])))
			continue;
		fprintf(f, "%016" PRIx64 "\n", bits[i]);
		bits[nfinite++] = bits[i];
	}
	fclose(f);
	snprintf(cmd, sizeof(cmd),
		 "python3 -c 'import sys, struct, json\n"
		 "out = open(sys.argv[2], \"w\")\n"
		 "for l in open(sys.argv[1]):\n"
		 "    out.write(json.dumps(struct.unpack(\">d\", bytes.fromhex(l.strip()))[0]) + \"\\n\")\n"
		 "' '%s' '%s'",
		 in, outp);
	if (!CHECK(system(cmd) == 0)) {
		free(bits);
		return;
	}
	f = fopen(outp, "r");
	if (!CHECK(f != NULL)) {
		free(bits);
		return;
	}
	char line[64], mine[ES_PYFLOAT_MAX], rep[ES_PYFLOAT_MAX];
	size_t i = 0, bad = 0;
	while (i < nfinite && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		double v = from_bits(bits[i]);
		es_pyfloat_dumps(v, mine);
		if (strcmp(line, mine) != 0 && bad++ < 10)
			fprintf(stderr, "repr mismatch for bits %016" PRIx64 ": python %s, ours %s\n", bits[i],
				line, mine);
		/* For a finite float json.dumps() prints float.__repr__(). */
		es_pyfloat_repr(v, rep);
		if (isfinite(v) && strcmp(rep, mine) != 0 && bad++ < 10)
			fprintf(stderr, "repr and dumps differ for bits %016" PRIx64 ": %s, %s\n", bits[i],
				rep, mine);
		i++;
	}
	fclose(f);
	CHECK_INT_EQ(i, nfinite);
	CHECK_INT_EQ(bad, 0);
	free(bits);
}

static void test_nonfinite_repr(void)
{
	char out[ES_PYFLOAT_MAX];
	CHECK_INT_EQ(es_pyfloat_repr(NAN, out), 3);
	CHECK_STR_EQ(out, "nan");
	CHECK_INT_EQ(es_pyfloat_repr(-NAN, out), 3);
	CHECK_STR_EQ(out, "nan");
	CHECK_INT_EQ(es_pyfloat_repr(INFINITY, out), 3);
	CHECK_STR_EQ(out, "inf");
	CHECK_INT_EQ(es_pyfloat_repr(-INFINITY, out), 4);
	CHECK_STR_EQ(out, "-inf");
	CHECK_INT_EQ(es_pyfloat_dumps(-NAN, out), 3);
	CHECK_STR_EQ(out, "NaN");
	/* The longest text of all fits with room to spare. */
	CHECK_INT_EQ(es_pyfloat_repr(-2.2250738585072014e-308, out), 24);
	CHECK_STR_EQ(out, "-2.2250738585072014e-308");
}

static void test_strtod(void)
{
	char *end;
	CHECK(es_pyfloat_strtod("1.5", NULL) == 1.5);
	CHECK(es_pyfloat_strtod("-2.5e-3x", &end) == -2.5e-3 && !strcmp(end, "x"));
	CHECK(es_pyfloat_strtod("1e400", NULL) == INFINITY);
	/* A locale with a ',' decimal point changes neither the text nor the parse. The test
	 * compiles one into its own folder (localedef, from Debian's libc-bin and locales), so it
	 * needs no locale installed on the machine. */
	char cmd[8192], dir[2048];
	snprintf(dir, sizeof(dir), "%s/locales", T);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && localedef -i de_DE -f UTF-8 '%s/de_DE.UTF-8' >/dev/null 2>&1", dir, dir);
	int made = system(cmd);
	setenv("LOCPATH", dir, 1);
	const char *got = setlocale(LC_NUMERIC, "de_DE.UTF-8");
	if (!CHECK(made == 0 && got != NULL)) {
		fprintf(stderr, "cannot make a locale with a ',' decimal point (localedef -i de_DE -f UTF-8, packages libc-bin and locales)\n");
		return;
	}
	CHECK_STR_EQ(localeconv()->decimal_point, ",");
	char out[ES_PYFLOAT_MAX];
	es_pyfloat_repr(1.5, out);
	CHECK_STR_EQ(out, "1.5");
	es_pyfloat_repr(1e-300, out);
	CHECK_STR_EQ(out, "1e-300");
	CHECK(es_pyfloat_strtod("2.25", &end) == 2.25 && *end == '\0');
	setlocale(LC_NUMERIC, "C");
}

int main(void)
{
	T = test_tmpdir();
	es_log_quiet_begin();
	test_format_double();
	test_nonfinite_repr();
	test_strtod();
	es_log_quiet_end();
	return test_done();
}
