/*
 * Unit tests of src/dj_registry.c: the naming convention, the registry's verdicts from a fake
 * helper (a shell script run with /bin/sh as the "python"), the fallbacks, the Data-Juicer
 * identity, the default helper's place, and the registry's name list behind "did you mean".
 * test_recipe checks the same protocol through es_recipe_load(); the real helper is exercised
 * by the dj test test_op_kinds.
 */
#include "testlib.h"

#include "dj_registry.h"
#include "eshard/log.h"
#include "eshard/recipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *T;

/* A helper that prints out on stdout, err on stderr and exits with code. */
static char *fake_helper(const char *tag, const char *out, const char *err, int code)
{
	static char path[4][4096];
	static int slot;
	char *p = path[slot++ % 4];
	snprintf(p, 4096, "%s/helper-%s.sh", T, tag);
	FILE *f = fopen(p, "w");
	if (!CHECK(f != NULL))
		return p;
	fprintf(f, "cat <<'EOF_OUT'\n%s\nEOF_OUT\ncat >&2 <<'EOF_ERR'\n%s\nEOF_ERR\nexit %d\n", out, err, code);
	fclose(f);
	return p;
}

static void test_naming_convention(void)
{
	static const struct {
		const char *name;
		enum es_dj_verdict v;
	} cases[] = {
		{ "clean_html_mapper", ES_DJ_OP_OK },     { "text_length_filter", ES_DJ_OP_OK },
		{ "document_deduplicator", ES_DJ_OP_WHOLE }, { "Global_x_mapper", ES_DJ_OP_WHOLE },
		{ "full_dataset_stats_filter", ES_DJ_OP_WHOLE }, { "topk_selector", ES_DJ_OP_WHOLE },
		{ "key_grouper", ES_DJ_OP_WHOLE },       { "x_aggregator", ES_DJ_OP_WHOLE },
		{ "x_pipeline", ES_DJ_OP_WHOLE },        { "_mapper", ES_DJ_OP_UNKNOWN },
		{ "mapper", ES_DJ_OP_UNKNOWN },          { "my_custom_op", ES_DJ_OP_UNKNOWN },
	};
	struct es_dj_registry reg = { 0 };
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++)
		if (!CHECK_INT_EQ(es_dj_registry_kind(&reg, cases[i].name), cases[i].v))
			fprintf(stderr, "  %s\n", cases[i].name);
}

static void test_consult(void)
{
	const char *names[] = { "a_mapper", "deduper_op", "flagged_filter", "odd_op", "unknown_mapper" };
	char *custom[] = { (char *)"/x/ops.py" };
	struct es_dj_registry reg = { 0 };

	/* No helper: the reason, nothing run. */
	CHECK_INT_EQ(es_dj_registry_consult(NULL, NULL, NULL, 0, names, 5, &reg), 0);
	CHECK(!reg.consulted);
	CHECK_STR_EQ(reg.reason, "no registry helper is configured");
	es_dj_registry_free(&reg);
	CHECK(reg.reason == NULL);

	/* No names: nothing to ask (a helper that would fail is not run). */
	char *bad = fake_helper("bad", "", "boom", 1);
	CHECK_INT_EQ(es_dj_registry_consult("/bin/sh", bad, NULL, 0, names, 0, &reg), 0);
	CHECK(!reg.consulted && reg.reason == NULL);
	es_dj_registry_free(&reg);

	char *ok = fake_helper("ok", "{\"data_juicer_version\": \"1.4.2\", \"ops\": {"
				     "\"a_mapper\": {\"known\": true, \"mapper\": true},"
				     "\"deduper_op\": {\"known\": true, \"mapper\": true},"
				     "\"flagged_filter\": {\"known\": true, \"filter\": true, \"global\": true},"
				     "\"odd_op\": {\"known\": true},"
				     "\"unknown_mapper\": {\"known\": false}}}", "", 0);
	CHECK_INT_EQ(es_dj_registry_consult("/bin/sh", ok, custom, 1, names, 5, &reg), 0);
	CHECK(reg.consulted && reg.reason == NULL);
	CHECK_STR_EQ(reg.version, "1.4.2");
	CHECK(reg.commit == NULL);
	CHECK_INT_EQ(es_dj_registry_kind(&reg, "a_mapper"), ES_DJ_OP_OK);
	CHECK_INT_EQ(es_dj_registry_kind(&reg, "deduper_op"), ES_DJ_OP_OK);
	CHECK_INT_EQ(es_dj_registry_kind(&reg, "flagged_filter"), ES_DJ_OP_WHOLE);
	CHECK_INT_EQ(es_dj_registry_kind(&reg, "odd_op"), ES_DJ_OP_WHOLE);
	CHECK_INT_EQ(es_dj_registry_kind(&reg, "unknown_mapper"), ES_DJ_OP_UNKNOWN);
	CHECK_INT_EQ(es_dj_registry_kind(&reg, "not_asked_mapper"), ES_DJ_OP_UNKNOWN);
	es_dj_registry_free(&reg);

	/* An interpreter that cannot be started is a fallback, with the reason. */
	CHECK_INT_EQ(es_dj_registry_consult("/nonexistent/python", ok, NULL, 0, names, 1, &reg), 0);
	CHECK(!reg.consulted);
	CHECK_STR_EQ(reg.reason, "cannot start '/nonexistent/python': No such file or directory");
	es_dj_registry_free(&reg);

	/* Failures: exit 4 is a bad recipe, anything else an I/O error; one message each. */
	char *c4 = fake_helper("c4", "", "Traceback (most recent call last):\n  x\nImportError: no ops", 4);
	char want[8192];
	es_clear_error();
	CHECK_INT_EQ(es_dj_registry_consult("/bin/sh", c4, NULL, 0, names, 1, &reg), ES_EINVAL);
	snprintf(want, sizeof(want), "Data-Juicer registry helper %s could not load the custom operators: "
		 "ImportError: no ops", c4);
	CHECK_STR_EQ(es_last_error(), want);
	es_dj_registry_free(&reg);
	CHECK_INT_EQ(es_dj_registry_consult("/bin/sh", bad, NULL, 0, names, 1, &reg), ES_EIO);
	snprintf(want, sizeof(want), "Data-Juicer registry helper %s failed with exit status 1: boom", bad);
	CHECK_STR_EQ(es_last_error(), want);
	es_dj_registry_free(&reg);
	char *half = fake_helper("half", "{\"ops\": {\"a_mapper\": {\"known\": true}}}", "", 0);
	CHECK_INT_EQ(es_dj_registry_consult("/bin/sh", half, NULL, 0, names, 2, &reg), ES_EIO);
	snprintf(want, sizeof(want), "Data-Juicer registry helper %s gave no usable answer (its output has no "
		 "answer for operator 'deduper_op'); stderr: (no message on stderr)", half);
	CHECK_STR_EQ(es_last_error(), want);
	es_dj_registry_free(&reg);
}

static void test_identity_and_default(void)
{
	char *both = fake_helper("both", "{\"data_juicer_version\": \"1.4.2\", \"commit\": \"abc\"}", "", 0);
	char *ver = fake_helper("ver", "noise\n{\"data_juicer_version\": \"1.4.2\", \"commit\": null}", "", 0);
	char *fail = fake_helper("fail", "{\"commit\": \"abc\"}", "", 3);
	char *id = es_recipe_dj_identity("/bin/sh", both);
	CHECK_STR_EQ(id, "abc");
	free(id);
	id = es_recipe_dj_identity("/bin/sh", ver);
	CHECK_STR_EQ(id, "1.4.2");
	free(id);
	CHECK(es_recipe_dj_identity("/bin/sh", fail) == NULL);
	CHECK(es_recipe_dj_identity("/nonexistent/python", both) == NULL);
	CHECK(es_recipe_dj_identity("/bin/sh", NULL) == NULL);

	setenv("ESHARD_DJ_HELPER", "/some/helper.py", 1);
	CHECK_STR_EQ(es_recipe_default_helper(), "/some/helper.py");
	unsetenv("ESHARD_DJ_HELPER");
	const char *d = es_recipe_default_helper();
	CHECK(d && strlen(d) > 22 && !strcmp(d + strlen(d) - 22, "scripts/dj_op_kinds.py"));
}

static void test_registered_list(void)
{
	const char *names[] = { "a_mapper", "b_mappr" };
	struct es_dj_registry reg = { 0 };
	char *list = fake_helper("list", "{\"ops\": {\"a_mapper\": {\"known\": true, \"mapper\": true}, "
				      "\"b_mappr\": {\"known\": false}}, \"registered\": [\"a_mapper\", \"b_mapper\", "
				      "null, \"c_filter\"]}", "", 0);
	CHECK_INT_EQ(es_dj_registry_consult("/bin/sh", list, NULL, 0, names, 2, &reg), 0);
	CHECK(reg.consulted);
	CHECK_INT_EQ(reg.registered.n, 3); /* strings only */
	CHECK_STR_EQ(es_dj_registry_suggest(&reg, "b_mappr"), "b_mapper");
	CHECK_STR_EQ(es_dj_registry_suggest(&reg, "c_filtre"), "c_filter");
	CHECK(es_dj_registry_suggest(&reg, "zzzzzz_op") == NULL);
	es_dj_registry_free(&reg);
	CHECK(reg.registered.n == 0 && reg.registered.v == NULL);

	/* An answer without the list (an older helper, or every name known): no hint. */
	char *plain = fake_helper("plain", "{\"ops\": {\"a_mapper\": {\"known\": true, \"mapper\": true}, "
				       "\"b_mappr\": {\"known\": false}}}", "", 0);
	CHECK_INT_EQ(es_dj_registry_consult("/bin/sh", plain, NULL, 0, names, 2, &reg), 0);
	CHECK(reg.consulted && reg.registered.n == 0);
	CHECK(es_dj_registry_suggest(&reg, "b_mappr") == NULL);
	es_dj_registry_free(&reg);
	/* Not consulted (the naming convention): no hint. */
	struct es_dj_registry none = { 0 };
	CHECK(es_dj_registry_suggest(&none, "b_mappr") == NULL);
}

int main(void)
{
	T = test_tmpdir();
	es_log_quiet_begin();
	test_naming_convention();
	test_consult();
	test_identity_and_default();
	test_registered_list();
	es_log_quiet_end();
	return test_done();
}
