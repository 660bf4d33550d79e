/*
 * pyfloat: repr(float) the way CPython prints it, in exact integer arithmetic.
 *
 * The fast path (shortest_fast) handles every double whose scaled interval fits 128 bits,
 * which is all of |v| in about [1e-15, 4e37]; the rest (and builds without __int128) take
 * shortest_slow, which leans on glibc's correctly rounded "%.*e". Both give the same digits;
 * format_repr() lays them out.
 */
#include "eshard/pyfloat.h"
#include "eshard/number.h"

#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The C locale, for strtod_l(). */
static pthread_once_t cloc_once = PTHREAD_ONCE_INIT;
static locale_t cloc;

static void cloc_init(void) { cloc = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

double es_pyfloat_strtod(const char *s, char **end)
{
	pthread_once(&cloc_once, cloc_init);
	if (cloc)
		return strtod_l(s, end, cloc);
	return strtod(s, end);
}


static const uint64_t P5[28] = {
	1ULL, 5ULL, 25ULL, 125ULL, 625ULL, 3125ULL, 15625ULL, 78125ULL, 390625ULL, 1953125ULL,
	9765625ULL, 48828125ULL, 244140625ULL, 1220703125ULL, 6103515625ULL, 30517578125ULL,
	152587890625ULL, 762939453125ULL, 3814697265625ULL, 19073486328125ULL,
	95367431640625ULL, 476837158203125ULL, 2384185791015625ULL, 11920928955078125ULL,
	59604644775390625ULL, 298023223876953125ULL, 1490116119384765625ULL,
	7450580596923828125ULL,
};

static const uint64_t P10[20] = {
	1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
	100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
	10000000000000ULL, 100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
	100000000000000000ULL, 1000000000000000000ULL, 10000000000000000000ULL,
};

#ifdef __SIZEOF_INT128__
typedef unsigned __int128 u128;

/*
 * The shortest decimal in the rounding interval of v = m * 2^e, and of those the closest
 * to v (ties to an even last digit): the definition that David Gay's dtoa mode 0, which
 * Python's repr uses, implements. Exact arithmetic: scale v and both interval ends by
 * 10^k so that v has 17 or 18 integer digits, as a fraction A / D with 128-bit A and D.
 * Then the interval holds at least one integer (its width is more than one unit there),
 * and the answer is found by trying coarser multiples 10^t while one still fits.
 * Returns 0 when the numbers do not fit 128 bits (|v| outside about [1e-15, 4e37]).
 */
static int shortest_fast(uint64_t m, int e, int asym, uint64_t *digits, int *dexp)
{
	/* Interval ends in quarter units: below a power of two the gap halves. */
	const u128 xl = (u128)(4 * m - (asym ? 1 : 2)), xv = (u128)(4 * m), xh = (u128)(4 * m + 2);
	const int eq = e - 2;
	const int inclusive = !(m & 1); /* strtod rounds ties to even */
	int x = e + 52;                 /* v is in [2^x, 2^(x+1)) */
	int est = x >= 0 ? (x * 78913) >> 18 : -((-x * 78913 + (1 << 18) - 1) >> 18);
	int k = 16 - est;

	for (int attempt = 0; attempt < 4; attempt++) {
		u128 al, av, ah, div = 0;
		int shr = 0;
		if (k >= 0) {
			if (k > 54) /* 5^k then overflows with any mantissa; P5 goes to 5^27 */
				return 0;
			u128 f = k <= 27 ? (u128)P5[k] : (u128)P5[27] * P5[k - 27];
			if (__builtin_mul_overflow(xh, f, &ah))
				return 0;
			al = xl * f;
			av = xv * f;
			int sh = eq + k;
			if (sh > 0) {
				if (sh >= 127 || (ah >> (128 - sh)) != 0)
					return 0;
				al <<= sh;
				av <<= sh;
				ah <<= sh;
			} else {
				shr = -sh;
				if (shr > 126)
					return 0;
			}
		} else {
			if (-k > 38 || eq < 0)
				return 0;
			div = -k <= 19 ? (u128)P10[-k] : (u128)P10[19] * P10[-k - 19];
			if (eq > 0 && (eq >= 127 || (xh >> (128 - eq)) != 0))
				return 0;
			al = xl << eq;
			av = xv << eq;
			ah = xh << eq;
		}
		u128 ql, qv, qh, rl, rv, rh;
		int half; /* sign of (2 * rv - D): where v's fraction is against one half */
		if (div) {
			ql = al / div;
			rl = al % div;
			qv = av / div;
			rv = av % div;
			qh = ah / div;
			rh = ah % div;
			u128 twice = rv * 2;
			half = twice < div ? -1 : twice > div;
		} else {
			u128 mask = shr ? (((u128)1 << shr) - 1) : 0;
			ql = al >> shr;
			rl = al & mask;
			qv = av >> shr;
			rv = av & mask;
			qh = ah >> shr;
			rh = ah & mask;
			if (!shr) {
				half = -1;
			} else {
				u128 h = (u128)1 << (shr - 1);
				half = rv < h ? -1 : rv > h;
			}
		}
		if (qh >> 64 || qv >= (u128)P10[18]) {
			k--;
			continue;
		}
		if (qv < (u128)P10[16]) {
			k++;
			continue;
		}
		uint64_t lo = (uint64_t)ql + ((rl != 0 || !inclusive) ? 1 : 0);
		uint64_t hi = (uint64_t)qh - ((rh == 0 && !inclusive) ? 1 : 0);
		uint64_t vi = (uint64_t)qv;

		/* Coarsest power of ten with a multiple inside [lo, hi]. */
		uint64_t unit = 1;
		int t = 0;
		while (t < 19 && unit <= hi / 10) {
			uint64_t u10 = unit * 10;
			if ((hi / u10) * u10 < lo)
				break;
			unit = u10;
			t++;
		}
		uint64_t cd = vi / unit * unit; /* the multiples just below and above v */
		uint64_t cu = cd + unit;
		int din = cd >= lo && cd <= hi, uin = cu >= lo && cu <= hi;
		uint64_t c;
		if (din && uin) {
			/* Compare v - cd = r + frac with unit / 2, exactly. */
			uint64_t r = vi - cd;
			int cmp; /* sign of (v - cd) - unit/2 */
			if (2 * r + 1 < unit)
				cmp = -1;
			else if (2 * r > unit)
				cmp = 1;
			else if (2 * r == unit)
				cmp = (rv != 0) ? 1 : 0;
			else /* 2r + 1 == unit */
				cmp = half;
			if (cmp < 0)
				c = cd;
			else if (cmp > 0)
				c = cu;
			else
				c = ((cd / unit) % 2 == 0) ? cd : cu;
		} else {
			c = din ? cd : cu;
		}
		*digits = c / unit;
		*dexp = t - k;
		return 1;
	}
	return 0;
}
#endif

/*
 * Slow but simple and correct for every finite v > 0 (subnormals too): the closest
 * p-digit decimal (glibc's %.*e is correctly rounded) for p = 1, 2, ... until one reads
 * back as v. When the interval is lopsided (v a power of two), the closest candidate may
 * miss on the narrow side while its neighbour on the wide side fits: try that one too.
 */
static void shortest_slow(double v, int asym, char *dig, int *nd, int *decpt)
{
	char buf[64], cand[64];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*e", prec - 1, v);
		/* Take the digits and the exponent, whatever the locale's decimal point. */
		char d[24];
		int n = 0, x = 0;
		const char *s = buf;
		for (; *s && *s != 'e' && *s != 'E'; s++)
			if (*s >= '0' && *s <= '9' && n < 20)
				d[n++] = *s;
		if (*s)
			x = (int)strtol(s + 1, NULL, 10);
		d[n] = '\0';
		/* value = d * 10^(x - (n - 1)) */
		snprintf(cand, sizeof(cand), "%se%d", d, x - (n - 1));
		double w = es_pyfloat_strtod(cand, NULL);
		uint64_t di = 0;
		int dx = x - (n - 1);
		if (w == v) {
			di = strtoull(d, NULL, 10);
		} else if (asym) {
			di = strtoull(d, NULL, 10);
			if (w < v)
				di++;
			else if (di == P10[n - 1] && n > 1)
				di = P10[n] - 1, dx--;
			else
				di--;
			snprintf(cand, sizeof(cand), "%" PRIu64 "e%d", di, dx);
			if (es_pyfloat_strtod(cand, NULL) != v)
				continue;
		} else {
			continue;
		}
		while (di && di % 10 == 0) {
			di /= 10;
			dx++;
		}
		*nd = es_format_u64(di, dig);
		*decpt = *nd + dx;
		return;
	}
	/* Not reached: 17 digits always read back. Keep the 17-digit form just in case. */
	snprintf(buf, sizeof(buf), "%.16e", v);
	*nd = 0;
	const char *s = buf;
	for (; *s && *s != 'e'; s++)
		if (*s >= '0' && *s <= '9')
			dig[(*nd)++] = *s;
	*decpt = (*s ? (int)strtol(s + 1, NULL, 10) : 0) + 1;
}

/* Python's repr layout: positional when -4 < decpt <= 16, else d[.ddd]e±XX. */
static size_t format_repr(int neg, const char *dig, int nd, int decpt, char *out)
{
	char *o = out;
	if (neg)
		*o++ = '-';
	if (decpt > -4 && decpt <= 16) {
		if (decpt <= 0) {
			*o++ = '0';
			*o++ = '.';
			for (int i = 0; i < -decpt; i++)
				*o++ = '0';
			memcpy(o, dig, (size_t)nd);
			o += nd;
		} else if (decpt >= nd) {
			memcpy(o, dig, (size_t)nd);
			o += nd;
			for (int i = nd; i < decpt; i++)
				*o++ = '0';
			*o++ = '.';
			*o++ = '0';
		} else {
			memcpy(o, dig, (size_t)decpt);
			o += decpt;
			*o++ = '.';
			memcpy(o, dig + decpt, (size_t)(nd - decpt));
			o += nd - decpt;
		}
	} else {
		*o++ = dig[0];
		if (nd > 1) {
			*o++ = '.';
			memcpy(o, dig + 1, (size_t)(nd - 1));
			o += nd - 1;
		}
		int x = decpt - 1;
		*o++ = 'e';
		*o++ = x < 0 ? '-' : '+';
		if (x < 0)
			x = -x;
		if (x >= 100) {
			*o++ = (char)('0' + x / 100);
			x %= 100;
		}
		*o++ = (char)('0' + x / 10);
		*o++ = (char)('0' + x % 10);
	}
	*o = '\0';
	return (size_t)(o - out);
}

/* The digits of a finite v != 0 and where its decimal point goes: v = 0.DIGITS * 10^decpt. */
static int shortest(double v, char dig[24], int *decpt)
{
	uint64_t bits;
	memcpy(&bits, &v, sizeof(bits));
	int be = (int)((bits >> 52) & 0x7ff);
	uint64_t frac = bits & ((1ULL << 52) - 1);
	int asym = frac == 0 && be > 1;
	int nd;
#ifdef __SIZEOF_INT128__
	uint64_t d;
	int dexp;
	if (be != 0 && shortest_fast(frac | (1ULL << 52), be - 1075, asym, &d, &dexp)) {
		nd = es_format_u64(d, dig);
		*decpt = nd + dexp;
		return nd;
	}
#endif
	shortest_slow(fabs(v), asym, dig, &nd, decpt);
	return nd;
}

static size_t put(char *out, const char *s)
{
	size_t n = strlen(s);
	memcpy(out, s, n + 1);
	return n;
}

size_t es_pyfloat_repr(double v, char out[ES_PYFLOAT_MAX])
{
	if (isnan(v))
		return put(out, "nan");
	if (isinf(v))
		return put(out, v > 0 ? "inf" : "-inf");
	if (v == 0)
		return put(out, signbit(v) ? "-0.0" : "0.0");
	char dig[24];
	int decpt, nd = shortest(v, dig, &decpt);
	return format_repr(signbit(v) != 0, dig, nd, decpt, out);
}

size_t es_pyfloat_dumps(double v, char out[ES_PYFLOAT_MAX])
{
	if (isnan(v))
		return put(out, "NaN");
	if (isinf(v))
		return put(out, v > 0 ? "Infinity" : "-Infinity");
	return es_pyfloat_repr(v, out);
}
