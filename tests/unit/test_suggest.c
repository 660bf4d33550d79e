/*
 * Unit tests of src/suggest.c: the edit distance behind "did you mean", and the closest name.
 */
#include "testlib.h"

#include "eshard/suggest.h"

#include <stdio.h>
#include <string.h>

static void test_edit_distance(void)
{
	static const struct {
		const char *a, *b;
		size_t d;
	} cases[] = {
		{ "", "", 0 },           { "", "run", 3 },        { "run", "", 3 },
		{ "status", "status", 0 }, { "stauts", "status", 1 }, /* one swap of neighbours */
		{ "job-dri", "job-dir", 1 }, { "statu", "status", 1 }, { "sttus", "status", 1 },
		{ "stXtus", "status", 1 }, { "kitten", "sitting", 3 }, { "ca", "abc", 3 },
		{ "ab", "ba", 1 },       { "abcd", "badc", 2 },   { "Status", "status", 1 },
		{ "whitespace_normalisation_mapper", "whitespace_normalization_mapper", 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (!CHECK_INT_EQ(es_edit_distance(cases[i].a, cases[i].b), cases[i].d))
			fprintf(stderr, "  '%s' vs '%s'\n", cases[i].a, cases[i].b);
		CHECK_INT_EQ(es_edit_distance(cases[i].b, cases[i].a), cases[i].d); /* symmetric */
	}
	/* Past 255 bytes: the longer length, no table. */
	char big[400];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK_INT_EQ(es_edit_distance(big, "x"), 399);
	CHECK_INT_EQ(es_edit_distance("xy", big), 399);
	big[255] = '\0';
	CHECK_INT_EQ(es_edit_distance(big, "x"), 254);
}

static void test_closest_name(void)
{
	const char *cmds[] = { "run", "prepare", "worker", "status", "retry", "merge", "verify" };
	size_t n = sizeof(cmds) / sizeof(cmds[0]);
	CHECK_STR_EQ(es_closest_name("stauts", cmds, n), "status");
	CHECK_STR_EQ(es_closest_name("verfy", cmds, n), "verify");
	CHECK_STR_EQ(es_closest_name("rnu", cmds, n), "run");
	CHECK_STR_EQ(es_closest_name("prepair", cmds, n), "prepare");
	CHECK_STR_EQ(es_closest_name("status", cmds, n), "status");
	/* Too far, or too short to tell: no suggestion. */
	CHECK(es_closest_name("report", cmds, n) == NULL);
	CHECK(es_closest_name("xyz", cmds, n) == NULL);
	CHECK(es_closest_name("rn", cmds, n) == NULL);
	CHECK(es_closest_name("", cmds, n) == NULL);
	CHECK(es_closest_name("status", cmds, 0) == NULL);
	/* Equals: the first one; NULL entries are skipped. */
	const char *ties[] = { NULL, "merge-a", "merge-b" };
	CHECK_STR_EQ(es_closest_name("merge-c", ties, 3), "merge-a");
	/* At most 3 edits, however long the word. */
	const char *ops[] = { "whitespace_normalization_mapper", "text_length_filter" };
	CHECK_STR_EQ(es_closest_name("whitespace_normalisation_mapper", ops, 2), "whitespace_normalization_mapper");
	CHECK_STR_EQ(es_closest_name("whitespace_normalizashun_mappr", ops, 2), NULL);
	CHECK_STR_EQ(es_closest_name("txt_length_fltr", ops, 2), "text_length_filter");
}

int main(void)
{
	test_edit_distance();
	test_closest_name();
	return test_done();
}
