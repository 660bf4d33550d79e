/*
 * Unit tests of recipe: YAML reading and typing, the alias-bomb and size caps, every rule and
 * message of docs/design.md#recipe-checks, the naming-convention fallback and the registry helper
 * protocol (with fake helpers written as shell scripts and run with /bin/sh as the "python").
 */
#include "testlib.h"

#include "eshard/log.h"
#include "eshard/recipe.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char *T;
static char *RT;         /* T with symlinks resolved, as resolved paths show it */
static char cur[4096];   /* the recipe file of the last load */
static int counter;

static const char *FALLBACK_NONE =
	"Data-Juicer registry was not consulted (no registry helper is configured); operator kinds were "
	"checked by their names only";
static const char *DEFAULT_WARNING =
	"recipe executor_type=default will be overridden with executor_type=ray for shard workers";

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fputs(text, f);
	fclose(f);
}

static char *tpath(const char *name)
{
	static char buf[8][4096];
	static int slot;
	char *p = buf[slot++ % 8];
	snprintf(p, 4096, "%s/%s", T, name);
	return p;
}

static int load_text(const char *text, const struct es_recipe_opts *o, struct es_recipe *r)
{
	snprintf(cur, sizeof(cur), "%s/recipe-%03d.yaml", T, ++counter);
	write_file(cur, text);
	es_clear_error();
	es_log_quiet_begin();
	int rc = es_recipe_load(cur, o, r);
	es_log_quiet_end();
	return rc;
}

#define EXPECT_ERR(text, o, sub) expect_err(__LINE__, text, o, sub, 0)
#define EXPECT_ERR_EXACT(text, o, msg) expect_err(__LINE__, text, o, msg, 1)
static void expect_err(int line, const char *text, const struct es_recipe_opts *o, const char *want, int exact)
{
	struct es_recipe r;
	int rc = load_text(text, o, &r);
	int ok = rc == ES_EINVAL && (exact ? !strcmp(es_last_error(), want) : strstr(es_last_error(), want) != NULL);
	if (!ok)
		fprintf(stderr, "test_recipe.c:%d: rc=%d error '%s'; wanted '%s'\n", line, rc, es_last_error(), want);
	CHECK(ok);
	CHECK(r.executor_type == NULL && r.warnings == NULL && r.media_keys == NULL);
	es_recipe_free(&r);
}

#define EXPECT_OK(text, o, r) expect_ok(__LINE__, text, o, r)
static int expect_ok(int line, const char *text, const struct es_recipe_opts *o, struct es_recipe *r)
{
	int rc = load_text(text, o, r);
	if (rc)
		fprintf(stderr, "test_recipe.c:%d: rc=%d error '%s'\n", line, rc, es_last_error());
	CHECK_INT_EQ(rc, 0);
	return rc == 0;
}

/* The warnings, joined with " | ", for one comparison. */
static const char *warnings_of(const struct es_recipe *r)
{
	static char buf[8192];
	size_t o = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < r->n_warnings; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%s", i ? " | " : "", r->warnings[i]);
	return buf;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const struct es_recipe_opts NOREG = { NULL, NULL, NULL, 0 };

static void test_minimal_and_defaults(void)
{
	struct es_recipe r;
	if (EXPECT_OK("process:\n  - whitespace_normalization_mapper:\n  - text_length_filter:\n      min_len: 10\n",
		      &NOREG, &r)) {
		CHECK_STR_EQ(r.executor_type, "default");
		CHECK_INT_EQ((int)r.n_media, 3);
		if (r.n_media == 3) {
			CHECK_STR_EQ(r.media_keys[0], "images");
			CHECK_STR_EQ(r.media_keys[1], "audios");
			CHECK_STR_EQ(r.media_keys[2], "videos");
		}
		CHECK_INT_EQ((int)r.n_index, 0);
		CHECK_INT_EQ((int)r.n_warnings, 2);
		if (r.n_warnings == 2) {
			CHECK_STR_EQ(r.warnings[0], FALLBACK_NONE);
			CHECK_STR_EQ(r.warnings[1], DEFAULT_WARNING);
		}
		CHECK(r.dataset_path == NULL);
		CHECK_INT_EQ(r.has_ray_address, 0);
		CHECK(r.ray_address_str == NULL && r.ray_address_repr == NULL);
		CHECK_INT_EQ(r.registry_consulted, 0);
		CHECK(r.dj_version == NULL && r.dj_commit == NULL);
	}
	es_recipe_free(&r);
	CHECK(r.executor_type == NULL);
	es_recipe_free(&r); /* twice is harmless */

	/* opts NULL means all defaults. */
	if (EXPECT_OK("executor_type: ray\nprocess: [{a_mapper: }]\n", NULL, &r)) {
		CHECK_STR_EQ(r.executor_type, "ray");
		CHECK_STR_EQ(warnings_of(&r), FALLBACK_NONE);
	}
	es_recipe_free(&r);
}

static void test_executor_type(void)
{
	struct es_recipe r;
	if (EXPECT_OK("executor_type: ray\nprocess:\n  - a_mapper:\n", &NOREG, &r)) {
		CHECK_STR_EQ(r.executor_type, "ray");
		CHECK_STR_EQ(warnings_of(&r), FALLBACK_NONE);
	}
	es_recipe_free(&r);
	if (EXPECT_OK("executor_type: 'default'\nprocess: []\n", &NOREG, &r)) {
		CHECK_STR_EQ(r.executor_type, "default");
		CHECK_STR_EQ(warnings_of(&r), DEFAULT_WARNING); /* no operator: nothing judged by name */
	}
	es_recipe_free(&r);
	const char *pre = "Elastic sharding supports recipes for executor_type=default or ray; got executor_type=";
	char want[512];
	snprintf(want, sizeof(want), "%s'spark'", pre);
	EXPECT_ERR_EXACT("executor_type: spark\nprocess: []\n", &NOREG, want);
	snprintf(want, sizeof(want), "%sNone", pre);
	EXPECT_ERR_EXACT("executor_type:\nprocess: []\n", &NOREG, want);
	EXPECT_ERR_EXACT("executor_type: null\nprocess: []\n", &NOREG, want);
	snprintf(want, sizeof(want), "%s5", pre);
	EXPECT_ERR_EXACT("executor_type: 5\nprocess: []\n", &NOREG, want);
	snprintf(want, sizeof(want), "%s['ray', 1]", pre);
	EXPECT_ERR_EXACT("executor_type: [ray, 1]\nprocess: []\n", &NOREG, want);
	snprintf(want, sizeof(want), "%s'Ray'", pre);
	EXPECT_ERR_EXACT("executor_type: Ray\nprocess: []\n", &NOREG, want);
	/* Checked before the process list. */
	snprintf(want, sizeof(want), "%s'x'", pre);
	EXPECT_ERR_EXACT("executor_type: x\n", &NOREG, want);
}

static void test_process_list(void)
{
	const char *msg = "Recipe must define an explicit process list";
	EXPECT_ERR_EXACT("executor_type: ray\n", &NOREG, msg);
	EXPECT_ERR_EXACT("process:\n", &NOREG, msg);
	EXPECT_ERR_EXACT("process: {a_mapper: {}}\n", &NOREG, msg);
	EXPECT_ERR_EXACT("process: a_mapper\n", &NOREG, msg);

	EXPECT_ERR_EXACT("process:\n  - a_mapper\n", &NOREG, "process[0] must contain exactly one operator");
	EXPECT_ERR_EXACT("process:\n  - a_mapper:\n  - {b_mapper: {}, c_filter: {}}\n", &NOREG,
			 "process[1] must contain exactly one operator");
	EXPECT_ERR_EXACT("process:\n  - {}\n", &NOREG, "process[0] must contain exactly one operator");
	EXPECT_ERR_EXACT("process:\n  - [a_mapper]\n", &NOREG, "process[0] must contain exactly one operator");
	EXPECT_ERR_EXACT("process:\n  -\n", &NOREG, "process[0] must contain exactly one operator");
	/* The structural error of an earlier item comes before an unknown later operator. */
	EXPECT_ERR_EXACT("process:\n  - x\n  - no_such_op:\n", &NOREG, "process[0] must contain exactly one operator");

	/* A repeated key is one key (the last value wins), as in a Python dict. */
	struct es_recipe r;
	if (EXPECT_OK("process:\n  - {a_mapper: {save_dir: /x}, a_mapper: {index_key: k}}\n", &NOREG, &r)) {
		CHECK_INT_EQ((int)r.n_index, 1);
		CHECK(!strstr(warnings_of(&r), "save_dir"));
	}
	es_recipe_free(&r);

	/* Arguments: falsy values mean {}, anything else must be a mapping. */
	if (EXPECT_OK("process:\n  - a_mapper: ''\n  - b_mapper: 0\n  - c_mapper: []\n  - d_mapper: false\n"
		      "  - e_mapper: {}\n  - f_mapper: ~\n", &NOREG, &r))
		CHECK_INT_EQ((int)r.n_warnings, 2);
	es_recipe_free(&r);
	EXPECT_ERR_EXACT("process:\n  - a_mapper: [1]\n", &NOREG, "Arguments for operator 'a_mapper' must be a mapping");
	EXPECT_ERR_EXACT("process:\n  - a_mapper: x\n", &NOREG, "Arguments for operator 'a_mapper' must be a mapping");
	EXPECT_ERR_EXACT("process:\n  - a_mapper: 3\n", &NOREG, "Arguments for operator 'a_mapper' must be a mapping");
}

static void test_naming_convention(void)
{
	struct es_recipe r;
	if (EXPECT_OK("process:\n  - clean_html_mapper:\n  - language_id_score_filter: {lang: en}\n"
		      "  - text_length_filter:\n", &NOREG, &r))
		CHECK_INT_EQ(r.registry_consulted, 0);
	es_recipe_free(&r);

	const char *unknown[] = { "no_such_operator_xyz", "mapper", "_mapper", "text_mapper_x", "Foo_MAPPER" };
	for (size_t i = 0; i < sizeof(unknown) / sizeof(*unknown); i++) {
		char text[256], want[256];
		snprintf(text, sizeof(text), "process:\n  - %s:\n", unknown[i]);
		snprintf(want, sizeof(want), "Unknown operator '%s'; cannot prove it is shard-safe", unknown[i]);
		EXPECT_ERR_EXACT(text, &NOREG, want);
	}
	const char *whole[] = { "document_deduplicator", "document_minhash_deduplicator_mapper",
				"frequency_global_mapper", "full_dataset_stats_filter", "topk_specified_field_selector",
				"key_value_grouper", "entity_attribute_aggregator", "my_pipeline",
				"Document_DEDUPLICATOR_filter", "GLOBAL_x_filter" };
	for (size_t i = 0; i < sizeof(whole) / sizeof(*whole); i++) {
		char text[256], want[256];
		snprintf(text, sizeof(text), "process:\n  - %s:\n", whole[i]);
		snprintf(want, sizeof(want),
			 "Operator '%s' requires or may require whole-dataset semantics and cannot run shard by shard: "
			 "pass --allow-unsharded", whole[i]);
		EXPECT_ERR(text, &NOREG, want);
	}
	/* Names that are not strings are never in the registry. */
	EXPECT_ERR_EXACT("process:\n  - 1: {}\n", &NOREG, "Unknown operator 1; cannot prove it is shard-safe");
	EXPECT_ERR_EXACT("process:\n  - true:\n", &NOREG, "Unknown operator True; cannot prove it is shard-safe");
	EXPECT_ERR_EXACT("process:\n  - ~:\n", &NOREG, "Unknown operator None; cannot prove it is shard-safe");
	EXPECT_ERR_EXACT("process:\n  - \"it's\":\n", &NOREG, "Unknown operator \"it's\"; cannot prove it is shard-safe");
}

static void test_operator_args(void)
{
	struct es_recipe r;
	EXPECT_ERR_EXACT("process:\n  - text_length_filter:\n      stats_export_path: /tmp/x\n", &NOREG,
			 "Operator 'text_length_filter' sets stats_export_path, which would cause cross-shard output collisions");
	EXPECT_ERR_EXACT("process:\n  - text_length_filter:\n      stats_export_path: [a]\n", &NOREG,
			 "Operator 'text_length_filter' sets stats_export_path, which would cause cross-shard output collisions");
	/* Falsy stats_export_path values are fine. */
	if (EXPECT_OK("process:\n  - a_filter: {stats_export_path: ''}\n  - b_filter: {stats_export_path: null}\n"
		      "  - c_filter: {stats_export_path: 0}\n  - d_filter: {stats_export_path: []}\n", &NOREG, &r))
		CHECK_INT_EQ((int)r.n_warnings, 2);
	es_recipe_free(&r);
	/* An earlier operator's argument error comes before a later unknown operator. */
	EXPECT_ERR("process:\n  - a_filter: {stats_export_path: x}\n  - nope:\n", &NOREG, "sets stats_export_path");

	/* index_key: collected sorted and distinct; null ignored; otherwise a non-empty str. */
	if (EXPECT_OK("process:\n  - a_mapper: {index_key: zeta}\n  - b_mapper: {index_key: alpha}\n"
		      "  - c_mapper: {index_key: zeta}\n  - d_mapper: {index_key: null}\n  - e_mapper: {index_key: 'Beta'}\n",
		      &NOREG, &r)) {
		CHECK_INT_EQ((int)r.n_index, 3);
		if (r.n_index == 3) {
			CHECK_STR_EQ(r.index_keys[0], "Beta");
			CHECK_STR_EQ(r.index_keys[1], "alpha");
			CHECK_STR_EQ(r.index_keys[2], "zeta");
		}
	}
	es_recipe_free(&r);
	EXPECT_ERR_EXACT("process:\n  - a_mapper: {index_key: ''}\n", &NOREG, "Operator 'a_mapper' has an invalid index_key");
	EXPECT_ERR_EXACT("process:\n  - a_mapper: {index_key: 5}\n", &NOREG, "Operator 'a_mapper' has an invalid index_key");
	EXPECT_ERR_EXACT("process:\n  - a_mapper: {index_key: [x]}\n", &NOREG, "Operator 'a_mapper' has an invalid index_key");
	EXPECT_ERR_EXACT("process:\n  - a_mapper: {index_key: false}\n", &NOREG, "Operator 'a_mapper' has an invalid index_key");

	/* save_dir: a warning per operator, after the executor warning, in operator order. */
	if (EXPECT_OK("process:\n  - b_mapper: {save_dir: /out/b}\n  - a_mapper: {save_dir: ''}\n"
		      "  - c_mapper: {save_dir: /out/c}\n", &NOREG, &r)) {
		char want[2048];
		snprintf(want, sizeof(want), "%s | %s | operator 'b_mapper' uses an explicit save_dir; the caller must "
			 "ensure generated filenames do not collide across shards | operator 'c_mapper' uses an explicit "
			 "save_dir; the caller must ensure generated filenames do not collide across shards",
			 FALLBACK_NONE, DEFAULT_WARNING);
		CHECK_STR_EQ(warnings_of(&r), want);
	}
	es_recipe_free(&r);
}

static void test_media_keys(void)
{
	struct es_recipe r;
	if (EXPECT_OK("image_key: pics\naudio_key: pics\nprocess: []\n", &NOREG, &r)) {
		CHECK_INT_EQ((int)r.n_media, 2);
		if (r.n_media == 2) {
			CHECK_STR_EQ(r.media_keys[0], "pics");
			CHECK_STR_EQ(r.media_keys[1], "videos");
		}
	}
	es_recipe_free(&r);
	if (EXPECT_OK("video_key: images\nimage_key: 'yes'\nprocess: []\n", &NOREG, &r)) {
		CHECK_INT_EQ((int)r.n_media, 3);
		if (r.n_media == 3) {
			CHECK_STR_EQ(r.media_keys[0], "yes");
			CHECK_STR_EQ(r.media_keys[1], "audios");
			CHECK_STR_EQ(r.media_keys[2], "images");
		}
	}
	es_recipe_free(&r);
	EXPECT_ERR_EXACT("image_key: ''\nprocess: []\n", &NOREG, "image_key must be a non-empty string");
	EXPECT_ERR_EXACT("image_key:\nprocess: []\n", &NOREG, "image_key must be a non-empty string");
	EXPECT_ERR_EXACT("audio_key: 3\nprocess: []\n", &NOREG, "audio_key must be a non-empty string");
	EXPECT_ERR_EXACT("video_key: [v]\nprocess: []\n", &NOREG, "video_key must be a non-empty string");
	EXPECT_ERR_EXACT("image_key: yes\nprocess: []\n", &NOREG, "image_key must be a non-empty string");
	/* Operators are checked before the media keys. */
	EXPECT_ERR("image_key: ''\nprocess: [{nope: {}}]\n", &NOREG, "Unknown operator 'nope'");
}

static void test_dataset_and_ray_address(void)
{
	struct es_recipe r;
	if (EXPECT_OK("dataset_path: data/in.jsonl\nray_address: local\nprocess: []\n", &NOREG, &r)) {
		CHECK_STR_EQ(r.dataset_path, "data/in.jsonl");
		CHECK_INT_EQ(r.has_ray_address, 1);
		CHECK_STR_EQ(r.ray_address_str, "local");
		CHECK_STR_EQ(r.ray_address_repr, "'local'");
	}
	es_recipe_free(&r);
	const char *blank[] = { "dataset_path: \"  \\t\"\n", "dataset_path: \"\\u3000\"\n", "dataset_path: 5\n",
				"dataset_path: [a]\n", "dataset_path:\n" };
	for (size_t i = 0; i < sizeof(blank) / sizeof(*blank); i++) {
		char text[256];
		snprintf(text, sizeof(text), "%sprocess: []\n", blank[i]);
		if (EXPECT_OK(text, &NOREG, &r))
			CHECK(r.dataset_path == NULL);
		es_recipe_free(&r);
	}
	if (EXPECT_OK("ray_address:\nprocess: []\n", &NOREG, &r))
		CHECK(r.has_ray_address == 0 && r.ray_address_str == NULL);
	es_recipe_free(&r);

	/* str() and repr() of typed values (YAML 1.1 as PyYAML's safe_load types them). */
	static const char *cases[][3] = {
		{ "12", "12", "12" },
		{ "true", "True", "True" },
		{ "Off", "False", "False" },
		{ "1.5", "1.5", "1.5" },
		{ "0x10", "16", "16" },
		{ "0b101", "5", "5" },
		{ "017", "15", "15" },
		{ "0o17", "0o17", "'0o17'" },
		{ "1_000", "1000", "1000" },
		{ "-0", "0", "0" },
		{ "+12", "12", "12" },
		{ "1:30", "90", "90" },
		{ "1:30.5", "90.5", "90.5" },
		{ "1e5", "1e5", "'1e5'" },
		{ "1.0e+5", "100000.0", "100000.0" },
		{ "1.", "1.0", "1.0" },
		{ ".5", "0.5", "0.5" },
		{ "0.0000001", "1e-07", "1e-07" },
		{ "1.0e+16", "1e+16", "1e+16" },
		{ "123456789.125", "123456789.125", "123456789.125" },
		{ "-.inf", "-inf", "-inf" },
		{ ".NaN", "nan", "nan" },
		{ "-0.0", "-0.0", "-0.0" },
		{ "12345678901234567890123", "12345678901234567890123", "12345678901234567890123" },
		{ "0xFFFFFFFFFFFFFFFFFF", "4722366482869645213695", "4722366482869645213695" },
		{ "2024-01-31", "2024-01-31", "datetime.date(2024, 1, 31)" },
		{ "\"it's\"", "it's", "\"it's\"" },
		{ "'say \"hi\" it''s'", "say \"hi\" it's", "'say \"hi\" it\\'s'" },
		{ "\"a\\tb\\\\c\\x01\\u00e9\\u2028\"", "a\tb\\c\x01\xc3\xa9\xe2\x80\xa8", "'a\\tb\\\\c\\x01\xc3\xa9\\u2028'" },
		{ "[a, 1, null, {k: v}]", "['a', 1, None, {'k': 'v'}]", "['a', 1, None, {'k': 'v'}]" },
		{ "{b: 1, a: 2, b: 3}", "{'b': 3, 'a': 2}", "{'b': 3, 'a': 2}" },
		{ "!!str 12", "12", "'12'" },
		{ "!!float 1", "1.0", "1.0" },
		{ "!!int '0x1f'", "31", "31" },
		{ "ray://head:10001", "ray://head:10001", "'ray://head:10001'" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char text[512];
		snprintf(text, sizeof(text), "ray_address: %s\nprocess: []\n", cases[i][0]);
		if (EXPECT_OK(text, &NOREG, &r)) {
			CHECK_INT_EQ(r.has_ray_address, 1);
			int ok = r.ray_address_str && r.ray_address_repr && !strcmp(r.ray_address_str, cases[i][1]) &&
				 !strcmp(r.ray_address_repr, cases[i][2]);
			if (!ok)
				fprintf(stderr, "ray_address %s: str '%s' repr '%s', wanted '%s' and '%s'\n", cases[i][0],
					r.ray_address_str, r.ray_address_repr, cases[i][1], cases[i][2]);
			CHECK(ok);
		}
		es_recipe_free(&r);
	}
}

static void test_yaml_errors(void)
{
	char want[8192];
	struct es_recipe r;
	/* Not a mapping. */
	const char *notmap[] = { "- a\n- b\n", "just text\n", "", "# only a comment\n", "42\n", "~\n" };
	for (size_t i = 0; i < sizeof(notmap) / sizeof(*notmap); i++) {
		int rc = load_text(notmap[i], &NOREG, &r);
		snprintf(want, sizeof(want), "Recipe must be a YAML mapping: %s", cur);
		CHECK_INT_EQ(rc, ES_EINVAL);
		CHECK_STR_EQ(es_last_error(), want);
	}
	/* Invalid YAML: the path, libyaml's problem and where. */
	int rc = load_text("process: [\n", &NOREG, &r);
	snprintf(want, sizeof(want), "Invalid YAML in %s: ", cur);
	CHECK_INT_EQ(rc, ES_EINVAL);
	CHECK(!strncmp(es_last_error(), want, strlen(want)));
	CHECK(strstr(es_last_error(), " at line ") != NULL);
	rc = load_text("a: b\n c: d\n  - x\n", &NOREG, &r);
	CHECK_INT_EQ(rc, ES_EINVAL);
	CHECK(strstr(es_last_error(), "Invalid YAML in ") && strstr(es_last_error(), "line 2"));
	rc = load_text("a: \"\xff\"\n", &NOREG, &r);
	CHECK_INT_EQ(rc, ES_EINVAL);
	CHECK(strstr(es_last_error(), "Invalid YAML in ") != NULL);
	EXPECT_ERR("a: 1\n---\nb: 2\n", &NOREG, "expected a single document in the stream");
	EXPECT_ERR("a: *nope\n", &NOREG, "found undefined alias 'nope'");
	EXPECT_ERR("a: &x [1, *x]\n", &NOREG, "recursive alias");
	EXPECT_ERR("a: &x 1\nb: &x 2\n", &NOREG, "found duplicate anchor 'x'");
	EXPECT_ERR("a: !foo x\nprocess: []\n", &NOREG, "could not determine a constructor for the tag '!foo'");
	EXPECT_ERR("a: !!python/tuple [1]\n", &NOREG, "could not determine a constructor for the tag");
	EXPECT_ERR("a: !!set {x}\n", &NOREG, "not supported");
	EXPECT_ERR("a: 2024-02-30\nprocess: []\n", &NOREG, "invalid timestamp '2024-02-30'");
	EXPECT_ERR("a: !!int abc\nprocess: []\n", &NOREG, "cannot construct an integer from 'abc'");
	EXPECT_ERR("a: !!bool maybe\nprocess: []\n", &NOREG, "cannot construct a boolean from 'maybe'");
	EXPECT_ERR("a: 0x_\nprocess: []\n", &NOREG, "cannot construct an integer from '0x_'");
	EXPECT_ERR("? [a]\n: b\nprocess: []\n", &NOREG, "found unhashable key");
	EXPECT_ERR("a: {<<: 1}\nprocess: []\n", &NOREG, "for merging");
	EXPECT_ERR("a: <<\nprocess: []\n", &NOREG, "tag:yaml.org,2002:merge");
	EXPECT_ERR("a: =\nprocess: []\n", &NOREG, "tag:yaml.org,2002:value");

	/* A missing file is an I/O error. */
	es_log_quiet_begin();
	rc = es_recipe_load(tpath("no-such-recipe.yaml"), &NOREG, &r);
	es_log_quiet_end();
	CHECK_INT_EQ(rc, ES_EIO);
	CHECK(strstr(es_last_error(), "no-such-recipe.yaml") != NULL);

	/* Past the size cap (a sparse file: nothing is read). */
	char *big = tpath("big.yaml");
	int fd = open(big, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	CHECK(fd >= 0);
	if (fd >= 0) {
		CHECK(ftruncate(fd, (off_t)ES_RECIPE_MAX_BYTES + 1) == 0);
		close(fd);
	}
	es_log_quiet_begin();
	rc = es_recipe_load(big, &NOREG, &r);
	es_log_quiet_end();
	CHECK_INT_EQ(rc, ES_EINVAL);
	CHECK(strstr(es_last_error(), "larger than 16 MiB") != NULL);
	unlink(big);
}

static void test_yaml_typing_and_aliases(void)
{
	struct es_recipe r;
	/* Quoted scalars are strings, plain ones are typed. */
	if (EXPECT_OK("executor_type: \"ray\"\nimage_key: '017'\naudio_key: 0o17\nvideo_key: 1e5\nprocess: []\n", &NOREG, &r) &&
	    CHECK_INT_EQ(r.n_media, 3)) {
		CHECK_STR_EQ(r.executor_type, "ray");
		CHECK_STR_EQ(r.media_keys[0], "017");
		CHECK_STR_EQ(r.media_keys[1], "0o17");
		CHECK_STR_EQ(r.media_keys[2], "1e5");
	}
	es_recipe_free(&r);
	const char *typed[] = { "017", "1_000", ".inf", "2024-01-01", "~", "NULL", "on", "No", "0x1f", "1:20", "3.",
				"2001-12-14t21:59:43.10-05:00", "!!int '7'", "!!null x" };
	for (size_t i = 0; i < sizeof(typed) / sizeof(*typed); i++) {
		char text[256];
		snprintf(text, sizeof(text), "image_key: %s\nprocess: []\n", typed[i]);
		EXPECT_ERR_EXACT(text, &NOREG, "image_key must be a non-empty string");
	}
	const char *strings[] = { "y", "n", "0o7", "08", "1e+5", "-.5", "._5", "nulls", "2024-1-1", "<<<", "=x", "! x",
				  "!!str 017", "0x", "1:30:x" };
	for (size_t i = 0; i < sizeof(strings) / sizeof(*strings); i++) {
		char text[256];
		snprintf(text, sizeof(text), "image_key: %s\nprocess: []\n", strings[i]);
		if (EXPECT_OK(text, &NOREG, &r) && r.n_media == 3) {
			int ok = !strcmp(r.media_keys[0], strings[i]) || !strncmp(strings[i], "!", 1);
			if (!ok)
				fprintf(stderr, "image_key %s read as '%s'\n", strings[i], r.media_keys[0]);
			CHECK(ok);
		}
		es_recipe_free(&r);
	}

	/* Anchors, aliases and merge keys, shared and not copied. */
	if (EXPECT_OK("base: &b {min_len: 5, save_dir: /out}\nlens: &l {index_key: idx}\nprocess:\n"
		      "  - text_length_filter: *b\n  - a_mapper: {<<: *l}\n  - b_mapper: {<<: [*l, *b], index_key: own}\n"
		      "  - c_mapper: {<<: *b, save_dir: ''}\n  - <<: {d_mapper: {index_key: merged}}\n",
		      &NOREG, &r)) {
		CHECK_INT_EQ((int)r.n_index, 3);
		if (r.n_index == 3) {
			CHECK_STR_EQ(r.index_keys[0], "idx");
			CHECK_STR_EQ(r.index_keys[1], "merged");
			CHECK_STR_EQ(r.index_keys[2], "own");
		}
		/* save_dir from *b on text_length_filter and b_mapper; c_mapper overrides it. */
		const char *w = warnings_of(&r);
		CHECK(strstr(w, "operator 'text_length_filter' uses an explicit save_dir") != NULL);
		CHECK(strstr(w, "operator 'b_mapper' uses an explicit save_dir") != NULL);
		CHECK(strstr(w, "'c_mapper'") == NULL);
	}
	es_recipe_free(&r);
	/* Merged top-level keys. */
	if (EXPECT_OK("defaults: &d {executor_type: ray, image_key: img}\n<<: *d\nimage_key: own\nprocess: []\n", &NOREG, &r) &&
	    CHECK_INT_EQ(r.n_media, 3)) {
		CHECK_STR_EQ(r.executor_type, "ray");
		CHECK_STR_EQ(r.media_keys[0], "own");
	}
	es_recipe_free(&r);
	/* Two keys after merging: the merged one counts. */
	EXPECT_ERR_EXACT("m: &m {b_mapper: {}}\nprocess:\n  - {<<: *m, a_mapper: {}}\n", &NOREG,
			 "process[0] must contain exactly one operator");
	/* Keys equal as Python values are one key: 1, 1.0 and true. */
	EXPECT_ERR_EXACT("process:\n  - {1: {}, 1.0: {}, true: x}\n", &NOREG, "Arguments for operator 1 must be a mapping");
}

static void test_alias_bomb(void)
{
	/* Billion laughs: 10^9 expanded strings from a few hundred bytes. */
	char text[4096];
	size_t o = (size_t)snprintf(text, sizeof(text), "a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\","
				    "\"lol\",\"lol\",\"lol\",\"lol\"]\n");
	for (int i = 1; i <= 9; i++) {
		o += (size_t)snprintf(text + o, sizeof(text) - o, "a%d: &a%d [", i, i);
		for (int j = 0; j < 10; j++)
			o += (size_t)snprintf(text + o, sizeof(text) - o, "%s*a%d", j ? "," : "", i - 1);
		o += (size_t)snprintf(text + o, sizeof(text) - o, "]\n");
	}
	snprintf(text + o, sizeof(text) - o, "process: *a9\n");
	struct es_recipe r;
	double t0 = now();
	int rc = load_text(text, &NOREG, &r);
	double dt = now() - t0;
	char want[8192];
	snprintf(want, sizeof(want), "YAML recipe %s expands to more than 1000000 nodes (alias bomb?)", cur);
	CHECK_INT_EQ(rc, ES_EINVAL);
	CHECK_STR_EQ(es_last_error(), want);
	if (dt > 0.5)
		fprintf(stderr, "alias bomb took %.3f s\n", dt);
	CHECK(dt < 0.5);

	/* Depth through aliases: each level wraps the previous one. */
	struct { char *p; size_t n, cap; } b = { NULL, 0, 0 };
	b.cap = 1 << 20;
	b.p = malloc(b.cap);
	CHECK(b.p != NULL);
	if (b.p) {
		b.n = (size_t)snprintf(b.p, b.cap, "d0: &d0 [x]\n");
		for (int i = 1; i <= 1100; i++)
			b.n += (size_t)snprintf(b.p + b.n, b.cap - b.n, "d%d: &d%d [*d%d]\n", i, i, i - 1);
		snprintf(b.p + b.n, b.cap - b.n, "process: []\n");
		EXPECT_ERR(b.p, &NOREG, "nests deeper than 1000 levels");
		/* Plain nesting. */
		b.n = (size_t)snprintf(b.p, b.cap, "a: ");
		for (int i = 0; i < 1500; i++)
			b.p[b.n++] = '[';
		for (int i = 0; i < 1500; i++)
			b.p[b.n++] = ']';
		b.p[b.n] = '\0';
		EXPECT_ERR(b.p, &NOREG, "nests deeper than 1000 levels");
		/* Many plain nodes (no alias) past the cap. */
		free(b.p);
		b.cap = (size_t)8 << 20;
		b.p = malloc(b.cap);
		if (b.p) {
			b.n = (size_t)snprintf(b.p, b.cap, "a: [");
			for (int i = 0; i < 1100000; i++) {
				b.p[b.n++] = '1';
				b.p[b.n++] = ',';
			}
			b.p[b.n++] = ']';
			b.p[b.n] = '\0';
			EXPECT_ERR(b.p, &NOREG, "expands to more than 1000000 nodes");
		}
	}
	free(b.p);
}

/* A fake registry helper run as "/bin/sh <script> args...": it records its arguments and
 * every call, prints out on stdout and err on stderr, and exits with code. */
static char *fake_helper(const char *tag, const char *out, const char *err, int code)
{
	static char path[8][4096];
	static int slot;
	char *p = path[slot++ % 8];
	snprintf(p, 4096, "%s/helper-%s.sh", T, tag);
	char text[16384];
	snprintf(text, sizeof(text),
		 "printf '%%s\\n' \"$@\" > '%s/args-%s.txt'\n"
		 "echo call >> '%s/calls-%s.txt'\n"
		 "cat <<'EOF_OUT'\n%s\nEOF_OUT\n"
		 "cat >&2 <<'EOF_ERR'\n%s\nEOF_ERR\n"
		 "exit %d\n",
		 T, tag, T, tag, out, err, code);
	write_file(p, text);
	return p;
}

static char *read_small(const char *path)
{
	static char buf[8192];
	buf[0] = '\0';
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static const char *ANSWER =
	"{\"data_juicer_version\": \"1.4.2\", \"commit\": \"abc123\", \"ops\": {"
	"\"clean_html_mapper\": {\"known\": true, \"mapper\": true, \"filter\": false, \"global\": false}, "
	"\"text_length_filter\": {\"known\": true, \"mapper\": false, \"filter\": true, \"global\": false}, "
	"\"my_custom_op\": {\"known\": true, \"mapper\": true, \"filter\": false, \"global\": false}, "
	"\"nothing_mapper\": {\"known\": false, \"mapper\": false, \"filter\": false, \"global\": false}, "
	"\"plain_op\": {\"known\": true, \"mapper\": false, \"filter\": false, \"global\": false}, "
	"\"flagged_mapper\": {\"known\": true, \"mapper\": true, \"filter\": false, \"global\": true}, "
	"\"document_deduplicator\": {\"known\": true, \"mapper\": true, \"filter\": false, \"global\": false}}}";

static void test_registry(void)
{
	struct es_recipe r;
	struct es_recipe_opts o = { "/bin/sh", fake_helper("ok", ANSWER, "", 0), T, 0 };
	mkdir(tpath("ops"), 0755);
	write_file(tpath("ops/my_ops.py"), "# custom operators\n");
	if (EXPECT_OK("executor_type: ray\ncustom_operator_paths: ops/my_ops.py\nprocess:\n  - text_length_filter:\n"
		      "  - clean_html_mapper:\n  - my_custom_op:\n  - text_length_filter: {min_len: 3}\n", &o, &r)) {
		CHECK_INT_EQ(r.registry_consulted, 1);
		CHECK_STR_EQ(r.dj_version, "1.4.2");
		CHECK_STR_EQ(r.dj_commit, "abc123");
		CHECK_INT_EQ((int)r.n_warnings, 0);
	}
	es_recipe_free(&r);
	char want[8192];
	snprintf(want, sizeof(want), "--custom-path\n%s/ops/my_ops.py\n--\nclean_html_mapper\nmy_custom_op\ntext_length_filter\n", RT);
	const char *args = read_small(tpath("args-ok.txt"));
	CHECK_STR_EQ(args, want);
	const char *calls = read_small(tpath("calls-ok.txt"));
	CHECK_STR_EQ(calls, "call\n"); /* run once for the whole recipe */

	/* The registry decides, not the name. */
	EXPECT_ERR_EXACT("process:\n  - nothing_mapper:\n", &o, "Unknown operator 'nothing_mapper'; cannot prove it is shard-safe");
	EXPECT_ERR_EXACT("process:\n  - plain_op:\n", &o,
			 "Operator 'plain_op' requires or may require whole-dataset semantics and cannot run shard by shard"
			 ": pass --allow-unsharded to run the whole dataset as one shard on one rank");
	EXPECT_ERR_EXACT("process:\n  - flagged_mapper:\n", &o,
			 "Operator 'flagged_mapper' requires or may require whole-dataset semantics and cannot run shard by shard"
			 ": pass --allow-unsharded to run the whole dataset as one shard on one rank");
	EXPECT_ERR_EXACT("process:\n  - document_deduplicator:\n", &o,
			 "Operator 'document_deduplicator' requires or may require whole-dataset semantics and cannot run shard by shard"
			 ": pass --allow-unsharded to run the whole dataset as one shard on one rank, or deduplicate "
			 "across the dataset with Data-Juicer itself on a Ray cluster (ray_document_deduplicator, "
			 "ray_bts_minhash_deduplicator, ray_image_deduplicator, ray_video_deduplicator)");
	/* A name the helper was not asked about (not a string) is unknown. */
	EXPECT_ERR_EXACT("process:\n  - clean_html_mapper:\n  - 7:\n", &o, "Unknown operator 7; cannot prove it is shard-safe");

	/* custom-operator-paths (a list) when custom_operator_paths is empty. */
	if (EXPECT_OK("custom_operator_paths: []\ncustom-operator-paths: [ops/my_ops.py, /abs/x]\nprocess:\n  - my_custom_op:\n",
		      &o, &r))
		CHECK_INT_EQ(r.registry_consulted, 1);
	es_recipe_free(&r);
	snprintf(want, sizeof(want), "--custom-path\n%s/ops/my_ops.py\n--custom-path\n/abs/x\n--\nmy_custom_op\n", RT);
	args = read_small(tpath("args-ok.txt"));
	CHECK_STR_EQ(args, want);
	EXPECT_ERR("custom_operator_paths: [ops/x.py, 3]\nprocess:\n  - my_custom_op:\n", &o,
		   "custom_operator_paths must be a path or a list of paths; got 3");

	/* No operator: nothing to ask. */
	unlink(tpath("calls-ok.txt"));
	if (EXPECT_OK("executor_type: ray\nprocess: []\n", &o, &r)) {
		CHECK_INT_EQ(r.registry_consulted, 0);
		CHECK_INT_EQ((int)r.n_warnings, 0);
	}
	es_recipe_free(&r);
	CHECK(access(tpath("calls-ok.txt"), F_OK) != 0);

	/* Noise on stdout before the answer is tolerated. */
	struct es_recipe_opts noisy = { "/bin/sh", fake_helper("noisy", "loading...\nstill loading\n{\"ops\": {"
			"\"a_mapper\": {\"known\": true, \"mapper\": true}}}", "", 0), NULL, 0 };
	if (EXPECT_OK("process:\n  - a_mapper:\n", &noisy, &r)) {
		CHECK_INT_EQ(r.registry_consulted, 1);
		CHECK(r.dj_version == NULL && r.dj_commit == NULL);
		CHECK_STR_EQ(warnings_of(&r), DEFAULT_WARNING);
	}
	es_recipe_free(&r);
}

static void test_registry_failures(void)
{
	struct es_recipe r;
	char want[8192];
	/* Exit 3: Data-Juicer is not importable -> the naming convention, with a warning. */
	struct es_recipe_opts o3 = { "/bin/sh", fake_helper("nodj", "", "ERROR: cannot import data_juicer: "
			"ModuleNotFoundError: No module named 'data_juicer'", 3), NULL, 0 };
	if (EXPECT_OK("process:\n  - clean_html_mapper:\n  - text_length_filter:\n", &o3, &r)) {
		CHECK_INT_EQ(r.registry_consulted, 0);
		snprintf(want, sizeof(want), "Data-Juicer registry was not consulted (cannot import data_juicer: "
			 "ModuleNotFoundError: No module named 'data_juicer'); operator kinds were checked by their "
			 "names only | %s", DEFAULT_WARNING);
		CHECK_STR_EQ(warnings_of(&r), want);
	}
	es_recipe_free(&r);
	EXPECT_ERR_EXACT("process:\n  - my_custom_op:\n", &o3, "Unknown operator 'my_custom_op'; cannot prove it is shard-safe");
	EXPECT_ERR("process:\n  - key_value_grouper:\n", &o3, "requires or may require whole-dataset semantics");
	/* Without the registry, custom paths must at least exist; the custom ops go by name. */
	EXPECT_ERR_EXACT("custom_operator_paths: /no/such/ops.py\nprocess:\n  - x_mapper:\n", &o3,
			 "Custom operator path does not exist: /no/such/ops.py");
	EXPECT_ERR_EXACT("custom_operator_paths: /no/such/ops.py\nprocess:\n  - x_mapper:\n", &NOREG,
			 "Custom operator path does not exist: /no/such/ops.py");
	struct es_recipe_opts o3b = o3;
	o3b.base_dir = T;
	mkdir(tpath("ops"), 0755);
	write_file(tpath("ops/my_ops.py"), "# custom operators\n");
	if (EXPECT_OK("custom_operator_paths: [ops/my_ops.py]\nprocess:\n  - my_custom_mapper:\n", &o3b, &r))
		CHECK_INT_EQ(r.registry_consulted, 0);
	es_recipe_free(&r);

	/* The interpreter cannot be started -> fallback. */
	struct es_recipe_opts nopy = { "/nonexistent/python3", o3.helper, NULL, 0 };
	if (EXPECT_OK("process:\n  - clean_html_mapper:\n", &nopy, &r))
		CHECK(strstr(warnings_of(&r), "Data-Juicer registry was not consulted (cannot start "
				      "'/nonexistent/python3': No such file or directory); operator kinds were "
				      "checked by their names only") != NULL);
	es_recipe_free(&r);

	/* The default interpreter (python3) with a Python helper that exits 3. */
	char *py = tpath("helper-exit3.py");
	write_file(py, "import sys\nsys.stderr.write(\"ERROR: cannot import data_juicer: no module\\n\")\nsys.exit(3)\n");
	struct es_recipe_opts pyo = { NULL, py, NULL, 0 };
	if (EXPECT_OK("process:\n  - clean_html_mapper:\n", &pyo, &r)) {
		CHECK_INT_EQ(r.registry_consulted, 0);
		CHECK(!strncmp(warnings_of(&r), "Data-Juicer registry was not consulted (", 40));
		/* Unless python3 is missing here, the reason is the helper's own message. */
		if (!strstr(warnings_of(&r), "(cannot start 'python3'"))
			CHECK(strstr(warnings_of(&r), "(cannot import data_juicer: no module)") != NULL);
	}
	es_recipe_free(&r);

	/* Exit 4: a custom operator path failed to load -> an error naming the helper. */
	struct es_recipe_opts o4 = { "/bin/sh", fake_helper("custom", "", "ERROR: cannot load custom operator paths "
			"['/x']: ImportError: boom", 4), NULL, 0 };
	snprintf(want, sizeof(want), "Data-Juicer registry helper %s could not load the custom operators: "
		 "cannot load custom operator paths ['/x']: ImportError: boom", o4.helper);
	EXPECT_ERR_EXACT("custom_operator_paths: /x\nprocess:\n  - a_mapper:\n", &o4, want);
	/* The helper is asked before any operator is checked. */
	EXPECT_ERR("custom_operator_paths: /x\nprocess:\n  - a_mapper: [bad]\n", &o4, "could not load the custom operators");

	/* Any other failure: the helper and its message (the exception line of a traceback). */
	struct es_recipe r2;
	struct es_recipe_opts o1 = { "/bin/sh", fake_helper("crash", "", "Traceback (most recent call last):\n"
			"  File \"x.py\", line 1, in <module>\nRuntimeError: kaput", 1), NULL, 0 };
	int rc = load_text("process:\n  - a_mapper:\n", &o1, &r2);
	snprintf(want, sizeof(want), "Data-Juicer registry helper %s failed with exit status 1: RuntimeError: kaput",
		 o1.helper);
	CHECK_INT_EQ(rc, ES_EIO);
	CHECK_STR_EQ(es_last_error(), want);
	struct es_recipe_opts og = { "/bin/sh", fake_helper("garbage", "this is not json", "", 0), NULL, 0 };
	rc = load_text("process:\n  - a_mapper:\n", &og, &r2);
	CHECK_INT_EQ(rc, ES_EIO);
	CHECK(strstr(es_last_error(), og.helper) && strstr(es_last_error(), "gave no usable answer"));
	struct es_recipe_opts om = { "/bin/sh", fake_helper("missing", ANSWER, "", 0), NULL, 0 };
	rc = load_text("process:\n  - other_mapper:\n", &om, &r2);
	CHECK_INT_EQ(rc, ES_EIO);
	CHECK(strstr(es_last_error(), "no answer for operator 'other_mapper'") != NULL);
	char *killer = tpath("helper-kill.sh");
	write_file(killer, "echo dying >&2\nkill -9 $$\n");
	struct es_recipe_opts ok9 = { "/bin/sh", killer, NULL, 0 };
	rc = load_text("process:\n  - a_mapper:\n", &ok9, &r2);
	CHECK_INT_EQ(rc, ES_EIO);
	CHECK(strstr(es_last_error(), "killed by signal 9: dying") != NULL);
	/* A helper file that does not exist: the interpreter fails (exit 127 from sh). */
	struct es_recipe_opts gone = { "/bin/sh", tpath("no-such-helper.sh"), NULL, 0 };
	rc = load_text("process:\n  - a_mapper:\n", &gone, &r2);
	CHECK(rc == 0 || rc == ES_EIO);
	es_recipe_free(&r2);
}

/* "did you mean": the closest registered name, only when the helper listed the registry's
 * names (it does when an asked name is unknown) and one is close. */
static void test_registry_suggestions(void)
{
	struct es_recipe_opts o = { "/bin/sh", fake_helper("list", "{\"ops\": {"
			"\"clean_htm_mapper\": {\"known\": false}, \"zzz_op\": {\"known\": false}, "
			"\"text_length_filter\": {\"known\": true, \"filter\": true}}, \"registered\": "
			"[\"clean_html_mapper\", \"clean_email_mapper\", \"text_length_filter\", 7, \"\"]}", "", 0), NULL, 0 };
	EXPECT_ERR_EXACT("process:\n  - clean_htm_mapper:\n", &o,
			 "Unknown operator 'clean_htm_mapper'; cannot prove it is shard-safe (did you mean 'clean_html_mapper'?)");
	EXPECT_ERR_EXACT("process:\n  - text_length_filter:\n  - zzz_op:\n", &o,
			 "Unknown operator 'zzz_op'; cannot prove it is shard-safe");
	/* A name that is not a string was not asked about: no hint. */
	EXPECT_ERR_EXACT("process:\n  - text_length_filter:\n  - 7:\n", &o, "Unknown operator 7; cannot prove it is shard-safe");
	/* The naming-convention fallback has no list: no hint, even for a near miss. */
	struct es_recipe_opts o3 = { "/bin/sh", fake_helper("nodj2", "", "ERROR: cannot import data_juicer", 3), NULL, 0 };
	EXPECT_ERR_EXACT("process:\n  - text_length_filtr:\n", &o3, "Unknown operator 'text_length_filtr'; cannot prove it is shard-safe");
	EXPECT_ERR_EXACT("process:\n  - text_length_filtr:\n", &NOREG, "Unknown operator 'text_length_filtr'; cannot prove it is shard-safe");
}

/* Top-level settings that cannot work per shard: refused naming the option and its value
 * (PyYAML typing: 0, false, null, empty are unset); the ones that only may not: warned. */
static void test_export_settings(void)
{
	static const char *const P = "process:\n  - whitespace_normalization_mapper:\n";
	static const struct { const char *yaml, *msg; } bad[] = {
		{ "export_type: parquet\n", "Recipe option export_type='parquet' cannot work per shard: every shard's output "
		  "is verified and merged as JSONL; only 'jsonl' (or no export_type) works" },
		{ "export_type: json\n", "Recipe option export_type='json' cannot work per shard" },
		{ "export_type: JSONL\n", "Recipe option export_type='JSONL' cannot work per shard" },
		{ "export_type: 1\n", "Recipe option export_type=1 cannot work per shard" },
		{ "export_shard_size: 1048576\n", "Recipe option export_shard_size=1048576 cannot work per shard: it sizes" },
		{ "export_shard_size: 1.5\n", "Recipe option export_shard_size=1.5 cannot work per shard" },
		{ "export_in_parallel: yes\n", "Recipe option export_in_parallel=True cannot work per shard" },
		{ "encrypt_before_export: true\nencryption_key_path: /k\n",
		  "Recipe option encrypt_before_export=True cannot work per shard: encrypted output files" },
		{ "generated_dataset_config:\n  type: EmptyFormatter\n", "Recipe option generated_dataset_config="
		  "{'type': 'EmptyFormatter'} cannot work per shard: Data-Juicer loads it instead of dataset_path" },
	};
	char text[1024];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "%s%s", bad[i].yaml, P);
		EXPECT_ERR(text, &NOREG, bad[i].msg);
	}
	/* Unset in every way PyYAML has: accepted without a warning of its own. */
	static const char *const fine[] = {
		"export_type: jsonl\n", "export_type: null\n", "export_shard_size: 0\n", "export_shard_size: 0.0\n",
		"export_in_parallel: false\n", "export_in_parallel: off\n", "encrypt_before_export: no\n",
		"generated_dataset_config: {}\n", "generated_dataset_config:\n", "export_extra_args: {}\n",
		"export_path: /x/out.jsonl\nkeep_stats_in_res_ds: false\nnp: 8\n",
	};
	struct es_recipe r;
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		snprintf(text, sizeof(text), "executor_type: ray\n%s%s", fine[i], P);
		if (EXPECT_OK(text, &NOREG, &r))
			CHECK_STR_EQ(warnings_of(&r), FALLBACK_NONE);
		es_recipe_free(&r);
	}
	/* Warned: arguments of every shard's write_json, and a dataset list that dataset_path wins over. */
	snprintf(text, sizeof(text), "executor_type: ray\nexport_extra_args:\n  min_rows_per_file: 10\n"
		 "dataset:\n  configs:\n    - type: local\n      path: /d\n%s", P);
	if (EXPECT_OK(text, &NOREG, &r)) {
		char want[2048];
		snprintf(want, sizeof(want), "%s | recipe option export_extra_args is passed to Ray's write_json for every "
			 "shard; an argument that changes the file format (pandas_json_args) breaks the merge | recipe "
			 "option dataset is ignored: shard workers read their shard through dataset_path", FALLBACK_NONE);
		CHECK_STR_EQ(warnings_of(&r), want);
	}
	es_recipe_free(&r);
	/* The reference's checks come first: an unknown operator is reported before the export. */
	EXPECT_ERR("export_type: parquet\nprocess:\n  - no_such_op_xyz:\n", &NOREG, "Unknown operator 'no_such_op_xyz'");
}

/* allow_unsharded: the refusals of a recipe that is not shard-safe become its reasons, in the
 * order found, without an error line; output formats that cannot be merged stay refused. */
static void test_allow_unsharded(void)
{
	static const struct es_recipe_opts ALLOW = { NULL, NULL, NULL, 1 };
	struct es_recipe r;
	if (EXPECT_OK("executor_type: ray\nexport_shard_size: 10\nprocess:\n  - document_deduplicator:\n"
		      "  - text_length_filter:\n      stats_export_path: /tmp/s.jsonl\n", &ALLOW, &r)) {
		CHECK_STR_EQ(es_last_error(), "");
		if (CHECK_INT_EQ(r.n_unsharded, 3)) {
			CHECK_STR_EQ(r.unsharded_reasons[0], "Operator 'document_deduplicator' requires or may require "
				     "whole-dataset semantics and cannot run shard by shard");
			CHECK_STR_EQ(r.unsharded_reasons[1], "Operator 'text_length_filter' sets stats_export_path, which "
				     "would cause cross-shard output collisions");
			CHECK(strncmp(r.unsharded_reasons[2], "Recipe option export_shard_size=10 cannot work per shard", 56) == 0);
		}
		CHECK_STR_EQ(warnings_of(&r), FALLBACK_NONE);
	}
	es_recipe_free(&r);
	CHECK(r.unsharded_reasons == NULL && r.n_unsharded == 0);
	/* A shard-safe recipe has no reasons with the flag either. */
	if (EXPECT_OK("process:\n  - whitespace_normalization_mapper:\n", &ALLOW, &r))
		CHECK_INT_EQ(r.n_unsharded, 0);
	es_recipe_free(&r);
	/* Not lifted: output that cannot be merged, an unknown operator, a malformed one. */
	EXPECT_ERR("export_type: parquet\nprocess:\n  - document_deduplicator:\n", &ALLOW,
		   "Recipe option export_type='parquet' cannot work per shard");
	EXPECT_ERR("encrypt_before_export: true\nprocess:\n  - document_deduplicator:\n", &ALLOW,
		   "Recipe option encrypt_before_export=True cannot work per shard");
	EXPECT_ERR("process:\n  - no_such_op_xyz:\n", &ALLOW, "Unknown operator 'no_such_op_xyz'");
	EXPECT_ERR("process:\n  - document_deduplicator: 3\n", &ALLOW, "must be a mapping");
	/* Without the flag, the first reason is the refusal. */
	EXPECT_ERR_EXACT("export_shard_size: 10\nprocess:\n  - document_deduplicator:\n", &NOREG,
			 "Operator 'document_deduplicator' requires or may require whole-dataset semantics and "
			 "cannot run shard by shard: pass --allow-unsharded to run the whole dataset as one shard on one rank, or deduplicate "
			 "across the dataset with Data-Juicer itself on a Ray cluster (ray_document_deduplicator, "
			 "ray_bts_minhash_deduplicator, ray_image_deduplicator, ray_video_deduplicator)");
}

int main(void)
{
	T = test_tmpdir();
	RT = realpath(T, NULL);
	if (!RT)
		RT = T;
	test_minimal_and_defaults();
	test_executor_type();
	test_process_list();
	test_naming_convention();
	test_operator_args();
	test_media_keys();
	test_dataset_and_ray_address();
	test_yaml_errors();
	test_yaml_typing_and_aliases();
	test_alias_bomb();
	test_registry();
	test_registry_failures();
	test_registry_suggestions();
	test_export_settings();
	test_allow_unsharded();
	return test_done();
}
