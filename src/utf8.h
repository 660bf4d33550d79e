/*
 * utf8: the one UTF-8 decoder and encoder of libeshard, as strict as Python's 'utf-8' codec:
 * no overlong forms, no surrogates (U+D800 to U+DFFF), nothing above U+10FFFF.
 *
 * Internal to libeshard. The per-byte helpers are static inline because the JSONL data path
 * calls them for every non-ASCII character (src/jsonl.c validates about 1 GB/s); the rest
 * lives in utf8.c.
 *
 * Contract: pure functions over the bytes they are given; nothing allocates, nothing reports
 * through es_error() (the caller words its own message), everything is thread-safe. Only
 * es_utf8_len() reads past what it decodes (see there).
 */
#ifndef ESHARD_UTF8_H
#define ESHARD_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* es_utf8_leads[c], what byte c starts: n, the length of the sequence (1 for ASCII, 0 for a byte that starts
 * none: a continuation byte, 0xC0, 0xC1, 0xF5 and up), and [lo, hi], the range its second
 * byte must be in (narrower than 0x80-0xBF after 0xE0, 0xED, 0xF0 and 0xF4). */
struct es_utf8_lead {
	unsigned char n, lo, hi;
};
extern const struct es_utf8_lead es_utf8_leads[256];

/* 1 for a continuation byte (10xxxxxx): not the start of a character. */
static inline int es_utf8_is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

/* Length of the valid sequence starting with a byte >= 0x80 at p, or 0. Reads up to 3 bytes
 * past p whatever the sequence, so the caller must have them (zero padding fails every
 * check, so it ends a sequence as the end of the data would). */
static inline int es_utf8_len(const unsigned char *p)
{
	const struct es_utf8_lead *l = &es_utf8_leads[p[0]];
	int n = l->n;
	if (n < 2 || p[1] < l->lo || p[1] > l->hi)
		return 0;
	if (n > 2 && !es_utf8_is_cont(p[2]))
		return 0;
	if (n > 3 && !es_utf8_is_cont(p[3]))
		return 0;
	return n;
}

/* Write code point cp (not a surrogate, at most U+10FFFF) at o; returns the end. */
static inline char *es_utf8_put(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		*o++ = (char)cp;
	} else if (cp < 0x800) {
		*o++ = (char)(0xC0 | (cp >> 6));
		*o++ = (char)(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		*o++ = (char)(0xE0 | (cp >> 12));
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
		*o++ = (char)(0x80 | (cp & 0x3F));
	} else {
		*o++ = (char)(0xF0 | (cp >> 18));
		*o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
		*o++ = (char)(0x80 | (cp & 0x3F));
	}
	return o;
}

/*
 * Strict check of s[0, n). 0 when it is valid UTF-8; else 1 with Python's UnicodeDecodeError
 * text in msg (cut to msz): the same position or range and reason ("invalid start byte",
 * "invalid continuation byte", "unexpected end of data") that bytes.decode() reports.
 */
int es_utf8_check(const unsigned char *s, size_t n, char *msg, size_t msz);

/* Decode the character at s (len > 0 bytes left) and set *adv to its length. A byte that
 * starts no valid sequence is taken as itself, alone (*adv 1, the byte's value). */
uint32_t es_utf8_next(const unsigned char *s, size_t len, size_t *adv);

#endif
