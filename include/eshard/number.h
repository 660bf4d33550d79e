/*
 * number: strict parsing of decimal numbers, saturating conversion and integer formatting.
 */
#ifndef ESHARD_NUMBER_H
#define ESHARD_NUMBER_H

#include <stdint.h>

/* Strict decimal parse of the whole string; 0 or ES_EUSAGE (no message). */
int es_parse_i64(const char *s, int64_t *out);
int es_parse_double(const char *s, double *out);
/* d truncated toward zero as an int64, saturated at INT64_MIN/INT64_MAX when d is past them
 * (a plain cast of such a double, or of 2^63 = (double)INT64_MAX, is undefined); NaN gives 0.
 * Callers that must refuse NaN check it first. */
int64_t es_i64_of_double(double d);
/* The decimal digits of v into out, without a NUL; returns how many (1 to 20). */
int es_format_u64(uint64_t v, char out[20]);

#endif
