/*
 * utf8: the bounded decoders (utf8.h has the inline per-byte helpers they share with the
 * JSONL data path).
 */
#include "utf8.h"

#include <stdio.h>
#include <string.h>

const struct es_utf8_lead es_utf8_leads[256] = {
	[0x00 ... 0x7F] = { 1, 0x80, 0xBF },
	[0xC2 ... 0xDF] = { 2, 0x80, 0xBF },
	[0xE0] = { 3, 0xA0, 0xBF },
	[0xE1 ... 0xEC] = { 3, 0x80, 0xBF },
	[0xED] = { 3, 0x80, 0x9F },
	[0xEE ... 0xEF] = { 3, 0x80, 0xBF },
	[0xF0] = { 4, 0x90, 0xBF },
	[0xF1 ... 0xF3] = { 4, 0x80, 0xBF },
	[0xF4] = { 4, 0x80, 0x8F },
};

int es_utf8_check(const unsigned char *s, size_t n, char *msg, size_t msz)
{
	size_t i = 0;
	while (i < n) {
		/* Plain ASCII is the common case: step over it a word at a time. */
		while (i + 8 <= n) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (w & 0x8080808080808080ULL)
				break;
			i += 8;
		}
		if (i >= n)
			break;
		unsigned c = s[i], lo = es_utf8_leads[c].lo, hi = es_utf8_leads[c].hi;
		size_t need = es_utf8_leads[c].n;
		if (need == 1) {
			i++;
			continue;
		}
		const char *why = NULL;
		size_t end = i + 1;
		if (!need) {
			why = "invalid start byte";
		} else if (i + 1 >= n) {
			why = "unexpected end of data";
			end = n;
		} else if (s[i + 1] < lo || s[i + 1] > hi) {
			why = "invalid continuation byte";
		} else {
			for (size_t k = 2; k < need; k++) {
				if (i + k >= n) {
					why = "unexpected end of data";
					end = n;
					break;
				}
				if (!es_utf8_is_cont(s[i + k])) {
					why = "invalid continuation byte";
					end = i + k;
					break;
				}
			}
		}
		if (why) {
			if (end - i == 1)
				snprintf(msg, msz, "'utf-8' codec can't decode byte 0x%02x in position %zu: %s",
					 c, i, why);
			else
				snprintf(msg, msz, "'utf-8' codec can't decode bytes in position %zu-%zu: %s",
					 i, end - 1, why);
			return 1;
		}
		i += need;
	}
	return 0;
}

uint32_t es_utf8_next(const unsigned char *s, size_t len, size_t *adv)
{
	const struct es_utf8_lead *l = &es_utf8_leads[s[0]];
	size_t n = l->n;
	*adv = 1;
	if (n < 2 || n > len || s[1] < l->lo || s[1] > l->hi)
		return s[0];
	uint32_t cp = s[0] & (0x7Fu >> n);
	for (size_t i = 1; i < n; i++) {
		if (!es_utf8_is_cont(s[i]))
			return s[0];
		cp = (cp << 6) | (s[i] & 0x3Fu);
	}
	*adv = n;
	return cp;
}
