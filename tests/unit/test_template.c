/*
 * Unit tests of template: --process-cmd templates split like a shell line (quotes, escapes,
 * empty words) with their placeholders, and every syntax error named in its message.
 */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/template.h"

#include <stdio.h>
#include <string.h>

static void test_bad_templates(void)
{
	/* Bad templates: each with the reason in the message. */
	static const struct {
		const char *tmpl, *why;
	} bad[] = {
		{ "", "no program" },
		{ "  \t ", "no program" },
		{ "prog {input} {output} 'open", "unmatched single quote" },
		{ "prog {input} {output} \"open", "unmatched double quote" },
		{ "prog {input} {output} \\", "lone backslash" },
		{ "prog {input}", "must use both {input} and {output}" },
		{ "prog {output}", "must use both {input} and {output}" },
		{ "prog {{input}} {output}", "must use both {input} and {output}" },
		{ "prog {input} {output} {bogus}", "unknown placeholder '{bogus}'" },
		{ "prog {input} {output} {Input}", "unknown placeholder '{Input}'" },
		{ "prog {input} {output} a}b", "a single '}'" },
		{ "prog {input} {output} a{b", "an unmatched '{'" },
		{ "awk '{print}' {input} {output}", "unknown placeholder '{print}'" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		es_clear_error();
		es_log_quiet_begin();
		int rc = es_template_check(bad[i].tmpl);
		es_log_quiet_end();
		CHECK_INT_EQ(rc, ES_EUSAGE);
		if (!strstr(es_last_error(), bad[i].why))
			fprintf(stderr, "template '%s': got '%s', want '%s'\n", bad[i].tmpl, es_last_error(),
				bad[i].why);
		CHECK(strstr(es_last_error(), bad[i].why) != NULL);
	}
	CHECK_INT_EQ(es_template_check("awk '{{print}}' {input} > {output}"), 0);
	CHECK_INT_EQ(es_template_check("{input}{output}"), 0);

}

static void test_expand(void)
{
	struct es_strv argv = ES_STRV_INIT;
	struct es_template_vars v = { "/in put.jsonl", "/out", "/A", "part-1", "/J" };
	CHECK_INT_EQ(es_template_expand("prog -i {input} \"{output}x\" 'q {shard_id}' {job_dir}/{attempt_dir} {{}}", &v, &argv), 0);
	const char *want[] = { "prog", "-i", "/in put.jsonl", "/outx", "q part-1", "/J//A", "{}" };
	CHECK_INT_EQ((int)argv.n, 7);
	for (size_t i = 0; i < 7 && i < argv.n; i++)
		CHECK_STR_EQ(argv.v[i], want[i]);
	es_strv_free(&argv);
	/* At run time a bad template is bad job state (ES_EINVAL), and nothing is appended. */
	es_log_quiet_begin();
	CHECK_INT_EQ(es_template_expand("prog {nope}", &v, &argv), ES_EINVAL);
	es_log_quiet_end();
	CHECK_INT_EQ((int)argv.n, 0);
	es_strv_free(&argv);
}

int main(void)
{
	test_bad_templates();
	test_expand();
	return test_done();
}
