/*
 * pyfloat: Python's text for a float, exactly, whatever the locale.
 *
 * es_pyfloat_repr() is repr(float): the shortest decimal that reads back as the same double
 * (of several, the closest; ties to an even last digit), which is what David Gay's dtoa mode 0
 * gives CPython, in Python's layout: positional from 1e-4 up to below 1e16 with at least one
 * decimal ("100.0", "0.0001"), else d[.ddd]e±XX ("1e+16", "1e-05"). es_pyfloat_dumps() is
 * json.dumps(float), the same text except for NaN, Infinity and -Infinity. Both are exact for
 * every double, subnormals included (checked against python3 in test_pyfloat).
 *
 * Nothing here depends on LC_NUMERIC: the program never calls setlocale(), but a library it
 * loads might, and a ',' decimal point must not reach a manifest or a JSONL line.
 *
 * Contract: pure functions; they allocate nothing, cannot fail, and are thread-safe (the C
 * locale object behind es_pyfloat_strtod() is made once, under pthread_once).
 */
#ifndef ESHARD_PYFLOAT_H
#define ESHARD_PYFLOAT_H

#include <stddef.h>

/* Room for any output and its NUL (the longest, "-2.2250738585072014e-308", is 24 bytes). */
#define ES_PYFLOAT_MAX 32

/* repr(v) into out, NUL-terminated; returns the length. NaN and the infinities are nan, inf
 * and -inf. */
size_t es_pyfloat_repr(double v, char out[ES_PYFLOAT_MAX]);
/* json.dumps(v): repr(v), but NaN, Infinity and -Infinity for the non-finite values. */
size_t es_pyfloat_dumps(double v, char out[ES_PYFLOAT_MAX]);
/* strtod() in the C locale: '.' is the decimal point whatever setlocale() said. */
double es_pyfloat_strtod(const char *s, char **end);

#endif
