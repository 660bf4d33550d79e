/*
 * Unit tests of src/utf8.c and utf8.h: the strict checker against Python's own
 * UnicodeDecodeError messages, the padded length used by the JSONL scanner against the
 * checker on every two-byte start and a spread of third and fourth bytes, the bounded decoder
 * and the encoder on every code point.
 */
#include "testlib.h"

#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *T; /* this run's temp folder */

static void test_known(void)
{
	char msg[160];
	CHECK_INT_EQ(es_utf8_check((const unsigned char *)"plain ascii, longer than a word", 31, msg, sizeof(msg)), 0);
	CHECK_INT_EQ(es_utf8_check((const unsigned char *)"caf\xc3\xa9 \xe6\x95\xb0 \xf0\x9f\x98\x80", 14, msg, sizeof(msg)), 0);
	CHECK_INT_EQ(es_utf8_check((const unsigned char *)"abcdefgh\xff", 9, msg, sizeof(msg)), 1);
	CHECK_STR_EQ(msg, "'utf-8' codec can't decode byte 0xff in position 8: invalid start byte");
	CHECK_INT_EQ(es_utf8_check((const unsigned char *)"\xe6\x95", 2, msg, sizeof(msg)), 1);
	CHECK_STR_EQ(msg, "'utf-8' codec can't decode bytes in position 0-1: unexpected end of data");
	CHECK_INT_EQ(es_utf8_check((const unsigned char *)"\xed\xa0\x80", 3, msg, sizeof(msg)), 1);
	CHECK_STR_EQ(msg, "'utf-8' codec can't decode byte 0xed in position 0: invalid continuation byte");
	CHECK_INT_EQ(es_utf8_check((const unsigned char *)"x\xf0\x9f\x98z", 5, msg, sizeof(msg)), 1);
	CHECK_STR_EQ(msg, "'utf-8' codec can't decode bytes in position 1-3: invalid continuation byte");
	CHECK_INT_EQ(es_utf8_check((const unsigned char *)"", 0, msg, sizeof(msg)), 0);

	size_t adv;
	CHECK_INT_EQ(es_utf8_next((const unsigned char *)"\xe2\x80\xa8x", 4, &adv), 0x2028);
	CHECK_INT_EQ(adv, 3);
	CHECK_INT_EQ(es_utf8_next((const unsigned char *)"\xe2\x80\xa8", 2, &adv), 0xe2); /* cut short */
	CHECK_INT_EQ(adv, 1);
	CHECK_INT_EQ(es_utf8_next((const unsigned char *)"\xc0\xa0", 2, &adv), 0xc0); /* overlong space */
	CHECK_INT_EQ(adv, 1);
	CHECK_INT_EQ(es_utf8_next((const unsigned char *)"\x85", 1, &adv), 0x85);
	CHECK_INT_EQ(adv, 1);
	CHECK_INT_EQ(es_utf8_next((const unsigned char *)"\0", 1, &adv), 0);
	CHECK_INT_EQ(adv, 1);
	CHECK(es_utf8_is_cont(0x80) && es_utf8_is_cont(0xbf) && !es_utf8_is_cont(0xc0) && !es_utf8_is_cont('a'));
}

/* The padded length, the checker and the decoder agree on every 4-byte window whose first
 * two bytes are anything and whose last two are picked from the edges of the ranges. */
static void test_agree(void)
{
	static const unsigned char edge[] = { 0x00, 0x41, 0x7f, 0x80, 0x9f, 0xa0, 0xbf, 0xc0, 0xff };
	size_t bad = 0, checked = 0;
	char msg[160];
	for (unsigned b0 = 0x80; b0 <= 0xff; b0++)
		for (unsigned b1 = 0; b1 <= 0xff; b1++)
			for (size_t i2 = 0; i2 < sizeof(edge); i2++)
				for (size_t i3 = 0; i3 < sizeof(edge); i3++) {
					unsigned char p[8] = { (unsigned char)b0, (unsigned char)b1, edge[i2], edge[i3] };
					int n = es_utf8_len(p);
					/* The longest valid prefix that is one character. */
					int want = 0;
					for (int k = 2; k <= 4 && !want; k++)
						if (!es_utf8_check(p, (size_t)k, msg, sizeof(msg)))
							want = k;
					size_t adv;
					uint32_t cp = es_utf8_next(p, 4, &adv);
					int ok = n == want && (size_t)(want ? want : 1) == adv;
					if (ok && want) {
						char o[4];
						ok = es_utf8_put(o, cp) - o == want && !memcmp(o, p, (size_t)want);
					}
					if (!ok && bad++ < 5)
						fprintf(stderr, "%02x %02x %02x %02x: len %d next %zu, want %d\n", p[0], p[1],
							p[2], p[3], n, adv, want);
					checked++;
				}
	CHECK_INT_EQ(bad, 0);
	CHECK(checked > 2000000);
}

/* Every scalar value encodes to what the decoders read back. */
static void test_every_code_point(void)
{
	size_t bad = 0;
	for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
		if (cp >= 0xd800 && cp <= 0xdfff)
			continue;
		unsigned char o[8] = { 0 };
		size_t n = (size_t)(es_utf8_put((char *)o, cp) - (char *)o), adv;
		size_t want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
		int ok = n == want && es_utf8_next(o, n, &adv) == cp && adv == n &&
			 (cp < 0x80 || es_utf8_len(o) == (int)n) && !es_utf8_check(o, n, NULL, 0);
		if (!ok && bad++ < 5)
			fprintf(stderr, "U+%04X: %zu bytes\n", cp, n);
	}
	CHECK_INT_EQ(bad, 0);
}

/* The checker's messages are Python's, for a few hundred broken strings. */
static void test_against_python(void)
{
	if (system("python3 -c pass >/dev/null 2>&1") != 0) {
		fprintf(stderr, "SKIP: python3 not found; UTF-8 messages not compared with Python\n");
		return;
	}
	static const char *const pieces[] = { "a", "\xc3\xa9", "\xe6\x95\xb0", "\xf0\x9f\x98\x80", "\xff", "\x80",
					      "\xc3", "\xe6\x95", "\xf0\x9f\x98", "\xed\xa0\x80", "\xc0\xaf",
					      "\xf4\x90\x80\x80", "\xe0\x80\x80", "\xf5", "12345678" };
	enum { NP = sizeof(pieces) / sizeof(*pieces) };
	char in[512], out[512], cmd[1400];
	snprintf(in, sizeof(in), "%s/bytes.txt", T);
	snprintf(out, sizeof(out), "%s/python.txt", T);
	FILE *f = fopen(in, "w");
	if (!CHECK(f != NULL))
		return;
	/* Every pair and every triple of pieces, in hex, one string a line. */
	size_t n = 0;
	for (int a = 0; a < NP; a++)
		for (int b = 0; b < NP; b++)
			for (int c = -1; c < NP; c++) {
				const char *s[3] = { pieces[a], pieces[b], c >= 0 ? pieces[c] : "" };
				for (int k = 0; k < 3; k++)
					for (const char *p = s[k]; *p; p++)
						fprintf(f, "%02x", (unsigned char)*p);
				fputc('\n', f);
				n++;
			}
	fclose(f);
	snprintf(cmd, sizeof(cmd),
		 "python3 -c 'import sys\n"
		 "out = open(sys.argv[2], \"w\")\n"
		 "for l in open(sys.argv[1]):\n"
		 "    try:\n"
		 "        bytes.fromhex(l.strip()).decode(\"utf-8\")\n"
		 "        out.write(\"ok\\n\")\n"
		 "    except UnicodeDecodeError as e:\n"
		 "        out.write(str(e) + \"\\n\")\n"
		 "' '%s' '%s'",
		 in, out);
	if (!CHECK(system(cmd) == 0))
		return;
	FILE *fi = fopen(in, "r"), *fo = fopen(out, "r");
	if (!CHECK(fi && fo)) {
		if (fi)
			fclose(fi);
		if (fo)
			fclose(fo);
		return;
	}
	char hex[256], want[256], msg[256];
	size_t lines = 0, bad = 0;
	while (fgets(hex, sizeof(hex), fi) && fgets(want, sizeof(want), fo)) {
		want[strcspn(want, "\n")] = '\0';
		unsigned char bytes[128];
		size_t len = 0;
		for (const char *h = hex; h[0] && h[0] != '\n'; h += 2) {
			unsigned v;
			sscanf(h, "%2x", &v);
			bytes[len++] = (unsigned char)v;
		}
		if (!es_utf8_check(bytes, len, msg, sizeof(msg)))
			snprintf(msg, sizeof(msg), "ok");
		if (strcmp(msg, want) && bad++ < 5)
			fprintf(stderr, "%s: python '%s', ours '%s'\n", hex, want, msg);
		lines++;
	}
	fclose(fi);
	fclose(fo);
	CHECK_INT_EQ(lines, n);
	CHECK_INT_EQ(bad, 0);
}

int main(void)
{
	T = test_tmpdir();
	test_known();
	test_agree();
	test_every_code_point();
	test_against_python();
	return test_done();
}
