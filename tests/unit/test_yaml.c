/*
 * Unit tests of src/yaml.c, straight on the tree: PyYAML's typing of scalars (kind, value,
 * the integer's canonical decimal, zero, the date), aliases shared and not copied, merge keys
 * through es_yaml_get() and es_yaml_walk(), and the failure contract. The recipe-level
 * behaviour of the same rules is in test_recipe.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/recipe.h"
#include "yamltree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct es_ydoc *parse(const char *text)
{
	struct es_ydoc *d = (struct es_ydoc *)1;
	int rc = es_yaml_parse("t.yaml", text, strlen(text), &d);
	if (rc) {
		fprintf(stderr, "cannot parse '%s': %s\n", text, es_last_error());
		CHECK(d == NULL);
		return NULL;
	}
	return d;
}

/* The value of "v: <text>". */
static const struct es_ynode *value_of(struct es_ydoc **d, const char *text)
{
	char doc[512];
	snprintf(doc, sizeof(doc), "v: %s\n", text);
	*d = parse(doc);
	if (!CHECK(*d != NULL))
		return NULL;
	const struct es_ynode *root = es_yaml_root(*d);
	if (!CHECK(root && root->kind == ES_Y_MAP))
		return NULL;
	return es_yaml_get(root, "v");
}

static void test_scalar_kinds(void)
{
	static const struct {
		const char *text;
		enum es_ykind kind;
		const char *dec; /* INT: the canonical decimal ("long" for none) */
		int zero;
	} cases[] = {
		{ "~", ES_Y_NULL, NULL, 0 },
		{ "", ES_Y_NULL, NULL, 0 },
		{ "Null", ES_Y_NULL, NULL, 0 },
		{ "yes", ES_Y_BOOL, NULL, 0 },
		{ "OFF", ES_Y_BOOL, NULL, 0 },
		{ "y", ES_Y_STR, NULL, 0 },
		{ "0", ES_Y_INT, "0", 1 },
		{ "-0", ES_Y_INT, "0", 1 },
		{ "0x1f", ES_Y_INT, "31", 0 },
		{ "-0b101", ES_Y_INT, "-5", 0 },
		{ "017", ES_Y_INT, "15", 0 },
		{ "0o17", ES_Y_STR, NULL, 0 },
		{ "1_000", ES_Y_INT, "1000", 0 },
		{ "-1:30", ES_Y_INT, "-90", 0 },
		{ "0x_0", ES_Y_INT, "0", 1 },
		{ "0x0000000000000000000000000000000000000000000000000000000000000000000", ES_Y_INT, "long", 1 },
		{ "0b0000000000000000000000000000000000000000000000000000000000000000001", ES_Y_INT, "long", 0 },
		{ "1.5", ES_Y_FLOAT, NULL, 0 },
		{ "1e5", ES_Y_STR, NULL, 0 },
		{ "1.0e+5", ES_Y_FLOAT, NULL, 0 },
		{ "-.INF", ES_Y_FLOAT, NULL, 0 },
		{ "2024-01-31", ES_Y_TIME, NULL, 0 },
		{ "2001-12-14t21:59:43.10-05:00", ES_Y_TIME, NULL, 0 },
		{ "2024-1-1", ES_Y_STR, NULL, 0 },
		{ "!!binary aGk=", ES_Y_BYTES, NULL, 0 },
		{ "!!str 12", ES_Y_STR, NULL, 0 },
		{ "'12'", ES_Y_STR, NULL, 0 },
		{ "!!float 1", ES_Y_FLOAT, NULL, 0 },
		{ "[1, 2]", ES_Y_SEQ, NULL, 0 },
		{ "{a: 1}", ES_Y_MAP, NULL, 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct es_ydoc *d;
		const struct es_ynode *v = value_of(&d, cases[i].text);
		if (!CHECK(v != NULL)) {
			es_yaml_free(d);
			continue;
		}
		int ok = v->kind == cases[i].kind;
		if (ok && v->kind == ES_Y_INT) {
			ok = !strcmp(cases[i].dec, "long") ? v->dec == NULL : v->dec && !strcmp(v->dec, cases[i].dec);
			ok = ok && v->zero == cases[i].zero;
		}
		if (!ok)
			fprintf(stderr, "'%s': kind %d dec %s zero %d\n", cases[i].text, (int)v->kind,
				v->dec ? v->dec : "(none)", v->zero);
		CHECK(ok);
		es_yaml_free(d);
	}

	/* Values. */
	struct es_ydoc *d;
	const struct es_ynode *v = value_of(&d, "On");
	CHECK(v && v->boolean == 1 && v->num == 1.0);
	es_yaml_free(d);
	v = value_of(&d, "1:30.5");
	CHECK(v && v->kind == ES_Y_FLOAT && v->num == 90.5);
	es_yaml_free(d);
	v = value_of(&d, ".nan");
	CHECK(v && isnan(v->num));
	es_yaml_free(d);
	v = value_of(&d, "2024-02-29");
	CHECK(v && v->date_only && v->date[0] == 2024 && v->date[1] == 2 && v->date[2] == 29);
	es_yaml_free(d);
	v = value_of(&d, "2024-02-29 01:02:03");
	CHECK(v && !v->date_only && v->date[0] == 2024);
	es_yaml_free(d);
	v = value_of(&d, "\"a\\0b\"");
	CHECK(v && v->kind == ES_Y_STR && v->len == 3 && !memcmp(v->text, "a\0b", 3));
	CHECK(v && !es_yaml_is_str(v, "a"));
	es_yaml_free(d);
	v = value_of(&d, "ray");
	CHECK(v && es_yaml_is_str(v, "ray") && !es_yaml_is_str(v, "ra") && !es_yaml_is_str(v, "rays"));
	es_yaml_free(d);
	v = value_of(&d, "1");
	CHECK(v && !es_yaml_is_str(v, "1"));
	es_yaml_free(d);
}

/* The keys of a walk, one after the other. */
static int collect(void *ctx, const struct es_ynode *k, const struct es_ynode *v)
{
	(void)v;
	es_buf_add(ctx, k->text, k->len);
	return 0;
}

static int stop_second(void *ctx, const struct es_ynode *k, const struct es_ynode *v)
{
	(void)k;
	(void)v;
	return ++*(int *)ctx == 2 ? 7 : 0;
}

static void test_aliases_and_merges(void)
{
	struct es_ydoc *d = parse("a: &A {x: 1, y: 2}\nb: &B {y: 3, z: 4}\n"
				  "one: *A\n"
				  "m: {<<: [*A, *B], w: 5, x: 6}\n"
				  "n: {<<: *B, <<: *A}\n");
	if (!CHECK(d != NULL))
		return;
	const struct es_ynode *root = es_yaml_root(d);
	const struct es_ynode *a = es_yaml_get(root, "a"), *m = es_yaml_get(root, "m");
	CHECK(es_yaml_get(root, "one") == a); /* shared, not copied */
	CHECK(es_yaml_get(root, "nope") == NULL);
	/* Explicit pairs win, then the merged list in order: the first mapping wins. */
	CHECK(es_yaml_get(m, "x")->num == 6);
	CHECK(es_yaml_get(m, "y")->num == 2);
	CHECK(es_yaml_get(m, "z")->num == 4);
	CHECK(es_yaml_get(m, "<<") == NULL);
	/* Walk: the merged list in reverse, then the explicit pairs. */
	struct es_buf s = ES_BUF_INIT;
	CHECK_INT_EQ(es_yaml_walk(m, collect, &s), 0);
	CHECK_STR_EQ(s.data, "yzxywx");
	/* Two "<<" keys: get() asks the last one first. */
	const struct es_ynode *n = es_yaml_get(root, "n");
	CHECK(es_yaml_get(n, "y")->num == 2);
	es_buf_reset(&s);
	es_yaml_walk(n, collect, &s);
	CHECK_STR_EQ(s.data, "yzxy");
	es_buf_free(&s);
	int calls = 0;
	CHECK_INT_EQ(es_yaml_walk(m, stop_second, &calls), 7);
	CHECK_INT_EQ(calls, 2);
	es_yaml_free(d);
}

static void test_failures(void)
{
	struct es_ydoc *d = (struct es_ydoc *)1;
	es_clear_error();
	CHECK_INT_EQ(es_yaml_parse("t.yaml", "a: &x 1\nb: &x 2\n", 16, &d), ES_EINVAL);
	CHECK(d == NULL);
	CHECK_STR_EQ(es_last_error(), "Invalid YAML in t.yaml: found duplicate anchor 'x' at line 2 column 4");
	CHECK_INT_EQ(es_yaml_parse("t.yaml", "a: [1\n", 6, &d), ES_EINVAL);
	CHECK(d == NULL && !strncmp(es_last_error(), "Invalid YAML in t.yaml: ", 24));
	CHECK_INT_EQ(es_yaml_parse("t.yaml", "v: !!int 1x\n", 12, &d), ES_EINVAL);
	CHECK_STR_EQ(es_last_error(), "Invalid YAML in t.yaml: cannot construct an integer from '1x' at line 1 column 4");

	/* Ten levels of ten aliases each: 10^10 nodes expanded, refused at the cap. */
	char text[4096];
	size_t o = (size_t)snprintf(text, sizeof(text), "a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n");
	for (int i = 1; i <= 9; i++) {
		o += (size_t)snprintf(text + o, sizeof(text) - o, "a%d: &a%d [", i, i);
		for (int j = 0; j < 10; j++)
			o += (size_t)snprintf(text + o, sizeof(text) - o, "%s*a%d", j ? "," : "", i - 1);
		o += (size_t)snprintf(text + o, sizeof(text) - o, "]\n");
	}
	char want[256];
	snprintf(want, sizeof(want), "YAML recipe t.yaml expands to more than %zu nodes (alias bomb?)",
		 ES_RECIPE_MAX_NODES);
	CHECK_INT_EQ(es_yaml_parse("t.yaml", text, o, &d), ES_EINVAL);
	CHECK(d == NULL);
	CHECK_STR_EQ(es_last_error(), want);

	/* An empty stream has no root; an empty document is None. */
	CHECK_INT_EQ(es_yaml_parse("t.yaml", "# c\n", 4, &d), 0);
	CHECK(d && es_yaml_root(d) == NULL);
	es_yaml_free(d);
	CHECK_INT_EQ(es_yaml_parse("t.yaml", "# c\n---\n", 8, &d), 0);
	CHECK(d && es_yaml_root(d) && es_yaml_root(d)->kind == ES_Y_NULL);
	es_yaml_free(d);
	es_yaml_free(NULL);
}

int main(void)
{
	es_log_quiet_begin();
	test_scalar_kinds();
	test_aliases_and_merges();
	test_failures();
	es_log_quiet_end();
	return test_done();
}
